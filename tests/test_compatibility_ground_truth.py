"""Ground truth: the verdict `flinkstate check` gives beforehand against what real Flink 2.3 then does.

The base version of the compatibility-matrix job runs on HashMap and on RocksDB and stops with a savepoint. For each
variant, the tool checks that savepoint against the variant's manifest; then the variant is restored from it on the
same backend and the outcome must be the one the verdict announced: restorable verdicts (as is, reconfigured, after
migration) → the job runs and every key continues from its exact restored count; incompatible → Flink fails the
restore, with the error quoted below. Row fields swapped by name are the silent case: Flink restores "as is" and the
values land in the wrong fields, which only the tool reports.

One verdict: for every variant and for declared changes edited into the manifests (a uid or state renamed, a max
parallelism or namespace changed, declared functions and conversions, TTL with a declared time, an enum reordered
while another state is rewritten), ``check``'s exit status is what ``migrate`` does (4: refused in one line, nothing
published; 0 or 3: published, and the output checks 0 against the same manifest; 0: every header kept), and real
Flink restores what ``migrate`` wrote for TTL switched on and off and for a declared function, every key checked.

Test ids read as the matrix: ``variant-FLINK_VERDICT-backend``.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from flinkstate import check
from flinkstate.compatibility import Verdict
from flinkstate.engine import FlinkJobFailed, FlinkRestError, LocalFlinkCluster
from flinkstate.format.keyed_header import StateMetaInfo, state_meta_bytes
from flinkstate.report import Report
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.ttl import TtlValue
from tests.support import compat_matrix
from tests.support.compat_matrix import MatrixRun, restored_count
from tests.support.one_verdict import assert_one_verdict

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
    silent: bool = False  # Flink restores, but the values are wrong (unless the plan migrates them)
    #: check's exit status: the plan migrate runs (0 restore, 3 migrate, 4 refused); None: from the verdict alone
    exit: int | None = None

    @property
    def expected_exit(self) -> int:
        if self.exit is not None:
            return self.exit
        if not self.flink_verdict.restorable or self.silent:
            return 4
        return 3 if self.flink_verdict is AFTER_MIGRATION else 0


_NEW_STATE_INCOMPATIBLE = "must not be incompatible with the old state serializer"
CASES = [
    Case("as-is", AS_IS, None),
    Case("pojo-field-added", AFTER_MIGRATION, "POJO_FIELD_ADDED"),
    Case("pojo-field-removed", AFTER_MIGRATION, "POJO_FIELD_REMOVED"),
    Case("pojo-field-type-changed", INCOMPATIBLE, "POJO_FIELD_TYPE_CHANGED",
         {"hashmap": "Can not set int field matrix.Item.count to java.lang.Long",
          "rocksdb": _NEW_STATE_INCOMPATIBLE}),
    # Flink refuses; the plan maps the fields by name into the renamed class (exit 3)
    Case("pojo-class-renamed", INCOMPATIBLE, "POJO_CLASS_CHANGED",
         {"hashmap": "matrix.Item", "rocksdb": "matrix.Item"}, exit=3),
    # Flink refuses; with the old manifest's names the plan adds the field (null) and keeps the others by name
    Case("row-field-added", INCOMPATIBLE, "ROW_FIELD_ADDED",
         {"hashmap": _NEW_STATE_INCOMPATIBLE, "rocksdb": _NEW_STATE_INCOMPATIBLE}, exit=3),
    # Silent for Flink; with the old manifest's names (previous) the plan moves each value to its field by name.
    Case("row-fields-swapped", AS_IS, "ROW_FIELDS_REORDERED", silent=True, exit=3),
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
    Case("state-dropped", AS_IS, "STATE_DROPPED", exit=3),  # Flink keeps it; the plan removes it
    # Flink 2.x migrates TTL switched on itself (TtlAwareSerializer); so does the plan (exit 3).
    Case("ttl-enabled", AFTER_MIGRATION, "TTL_ENABLED"),
    # Flink's reconfigured EnumSerializer reads the old ordinals: the bytes and the snapshot are kept (exit 0).
    Case("enum-constant-inserted", RECONFIGURED, "ENUM_CONSTANTS_REORDERED"),
]


def _case_id(case: Case) -> str:
    return f"{case.variant}-{case.flink_verdict.name}"


@pytest.fixture(scope="module")
def base_savepoints(compat_matrix_base_savepoints: dict[str, Path]) -> dict[str, Path]:
    """backend -> savepoint of the base version after every key saw a few events (the session's: check --trial's
    tests restore the same ones)."""
    return compat_matrix_base_savepoints


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


@dataclass(frozen=True)
class Restore:
    """What Flink did with one variant's restore: its error (refused), or every key's record once it ran."""

    error: str | None
    records: list[dict[str, Any]] | None


@pytest.fixture(scope="module")
def flink_restores(flink_cluster: LocalFlinkCluster, base_savepoints: dict[str, Path],
                   tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Future[Restore]]:
    """(variant, backend) -> Flink's restore of the variant from the base savepoint, four at a time (the session
    cluster's four slots; one restore waits on Flink more than it computes: 32 one after the other took 220 s).
    All of them end before the fixture returns: pytest sets os.environ between tests, which threads reading it
    (requests looks up proxies) must not overlap. Each test takes its own restore's result, so that a failure (an
    exception included) is that test's."""
    audits = tmp_path_factory.mktemp("matrix-restores")

    def restore(case: Case, backend: str) -> Restore:
        with _restore(flink_cluster, case.variant, backend, base_savepoints[backend],
                      audits / f"{case.variant}-{backend}") as (run, error):
            if run is None:
                return Restore(error, None)
            # An incompatible variant that runs is the test's failure: no records needed to say so.
            return Restore(None, run.wait_for_keys() if case.flink_verdict.restorable else [])

    with ThreadPoolExecutor(4, thread_name_prefix="restore") as pool:
        return {(case.variant, backend): pool.submit(restore, case, backend)
                for case in CASES for backend in BACKENDS}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_verdict_given_beforehand_is_what_flink_does(
    flink_restores: dict[tuple[str, str], Future[Restore]], base_savepoints: dict[str, Path], case: Case,
    backend: str
):
    savepoint = base_savepoints[backend]
    report = _verdict(savepoint, case.variant, backend)
    assert report.flink_verdict is case.flink_verdict, report.render_markdown()
    codes = {f.code for f in report.findings}
    if case.code is not None:
        assert case.code in codes, report.render_markdown()
    restorable = case.flink_verdict.restorable
    assert report.exit_code == case.expected_exit, report.render_markdown()

    flink = flink_restores[case.variant, backend].result()
    if not restorable:
        assert flink.records is None, f"Flink restored {case.variant} on {backend}, the tool said INCOMPATIBLE"
        assert case.errors is not None and case.errors[backend] in (flink.error or ""), flink.error
        print(f"\n[{case.variant} / {backend}] Flink: {flink.error}")
        return
    assert flink.records is not None, f"Flink refused {case.variant} on {backend} ({flink.error}); the tool said " \
                                      f"{case.flink_verdict.name}"
    for record in flink.records:
        n = restored_count(record)
        assert n > 0 and record["count"] == n, record  # the state was restored, value for value
        _check_values(case.variant, record, n)
    print(f"\n[{case.variant} / {backend}] Flink restored; first record: {flink.records[0]}")


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


