"""Manifests come from elsewhere: bounded in size, aliases and depth, validated the same way for check and migrate,
and every error is one line; names from files are escaped when printed; anything unexpected is one line too."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flinkstate.cli import main
from flinkstate.errors import printable
from flinkstate.manifest import ManifestError, load_manifest, parse_manifest
from flinkstate.report import escape_markdown

HEAD = "manifest_version: 1\noperators:\n  stats:\n    key: String\n    states:\n"


def _load(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(content)
    load_manifest(path)


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20))
    started = time.perf_counter()
    with pytest.raises(ManifestError, match="aliases"):
        _load(tmp_path, bomb.encode())
    assert time.perf_counter() - started < 2


def test_deep_nesting_is_refused(tmp_path: Path):
    with pytest.raises(ManifestError, match="nested more than"):
        _load(tmp_path, ("[" * 50_000 + "]" * 50_000).encode())


def test_invalid_utf8_is_refused(tmp_path: Path):
    with pytest.raises(ManifestError, match=r"byte 4: not UTF-8"):
        _load(tmp_path, b"a: b\xff\xfe")


def test_a_huge_manifest_is_refused_without_parsing(tmp_path: Path):
    started = time.perf_counter()
    with pytest.raises(ManifestError, match="larger than 4 MiB"):
        _load(tmp_path, b"# " + b"x" * (5 * 1024 * 1024))
    assert time.perf_counter() - started < 2


def test_an_unknown_key_in_a_migration_block_is_refused_when_loading():
    text = HEAD + "      count: {kind: VALUE, value: Long, migration: {fields: {}, colour: red}}\n"
    with pytest.raises(ManifestError, match=r"operators\.stats\.states\.count\.migration\.colour: unknown key"):
        parse_manifest(text, "m.yaml")


def test_values_in_messages_are_short_and_escaped():
    huge = "x" * 10_000_000
    text = HEAD + f"      count: {{kind: VALUE, value: Long, renamed_from: [{huge}]}}\n"
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, "m.yaml")
    assert len(str(caught.value)) < 300
    with pytest.raises(ManifestError) as caught:
        parse_manifest(HEAD + '      count: {kind: "VAL\\nUE\\u001b[31m"}\n', "m.yaml")
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and "\\n" in message


def test_printable_and_markdown_escaping():
    assert printable("uid\noperator FAKE (uid x)\x1b[2J") == "uid\\noperator FAKE (uid x)\\x1b[2J"
    assert printable("plain ü") == "plain ü"
    assert escape_markdown("a|b`c\nd") == "a\\|b'c\\nd"
    # a name that would render as a link (or an image) whose text hides its target, in a report viewed as Markdown
    assert escape_markdown("[Approve](http://evil.example) ![x](http://evil.example/i.png)") == \
        "[Approve] (http://evil.example) ![x] (http://evil.example/i.png)"


def test_alerts_notify_nobody_by_plain_text_mentions():
    from flinkstate.report import slack_text

    assert slack_text("@channel @Here x@everyone @all: @channels @alice") == \
        "\uff20channel \uff20Here x\uff20everyone \uff20all: @channels @alice"


def test_manifest_errors_on_the_command_line_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "m.yaml"
    path.write_bytes(b"a: &a [1]\nb: *a\n")
    assert main(["check", str(tmp_path), "--schema", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_an_unexpected_failure_is_one_line_with_a_bug_report_hint(capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch):
    import flinkstate.cli.describe as describe

    def broken(args: object) -> int:
        raise KeyError("boom\nsecond line")

    monkeypatch.setattr(describe, "_run", broken)
    # The parser binds the handler when it is built: rebuild it with the broken one.
    assert main(["describe", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flinkstate: internal error: KeyError") and err.count("\n") == 1
    assert "--debug" in err and "Traceback" not in err
    assert main(["--debug", "describe", "/nonexistent"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("output, report", [("SRC/migrated", None), ("OUT", "SRC"), ("OUT", "SRC/r"),
                                            ("OUT", "OUT/r"), ("LINK/x", None), ("OUT", "OUT")])
def test_outputs_and_reports_never_land_in_the_source_or_each_other(tmp_path: Path, output: str, report: str | None,
                                                                   capsys: pytest.CaptureFixture[str]):
    source = tmp_path / "source"
    source.mkdir()
    (source / "_metadata").write_bytes(b"not read: the locations are refused first")
    (tmp_path / "link").symlink_to(source)
    names = {"SRC": str(source), "OUT": str(tmp_path / "out"), "LINK": str(tmp_path / "link")}

    def place(text: str) -> str:
        head, _, rest = text.partition("/")
        return names[head] + ("/" + rest if rest else "")

    args = ["migrate", str(source / "_metadata"), "--schema", str(tmp_path / "none.yaml"), "--output", place(output)]
    if report is not None:
        args += ["--report", place(report)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("inside the source" in err or "must not contain each other" in err), err
    assert sorted(p.name for p in source.iterdir()) == ["_metadata"]
    assert not (tmp_path / "out").exists()

