"""Safe outputs: concurrent runs to one output, a killed run, leftovers that are not ours, and locations that cannot
be written, all with real savepoints written by Flink in this run and the installed ``flinkstate migrate`` in its own
processes.

A migration function (allowed code, ``gate_fix`` below) lets a test hold a run at a known point: while migrating
(before anything is assembled) or while verifying (after ``_metadata`` was staged). It waits there for a file the
test creates, so nothing depends on timing.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from flinkstate.savepoint import Savepoint
from flinkstate.storage.outputs import OWNER_MARKER, STAGED_METADATA, Owner
from tests.test_spark_jobs import MANIFESTS

ROOT = Path(__file__).resolve().parents[1]
FLINKSTATE = ROOT / ".venv" / "bin" / "flinkstate"
KEYS = 20

#: Keeps every value (so the verifier agrees); the call numbered $GATE_AT (1-based; the migration makes KEYS calls,
#: then the verifier KEYS more) writes $GATE_DIR/entered and waits until $GATE_DIR/go exists.
GATE_FIX = '''
import os
import time

_calls = 0


def keep(value):
    global _calls
    _calls += 1
    gate = os.environ.get("GATE_DIR")
    if gate and _calls == int(os.environ["GATE_AT"]):
        open(os.path.join(gate, "entered"), "w").close()
        while not os.path.exists(os.path.join(gate, "go")):
            time.sleep(0.02)
    return value
'''


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "gate_fix.py").write_text(GATE_FIX)
    (tmp_path / "gate").mkdir()
    text = (MANIFESTS / "v3-with-conversion.yaml").read_text()
    old = "            count: {convert: to-string}\n"
    (tmp_path / "v3-fn.yaml").write_text(text.replace(old, old + "          function: gate_fix:keep\n"))
    (tmp_path / "runs").mkdir()
    return tmp_path


def _command(work: Path, source: Path, output: Path, *extra: str) -> list[str]:
    return [str(FLINKSTATE), "migrate", str(source), "--schema", str(work / "v3-fn.yaml"), "--output", str(output),
            "--allow-code=gate_fix", *extra]


def _env(work: Path, gate_at: int | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(work / "code")}
    if gate_at is not None:
        env.update(GATE_DIR=str(work / "gate"), GATE_AT=str(gate_at))
    return env


def _start(work: Path, source: Path, output: Path, gate_at: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(_command(work, source, output), env=_env(work, gate_at), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (work / "gate" / "entered").exists():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before the gate: {process.communicate()}")
        assert time.monotonic() < deadline, "the run never reached the gate"
        time.sleep(0.05)
    return process


def _run(work: Path, source: Path, output: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(work, source, output, *extra), env=_env(work, None), capture_output=True,
                          text=True, timeout=300)


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _metadata_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("_metadata*"))


def _assert_migrated(output: Path) -> None:
    savepoint = Savepoint.open(output)
    values = [value for _, _, value in savepoint.iter_entries("stats", "stats")]
    assert len(values) == KEYS and all(isinstance(v["count"], str) for v in values)
    names = {p.name for p in output.iterdir()}
    assert "_metadata" in names and not names & {STAGED_METADATA, OWNER_MARKER}, names


def test_a_second_run_to_the_same_output_fails_cleanly(flink_savepoints: dict[str, Path], work: Path):
    runs = work / "runs"
    output = runs / "migrated"
    first = _start(work, flink_savepoints["heap-p2"], output, gate_at=1)  # holds the lock, mid-migration
    try:
        lock = runs / ".migrated.lock"
        holder = Owner.from_json(lock.read_bytes())
        assert holder is not None and holder.pid == first.pid and holder.host == socket.gethostname()
        second = _run(work, flink_savepoints["heap-p2"], output)
        error = _error_line(second)
        assert error.startswith(f"flinkstate: error: {output}: another migration is writing this output (lock "
                                f"{lock} held by run {holder.id[:12]} (pid {first.pid} on ")
        # The second run touched nothing of the first: its staging directory and marker are intact.
        marker = Owner.from_json((runs / ".migrated.inprogress" / OWNER_MARKER).read_bytes())
        assert marker == holder
        assert not output.exists()
    finally:
        (work / "gate" / "go").touch()
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    _assert_migrated(output)
    # Published, and nothing else left: no staging directory, no lock file, the report beside the output.
    assert sorted(p.name for p in runs.iterdir()) == ["migrated", "migrated.report"]


def test_a_killed_run_leaves_nothing_complete_looking_and_the_next_run_succeeds(flink_savepoints: dict[str, Path],
                                                                              work: Path):
    runs = work / "runs"
    output = runs / "migrated"
    # Held in the verifier (call KEYS + 1): every file is staged, _metadata under its staged name.
    victim = _start(work, flink_savepoints["heap-p2"], output, gate_at=KEYS + 1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)  # reaped: its pid is gone, as after a crash
    staging = runs / ".migrated.inprogress"
    assert _metadata_files(runs) == [f".migrated.inprogress/{STAGED_METADATA}"], "only the unverified name"
    assert not output.exists()
    owner = Owner.from_json((staging / OWNER_MARKER).read_bytes())
    assert owner is not None and owner.pid == victim.pid and owner.is_over()
    # No Flink or flinkstate reader takes the staging directory for a savepoint.
    probe = subprocess.run([str(FLINKSTATE), "describe", str(staging)], capture_output=True, text=True, timeout=60)
    assert probe.returncode == 1 and "not a savepoint directory (no _metadata)" in probe.stderr

    result = _run(work, flink_savepoints["heap-p2"], output)
    assert result.returncode == 0, result.stderr
    _assert_migrated(output)
    assert sorted(p.name for p in runs.iterdir()) == ["migrated", "migrated.report"]
    report = json.loads((runs / "migrated.report" / "report.json").read_text())
    assert report["states"]["stats"]["stats"] == {"read": KEYS, "written": KEYS, "dead_lettered": 0}


def test_a_run_killed_while_migrating_is_cleaned_up_too(flink_savepoints: dict[str, Path], work: Path):
    runs = work / "runs"
    output = runs / "migrated"
    victim = _start(work, flink_savepoints["heap-p2"], output, gate_at=1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=60)
    assert _metadata_files(runs) == [] and (runs / ".migrated.inprogress" / OWNER_MARKER).is_file()
    assert (runs / ".migrated.lock").is_file()  # the kernel released the lock; the file stays and is reused
    result = _run(work, flink_savepoints["heap-p2"], output)
    assert result.returncode == 0, result.stderr
    _assert_migrated(output)
    assert sorted(p.name for p in runs.iterdir()) == ["migrated", "migrated.report"]


def test_leftovers_that_are_not_provably_ours_are_refused_and_kept(flink_savepoints: dict[str, Path], work: Path):
    runs = work / "runs"
    output = runs / "migrated"
    staging = runs / ".migrated.inprogress"
    source = flink_savepoints["heap-p2"]
    # Someone else's directory (no owner marker).
    staging.mkdir()
    (staging / "notes.txt").write_text("keep")
    assert _error_line(_run(work, source, output)) == (
        f"flinkstate: error: {staging}: a staging directory without flinkstate's owner marker (not ours); remove "
        f"it if nothing needs it")
    assert (staging / "notes.txt").read_text() == "keep"
    # A run that is still alive on this host (this test process).
    me = Owner.current()
    (staging / OWNER_MARKER).write_bytes(me.to_json())
    error = _error_line(_run(work, source, output))
    assert error.startswith(f"flinkstate: error: {staging}: left by run {me.id[:12]} (pid {os.getpid()} on ")
    assert error.endswith("which may still be running; remove it if that run is over")
    # A run on another host cannot be proved over.
    other = Owner("f" * 32, "another-host.example", 1, time.time(), None)
    (staging / OWNER_MARKER).write_bytes(other.to_json())
    assert "left by run ffffffffffff (pid 1 on another-host.example" in _error_line(_run(work, source, output))
    assert (staging / "notes.txt").read_text() == "keep"
    # A dead run of this host: removed, and the migration goes through.
    dead = Owner("0" * 32, socket.gethostname(), 2**22 + 1, time.time(), None)  # above the default pid_max
    (staging / OWNER_MARKER).write_bytes(dead.to_json())
    result = _run(work, source, output)
    assert result.returncode == 0, result.stderr
    _assert_migrated(output)


def test_staging_paths_that_are_files_or_links_are_refused(flink_savepoints: dict[str, Path], work: Path):
    runs = work / "runs"
    output = runs / "migrated"
    staging = runs / ".migrated.inprogress"
    staging.write_text("a file")
    assert _error_line(_run(work, flink_savepoints["heap-p2"], output)) == (
        f"flinkstate: error: {staging}: the staging path is a file, not a staging directory of flinkstate; remove "
        f"it if nothing needs it")
    staging.unlink()
    target = work / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("keep")
    staging.symlink_to(target)
    assert _error_line(_run(work, flink_savepoints["heap-p2"], output)) == (
        f"flinkstate: error: {staging}: the staging path is a symbolic link, not a staging directory of "
        f"flinkstate; remove it if nothing needs it")
    assert (target / "precious").read_text() == "keep" and sorted(p.name for p in target.iterdir()) == ["precious"]
    assert not output.exists() and not (runs / ".migrated.lock").exists()


def test_outputs_and_reports_that_cannot_be_written_are_one_line(flink_savepoints: dict[str, Path], work: Path):
    source = flink_savepoints["heap-p2"]
    a_file = work / "runs" / "a-file"
    a_file.write_text("x")
    assert _error_line(_run(work, source, a_file / "sub" / "migrated")) == (
        f"flinkstate: error: --output {a_file / 'sub' / 'migrated'}: {a_file} is a file, not a directory")
    error = _error_line(_run(work, source, Path("/sys/flinkstate-no-such/migrated")))
    assert error.startswith("flinkstate: error: /sys/flinkstate-no-such/migrated: cannot create the output")
    error = _error_line(_run(work, source, Path("/sys/flinkstate-migrated")))
    assert error.startswith("flinkstate: error: /sys/flinkstate-migrated: cannot create the output: /sys is not "
                            "writable")
    # A --report that is a file is refused before anything is migrated or published.
    output = work / "runs" / "migrated"
    assert _error_line(_run(work, source, output, "--report", str(a_file))) == (
        f"flinkstate: error: --report {a_file}: {a_file} is a file, not a directory")
    assert _error_line(_run(work, source, output, "--report", str(a_file / "report"))) == (
        f"flinkstate: error: --report {a_file / 'report'}: {a_file} is a file, not a directory")
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["a-file"]
    # An output that exists (even as a dangling symbolic link) is never replaced.
    output.symlink_to(work / "nowhere")
    assert _error_line(_run(work, source, output)) == f"flinkstate: error: {output}: output already exists"
    assert sorted(p.name for p in (work / "runs").iterdir()) == ["a-file", "migrated"]


# -- credentials -----------------------------------------------------------------------------------------------------


def test_the_s3_secret_never_appears_in_output_or_reports(flink_savepoints: dict[str, Path], work: Path,
                                                          s3_endpoint: str, monkeypatch: pytest.MonkeyPatch):
    """S3 paths that succeed and that fail (no bucket, no object, an endpoint that refuses connections, a lock held
    by another run), through the CLI and the Spark job: the secret key is in no line printed and in no report or
    object written."""
    import boto3

    from tests.test_spark_jobs import spark_submit

    secret = "fsSecret" + os.urandom(12).hex()
    key_id = "AKIAFLINKSTATE" + os.urandom(3).hex().upper()
    env = {**_env(work, None), "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret}
    boto3.client("s3", aws_access_key_id=key_id, aws_secret_access_key=secret).create_bucket(Bucket="creds")
    source = flink_savepoints["heap-p2"]
    printed: list[str] = []

    def run(*args: str | Path, expect: int, endpoint: str | None = None) -> None:
        environment = {**env, **({"AWS_ENDPOINT_URL": endpoint} if endpoint else {})}
        result = subprocess.run([str(FLINKSTATE), *map(str, args)], env=environment, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == expect, (args, result.stdout + result.stderr)
        printed.append(result.stdout + result.stderr)

    manifest = work / "v3-fn.yaml"
    run("migrate", source, "--schema", manifest, "--output", "s3://creds/ok", "--allow-code=gate_fix", "--json",
        expect=0)
    run("describe", "s3://creds/ok", expect=0)
    # the manifest's function would run again on the output (migrate's plan): a migration, exit 3
    run("check", "s3://creds/ok", "--schema", manifest, "--format", "json", expect=3)
    run("migrate", "s3://creds/ok", "--schema", MANIFESTS / "v3-with-conversion.yaml", "--output",
        "s3://creds/ok", expect=1)  # inside the source
    run("migrate", source, "--schema", manifest, "--output", "s3://no-such-bucket/x", "--allow-code=gate_fix",
        expect=1)
    run("describe", "s3://creds/missing", expect=1)
    run("dump", "s3://creds/ok", "--operator", "stats", "--state", "nope", expect=1)
    closed = f"http://127.0.0.1:{_closed_port()}"
    run("describe", "s3://creds/ok", expect=1, endpoint=closed)
    run("migrate", source, "--schema", manifest, "--output", "s3://creds/down", "--allow-code=gate_fix", expect=1,
        endpoint=closed)
    # A lock held by another run.
    client = boto3.client("s3", aws_access_key_id=key_id, aws_secret_access_key=secret)
    client.put_object(Bucket="creds", Key=".locked.lock", Body=Owner.current().to_json())
    run("migrate", source, "--schema", manifest, "--output", "s3://creds/locked", "--allow-code=gate_fix", expect=1)
    assert "another migration is writing this output" in printed[-1]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)  # spark_submit passes this process's environment on
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    # One Spark application, writing its savepoint to S3 and its report here (each spark-submit costs half a minute
    # or more on these machines; a missing bucket's error is the CLI's above, from the same storage code).
    result = spark_submit("migrate_state.py", source, "--schema", MANIFESTS / "v3-with-conversion.yaml", "--output",
                          "s3://creds/spark", "--report", work / "spark-report")
    printed.append(result.stdout + result.stderr)
    assert result.returncode == 0, printed[-1][-2000:]

    assert not [text for text in printed if secret in text]
    written = [p.read_bytes() for p in work.rglob("*") if p.is_file()]
    assert len(written) > 3 and not [data for data in written if secret.encode() in data]
    objects = [client.get_object(Bucket="creds", Key=item["Key"])["Body"].read()
               for item in client.list_objects_v2(Bucket="creds").get("Contents", [])]
    assert len(objects) > 5 and not [data for data in objects if secret.encode() in data]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed when the block ends: connections are refused
