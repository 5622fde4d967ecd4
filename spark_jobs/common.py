"""What the Spark jobs share: the session, errors reported as one line instead of a JVM stack trace, and the
re-check of a migrated savepoint (the check job's ``--verify-against``, which the migration job also runs in its own
application with ``--recheck-report-dir``)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkstate import (
    CodePolicy,
    FlinkStateError,
    Manifest,
    MigrationJob,
    Report,
    check,
    os_error_line,
    printable,
    render_html,
    schema_of_jar,
    verify_published,
    write_file,
)

REPORT_JSON = "check-report.json"
REPORT_MARKDOWN = "check-report.md"
#: The same report as one self-contained page, rendered from the JSON body (flinkstate.report_html).
REPORT_HTML = "check-report.html"

#: The last line of a Python traceback raised by flinkstate inside a Spark task, e.g.
#: ``flinkstate.migration.engine.MigrationError: operator stats, state stats: ...``.
_WORKER_ERROR = re.compile(r"^(?:[\w.]*\.)?(\w*(?:Error|Exception|Failed|Snapshot|Data|Format)): (.+)$", re.M)


def add_in_process_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--in-process", action="store_true",
                        help="run the job's tasks one after the other in this Python process, without Spark (no "
                             "JVM and no session to start: what the upgrade DAG does for a small savepoint); the "
                             "output is byte for byte what Spark writes")


def start_session(app_name: str, in_process: bool) -> Any | None:
    """The Spark session the job's tasks run in, or None: ``--in-process``, they run in this process (see
    :func:`spark_map`, :func:`unit_count`)."""
    return None if in_process else spark_session(app_name)


def stop_session(spark: Any | None) -> None:
    if spark is not None:
        spark.stop()


#: The nice value of an application that has nothing left to do but end.
LOWEST_PRIORITY = 19


def yield_cpu(spark: Any | None) -> None:
    """Lowers this application to the lowest CPU priority (nice 19), every thread of the Python driver and, when
    spark-submit started it, of Spark's JVM (its parent): called by the pre-started application just before it
    records its result. What it still does then (stopping the session: the JVM's shutdown, its Python workers' end)
    runs while the new job deploys and restores on the same machine, and would compete with it (on 2 cores, a tenth
    of a second of a small state's half-second downtime). Linux's nice value is per thread, and a new thread takes
    its creator's: the threads are gone over until one pass finds all of them at 19 (then none can be created at
    another). Best effort: a thread that ended meanwhile is skipped."""
    pids = [os.getpid()]
    parent = os.getppid()
    try:
        if spark is not None and Path(f"/proc/{parent}/comm").read_text().strip() == "java":
            pids.append(parent)
    except OSError:
        pass
    for _ in range(10):
        lowered = 0
        for pid in pids:
            try:
                threads = [int(thread) for thread in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for thread in threads:
                with suppress(OSError):
                    if os.getpriority(os.PRIO_PROCESS, thread) < LOWEST_PRIORITY:
                        os.setpriority(os.PRIO_PROCESS, thread, LOWEST_PRIORITY)
                        lowered += 1
        if not lowered:
            return


def runner_name(spark: Any | None) -> str:
    """Where the job's tasks ran, as its reports say it."""
    return "Spark" if spark is not None else "one process"


def spark_session(app_name: str) -> Any:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    # A failed task reaches the driver as an exception, which run_main reports in one line (or re-raises with its
    # trace when it is not flinkstate's); Spark's own ERROR logs would repeat it as pages of JVM stack traces.
    spark.sparkContext.setLogLevel("FATAL")
    warm_up(spark)
    return spark


def _start_worker(_: int) -> int:
    import flinkstate  # noqa: F401 -- what every task of the jobs imports first (the public API imports it all)

    return os.getpid()


def warm_up(spark: Any) -> None:
    """Starts a Python worker on every core and imports flinkstate there, once per session, as JVM start is: the
    first Spark job of a session otherwise pays both (about 3 s on 2 cores), however small its data, which is not
    work the job does but a session's fixed cost (a session kept up, e.g. Spark Connect, pays it once)."""
    context = spark.sparkContext
    cores = context.defaultParallelism
    context.parallelize(range(cores), cores).map(_start_worker).collect()


def worker_error_message(exc: BaseException) -> str:
    """The flinkstate error that failed a Spark task, from the traceback text Spark wraps it in."""
    text = str(exc)
    matches = [m for m in _WORKER_ERROR.finditer(text) if "py4j" not in m.group(1).lower()]
    flinkstate = [m for m in matches if f"flinkstate.{m.group(0)}" in text or "flinkstate." in m.group(0)]
    candidates = flinkstate or matches
    if not candidates:
        return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return candidates[-1].group(2).strip()


@dataclass(frozen=True)
class TaskFailure:
    """What a Spark task hands back instead of raising: the cause in one line, which Spark's wrapping of worker
    exceptions ("An exception was thrown from the Python worker") would otherwise bury in traceback text."""

    unit: str
    message: str
    located: bool = False


