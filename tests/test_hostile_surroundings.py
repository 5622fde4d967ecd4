"""Hostile surroundings (issue 26, rows 1 to 5): what lies around the savepoint, not in it. A lock file planted beside
the output (a symbolic link to the source's ``_metadata`` or to any file, a hard link), ``-o`` of every command
pointed into the source (directly, through a linked folder, through a link to a file), names from the savepoint on
their way to a terminal (escape sequences, a forged error line) and to the Slack-style alert (``<!channel>``, links),
and deployment and run names that fold together or climb out of the savepoint base. Each source is a copy of one of
Flink's own savepoints (tests/corpus), its tree hashed before and after every run: the source is never written.
No cluster, except the alert test, which posts to the local webhook receiver through Airflow's HTTP hook.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import flinkstate.cli
from flinkstate import NameRefused
from flinkstate.errors import WriteError, printable
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.storage.outputs import Owner
from flinkstate.upgrades.journal import UpgradeJournal, journal_uri, write_durably
from flinkstate.upgrades.names import safe_name
from tests.test_hostile_data import HEAP_23, tree_hash

#: A keyed operator of HEAP_23 whose uid the tests replace with a hostile one.
KEYED_UID = "CheckpointingKeyedStateFlatMap1"
#: Clear-screen, an OSC-8 hyperlink, a carriage return and a new line that forges the CLI's error line.
TERMINAL_UID = ("evil\x1b[2J\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\r\n"
                "flinkstate: error: forged")
#: Slack's control sequences (a workspace-wide mention, a link whose text hides its target) and Markdown's link.
SLACK_UID = "<!channel> <!everyone> [Approve](http://evil.example) <http://evil.example|Approve> & co"


def copy_source(tmp_path: Path, uid: str | None = None) -> Path:
    """A copy of Flink's 2.3 savepoint, the keyed operator's uid replaced by ``uid`` when given."""
    source = tmp_path / "src"
    shutil.copytree(HEAP_23, source)
    if uid is not None:
        metadata = read_metadata((source / "_metadata").read_bytes())
        operator = next(op for op in metadata.operators if op.uid == KEYED_UID)
        operator.uid = uid
        (source / "_metadata").write_bytes(write_metadata(metadata))
    return source


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = flinkstate.cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def schema_of(capsys: pytest.CaptureFixture[str], source: Path, manifest: Path) -> Path:
    assert cli(capsys, "schema", str(source), "-o", str(manifest))[0] == 0
    return manifest


def one_error_line(code: int, err: str) -> str:
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith("flinkstate: error: ") and "Traceback" not in err, err
    return err.rstrip("\n")


# ------------------------------------------------------------------------------------ row 1: planted lock files


@pytest.mark.parametrize("planted", ["symlink-to-source-metadata", "symlink-to-another-file", "hard-link",
                                     "dangling-symlink"])
def test_a_planted_lock_is_never_written_through(tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str):
    """``.OUT.lock`` beside the output, planted before the run: today's code opened it following links and wrote
    its owner record into whatever it named (the source's ``_metadata``: the source destroyed)."""
    source = copy_source(tmp_path)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    runs = tmp_path / "runs"
    runs.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not flinkstate's\n")
    lock = runs / ".out.lock"
    if planted == "symlink-to-source-metadata":
        lock.symlink_to(source / "_metadata")
    elif planted == "symlink-to-another-file":
        lock.symlink_to(victim)
    elif planted == "hard-link":
        os.link(victim, lock)
    else:
        lock.symlink_to(tmp_path / "created-through-the-link")
    before = tree_hash(source)
    code, _, err = cli(capsys, "migrate", str(source), "--schema", str(manifest), "--output", str(runs / "out"))
    line = one_error_line(code, err)
    assert line.startswith(f"flinkstate: error: {lock}: ") and "remove it if nothing needs it" in line, line
    assert tree_hash(source) == before
    assert victim.read_bytes() == b"not flinkstate's\n"
    assert not (tmp_path / "created-through-the-link").exists()
    assert sorted(p.name for p in runs.iterdir()) == [".out.lock"], "nothing written, the planted file left as is"


def test_a_lock_left_by_a_dead_run_is_taken_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """A lock file whose writer died (the kernel released its flock; the file stays) is flinkstate's own: the next
    run removes it and takes the output, as before locks were created exclusively."""
    source = copy_source(tmp_path)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    runs = tmp_path / "runs"
    runs.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    owner = Owner("f" * 32, os.uname().nodename, int(dead.stdout), 0.0, None)
    (runs / ".out.lock").write_bytes(owner.to_json())
    code, _, err = cli(capsys, "migrate", str(source), "--schema", str(manifest), "--output", str(runs / "out"))
    assert code == 0, err
    assert sorted(p.name for p in runs.iterdir()) == ["out", "out.report"]
    assert (runs / "out" / "_metadata").is_file()


def test_files_written_beside_and_renamed_never_follow_a_planted_link(tmp_path: Path):
    """The journal's and the registry's durable writes went through ``.NAME.PID.tmp``, opened following links and
    truncated: a link planted there (the pid is easy to guess) had its target overwritten."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    target = tmp_path / "base" / "deployments.json"
    target.parent.mkdir()
    (target.parent / f".deployments.json.{os.getpid()}.tmp").symlink_to(victim)
    write_durably(str(target), b'{"a": 1}\n')
    assert victim.read_bytes() == b"keep me\n"
    assert target.read_bytes() == b'{"a": 1}\n' and not target.is_symlink()


# --------------------------------------------------------------------------------- row 2: -o into the source


def _output_forms(source: Path, tmp_path: Path) -> dict[str, Path]:
    linked_folder = tmp_path / "linked-folder"
    linked_folder.symlink_to(source)
    linked_file = tmp_path / "linked-file.yaml"
    linked_file.symlink_to(source / "_metadata")
    state_file = next(p for p in sorted(source.iterdir()) if p.name != "_metadata")
    return {"metadata": source / "_metadata", "through-a-linked-folder": linked_folder / "_metadata",
            "through-a-link-to-it": linked_file, "a-state-file": state_file, "a-new-file-inside": source / "new.txt"}


@pytest.mark.parametrize("command", ["schema", "check-json", "check-markdown"])
@pytest.mark.parametrize("form", ["metadata", "through-a-linked-folder", "through-a-link-to-it", "a-state-file",
                                  "a-new-file-inside"])
def test_an_output_into_the_source_is_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, form: str):
    source = copy_source(tmp_path)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    output = _output_forms(source, tmp_path)[form]
    args = {"schema": ["schema", str(source)],
            "check-json": ["check", str(source), "--schema", str(manifest), "--format", "json"],
            "check-markdown": ["check", str(source / "_metadata"), "--schema", str(manifest)]}[command]
    before = tree_hash(source)
    names = sorted(p.name for p in source.iterdir())
    code, out, err = cli(capsys, *args, "-o", str(output))
    line = one_error_line(code, err)
    assert line == (f"flinkstate: error: -o {output} is inside the source savepoint {args[1]} (or contains it): "
                    f"the source is never written to"), line
    assert tree_hash(source) == before and sorted(p.name for p in source.iterdir()) == names
    assert out == ""


@pytest.mark.parametrize("job", ["check_compatibility", "migrate_state"])
def test_the_spark_jobs_report_folders_are_refused_inside_the_source(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str], job: str):
    """The Spark jobs' report folders are outputs too: refused in the driver before Spark starts."""
    from spark_jobs import check_compatibility, migrate_state

    source = copy_source(tmp_path)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    linked = tmp_path / "linked-folder"
    linked.symlink_to(source)
    before = tree_hash(source)
    if job == "check_compatibility":
        option, main = "--report-dir", check_compatibility.main
        argv = [str(source), "--schema", str(manifest), option, str(linked / "report")]
    else:
        option, main = "--recheck-report-dir", migrate_state.main
        argv = [str(source), "--schema", str(manifest), "--output", str(tmp_path / "out"), option, str(linked)]
    with pytest.raises(WriteError) as refused:
        main(argv)
    assert str(refused.value) == (f"{option} {argv[-1]} is inside the source savepoint {source} (or contains it): "
                                  f"the source is never written to")
    assert tree_hash(source) == before and not (tmp_path / "out").exists()


def test_a_report_folder_may_hold_the_source_beside_its_reports(tmp_path: Path):
    """The upgrade's preflight/ folder holds the preflight savepoint and, beside it, the check's report files: a
    report folder that contains the source is no write into it (its named files are written, never the folder
    replaced); one that is the source or inside it still is refused."""
    from flinkstate import refuse_output_in_source

    source = copy_source(tmp_path)
    refuse_output_in_source(str(tmp_path), str(source), "--report-dir", report_folder=True)
    with pytest.raises(WriteError, match="is inside the source savepoint"):
        refuse_output_in_source(str(tmp_path), str(source), "--output")
    for inside in (source, source / "reports"):
        with pytest.raises(WriteError, match="is inside the source savepoint"):
            refuse_output_in_source(str(inside), str(source), "--report-dir", report_folder=True)


def test_an_output_elsewhere_is_written_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The refusal is about the source only: -o beside it writes what stdout would show."""
    source = copy_source(tmp_path)
    code, printed, _ = cli(capsys, "schema", str(source))
    assert code == 0
    written = schema_of(capsys, source, tmp_path / "beside" / "schema.yaml")
    assert written.read_text() == printed


# ------------------------------------------------------------------------------ row 3: names into the alert


def test_the_alert_neutralises_slack_control_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       airflow_home: Path, webhook: Any):
    """A REFUSED/CHECKED alert carries the check report; a uid in it was posted as Slack markup: a mention of the
    whole workspace, a link whose text hides its target. Sent through the one exit all alerts take."""
    from flinkstate_airflow.notifiers import compose, send_alert

    source = copy_source(tmp_path, SLACK_UID)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    report = tmp_path / "check-report.md"
    assert cli(capsys, "check", str(source), "--schema", str(manifest), "-o", str(report))[0] == 0
    # the report as it is: Markdown, not Slack (its pipe escaped for the table, its link broken as escape_markdown does)
    assert SLACK_UID.replace("|", "\\|").replace("](", "] (") in report.read_text()
    before = len(webhook.received)
    send_alert(compose(f"Flink upgrade of {SLACK_UID} checked", str(report)))
    posted = webhook.received[before:]
    assert len(posted) == 1
    text = posted[0]["text"]
    for markup in ("<!channel>", "<!everyone>", "<http://", "](http://", "|Approve>"):
        assert markup not in text, markup
    shown = ("&lt;!channel&gt; &lt;!everyone&gt; [Approve] (http://evil.example) &lt;http://evil.example|Approve&gt; "
             "&amp; co")
    assert text.startswith(f"Flink upgrade of {shown} checked\n\n# Compatibility check: restorable\n"), text
    assert f"| {shown.replace('|', chr(92) + '|')} | state-name |" in text


def test_the_approval_request_shows_names_escaped(tmp_path: Path, airflow_home: Path):
    """The approval's subject is plain text and its body Markdown (Airflow renders both on the Required Actions
    page): a deployment named by a trigger's conf or a release file, and a run folder holding such a name, cannot
    forge a line, drive a terminal or render as a link whose text hides its target."""
    from flinkstate_airflow.approval import request_text

    hostile = "orders\n\x1b[2J[Approve](http://evil.example)"
    run_dir = str(tmp_path / "[report](http://evil.example)")
    subject, body = request_text({"job_name": hostile, "job_id": "0" * 32, "run_dir": run_dir}, "stop_for_migration",
                                 "http://localhost:8080/run")
    assert subject == "Stop orders\\n\\x1b[2J[Approve] (http://evil.example) (" + "0" * 32 + ") and upgrade it?"
    assert "\n" not in subject and "\x1b" not in subject and "](http://evil" not in subject
    assert "](http:" not in body and "\x1b" not in body  # (the folder's name: pathlib folds its '//' to '/')
    assert "[report] (http:/evil.example)/preflight/check-report.md" in body


# --------------------------------------------------------------------------- row 4: names to the terminal


def test_migrate_prints_names_escaped_on_stdout_and_in_verbose_stderr(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    source = copy_source(tmp_path, TERMINAL_UID)
    manifest = schema_of(capsys, source, tmp_path / "schema.yaml")
    code, out, err = cli(capsys, "migrate", str(source), "--schema", str(manifest), "--output",
                         str(tmp_path / "out"), "-v")
    assert code == 0, err
    for stream in (out, err):
        assert not [ch for ch in stream if ch != "\n" and not ch.isprintable()], "a control character reached it"
        assert not [line for line in stream.splitlines() if line.startswith("flinkstate: error:")]
    shown = printable(TERMINAL_UID)
    assert f"    {shown}/state-name: 4 entries equal byte for byte\n" in out
    assert f"plan: operator {shown} -> {shown} (d5c8b168c6cbfe8c507a10f88b325243): keeps its keyed-state files" in err


# ------------------------------------------------------------------- row 5: deployment and run names as folders


HOSTILE_NAMES = ["..", ".", "orders/eu", "orders_eu", "orders eu", "orders:eu", "orders~2Feu", "orders.eu",
                 ".hidden", "a/../..", "~", "~h", "x" * 300, "x" * 301, "é", "e\u0301", "\x00", "run", "journal",
                 "~6Aournal", "deployments.json"]


def test_deployment_and_run_names_map_one_to_one_onto_safe_folder_names():
    folders = [safe_name(name) for name in HOSTILE_NAMES]
    assert len(set(folders)) == len(HOSTILE_NAMES), dict(zip(HOSTILE_NAMES, folders, strict=True))
    for name, folder in zip(HOSTILE_NAMES, folders, strict=True):
        assert folder not in ("", ".", "..") and not folder.startswith(".") and "/" not in folder, (name, folder)
        assert folder not in ("journal", "deployments.json"), (name, folder)  # the base's own entries
        assert len(folder.encode()) <= 200 and folder.isascii() and folder.isprintable(), (name, folder)
    # Names of [A-Za-z0-9_-] are their own folder: existing deployments keep their journals and run folders.
    for plain in ("keyed-stats-v1", "orders_eu", "manual__2024", "A-1_b"):
        assert safe_name(plain) == plain
    with pytest.raises(NameRefused, match=r"^a deployment or run name is empty: it cannot name a folder$"):
        safe_name("")


def test_a_run_folder_stays_under_the_savepoint_base(tmp_path: Path):
    base = tmp_path / "base"
    for job_name, run_id in (("..", "r1"), ("orders", ".."), ("..", ".."), ("orders", ".")):
        run_dir = (base / safe_name(job_name) / safe_name(run_id)).resolve()
        assert run_dir.parent.parent == base.resolve(), (job_name, run_id, run_dir)


def test_journals_of_different_deployments_are_different_files(tmp_path: Path):
    base = str(tmp_path / "base")
    assert journal_uri(base, "orders/eu") != journal_uri(base, "orders_eu")
    assert journal_uri(base, "keyed-stats-v1") == f"{base}/journal/keyed-stats-v1.json"
    long_name = "j" * 300
    journals = {}
    for name in ("orders/eu", "orders_eu", long_name):
        journals[name] = UpgradeJournal.start({"savepoint_base": base, "job_name": name, "run_id": "r1",
                                               "run_dir": f"{base}/{safe_name(name)}/r1", "job_id": "0" * 32,
                                               "old": {"jar": "/a.jar", "manifest": "/a.yaml"},
                                               "new": {"jar": "/b.jar", "manifest": "/b.yaml"}}, "resolve")
    for name in journals:
        loaded = UpgradeJournal.for_deployment(base, name)
        assert loaded is not None and loaded.data["deployment"] == name
    assert sorted(j.data["deployment"] for j in UpgradeJournal.all(base)) == sorted(journals)
