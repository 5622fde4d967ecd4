"""The migration's hold on Python's cyclic garbage collector (flinkstate/migration/collector.py): inside, the objects
alive on entry are frozen and the thresholds raised; outside, the collector is exactly as the caller left it, after
success and after an exception, nested or not; and garbage cycles made inside are still reclaimed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.collector import OLDER_THRESHOLD, YOUNG_THRESHOLD, collector_deferred
from flinkstate.migration.plan import OperatorTarget, StateTarget, plan_migration
from flinkstate.migration.rewrite import dry_run_subtask
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.spec import parse_migration
from flinkstate.savepoint import Savepoint
from flinkstate.storage.uri import open_output

CALLERS_THRESHOLDS = (1234, 5, 6)  # not Python's defaults, so a restore to the defaults would be caught


@pytest.fixture
def callers_collector() -> Iterator[None]:
    """The caller's own settings, and the process's put back afterwards whatever the test did."""
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(*CALLERS_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        (gc.enable if enabled else gc.disable)()


def _inside() -> tuple[tuple[int, int, int], int, bool]:
    return gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()


@pytest.mark.parametrize("enabled", [True, False])
def test_restored_after_success(callers_collector: None, enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    alive_before = len(gc.get_objects())
    with collector_deferred():
        thresholds, frozen, inside_enabled = _inside()
    assert thresholds == (YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
    assert frozen >= alive_before  # what existed on entry was frozen
    assert inside_enabled is enabled  # never switched on or off
    assert _inside() == (CALLERS_THRESHOLDS, 0, enabled)


@pytest.mark.parametrize("enabled", [True, False])
def test_restored_after_an_exception(callers_collector: None, enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with pytest.raises(ZeroDivisionError), collector_deferred():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
        _ = 1 / 0
    assert _inside() == (CALLERS_THRESHOLDS, 0, enabled)


def test_nested_uses_restore_what_they_found(callers_collector: None) -> None:
    with collector_deferred():
        outer = _inside()
        with pytest.raises(RuntimeError), collector_deferred():
            raise RuntimeError("inner")
        assert _inside() == outer  # still frozen and raised for the outer use
    assert _inside() == (CALLERS_THRESHOLDS, 0, True)


def test_a_callers_own_freeze_is_left_as_it_is(callers_collector: None) -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with collector_deferred():
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen  # not unfrozen: the caller froze those objects, not us
    assert gc.get_threshold() == CALLERS_THRESHOLDS


def test_cycles_made_inside_are_still_reclaimed(callers_collector: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a reference cycle: only the cyclic collector frees it

    with collector_deferred():
        cycle = Node()
        gone = weakref.ref(cycle)
        del cycle
        # New container objects that stay alive, as a migration's decoded entries do: enough to start a young
        # collection at the raised threshold (never gc.collect() here: the automatic collector must do it).
        kept = [[i] for i in range(2 * YOUNG_THRESHOLD)]
        assert gone() is None
        del kept


#: gc.get_threshold() as the migration function below saw it, call by call.
SEEN_THRESHOLDS: list[tuple[int, int, int]] = []


def record_thresholds(stats: dict[str, Any]) -> dict[str, Any]:
    """A migration function (tests.test_collector:record_thresholds): called by the rewrite, the dry run and the
    verifier's recomputation of each expected entry, from inside their hot loops."""
    SEEN_THRESHOLDS.append(gc.get_threshold())
    return stats


def test_migrate_dry_run_and_verify_run_with_the_collector_deferred(flink_savepoints: dict[str, Path],
                                                                    tmp_path: Path) -> None:
    source = flink_savepoints["heap-p2"]  # written by real Flink for the session
    target = OperatorTarget("stats", states=[StateTarget("stats", migration=parse_migration(
        {"function": "tests.test_collector:record_thresholds"}))])
    trusted = CodePolicy(modules=("tests.test_collector",))
    SEEN_THRESHOLDS.clear()
    report = migrate_savepoint(str(source), [target], open_output(tmp_path / "out"), code=trusted)
    keys = report.counts["stats"]["stats"].read
    assert keys > 0
    plan = plan_migration(Savepoint.open(source), [target], code=trusted)
    dry = [dry_run_subtask(Savepoint.open(source), plan, op_id, subtask) for op_id, subtask in plan.units()]
    assert sum(r.counts["stats"].read for r in dry) == keys
    raised = (YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
    # Once per entry in the rewrite, once in the verifier, once in the dry run: each within the hold.
    assert SEEN_THRESHOLDS == [raised] * (3 * keys)
    assert gc.get_threshold() != raised and gc.get_freeze_count() == 0
