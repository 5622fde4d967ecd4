"""What `make demo` prints about a run comes from the run's own record, not from fixed text: its downtime is run.json's
(the journal's durations, one computation), and whether it stopped anything is what the journal says. On run
records written by the upgrade's own conclude step; no cluster."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from flinkstate import FlinkRestClient, Outcome, UpgradeJournal
from tests.support.airflow_env import ROOT
from tests.test_upgrade_journal import _plan, _upgraded_journal


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo", ROOT / "examples" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _concluded(base: Path, journal_for: object) -> dict:
    """The run record conclude writes for the journal ``journal_for(base, run)`` builds (an unreachable Flink: the
    journal is closed, so it is not asked)."""
    if str(ROOT / "plugins") not in sys.path:
        sys.path.insert(0, str(ROOT / "plugins"))
    from flinkstate_airflow import upgrade

    plan = {**_plan(base), "dag_id": "flink_state_upgrade"}
    plan["journal"] = journal_for(base, upgrade.run_of(plan, "resolve")).uri  # type: ignore[operator]
    upgrade.write_run_record(plan, {"stage": "planned"})
    upgrade.conclude(plan, FlinkRestClient("http://127.0.0.1:9"), deployment="orders", failures=[], view="(view)")
    return json.loads((Path(plan["run_dir"]) / "run.json").read_text())


def test_the_demo_prints_the_downtime_run_json_records(tmp_path: Path):
    record = _concluded(tmp_path, _upgraded_journal)
    assert _demo().downtime(record) == (
        "downtime (stop request -> every v2 subtask RUNNING): 33.0 s = stop 1.0, migration with its re-check 23.5, "
        "submit and restore (submit request -> every subtask RUNNING) 7.5, Airflow between tasks 1.0; then the "
        "health gate, 14.0 s")


def test_the_demo_says_what_the_journal_says_was_stopped(tmp_path: Path):
    demo = _demo()
    upgraded = _concluded(tmp_path / "upgraded", _upgraded_journal)
    assert demo.stop_account(upgraded).startswith("its journal records a stop")

    def refused(base: Path, run: dict) -> UpgradeJournal:
        journal = UpgradeJournal.start(_plan(base), "resolve", run=run)
        journal.finish(Outcome.REFUSED, "alert_incompatible", running={"version": "old", "job_id": "0" * 32})
        return journal

    assert demo.stop_account(_concluded(tmp_path / "refused", refused)) == \
        "its journal records no stop: nothing was stopped"
