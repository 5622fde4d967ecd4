"""The command line as a user meets it (no Flink needed): global options before or after the command, --version."""

from __future__ import annotations

import subprocess
import sys

import pytest

from flinkstate.cli import build_parser, main
from flinkstate.storage import settings


@pytest.mark.parametrize("argv", [
    ["--s3-endpoint-url", "http://127.0.0.1:9", "describe", "s3://b/p"],
    ["describe", "s3://b/p", "--s3-endpoint-url", "http://127.0.0.1:9"],
    ["describe", "--s3-endpoint-url", "http://127.0.0.1:9", "s3://b/p"],
])
def test_global_options_go_before_or_after_the_command(argv: list[str]):
    args = build_parser().parse_args(argv)
    assert args.s3_endpoint_url == "http://127.0.0.1:9" and args.command == "describe"


def test_a_global_option_before_the_command_is_not_reset_by_it():
    args = build_parser().parse_args(["--debug", "--s3-region", "eu-west-1", "describe", "x"])
    assert args.debug is True and args.s3_region == "eu-west-1" and args.s3_profile is None


def test_the_endpoint_given_after_the_command_is_used(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    assert main(["describe", "s3://bucket/prefix", "--s3-endpoint-url", "http://127.0.0.1:9", "--s3-region",
                 "us-east-1"]) == 1
    assert settings.s3_options.endpoint_url == "http://127.0.0.1:9"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    settings.s3_options = settings.S3Options(None, None, None)


def test_version_names_the_supported_formats():
    result = subprocess.run([sys.executable, "-m", "flinkstate", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "_metadata versions 2, 3, 4, 5, 6 (Flink 1.8 to 2.3)" in result.stdout and "Flink 2.3.0" in result.stdout
    assert "native format (read)" in result.stdout and "RowData" in result.stdout


def test_help_has_examples():
    result = subprocess.run([sys.executable, "-m", "flinkstate", "--help"], capture_output=True, text=True)
    assert "Examples:" in result.stdout and "flinkstate check SAVEPOINT --schema v2.yaml --dry-run" in result.stdout


def test_check_report_to_a_file(tmp_path, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    # A savepoint that cannot be opened still fails in one line; a report path that cannot be written too.
    from flinkstate.storage.locations import StorageError
    from flinkstate.storage.uri import write_file

    target = tmp_path / "reports" / "check.md"
    assert write_file(target, b"# report\n") == str(target) and target.read_bytes() == b"# report\n"
    (tmp_path / "dir.md").mkdir()
    with pytest.raises(StorageError, match=r"dir\.md: cannot write"):
        write_file(tmp_path / "dir.md", b"x")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
