"""``-v/--verbose``: what the command does goes to stderr (files opened, the plan per operator, phase timings), before
or after the command's name; stdout is the same as without it; nothing is logged without it; ``-q`` with ``-v`` is a
usage error. On savepoints Flink wrote in this run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from flinkstate.cli import main
from flinkstate.savepoint import Savepoint
from tests.support.sample_job import ROOT

FLINKSTATE = str(ROOT / ".venv" / "bin" / "flinkstate")
MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLINKSTATE, *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv", [
    ["-q", "-v", "describe", "x"], ["-v", "describe", "x", "-q"], ["describe", "x", "--quiet", "--verbose"],
])
def test_quiet_and_verbose_together_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("flinkstate: error: -q/--quiet and -v/--verbose contradict each other: give one")


@pytest.mark.flink
def test_describe_verbose_names_the_files_it_opens(flink_savepoints: dict[str, Path]):
    savepoint = flink_savepoints["heap-p2"]
    plain = _run("describe", str(savepoint))
    assert plain.returncode == 0 and plain.stderr == ""
    for argv in (["-v", "describe", str(savepoint)], ["describe", str(savepoint), "--verbose"]):
        verbose = _run(*argv)
        assert verbose.returncode == 0 and verbose.stdout == plain.stdout
        lines = verbose.stderr.splitlines()
        assert all(re.match(r"flinkstate \[\+\d+\.\d{3}s\] ", line) for line in lines), lines
        text = "\n".join(re.sub(r"^flinkstate \[\+\d+\.\d{3}s\] ", "", line) for line in lines)
        metadata = Savepoint.open(savepoint).metadata
        assert (f"opened {savepoint / '_metadata'}: _metadata version {metadata.version}, checkpoint "
                f"{metadata.checkpoint_id}, {len(metadata.operators)} operators") in text
        files = metadata.file_handles()
        assert len(files) >= 2
        for where, handle in files:  # every state file the handles name, with its place and size
            name = getattr(handle, "relative_path", None) or handle.path
            assert f"  {where}: {(savepoint / name).resolve()} ({handle.size} bytes)" in text, (where, text)
        # one phase since describe streams its operators: each operator's header, then its Kryo sample
        assert re.search(r"^read each operator's keyed-state header, sample Kryo states \(at most \d+ key-group "
                         r"blocks each\): done in \d+\.\d{3} s$", text, re.M), text
        assert re.search(r"^flinkstate describe: done in \d+\.\d{3} s$", text, re.M), text


@pytest.mark.flink
def test_dump_verbose_counts_what_it_wrote(flink_savepoints: dict[str, Path]):
    argv = ["dump", str(flink_savepoints["heap-p2"]), "--operator", "stats", "--state", "buckets"]
    plain, verbose = _run(*argv), _run("-v", *argv)
    assert plain.returncode == verbose.returncode == 0 and plain.stderr == ""
    assert verbose.stdout == plain.stdout
    entries = len(plain.stdout.splitlines())
    assert entries > 20
    assert f"] {entries} entries written\n" in verbose.stderr
    assert "] dump buckets of operator stats: MAP state, " in verbose.stderr
    assert "managed keyed state: " in verbose.stderr and "sequence-source" not in verbose.stderr  # its files only


@pytest.mark.flink
def test_migrate_verbose_logs_the_plan_and_the_phases(flink_savepoints: dict[str, Path], tmp_path: Path):
    source = flink_savepoints["heap-p2"]

    def migrate(output: Path, *options: str) -> subprocess.CompletedProcess[str]:
        return _run(*options, "migrate", str(source), "--schema", str(MANIFESTS / "v2.yaml"), "--old-schema",
                    str(MANIFESTS / "v1.yaml"), "--output", str(output))

    plain, verbose = migrate(tmp_path / "plain"), migrate(tmp_path / "verbose", "--verbose")
    assert plain.returncode == verbose.returncode == 0 and plain.stderr == ""
    assert verbose.stdout == plain.stdout.replace(str(tmp_path / "plain"), str(tmp_path / "verbose"))
    text = re.sub(r"(?m)^flinkstate \[\+\d+\.\d{3}s\] ", "", verbose.stderr)
    assert re.search(r"^plan: operator stats -> stats \([0-9a-f]{32}\): rewrites its keyed streams$", text, re.M)
    assert "\n  VALUE stats: values converted\n" in text  # v2 adds the POJO field: the one state converted
    assert "\n  MAP buckets: bytes copied\n" in text and "\n  VALUE count: bytes copied\n" in text
    # Per keyed stream: what was read and written, which adds up to what stdout reports per state.
    per_stream = re.findall(r"^  operator stats, subtask (\d+) \((\d+) bytes of keyed state\): (\d+) entries read, "
                            r"(\d+) written in \d+\.\d{3} s$", text, re.M)
    assert sorted(int(s) for s, *_ in per_stream) == [0, 1]
    printed = [tuple(map(int, m)) for m in re.findall(r"^  stats/\S+: (\d+) read, (\d+) written$", plain.stdout, re.M)]
    assert sum(int(r) for _, _, r, _ in per_stream) == sum(r for r, _ in printed)
    assert sum(int(w) for *_, w in per_stream) == sum(w for _, w in printed)
    for phase in ("migrate", "verify"):
        assert re.search(rf"^{phase}: \d+\.\d{{3}} s$", text, re.M), (phase, text)
    assert f"\nreport written to {tmp_path / 'verbose'}.report\n" in text