# -- one verdict: check's exit status is what migrate does, and Flink restores what migrate writes --------------------

FUNCTIONS = "tests.support.compat_matrix"


def _edited(variant: str, tmp_path: Path, edit: Any) -> Path:
    """A copy of a variant's manifest with ``edit(document)`` applied."""
    document = yaml.safe_load(compat_matrix.manifest(variant).read_text())
    edit(document)
    path = tmp_path / f"{variant}-edited.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _matrix(document: dict[str, Any]) -> dict[str, Any]:
    return document["operators"]["matrix"]


def _rename_operator(document: dict[str, Any]) -> None:
    document["operators"]["matrix-v2"] = {**document["operators"].pop("matrix"), "renamed_from": "matrix"}


def _rename_state(document: dict[str, Any]) -> None:
    states = _matrix(document)["states"]
    states["events"] = {**states.pop("count"), "renamed_from": "count"}


#: name -> (variant whose manifest is edited, edit, check's exit status, the finding that must explain it)
DECLARED: dict[str, tuple[str, Any, int, str | None]] = {
    "max-parallelism-changed": ("base", lambda d: _matrix(d).update(max_parallelism=256), 4, "MIGRATION_REFUSED"),
    "uid-renamed": ("base", _rename_operator, 3, "OPERATOR_RENAMED"),
    "state-renamed": ("base", _rename_state, 3, "STATE_RENAMED"),
    "namespace-changed": ("base", lambda d: _matrix(d)["states"]["color"].update(namespace="TimeWindow"), 4,
                          "NAMESPACE_CHANGED"),
    "tuple-arity-changed-function": ("tuple-arity-changed", lambda d: _matrix(d)["states"]["tuple"].update(
        migration={"function": f"{FUNCTIONS}:tuple3_of_tuple2"}), 3, "TUPLE_ARITY_CHANGED"),
    "enum-constant-removed-function": ("enum-constant-removed", lambda d: _matrix(d)["states"]["color"].update(
        migration={"function": f"{FUNCTIONS}:color_without_blue"}), 3, "ENUM_CONSTANT_REMOVED"),
    "pojo-field-type-changed-convert": ("pojo-field-type-changed", lambda d: _matrix(d)["states"]["pojo"].update(
        migration={"fields": {"count": {"convert": "to-int"}}}), 3, "POJO_FIELD_TYPE_CHANGED"),
    "state-kind-changed": ("state-kind-changed", lambda d: None, 4, "STATE_KIND_CHANGED"),
    "ttl-enabled-at": ("ttl-enabled", lambda d: _matrix(d)["states"]["count"].update(
        migration={"ttl_last_access": 1_700_000_000_000}), 3, "TTL_ENABLED"),
    # the enum keeps its bytes and its snapshot while another state of the operator is rewritten
    "enum-inserted-and-pojo-field-added": ("enum-constant-inserted", lambda d: _matrix(d)["states"]["pojo"][
        "value"]["fields"].update(tag="String"), 3, "ENUM_CONSTANTS_REORDERED"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_check_is_the_plan_migrate_runs_for_every_variant(base_savepoints: dict[str, Path], tmp_path: Path,
                                                          case: Case, backend: str):
    report = assert_one_verdict(base_savepoints[backend], compat_matrix.manifest(case.variant), tmp_path / "out",
                                previous=compat_matrix.manifest("base"))
    assert report.exit_code == case.expected_exit, report.render_markdown()
    if case.variant == "enum-constant-removed":
        # issue 23: the refusal said "type changed from Enum matrix.Color to Enum matrix.Color"; it says what differs
        refused = next(f.message for f in report.findings if f.code == "MIGRATION_REFUSED")
        assert "Enum matrix.Color changed in a way Flink cannot restore: " in refused and "BLUE" in refused, refused


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(DECLARED))
def test_check_is_the_plan_migrate_runs_for_declared_changes(base_savepoints: dict[str, Path], tmp_path: Path,
                                                             name: str, backend: str):
    variant, edit, expected, code = DECLARED[name]
    manifest = _edited(variant, tmp_path, edit)
    report = assert_one_verdict(base_savepoints[backend], manifest, tmp_path / "out",
                                previous=compat_matrix.manifest("base"), allow_code=FUNCTIONS)
    assert report.exit_code == expected, report.render_markdown()
    assert code is None or code in {f.code for f in report.findings}, report.render_markdown()
    if name == "enum-inserted-and-pojo-field-added":
        # the enum state's entries keep their bytes (old ordinals, old snapshot) although the stream is rewritten
        source, output = Savepoint.open(base_savepoints[backend]), Savepoint.open(tmp_path / "out")
        assert list(source.iter_entries("matrix", "color")) == list(output.iter_entries("matrix", "color"))
        assert state_meta_bytes(_state(output, "color")) == state_meta_bytes(_state(source, "color"))
        assert state_meta_bytes(_state(output, "pojo")) != state_meta_bytes(_state(source, "pojo"))
    if name == "ttl-enabled-at":
        values = [value for _, _, value in Savepoint.open(tmp_path / "out").iter_entries("matrix", "count")]
        assert values and all(v.last_access == 1_700_000_000_000 for v in values), values


def _state(savepoint: Savepoint, name: str) -> StateMetaInfo:
    header = savepoint.keyed_header("matrix")
    index = header.state_index(name) if header is not None else None
    assert header is not None and index is not None
    return header.states[index]


def _restore_and_check(cluster: LocalFlinkCluster, variant: str, backend: str, savepoint: Path, audit: Path,
                       check_record: Any) -> None:
    with _restore(cluster, variant, backend, savepoint, audit) as (run, error):
        assert run is not None, error
        for record in run.wait_for_keys():
            n = restored_count(record)
            assert n > 0 and record["count"] == n, record
            check_record(record, n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_flink_restores_what_migrate_wrote_for_ttl_on_and_off_and_a_function(
    flink_cluster: LocalFlinkCluster, base_savepoints: dict[str, Path], tmp_path: Path, backend: str
):
    """The plans check calls possible, run by migrate and restored by real Flink with every key's values checked:
    TTL switched on (then off again, from a savepoint Flink wrote with TTL), and a declared function (Tuple2 ->
    Tuple3)."""
    base = compat_matrix.manifest("base")
    on = tmp_path / "ttl-on"
    assert assert_one_verdict(base_savepoints[backend], compat_matrix.manifest("ttl-enabled"), on,
                              previous=base).exit_code == 3
    assert all(isinstance(value, TtlValue) for _, _, value in Savepoint.open(on).iter_entries("matrix", "count"))
    with _restore(flink_cluster, "ttl-enabled", backend, on, tmp_path / "audit-on") as (run, error):
        assert run is not None, error
        for record in run.wait_for_keys():
            assert record["count"] == restored_count(record) > 0, record
            _check_values("ttl-enabled", record, restored_count(record))
        with_ttl = Path(flink_cluster.client.stop_with_savepoint(run.job_id, str(tmp_path / "raw"))
                        .removeprefix("file:"))
    # TTL switched off: Flink's own verdict (it restores and unwraps), and migrate's plan, restored by Flink
    report = check(with_ttl, base)
    assert report.flink_verdict is AFTER_MIGRATION and "TTL_DISABLED" in {f.code for f in report.findings}
    off = tmp_path / "ttl-off"
    assert assert_one_verdict(with_ttl, base, off).exit_code == 3
    _restore_and_check(flink_cluster, "base", backend, off, tmp_path / "audit-off",
                       lambda record, n: _check_values("base", record, n))
    _restore_and_check(flink_cluster, "base", backend, with_ttl, tmp_path / "audit-flink-off",
                       lambda record, n: _check_values("base", record, n))
    # a declared function where Flink refuses (Tuple2 -> Tuple3)
    variant, edit, _, _ = DECLARED["tuple-arity-changed-function"]
    function = tmp_path / "function"
    assert assert_one_verdict(base_savepoints[backend], _edited(variant, tmp_path, edit), function, previous=base,
                              allow_code=FUNCTIONS).exit_code == 3

    def tuple3(record: dict[str, Any], n: int) -> None:
        assert record["tuple"] == [n, record["key"], n], record

    _restore_and_check(flink_cluster, "tuple-arity-changed", backend, function, tmp_path / "audit-function", tuple3)