def guarded(task: Callable[[Any], Any], describe: Callable[[Any], str]) -> Callable[[Any], Any]:
    """``task`` for ``rdd.map``: its result, or a :class:`TaskFailure` naming the unit and the cause."""

    def run(unit: Any) -> Any:
        try:
            return task(unit)
        except FlinkStateError as exc:  # already names the operator, the state and the entry
            return TaskFailure(describe(unit), printable(exc), located=True)
        except OSError as exc:  # the machine's storage (a full disk), not a bug: which file, and what is wrong
            return TaskFailure(describe(unit), os_error_line(exc))
        except Exception as exc:
            return TaskFailure(describe(unit), f"internal error: {type(exc).__name__}: {printable(exc)} (a bug in "
                                               f"flinkstate; please report it)")

    return run


def collect_guarded(results: list[Any]) -> list[Any]:
    """The results of guarded tasks; the first failure is raised as one line naming its unit."""
    for result in results:
        if isinstance(result, TaskFailure):
            raise FlinkStateError(result.message if result.located else f"{result.unit}: {result.message}")
    return results


def shared(location: str | None) -> str | None:
    """A local path as an absolute one (executors of a cluster run in work directories of their own, so a relative
    path would name another file there); URIs (``s3://``, ``file:``) as they are."""
    if location is None or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+:", location):
        return location
    return os.path.abspath(location)


def spark_map(spark: Any | None, describe: Callable[[Any], str] = lambda unit: unit.describe()
              ) -> Callable[[Callable[[Any], Any], list[Any]], list[Any]]:
    """flinkstate's ``map_units`` (:mod:`flinkstate.migration.units`) as Spark tasks: one task per unit, results in
    the units' order, a failed unit reported in one line naming it. Without a session (``--in-process``), the units
    run one after the other here, a failure reported the same way."""

    def run(task: Callable[[Any], Any], units: list[Any]) -> list[Any]:
        if not units:
            return []
        if spark is None:
            return collect_guarded([guarded(task, describe)(unit) for unit in units])
        rdd = spark.sparkContext.parallelize(units, len(units))
        return collect_guarded(rdd.map(guarded(task, describe)).collect())

    return run


def unit_count(spark: Any | None, requested: int | None) -> int:
    """``--units``, or three per core of the executors (Spark's default parallelism; in-process, one worker's)."""
    from flinkstate import default_unit_count

    if requested is not None:
        return requested
    return default_unit_count(spark.sparkContext.defaultParallelism if spark is not None else 1)


def add_new_version_arguments(parser: argparse.ArgumentParser) -> None:
    """``--schema`` and ``--jar`` as ``flinkstate check`` and ``migrate`` take them: the new version's schema is the
    manifest's, the jar's, or the jar's completed by the manifest as an overlay (both given)."""
    parser.add_argument("--schema", metavar="MANIFEST",
                        help="the new version's schema manifest; with --jar, an overlay: what the jar cannot say "
                             "(migrations, renames, dropped states, Row field names), refused if it contradicts it")
    parser.add_argument("--jar", help="the new version's job jar: its schema is what its operators register when "
                                      "they open (its main() and open() code runs in a JVM of its own, on the driver, "
                                      "before Spark starts; cached by the jar's hash)")
    parser.add_argument("--entry-class", metavar="CLASS",
                        help="with --jar: the class whose main() builds the job (default: the jar's Main-Class)")
    parser.add_argument("--program-args-json", metavar="JSON", help='with --jar: main()\'s arguments, as a JSON '
                                                                    'list of strings, e.g. ["--keys", "10"]')
    parser.add_argument("--jar-parallelism", type=int, default=1, metavar="N",
                        help="with --jar: the default parallelism 'flink run' would give (it shapes the generated "
                             "ids of operators without a uid; default 1)")


