"""Run folders laid out as the upgrade DAG writes them, without Airflow or a cluster: ``run.json`` through the
plugin's own ``write_run_record``, the registry and the journal through flinkstate's, a real savepoint of Flink's
corpus in each savepoint folder (tests/test_history.py, tests/test_airflow_view.py)."""

from __future__ import annotations

import json
import sys

from flinkstate import UpgradeJournal
from flinkstate.storage.uri import copy_savepoint, read_file, write_file
from flinkstate.upgrades.journal import JobVersion
from flinkstate.upgrades.registry import DeploymentRegistry
from tests.support.airflow_env import ROOT

if str(ROOT / "plugins") not in sys.path:  # the plugin's run record, without Airflow set-up
    sys.path.insert(0, str(ROOT / "plugins"))

from flinkstate_airflow.upgrade import write_run_record

SAVEPOINT = (ROOT / "tests" / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
             / "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint")
V1, V2 = JobVersion(jar="/jobs/v1.jar", manifest=None), JobVersion(jar="/jobs/v2.jar", manifest=None)


def lay_out_runs(base: str) -> dict[str, str]:
    """Three runs of deployment 'orders': r1 and r2 upgraded (the job runs from r2's migrated savepoint), r3
    stopped the job and is unfinished. Returns what each savepoint is, by location."""
    where = {}
    for index, run_id in enumerate(("r1", "r2", "r3"), start=1):
        run_dir = f"{base}/orders/{run_id}"
        plan = {"run_id": run_id, "run_dir": run_dir, "new": {"jar": f"/jobs/v{index + 1}.jar"}}
        record = {"stage": "planned", "at": f"2026-11-0{index}T10:00:00Z"}
        write_run_record(plan, record)
        stored = json.loads(read_file(f"{run_dir}/run.json"))
        stored["events"][0]["at"] = record["at"]  # the runs are days apart
        _write_text(f"{run_dir}/run.json", json.dumps(stored))
        write_run_record(plan, {"stage": "checked", "check_outcome": "migrate",
                                "verdict": "COMPATIBLE_AFTER_MIGRATION"})
        for kind, name in (("preflight", "savepoint-aa-1"), ("stop", "savepoint-aa-2"), ("migrated", "savepoint")):
            where[f"{run_dir}/{kind}/{name}"] = f"{run_id}/{kind}"
            copy_savepoint(SAVEPOINT, f"{run_dir}/{kind}/{name}")
        if run_id != "r3":
            write_run_record(plan, {"stage": "done", "outcome": "upgraded"})
    DeploymentRegistry(base).record("orders", V2, "0" * 32, f"{base}/orders/r2/migrated/savepoint", "r2")
    journal = UpgradeJournal.start({"savepoint_base": base, "job_name": "orders", "run_id": "r3",
                                    "run_dir": f"{base}/orders/r3", "old": {}, "new": {}, "job_id": "0" * 32},
                                   "resolve")
    journal.advance("stopped", "stop_for_migration", stop_savepoint=f"{base}/orders/r3/stop/savepoint-aa-2")
    return where


def _write_text(uri: str, text: str) -> None:
    write_file(uri, text.encode())
