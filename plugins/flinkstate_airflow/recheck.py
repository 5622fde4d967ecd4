"""The DAG's ``recheck`` step: judging the re-check report the migration job wrote beside the migrated savepoint
(``migrate_state.py --recheck-report-dir``, on Spark or in-process), instead of starting a second application while
the job is down. The step passes exactly when ``check_compatibility.py --exit-code --verify-against`` would have
exited 0: the report is there, is about this run's migrated savepoint and stop savepoint, the migrated savepoint is
restorable as is by the new version, and the independent verifier found every entry equal to the source's
migration."""

from __future__ import annotations

import json
import os
from typing import Any

from flinkstate import exists, local_path, read_file

CHECK_REPORT = "check-report.json"
CHECK_REPORT_MARKDOWN = "check-report.md"
CHECK_REPORT_HTML = "check-report.html"


def _place(location: str) -> str:
    """A location as the Spark jobs name it: a URI as it is, a local path absolute (Flink names local savepoints
    ``file:/...``; spark-submit runs in the task's working directory, where a relative path resolves alike)."""
    path = local_path(location)
    return path.rstrip("/") if "://" in path else os.path.abspath(path)


def _same(a: Any, b: str) -> bool:
    return isinstance(a, str) and _place(a) == _place(b)


def recheck_problem(report_dir: str, migrated: str, source: str) -> str | None:
    """Why the re-check in ``report_dir`` does not let ``migrated`` (a migration of ``source``) be restored, in one
    line; None when it does."""
    folder = report_dir.rstrip("/")
    uri = f"{folder}/{CHECK_REPORT}"
    if not exists(uri):
        return (f"no re-check report at {uri}: the migration job did not re-check the savepoint it "
                f"published, so {migrated} is not restored")
    try:
        report = json.loads(read_file(uri))
    except ValueError as exc:
        return f"{uri}: not a check report ({exc})"
    if not isinstance(report, dict) or report.get("report_version") != 1:
        return f"{uri}: not a check report of version 1"
    if not _same(report.get("savepoint"), migrated):
        return f"{uri}: re-checks {report.get('savepoint')}, not this run's migrated savepoint {migrated}"
    if not _same(report.get("verified_against"), source):
        return (f"{uri}: the migrated savepoint was verified against {report.get('verified_against')}, not against "
                f"its source {source}")
    if report.get("verification_error"):
        return f"the re-check refused the migrated savepoint: {report['verification_error']}"
    if report.get("outcome") != "restore":
        return (f"the re-check of the migrated savepoint {migrated}: outcome {report.get('outcome')!r} (verdict "
                f"{report.get('verdict')}), not restorable as is by the new version (see {folder}/"
                f"{CHECK_REPORT_MARKDOWN})")
    if not report.get("verification"):
        return f"{uri}: no verification against the source savepoint {source}"
    return None
