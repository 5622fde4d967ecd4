"""Downtime benchmark (issue 16): how long the job is down when v1 of the sample job is upgraded to v2 (the ``stats``
POJO gains ``label``), on a real local Flink 2.3 cluster, with the state of bench_reader's cached savepoint
(200,000 keys: 10^6 entries by default; ``--keys 2000`` for the small one):

a. Flink's own path: stop-with-savepoint of v1, submit v2 from that savepoint (Flink migrates the POJO at restore);
b. ours: stop-with-savepoint, ``flinkstate migrate`` in one process (``MigrationJob.run``, what the CLI runs: migrate,
   verify, publish), submit v2 from the migrated savepoint (which v2 restores as is);
c. the same with the Spark migration job (``spark_jobs/migrate_state.py``) on local[2], spark-submit included, as
   the upgrade DAG ran it before issue 28: one application that migrates, publishes, then re-checks what it
   published (``--recheck-report-dir``: the new manifest's check and the verifier against the source, again);
d. the same application pre-started, as the upgrade DAG runs it now: spark-submit with ``--await-handoff`` before
   the stop (its JVM, session and Python workers up, ready.json written: not timed), the stop savepoint's path handed
   over once the stop completed (:mod:`flinkstate.upgrades.handoff`), then its result waited for. As under the DAG's
   engine "auto", the application migrates a stop savepoint of at most 256 MiB in its driver, larger ones as Spark
   tasks; each run says which (``--prestarted-tasks`` forces Spark tasks at every size).

Each run starts v1 afresh from the cached savepoint (so every path stops the same state), waits until every subtask
runs, then times from the stop request to:

- every subtask of v2 RUNNING. Taken from Flink's own per-subtask state timestamps
  (``GET /jobs/<id>/vertices/<vertex>/subtasktimes``, the JobManager's clock on this same host), not from the job
  status: a job is RUNNING as soon as it is scheduled, while a subtask turns RUNNING only after its state has been
  restored (Task.restoreAndInvoke: INITIALIZING -> restore() -> RUNNING). The same timestamps split submit -> RUNNING
  into the submission (jar upload and the job's main() in the JobManager), scheduling and deployment, and the restore
  (the longest INITIALIZING -> RUNNING of a subtask);
- v2's first completed checkpoint (``latest.completed.latest_ack_timestamp``; v2 checkpoints every second), when the
  upgraded state is durable again.

The stop is polled every 0.1 s (the same for every path) until Flink reports the stop-with-savepoint COMPLETED
(the savepoint written and every task FINISHED); the job status is not waited for, since the REST API serves it from
a cache refreshed every 3 s (web.refresh-interval), which alone would add up to 3 s to every path. Each path's
figures are those of its best run (by stop -> RUNNING) of ``--runs``, printed with the load average before that run:
the machine may be shared. The goal is judged on paired runs (each path's run i against Flink's run i, taken right
before it): every ratio, their median and the worst are printed.

    .venv/bin/python bench/bench_downtime.py [--keys 200000] [--runs 3] [--parallelism 1] [--backend hashmap]
                                             [--no-spark] [--no-cold-spark] [--prestarted-tasks]
                                             [--taskmanager-memory SIZE]

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_migrate import spark_submit, spark_submit_command  # noqa: E402
from bench.bench_reader import WORK, directory_bytes, load_average, write_savepoint  # noqa: E402
from flinkstate.engine import LocalFlinkCluster  # noqa: E402
from flinkstate.engine.rest import TERMINAL_STATES, FlinkJobFailed, FlinkRestClient  # noqa: E402
from flinkstate.errors import FlinkStateError  # noqa: E402
from flinkstate.migration.job import MigrationJob  # noqa: E402
from flinkstate.savepoint import Savepoint  # noqa: E402
from flinkstate.upgrades.handoff import AppRef  # noqa: E402
from flinkstate.upgrades.journal import UpgradeJournal  # noqa: E402
from tests.support import sample_job  # noqa: E402

#: v2's own manifest (what the demo and the upgrade DAG use): label gets a default, the rest is kept.
V2_MANIFEST = ROOT / "examples" / "sample-job" / "manifests" / "v2.yaml"
V1_MANIFEST = V2_MANIFEST.with_name("v1.yaml")
POLL = 0.1  # seconds between REST polls while timing
#: v1's periodic checkpoints are ten minutes apart, so none recurs around the stop. Flink still takes one a few
#: seconds after v1 starts (seen every time, 9 to 11 s after the job turned RUNNING); start_v1 waits for it.
V1_CHECKPOINT_MS = 600_000
V2_CHECKPOINT_MS = 1_000
PATHS = ("flink", "single", "spark", "prestarted")
LABELS = {"flink": "Flink's own", "single": "flinkstate migrate", "spark": "Spark local[2]",
          "prestarted": "Spark pre-started"}
#: The run the pre-started application works for: its fence is a journal of the bench's own (as the DAG's run's).
BENCH_RUN = {"dag_id": "bench_downtime", "run_id": "bench"}


@dataclass
class Timing:
    """One run of one path: seconds since the stop request at which each step ended, and the load average before."""

    load: str
    steps: dict[str, float] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)
    #: The pre-started application: seconds from its spark-submit to its session ready, before the stop (not down).
    before_stop: float | None = None
    #: The pre-started application: where it migrated ("driver" or "Spark tasks").
    ran_in: str = ""

    @property
    def down(self) -> float:
        return self.marks["running"]


def rest(client: FlinkRestClient, path: str) -> Any:
    """A GET on the REST API for what FlinkRestClient has no method for (subtask times, raw checkpoint stats)."""
    response = requests.get(f"{client.base_url}{path}", timeout=30)
    response.raise_for_status()
    return response.json()


def poll(what: str, probe: Callable[[], bool], timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(POLL)


def start_v1(client: FlinkRestClient, seed: Path, work: Path, keys: int, parallelism: int, backend: str) -> str:
    """v1 restored from the cached savepoint, every subtask RUNNING: the job about to be upgraded."""
    run = sample_job.submit(client, "v1", work / "audit-v1", keys=keys, rate=100, parallelism=parallelism,
                            state_backend=backend, savepoint_path=seed,
                            extra_args=["--checkpoint-interval-ms", str(V1_CHECKPOINT_MS)], wait=True)
    deadline = time.monotonic() + 60
    while client.checkpoints(run.job_id).completed < 1 and time.monotonic() < deadline:
        time.sleep(POLL)  # the early checkpoint (above), so that it cannot overlap the stop being timed
    return run.job_id


def stop(client: FlinkRestClient, job_id: str, target: Path) -> Path:
    """Stop-with-savepoint, polled every POLL seconds until the operation is COMPLETED. Flink completes it only once
    the savepoint is written and every task has FINISHED (StopWithSavepointTerminationHandler), which is what the
    next step needs. The job status is not waited for: GET /jobs/<id> serves an execution graph cached for
    web.refresh-interval (3 s by default), so it says RUNNING for up to 3 s after the tasks finished."""
    trigger = client.trigger_stop_with_savepoint(job_id, str(target))
    status: dict[str, Any] = {}

    def done() -> bool:
        status.update(client.savepoint_status(job_id, trigger))
        return (status.get("status") or {}).get("id") == "COMPLETED"

    poll(f"stop-with-savepoint of {job_id}", done)
    location = (status.get("operation") or {}).get("location")
    if not location:
        raise RuntimeError(f"stop-with-savepoint of {job_id} failed: {status.get('operation')}")
    return Path(str(location).removeprefix("file:"))


def submit_v2(client: FlinkRestClient, savepoint: Path, work: Path, keys: int, parallelism: int, backend: str,
              origin: float, timing: Timing) -> None:
    """Submits v2 from ``savepoint`` and records, in seconds since ``origin`` (the stop request): the submission,
    every subtask RUNNING and the first completed checkpoint, from the JobManager's timestamps."""
    began = time.time()
    run = sample_job.submit(client, "v2", work / "audit-v2", keys=keys, rate=100, parallelism=parallelism,
                            state_backend=backend, savepoint_path=savepoint,
                            extra_args=["--checkpoint-interval-ms", str(V2_CHECKPOINT_MS)], wait=False)
    submitted = time.time()
    job_id = run.job_id
    try:
        def all_running() -> bool:
            job = client.job(job_id)
            if job["state"] in {"FAILING", "FAILED", "RESTARTING", "CANCELED"} or client.exceptions(job_id):
                raise FlinkJobFailed(f"v2 ({job_id}) failed while restoring {savepoint}: {job['state']}")
            return all(v["tasks"].get("RUNNING", 0) == v["parallelism"] for v in job["vertices"])

        poll(f"every subtask of v2 ({job_id}) RUNNING", all_running)
        running = client.all_subtasks_running_at(job_id)  # what the upgrade's run.json and the demo report too
        assert running is not None
        restore = max(t["RUNNING"] - t["INITIALIZING"] for t in client.subtask_timestamps(job_id)) / 1000
        poll(f"v2 ({job_id}) to complete a checkpoint", lambda: client.checkpoints(job_id).completed >= 1)
        checkpoint = rest(client, f"/jobs/{job_id}/checkpoints")["latest"]["completed"]["latest_ack_timestamp"] / 1000
        restored_from = client.checkpoints(job_id).restored_from
        if restored_from is None or Path(restored_from.removeprefix("file:")) != savepoint:
            raise RuntimeError(f"v2 ({job_id}) restored from {restored_from}, not {savepoint}")
    finally:
        if client.job_state(job_id) not in TERMINAL_STATES:  # a failed v2 keeps its error, not the cancel's
            client.cancel(job_id)
    timing.steps["submit (jar upload, main(), job id)"] = submitted - began
    timing.steps["restore (INITIALIZING -> RUNNING)"] = restore
    timing.marks["running"] = running - origin
    timing.marks["checkpoint"] = checkpoint - origin
    # The rest, from the job id to the last subtask RUNNING less its restore: scheduling, deployment, and any
    # subtask that started restoring late. The steps add up to the total.
    timing.steps["schedule, deploy (to INITIALIZING)"] = timing.marks["running"] - sum(timing.steps.values())