def new_version_schema(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | Manifest:
    """The new version's schema the arguments give (see :func:`add_new_version_arguments`): the manifest file, or
    the jar's, completed by the manifest (:func:`flinkstate.schema_of_jar`, the merge ``flinkstate check --jar``
    runs). A manifest that contradicts the jar is refused in one line, before Spark starts."""
    if args.jar is None:
        if args.schema is None:
            parser.error("give the new version's schema: --schema MANIFEST, --jar JAR, or both (the manifest is then "
                         "an overlay of the jar's)")
        if args.entry_class or args.program_args_json:
            parser.error("--entry-class and --program-args-json go with --jar")
        return str(shared(args.schema))
    program_args: Any = []
    if args.program_args_json:
        try:
            program_args = json.loads(args.program_args_json)
        except ValueError:
            parser.error(f"--program-args-json: not JSON: {printable(args.program_args_json[:200])!r}")
        if not isinstance(program_args, list) or not all(isinstance(a, str) for a in program_args):
            parser.error("--program-args-json: expected a JSON list of strings")
    return schema_of_jar(str(shared(args.jar)), shared(args.schema), entry_class=args.entry_class,
                         program_args=program_args, parallelism=args.jar_parallelism)


def verify_against(spark: Any | None, source_path: str, migrated_path: str, schema: str | Manifest,
                   old_schema: str | None, allow_code: CodePolicy | None = None, units: int | None = None,
                   now_ms: int | None = None) -> list[str]:
    """The independent verifier on a migrated savepoint and its source (the DAG's re-check), its entries compared
    by Spark tasks per key-group range (the driver checks the metadata level and that every range verified). It
    re-applies the declared migration, so its functions need the same allowance as the migration, and the
    migration's time (``now_ms``, the last access of values whose TTL it switched on)."""
    job = MigrationJob(source_path, schema, output="", old_schema=old_schema, allow_code=allow_code, now_ms=now_ms)
    return verify_published(job, migrated_path, spark_map(spark), unit_count(spark, units)).lines()


def report_files(report: Report, verification: list[str] | None, *, verified_against: str | None = None,
                 verification_error: str | None = None) -> tuple[dict[str, Any], str]:
    """The check report's JSON body and Markdown, with the verification against the source savepoint when one ran
    (its lines, or the one line that refused the savepoint)."""
    body = report.to_json()
    markdown = report.render_markdown()
    if verified_against is not None:
        body["verified_against"] = verified_against
    if verification is not None:
        body["verification"] = verification
        markdown += "\n## Verification against the source savepoint\n\n" + "".join(
            f"- {line}\n" for line in verification)
    if verification_error is not None:
        body["verification_error"] = verification_error
        markdown += f"\n## Verification against the source savepoint\n\n**FAILED**: {verification_error}\n"
    return body, markdown


def write_report_files(folder: str, body: dict[str, Any], markdown: str) -> None:
    """``check-report.json``, ``check-report.md`` and ``check-report.html`` in ``folder`` (local or s3://)."""
    folder = folder.rstrip("/")
    write_file(f"{folder}/{REPORT_JSON}", (json.dumps(body, indent=2) + "\n").encode())
    write_file(f"{folder}/{REPORT_MARKDOWN}", markdown.encode())
    write_file(f"{folder}/{REPORT_HTML}", render_html(body).encode())


@dataclass(frozen=True)
class Recheck:
    """The re-check of a published migration, as its report files say it: ``exit_code`` 0 (restorable as is and
    equal to its source's migration), 3 / 4 (the check's outcome), 1 (the verifier refused it: ``error``)."""

    body: dict[str, Any]
    markdown: str
    error: str | None

    @property
    def exit_code(self) -> int:
        return 1 if self.error is not None else int(self.body["exit_code"])


def recheck(spark: Any | None, migrated: str, schema: str | Manifest, source: str, old_schema: str | None,
            allow_code: CodePolicy | None = None, units: int | None = None, now_ms: int | None = None,
            allow_non_restored_state: bool = False) -> Recheck:
    """What ``check_compatibility.py MIGRATED --schema SCHEMA --dry-run never --exit-code --verify-against SOURCE
    --verify-old-schema OLD`` does, in a session already up: the header-level check of the migrated savepoint
    against the new manifest, then every entry compared with the source's migration. A refusal by the verifier is
    kept in the report (``verification_error``) instead of raised, so that whoever judges the report can say why."""
    # renames done: the output of this manifest's plan
    report = check(migrated, schema, migrated=True, allow_non_restored_state=allow_non_restored_state)
    report.dry_run, report.dry_run_runner = {"ran": False, "reason": "--dry-run never"}, runner_name(spark)
    try:
        lines = verify_against(spark, source, migrated, schema, old_schema, allow_code, units, now_ms)
    except FlinkStateError as exc:
        body, markdown = report_files(report, None, verified_against=source, verification_error=printable(exc))
        return Recheck(body, markdown, printable(exc))
    body, markdown = report_files(report, lines, verified_against=source)
    return Recheck(body, markdown, None)


def run_main(name: str, main: Callable[[list[str]], int], argv: list[str] | None = None) -> None:
    """Runs a job's main; flinkstate errors (raised in the driver or in a task) end it with one line and status 1.
    (spark-submit hands the Python driver's stderr to its own stdout, so that is where the line appears.)"""
    try:
        status = main(sys.argv[1:] if argv is None else argv)
    except Exception as exc:
        print(f"{name}: {failure_line(exc)}", file=sys.stderr)
        status = 1
    sys.exit(status)


def failure_line(exc: Exception) -> str:
    """A job's failure in one line, as its last line says it: "error: ..." or "internal error: ..." (a bug)."""
    if isinstance(exc, FlinkStateError):
        return f"error: {exc}"
    if isinstance(exc, OSError):  # the machine's storage (a full disk), not a bug: which file, and what is wrong
        return f"error: {os_error_line(exc)}"
    if type(exc).__name__ in ("Py4JJavaError", "PythonException", "SparkException"):  # a task failure, wrapped
        return f"error: {printable(worker_error_message(exc))}"
    return f"internal error: {type(exc).__name__}: {printable(exc)} (a bug in flinkstate; please report it)"
