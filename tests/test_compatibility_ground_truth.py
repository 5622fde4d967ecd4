"""Ground truth: the verdict `flinkstate check` gives beforehand against what real Flink 2.3 then does.

The base version of the compatibility-matrix job runs on HashMap and on RocksDB and stops with a savepoint. For each
variant, the tool checks that savepoint against the variant's manifest; then the variant is restored from it on the
same backend and the outcome must be the one the verdict announced: restorable verdicts (as is, reconfigured, after
migration) → the job runs and every key continues from its exact restored count; incompatible → Flink fails the
restore, with the error quoted below. Row fields swapped by name are the silent case: Flink restores "as is" and the
values land in the wrong fields, which only the tool reports.

Test ids read as the matrix: ``variant-FLINK_VERDICT-backend``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkstate import check
from flinkstate.compatibility import Verdict
from flinkstate.engine import FlinkJobFailed, FlinkRestError, LocalFlinkCluster
from flinkstate.report import Report
from tests.support import compat_matrix
from tests.support.compat_matrix import MatrixRun, restored_count

pytestmark = pytest.mark.flink

BACKENDS = ("hashmap", "rocksdb")
AS_IS = Verdict.COMPATIBLE_AS_IS
RECONFIGURED = Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER
AFTER_MIGRATION = Verdict.COMPATIBLE_AFTER_MIGRATION
INCOMPATIBLE = Verdict.INCOMPATIBLE


@dataclass(frozen=True)
class Case:
    variant: str
    flink_verdict: Verdict  # what the tool says Flink will answer
    code: str | None  # the finding that explains it
    errors: dict[str, str] | None = None  # backend -> text of Flink's failure (incompatible cases)
    silent: bool = False  # Flink restores, but the values are wrong: the tool's verdict is INCOMPATIBLE


_NEW_STATE_INCOMPATIBLE = "must not be incompatible with the old state serializer"
CASES = [
    Case("as-is", AS_IS, None),
    Case("pojo-field-added", AFTER_MIGRATION, "POJO_FIELD_ADDED"),
    Case("pojo-field-removed", AFTER_MIGRATION, "POJO_FIELD_REMOVED"),
    Case("pojo-field-type-changed", INCOMPATIBLE, "POJO_FIELD_TYPE_CHANGED",
         {"hashmap": "Can not set int field matrix.Item.count to java.lang.Long",
          "rocksdb": _NEW_STATE_INCOMPATIBLE}),
    Case("pojo-class-renamed", INCOMPATIBLE, "POJO_CLASS_CHANGED",
         {"hashmap": "matrix.Item", "rocksdb": "matrix.Item"}),
    Case("row-field-added", INCOMPATIBLE, "ROW_FIELD_ADDED",
         {"hashmap": _NEW_STATE_INCOMPATIBLE, "rocksdb": _NEW_STATE_INCOMPATIBLE}),
    Case("row-fields-swapped", AS_IS, "ROW_FIELDS_REORDERED", silent=True),
    Case("tuple-arity-changed", INCOMPATIBLE, "TUPLE_ARITY_CHANGED",
         {"hashmap": _NEW_STATE_INCOMPATIBLE, "rocksdb": _NEW_STATE_INCOMPATIBLE}),
    Case("enum-constant-appended", RECONFIGURED, "ENUM_CONSTANT_ADDED"),
    Case("enum-constant-removed", INCOMPATIBLE, "ENUM_CONSTANT_REMOVED",
         {"hashmap": "Probably because an enum value was removed",
          "rocksdb": "Probably because an enum value was removed"}),
    Case("key-type-changed", INCOMPATIBLE, "KEY_TYPE_CHANGED",
         {"hashmap": "must be compatible with the previous key serializer",
          "rocksdb": "must be compatible with the previous key serializer"}),
    Case("state-kind-changed", INCOMPATIBLE, "STATE_KIND_CHANGED",
         {"hashmap": "Incompatible key/value state types", "rocksdb": "Incompatible key/value state types"}),
    Case("operator-removed", INCOMPATIBLE, "OPERATOR_REMOVED",
         {"hashmap": "Cannot map checkpoint/savepoint state for operator",
          "rocksdb": "Cannot map checkpoint/savepoint state for operator"}),
    Case("state-dropped", AS_IS, "STATE_DROPPED"),
]


def _case_id(case: Case) -> str:
    return f"{case.variant}-{case.flink_verdict.name}"


@pytest.fixture(scope="module")
def base_savepoints(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """backend -> savepoint of the base version after every key saw a few events."""
    work = tmp_path_factory.mktemp("compat-matrix")
    savepoints = {}
    for backend in BACKENDS:
        run = compat_matrix.submit(flink_cluster.client, "base", work / f"audit-{backend}", backend=backend)
        flink_cluster.client.wait_until_running(run.job_id, timeout=120)
        run.wait_for_keys()
        location = flink_cluster.client.stop_with_savepoint(run.job_id, str(work / f"raw-{backend}"))
        savepoints[backend] = Path(shutil.move(location.removeprefix("file:"), work / f"savepoint-{backend}"))
    return savepoints


def _verdict(savepoint: Path, variant: str, backend: str, **options: object) -> Report:
    return check(savepoint, compat_matrix.manifest(variant), previous=compat_matrix.manifest("base"),
                 backend=backend, **options)  # type: ignore[arg-type]


@contextmanager
def _restore(cluster: LocalFlinkCluster, variant: str, backend: str, savepoint: Path, audit: Path,
             allow_non_restored_state: bool = False) -> Iterator[tuple[MatrixRun | None, str | None]]:
    """Submits the variant from the savepoint; yields (run, None) once it runs, or (None, Flink's error)."""
    client = cluster.client
    try:
        run = compat_matrix.submit(client, variant, audit, backend=backend, savepoint_path=savepoint,
                                   allow_non_restored_state=allow_non_restored_state)
    except FlinkRestError as exc:  # refused at submission (the savepoint does not map onto the job)
        yield None, f"{exc} {exc.details}"
        return
    try:
        try:
            client.wait_until_running(run.job_id, timeout=90)
        except FlinkJobFailed as exc:
            yield None, f"{exc} {exc.details}"
            return
        yield run, None
    finally:
        if client.job_state(run.job_id) not in ("CANCELED", "FAILED", "FINISHED"):
            client.cancel(run.job_id)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_verdict_given_beforehand_is_what_flink_does(
    flink_cluster: LocalFlinkCluster, base_savepoints: dict[str, Path], tmp_path: Path, case: Case, backend: str
):
    savepoint = base_savepoints[backend]
    report = _verdict(savepoint, case.variant, backend)
    assert report.flink_verdict is case.flink_verdict, report.render_markdown()
    codes = {f.code for f in report.findings}
    if case.code is not None:
        assert case.code in codes, report.render_markdown()
    restorable = case.flink_verdict.restorable
    expected_exit = 4 if (not restorable or case.silent) else 3 if case.flink_verdict is AFTER_MIGRATION else 0
    assert report.exit_code == expected_exit, report.render_markdown()

    with _restore(flink_cluster, case.variant, backend, savepoint, tmp_path / "audit") as (run, error):
        if not restorable:
            assert run is None, f"Flink restored {case.variant} on {backend}, the tool said INCOMPATIBLE"
            assert case.errors is not None and case.errors[backend] in (error or ""), error
            print(f"\n[{case.variant} / {backend}] Flink: {error}")
            return
        assert run is not None, f"Flink refused {case.variant} on {backend} ({error}); the tool said " \
                                f"{case.flink_verdict.name}"
        records = run.wait_for_keys()
        for record in records:
            n = restored_count(record)
            assert n > 0 and record["count"] == n, record  # the state was restored, value for value
            _check_values(case.variant, record, n)
        print(f"\n[{case.variant} / {backend}] Flink restored; first record: {records[0]}")


def _check_values(variant: str, record: dict, n: int) -> None:
    key = record["key"]
    if variant == "row-fields-swapped":
        # What Flink did silently: the old `note` value now reads as `label` and the other way round.
        assert record["row"] == {"id": n, "note": f"{key}#{n}", "label": f"note-{n}"}, record
        return
    if variant == "pojo-field-added":
        assert record["pojo"] == {"name": key, "count": n, "score": n / 2.0, "tag": None}, record
    elif variant == "pojo-field-removed":
        assert record["pojo"] == {"name": key, "count": n}, record
    elif variant != "state-dropped":
        assert record["pojo"] == {"name": key, "count": n, "score": n / 2.0}, record
        assert record["tuple"] == [n, key], record
    assert record["row"] == {"id": n, "label": f"{key}#{n}", "note": f"note-{n}"}, record
    # Enum values are stored as ordinals into the old constant list, which the reconfigured serializer keeps.
    assert record["color"] == ("RED", "GREEN", "BLUE")[n % 3], record


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_removed_operator_restores_with_allow_non_restored_state(
    flink_cluster: LocalFlinkCluster, base_savepoints: dict[str, Path], tmp_path: Path, backend: str
):
    report = _verdict(base_savepoints[backend], "operator-removed", backend, allow_non_restored_state=True)
    assert report.exit_code == 0 and report.flink_verdict is AS_IS, report.render_markdown()
    with _restore(flink_cluster, "operator-removed", backend, base_savepoints[backend], tmp_path / "audit",
                  allow_non_restored_state=True) as (run, error):
        assert run is not None, error
        assert all(r["count"] == restored_count(r) > 0 for r in run.wait_for_keys())