APP_LOG = "prestarted-application.log"


def app_log(work: Path) -> str:
    """The end of the pre-started application's output."""
    return (work / APP_LOG).read_text(encoding="utf-8", errors="replace").strip()[-2000:]


def prestart(work: Path, tasks: bool) -> tuple[AppRef, subprocess.Popen[str], float]:
    """The migration application started before the stop, as the DAG's prestart_migration starts it: returns once
    it has its session (ready.json), with the seconds that took (outside the down window)."""
    plan: dict[str, Any] = {"savepoint_base": str(work / "base"), "job_name": "bench", "run_id": BENCH_RUN["run_id"],
            "run_dir": str(work / "run"), "old": {"jar": "v1"}, "new": {"jar": "v2"}, "job_id": "0" * 32}
    journal = UpgradeJournal.start(plan, "bench", {**BENCH_RUN, "task_id": "prestart_migration"})
    app = AppRef.new(plan["run_dir"], BENCH_RUN)
    command, env = spark_submit_command(
        "migrate_state.py", "local[2]", "--await-handoff", app.folder, "--handoff-token", app.token, "--schema",
        V2_MANIFEST, "--old-schema", V1_MANIFEST, "--output", work / "migrated", "--recheck-report-dir",
        work / "recheck", "--recheck-exit-code", "--fence-journal", journal.uri, "--fence-run", json.dumps(BENCH_RUN),
        *(["--in-process-max-bytes=0"] if tasks else []))
    began = time.monotonic()
    # In its own session, as prestart_migration starts it.
    # Its output to a file, as the DAG's (a pipe nobody reads while it waits would stall it once full).
    with (work / APP_LOG).open("w", encoding="utf-8") as log:
        process = subprocess.Popen(command, env=env, text=True, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    if app.wait_for(app.ready, 300, alive=lambda: process.poll() is None) is None:
        process.kill()
        process.wait()
        raise RuntimeError(f"the pre-started migration application did not get ready: {app_log(work)}")
    return app, process, time.monotonic() - began


def one_run(client: FlinkRestClient, path: str, seed: Path, keys: int, parallelism: int, backend: str,
            tasks: bool = False) -> Timing:
    with tempfile.TemporaryDirectory(dir=WORK, prefix="downtime-") as tmp:
        work = Path(tmp)
        v1 = start_v1(client, seed, work, keys, parallelism, backend)
        app: tuple[AppRef, subprocess.Popen[str], float] | None = prestart(work, tasks) if path == "prestarted" \
            else None
        timing = Timing(load_average())
        origin = time.time()
        stopped = stop(client, v1, work / "stop")
        timing.steps["stop-with-savepoint"] = time.time() - origin
        restore_from = stopped
        if path == "single":
            started = time.perf_counter()
            report = MigrationJob(str(stopped), str(V2_MANIFEST), str(work / "migrated")).run()
            total = time.perf_counter() - started
            timing.steps["migrate (decode, convert, write)"] = report.seconds["migrate"]
            timing.steps["verify (re-read both, compare)"] = report.seconds["verify"]
            timing.steps["publish, report"] = total - report.seconds["migrate"] - report.seconds["verify"]
            restore_from = work / "migrated"
        elif path == "spark":
            # As the DAG runs it: one application migrates, then re-checks what it published (the new manifest's
            # check and the verifier against the source, its report judged by the DAG's recheck task).
            wall = spark_submit("migrate_state.py", "local[2]", stopped, "--schema", V2_MANIFEST, "--old-schema",
                                V1_MANIFEST, "--output", work / "migrated", "--recheck-report-dir", work / "recheck",
                                "--recheck-exit-code")
            spark_steps(timing, work, wall, "spark-submit: JVM, session, report")
            restore_from = work / "migrated"
        elif app is not None:
            handoff, process, timing.before_stop = app
            handed = time.time()
            handoff.hand_over(str(stopped))
            # As the DAG's migrate task: until its result (written before its session stops), not its exit.
            result = handoff.wait_for(handoff.result, 900, alive=lambda: process.poll() is None, poll=POLL / 2)
            wall = time.time() - handed
            if result is None or result["outcome"] != "published":
                process.wait()
                raise RuntimeError(f"the pre-started migration application failed (status {process.returncode}): "
                                   f"{(result or {}).get('line') or app_log(work)}")
            spark_steps(timing, work, wall, "handoff, result")
            log = (work / APP_LOG).read_text(encoding="utf-8", errors="replace")
            timing.ran_in = "driver" if "migrate_state: the driver migrates it" in log else "Spark tasks"
            restore_from = work / "migrated"
        # The pre-started application's exit (its session stopping) is awaited after v2's submission, as the DAG
        # does: its result is what v2 waits for. (Waiting for the exit first put 1.5 s of it in v2's deployment.)
        submit_v2(client, restore_from, work, keys, parallelism, backend, origin, timing)
        if app is not None and app[1].wait() != 0:
            raise RuntimeError(f"the pre-started migration application ended with status {app[1].returncode}: "
                               f"{app_log(work)}")
        return timing


def read_report(directory: Path) -> dict[str, float]:
    return {k: float(v) for k, v in json.loads((directory / "report.json").read_text())["seconds"].items()}


def spark_steps(timing: Timing, work: Path, wall: float, rest: str) -> None:
    """A Spark migration's steps from its reports: migrate and verify (its own figures), the re-check (from the
    migration's report, written once the savepoint is published, to the re-check's), and ``rest``: what else the
    ``wall`` seconds since the stop savepoint was ready held (a JVM's start, or the handoff)."""
    seconds = read_report(work / "migrated.report")
    recheck = (work / "recheck" / "check-report.json").stat().st_mtime - \
        (work / "migrated.report" / "report.json").stat().st_mtime
    timing.steps["migrate (decode, convert, write)"] = seconds["migrate"]
    timing.steps["verify (re-read both, compare)"] = seconds["verify"]
    timing.steps["re-check (check, verify again)"] = recheck
    timing.steps[rest] = wall - seconds["migrate"] - seconds["verify"] - recheck


#: The goal of issues 16 and 28: the migration branch down at most this many times Flink's own restore-time migration.
GOAL = 1.2
ROWS = ("stop-with-savepoint", "migrate (decode, convert, write)", "verify (re-read both, compare)",
        "publish, report", "re-check (check, verify again)", "spark-submit: JVM, session, report",
        "handoff, result",
        "submit (jar upload, main(), job id)",
        "schedule, deploy (to INITIALIZING)", "restore (INITIALIZING -> RUNNING)")


def print_table(best: dict[str, Timing], runs: dict[str, list[Timing]], title: str) -> None:
    paths = [p for p in PATHS if p in best]
    print(f"\n{title}")
    print(f"{'seconds since the stop request':<40}"
          + "".join(f"{LABELS[path]:>20}" + (f"{'x Flink':>9}" if path != "flink" else "") for path in paths))

    def row(label: str, values: dict[str, float | None], reference: float | None = None) -> None:
        line = f"{label:<40}"
        for path in paths:
            value = values.get(path)
            line += f"{value:>20.2f}" if value is not None else f"{'-':>20}"
            if path != "flink":
                line += f"{value / reference:>8.2f}x" if reference and value is not None else f"{'':>9}"
        print(line)

    for label in ROWS:
        values = {path: best[path].steps.get(label) for path in paths}
        if any(v is not None for v in values.values()):
            row(f"  {label}", values)
    row("= down: stop request -> all RUNNING", {path: best[path].down for path in paths}, best["flink"].down)
    row("to the 1st completed checkpoint", {path: best[path].marks["checkpoint"] for path in paths},
        best["flink"].marks["checkpoint"])
    print(f"{'load average before the best run':<40}" + "".join(
        f"{best[path].load:>20}" + ("" if path == "flink" else f"{'':>9}") for path in paths))
    for path in paths:
        print(f"  {LABELS[path]}, every run (down / to checkpoint, load average before): " + "; ".join(
            f"{t.down:.2f} / {t.marks['checkpoint']:.2f} s ({t.load})" for t in runs[path]))
    print_paired(runs)


def print_paired(runs: dict[str, list[Timing]]) -> None:
    """The goal judged on paired runs: run i of a path against run i of Flink's own path, which ran right before it
    (interleaved), so that a busy spell of the machine weighs on both sides of a ratio; the median and the worst
    pair decide, not the best run of each path taken apart."""
    print(f"\npaired runs: down / Flink's own down in the same round (goal: at most {GOAL:.1f}x)")
    for path in (p for p in PATHS if p in runs and p != "flink"):
        ratios = [t.down / f.down for t, f in zip(runs[path], runs["flink"], strict=False) if f.down > 0]
        if not ratios:
            continue
        middle = statistics.median(ratios)
        print(f"  {LABELS[path]:<28} " + ", ".join(f"{r:.2f}x" for r in ratios)
              + f"; median {middle:.2f}x, worst {max(ratios):.2f}x: goal "
              + ("met" if middle <= GOAL else f"NOT met (by {middle / GOAL:.2f}x)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000, help="keys of v1's state (5 entries each; default "
                        "200,000, as bench_migrate; 2,000 for a small state)")
    parser.add_argument("--runs", type=int, default=3, help="runs per path; the best is shown (default 3)")
    parser.add_argument("--parallelism", type=int, default=1, help="the jobs' parallelism (default 1)")
    parser.add_argument("--backend", default="hashmap", choices=["hashmap", "rocksdb"],
                        help="v1's and v2's state backend (default hashmap); the savepoints are canonical")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark migration job (both paths)")
    parser.add_argument("--no-cold-spark", action="store_true",
                        help="leave out the Spark job started after the stop (the pre-started one runs)")
    parser.add_argument("--prestarted-tasks", action="store_true",
                        help="the pre-started application migrates as Spark tasks at every size (by default, as "
                             "under the DAG's engine \"auto\", its driver migrates a stop savepoint of at most "
                             "256 MiB)")
    parser.add_argument("--taskmanager-memory", default=None, metavar="SIZE",
                        help="the bench cluster's taskmanager.memory.process.size (default: 1536m, 10g from 10^6 "
                             "keys, with almost no managed memory on HashMap: a HashMap restore of 10^7 entries lost "
                             "a 1536m TaskManager to its heartbeat, and on a 6g one (a 2.45 GB heap) v2's checkpoints "
                             "took 200 s instead of 18 s and the TaskManager was lost)")
    args = parser.parse_args()
    large = args.keys >= 1_000_000
    options = {"taskmanager.memory.process.size": args.taskmanager_memory or ("10g" if large else "1536m")}
    if large and args.backend == "hashmap":  # HashMap state lives on the heap: managed memory is RocksDB's
        options["taskmanager.memory.managed.fraction"] = "0.05"
    WORK.mkdir(parents=True, exist_ok=True)
    paths = [p for p in PATHS if not (p in ("spark", "prestarted") and args.no_spark)
             and not (p == "spark" and args.no_cold_spark)]
    runs: dict[str, list[Timing]] = {path: [] for path in paths}
    # Its own cluster folder: bench_migrate and bench_reader use WORK/cluster and may run at the same time.
    with LocalFlinkCluster(WORK / "cluster-downtime", slots=max(2, args.parallelism),
                           options=options) as cluster:
        seed = write_savepoint(cluster, args.keys, "hashmap", args.parallelism)
        opened = Savepoint.open(seed)
        entries = sum(1 for info in opened.keyed_states(sample_job.OPERATOR_UID)
                      for _ in opened.iter_entries(sample_job.OPERATOR_UID, info.name))
        print(f"v1 -> v2 on Flink {cluster.status().get('flink_version')}, {args.backend}, parallelism "
              f"{args.parallelism}: v1 restored from {seed.name} ({entries:,} keyed entries, "
              f"{directory_bytes(seed) / 1e6:.1f} MB) before each run", flush=True)
        for run in range(args.runs):
            for path in paths:  # interleaved, so that a busy spell of the machine hits every path alike
                timing = one_run(cluster.client, path, seed, args.keys, args.parallelism, args.backend,
                                 args.prestarted_tasks)
                runs[path].append(timing)
                ready = "" if timing.before_stop is None else \
                    f"; its session ready {timing.before_stop:.1f} s after its spark-submit, before the stop; " \
                    f"migrated by {'its driver' if timing.ran_in == 'driver' else 'Spark tasks'}"
                print(f"  run {run + 1}, {LABELS[path]}: down {timing.down:.2f} s, 1st checkpoint "
                      f"{timing.marks['checkpoint']:.2f} s (load average before: {timing.load}){ready}", flush=True)
    best = {path: min(timings, key=lambda t: t.down) for path, timings in runs.items()}
    print_table(best, runs, f"downtime of v1 -> v2, {entries:,} entries, {args.backend}, parallelism "
                            f"{args.parallelism}, best of {args.runs} runs per path")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FlinkStateError, RuntimeError, OSError) as exc:  # one line, e.g. a v2 that failed to restore
        print(f"bench_downtime: error: {exc}", file=sys.stderr)
        sys.exit(1)
