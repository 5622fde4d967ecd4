"""One verdict (issue 23), without a cluster: on Flink's own savepoints (canonical HashMap and RocksDB, a RocksDB
native savepoint, a broadcast job with Long keys), every upgrade case a manifest can declare (one change at a time,
with the exit status each must get, and derandomized combinations of up to three) holds the property of
:mod:`tests.support.one_verdict`: ``check`` exit 4 -> ``migrate`` refuses in one line and publishes nothing;
exit 0 or 3 -> ``migrate`` publishes and its output checks 0 against the same manifest.

The checks that can fail are shown to fail: a plan whose output would not restore is refused by migrate before it
writes (``test_the_gate_refuses_what_check_refuses``), and a staged output that differs from the plan is refused by
the output check before it is published (``test_the_output_check_refuses_a_wrong_written_snapshot``)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flinkstate import check
from flinkstate.cli import main
from flinkstate.compatibility import Verdict
from flinkstate.manifest import load_manifest, manifest_from_savepoint
from flinkstate.migration.conversions import MigrationPlanError
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.transforms import build_transform
from flinkstate.migration.verdict import check_against_manifest
from flinkstate.report import headline_text
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.serializers.rowdata import RowDataSnapshot
from flinkstate.serializers.ttl import TtlValue
from flinkstate.typenotation import to_snapshot
from tests.support.one_verdict import assert_one_verdict

CORPUS = Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
UDF = "new-stateful-udf-migration-itcase-flink2.3-"
SAVEPOINTS = [UDF + "hashmap-savepoint", UDF + "rocksdb-savepoint", UDF + "rocksdb-savepoint-native"]
BROADCAST = "new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint"
FLAT_MAP = "CheckpointingKeyedStateFlatMap1"
TIMELY = "CheckpointingTimelyStatefulOperator1"
FUNCTIONS = "tests.test_one_verdict"

Document = dict[str, Any]


def describe_count(value: int) -> str:
    """A declared migration function (imported only with --allow-code=tests.test_one_verdict)."""
    return f"n={value}"


def count_record(value: int) -> dict[str, Any]:
    """A declared function from a Long to a POJO (as from a Tuple2 to a POJO: the rules cannot build a record)."""
    return {"n": value, "label": f"n={value}"}


COUNT_POJO = {"pojo": "up.Count", "fields": {"label": "String", "n": "Long"}}


def _schema(savepoint: Path) -> Document:
    document: Document = yaml.safe_load(manifest_from_savepoint(Savepoint.open(savepoint)).dump())
    return document


def _state(document: Document, operator: str = FLAT_MAP, name: str = "state-name") -> Document:
    state: Document = document["operators"][operator]["states"][name]
    return state


def _rename_operator(document: Document) -> None:
    document["operators"][f"{FLAT_MAP}-v2"] = {**document["operators"].pop(FLAT_MAP), "renamed_from": FLAT_MAP}


def _rename_state(document: Document) -> None:
    states = document["operators"][FLAT_MAP]["states"]
    states["renamed"] = {**states.pop("state-name"), "renamed_from": "state-name"}


def _drop_state(document: Document) -> None:
    operator = document["operators"][TIMELY]
    operator["states"].pop("state-name")
    operator["dropped_states"] = ["state-name"]


#: name -> (edit of the savepoint's own manifest, check's exit status)
MUTATIONS: dict[str, tuple[Callable[[Document], None], int]] = {
    "identity": (lambda d: None, 0),
    "state-renamed": (_rename_state, 3),
    "state-dropped": (_drop_state, 3),
    "value-type-changed": (lambda d: _state(d).update(value="String"), 4),
    "value-converted": (lambda d: _state(d).update(value="String", migration={"value": {"convert": "to-string"}}), 3),
    "value-function": (lambda d: _state(d).update(value="String",
                                                 migration={"function": f"{FUNCTIONS}:describe_count"}), 3),
    "ttl-enabled": (lambda d: _state(d).update(value="TTL<Long>"), 3),
    "ttl-enabled-at": (lambda d: _state(d).update(value="TTL<Long>", migration={"ttl_last_access": 1234}), 3),
    # a declared function where TTL is switched on: it maps the user value, the plan wraps it (issue 23)
    "ttl-enabled-function": (lambda d: _state(d).update(value="TTL<String>", migration={
        "function": f"{FUNCTIONS}:describe_count", "ttl_last_access": 1234}), 3),
    "record-function": (lambda d: _state(d).update(value=COUNT_POJO,
                                                  migration={"function": f"{FUNCTIONS}:count_record"}), 3),
    "namespace-changed": (lambda d: _state(d).update(namespace="TimeWindow"), 4),
    "timer-namespace-changed": (lambda d: _state(d, TIMELY, "_timer_state/event_timer").update(
        namespace="TimeWindow"), 4),
    "kind-changed": (lambda d: _state(d).update(kind="LIST"), 4),
    "operator-renamed": (_rename_operator, 3),
    "operator-removed": (lambda d: d["operators"].pop(TIMELY), 4),
    "max-parallelism-changed": (lambda d: d["operators"][FLAT_MAP].update(max_parallelism=256), 4),
    "key-type-changed": (lambda d: d["operators"][FLAT_MAP].update(key="Tuple1<Integer>"), 4),
    "key-converted-unsupported": (lambda d: d["operators"][FLAT_MAP].update(
        key="String", migration={"key": {"convert": "to-string"}}), 4),
}


def _write(document: Document, path: Path) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.mark.parametrize("savepoint", SAVEPOINTS)
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_declared_change_gets_the_verdict_migrate_acts_on(tmp_path: Path, savepoint: str, mutation: str):
    edit, expected = MUTATIONS[mutation]
    document = _schema(CORPUS / savepoint)
    edit(document)
    manifest = _write(document, tmp_path / "manifest.yaml")
    report = assert_one_verdict(CORPUS / savepoint, manifest, tmp_path / "out", allow_code=FUNCTIONS)
    assert report.exit_code == expected, report.render_markdown()
    # The command line says the same as the API, and migrate's exit status follows it.
    assert main(["check", str(CORPUS / savepoint), "--schema", str(manifest)]) == expected


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(set(MUTATIONS) - {"identity"})), min_size=2, max_size=3, unique=True),
       st.sampled_from(SAVEPOINTS))
def test_combined_changes_hold_the_property(tmp_path_factory: pytest.TempPathFactory, mutations: list[str],
                                           savepoint: str):
    document = _schema(CORPUS / savepoint)
    applied = []
    for name in mutations:
        try:
            MUTATIONS[name][0](document)
            applied.append(name)
        except KeyError:  # an earlier change took what this one edits (a renamed or removed operator)
            continue
    work = tmp_path_factory.mktemp("combined")
    report = assert_one_verdict(CORPUS / savepoint, _write(document, work / "manifest.yaml"), work / "out",
                                allow_code=FUNCTIONS)
    if set(applied) & BEYOND_REPAIR:
        assert report.exit_code == 4, (applied, report.render_markdown())


#: Changes that no other change of the list undoes: the manifest stays one that migrate refuses.
BEYOND_REPAIR = {"kind-changed", "max-parallelism-changed", "operator-removed", "namespace-changed",
                 "timer-namespace-changed", "key-type-changed", "key-converted-unsupported"}


def test_a_key_conversion_is_declared_once_per_operator_and_moves_keys(tmp_path: Path):
    """Long keys converted to String on the operator (not per state): entries move to the key groups Flink hashes
    the String keys to, timers included, and the output checks 0."""
    savepoint = CORPUS / BROADCAST
    document = _schema(savepoint)
    keyed = [label for label, op in document["operators"].items() if op.get("key") == "Long"]
    assert keyed
    for label in keyed:
        document["operators"][label].update(key="String", migration={"key": {"convert": "to-string"}})
    manifest = _write(document, tmp_path / "manifest.yaml")
    report = assert_one_verdict(savepoint, manifest, tmp_path / "out")
    assert report.exit_code == 3, report.render_markdown()
    source, output = Savepoint.open(savepoint), Savepoint.open(tmp_path / "out")
    for label in keyed:
        for state in source.keyed_states(label):
            before = sorted((str(e[0]), *map(repr, e[1:])) for e in source.iter_entries(label, state.name))
            after = sorted((e[0], *map(repr, e[1:])) for e in output.iter_entries(label, state.name))
            assert before == after and all(isinstance(e[0], str) for e in output.iter_entries(label, state.name))
    # a key conversion written on a state is refused, naming where it belongs
    state = next(iter(document["operators"][keyed[0]]["states"].values()))
    state["migration"] = {"key": {"convert": "to-string"}}
    assert main(["check", str(savepoint), "--schema", str(_write(document, tmp_path / "bad.yaml"))]) == 1


def test_the_gate_refuses_what_check_refuses(tmp_path: Path):
    """Before this rule, a changed window namespace was "COMPATIBLE_AS_IS (snapshot identical to the manifest's)" for
    migrate's check, which compared value serializers only, and the savepoint was published; now migrate refuses
    before writing, with check's finding."""
    document = _schema(CORPUS / SAVEPOINTS[0])
    MUTATIONS["namespace-changed"][0](document)
    manifest = _write(document, tmp_path / "manifest.yaml")
    job = MigrationJob(str(CORPUS / SAVEPOINTS[0]), str(manifest), str(tmp_path / "out"))
    with pytest.raises(MigrationError, match=f"operator {FLAT_MAP}, state state-name: .*NAMESPACE_CHANGED"):
        job.run()
    assert not (tmp_path / "out").exists()


def test_the_output_check_refuses_a_wrong_written_snapshot(tmp_path: Path):
    """The check of what migrate wrote can fail: an output whose written namespace serializer is not the manifest's
    (as if the writer had kept the old one) is refused, naming the staged state file, the operator and the state."""
    source = CORPUS / SAVEPOINTS[0]
    assert main(["migrate", str(source), "--schema", str(_write(_schema(source), tmp_path / "own.yaml")),
                 "--output", str(tmp_path / "out")]) == 0
    document = _schema(source)
    MUTATIONS["namespace-changed"][0](document)
    manifest = load_manifest(_write(document, tmp_path / "wrong.yaml"))
    with pytest.raises(MigrationError) as refused:
        check_against_manifest(Savepoint.open(tmp_path / "out"), manifest)
    message = str(refused.value)
    assert f"operator {FLAT_MAP}, state state-name: " in message and "NAMESPACE_CHANGED" in message, message
    assert str(tmp_path / "out") in message and len(message.splitlines()) == 1


SQL_AGGREGATE = (Path(__file__).parent / "corpus" / "savepoints" / "flink-table" / "flink-table-planner" / "src" /
                 "test" / "resources" / "restore-tests" / "stream-exec-group-aggregate_1" / "agg-with-state-ttl-hint" /
                 "savepoint")
SQL_AGGREGATE_OPERATOR = "20066aaa5f4902f5627b7c13fb0ab2a5"


@pytest.mark.parametrize("rules", [None, {"f4": {"default": 0}}, {"f4": {"from": "f0"}}])
def test_a_sql_accumulator_gaining_a_field_is_migrated_by_field_name(tmp_path: Path, rules: dict[str, Any] | None):
    """Flink's GROUP BY accumulator (TTL<ROW<f0 BIGINT, f1 BIGINT, f2 BIGINT, f3 STRING>>, from Flink's restore
    tests) gains a BIGINT (a query gaining SUM): the new field is named as describe shows it (f4). Without a rule
    the plan cannot know which field is new (the snapshot stores no names): refused by both (4); with one, migrated
    (3), every accumulator keeping its values and its TTL last access."""
    source = Savepoint.open(SQL_AGGREGATE)
    header = source.keyed_header(SQL_AGGREGATE_OPERATOR)
    assert header is not None and header.states[0].name == "accState"
    ttl = header.states[0].value_serializer
    accumulator = ttl.nested[1]  # type: ignore[union-attr]
    assert isinstance(accumulator, RowDataSnapshot)
    grown = RowDataSnapshot(accumulator.class_name, accumulator.version, [*accumulator.types, accumulator.types[0]],
                            [*accumulator.raw_types, accumulator.raw_types[0]],
                            [*accumulator.nested, accumulator.nested[0]], None)
    document = _schema(SQL_AGGREGATE)
    state = document["operators"][SQL_AGGREGATE_OPERATOR]["states"]["accState"]
    state["value"] = {"ttl": {"table": grown.type_name(),
                              "snapshot": base64.b64encode(snapshot_bytes(grown)).decode("ascii")}}
    if rules is not None:
        state["migration"] = {"fields": rules}
    report = assert_one_verdict(SQL_AGGREGATE, _write(document, tmp_path / "manifest.yaml"), tmp_path / "out")
    assert report.exit_code == (4 if rules is None else 3), report.render_markdown()
    if rules is None:
        assert "fN" in next(f.message for f in report.findings if f.code == "MIGRATION_REFUSED")
        return
    before = {e[0]: e[2] for e in source.iter_entries(SQL_AGGREGATE_OPERATOR, "accState")}
    after = {e[0]: e[2] for e in Savepoint.open(tmp_path / "out").iter_entries(SQL_AGGREGATE_OPERATOR, "accState")}
    assert before.keys() == after.keys() and before
    for key, old in before.items():
        added = 0 if "f4" in rules and "default" in rules["f4"] else old.value[0]
        assert after[key] == TtlValue((*old.value, added), old.last_access), (old, after[key])


def test_a_removed_operator_with_allow_non_restored_state(tmp_path: Path):
    """With allowNonRestoredState, an operator the new version lacks is no refusal for check (0) and migrate copies
    it (the same flag for both); without the flag both refuse."""
    source = CORPUS / SAVEPOINTS[0]
    document = _schema(source)
    MUTATIONS["operator-removed"][0](document)
    manifest = _write(document, tmp_path / "manifest.yaml")
    assert check(source, manifest).exit_code == 4
    assert check(source, manifest, allow_non_restored_state=True).exit_code == 0
    assert main(["migrate", str(source), "--schema", str(manifest), "--output", str(tmp_path / "refused")]) == 1
    assert not (tmp_path / "refused").exists()
    assert main(["migrate", str(source), "--schema", str(manifest), "--output", str(tmp_path / "out"),
                 "--allow-non-restored-state"]) == 0
    assert check(tmp_path / "out", manifest, migrated=True, allow_non_restored_state=True).exit_code == 0
    assert Savepoint.open(tmp_path / "out").operator(TIMELY) is not None


def test_a_manifest_deployed_again_on_its_own_savepoint_restores(tmp_path: Path):
    """A manifest that carried a version's conversion (count: Long -> String, to-string), deployed again on a
    savepoint that version wrote (count already a String): the conversion is the identity there, so check says
    restore (0) and migrate keeps every header, where a rename or a default would still be a migration."""
    from flinkstate.migration.spec import parse_migration
    from flinkstate.migration.transforms import build_transform
    from flinkstate.typenotation import to_snapshot

    v3 = to_snapshot({"pojo": "sample.Stats", "fields": {"count": "String", "key": "String", "total": "Long"}})
    v2 = to_snapshot({"pojo": "sample.Stats", "fields": {"count": "Long", "key": "String", "total": "Long"}})
    convert = parse_migration({"fields": {"count": {"convert": "to-string"}}}).fields
    assert build_transform(v3, v3, rules=convert) is None
    transform = build_transform(v2, v3, rules=convert)
    assert transform is not None and transform({"count": 5, "key": "k", "total": 1})["count"] == "5"
    for live in ({"count": {"default": "x"}}, {"count": {"from": "key"}}):
        assert build_transform(v3, v3, rules=parse_migration({"fields": live}).fields) is not None


def test_a_declared_function_is_honoured_where_ttl_is_switched_on_and_off(tmp_path: Path):
    """Issue 23: check said 3 for a function declared where TTL is switched on, then migrate failed on every entry
    (the function's String was encoded as a TTL value). The function maps user values; the plan wraps them with the
    declared last access (on) or unwraps them first (off). Every value checked, both ways."""
    source = CORPUS / SAVEPOINTS[0]
    before = {e[0]: e[2] for e in Savepoint.open(source).iter_entries(FLAT_MAP, "state-name")}
    assert before and all(isinstance(v, int) for v in before.values())
    document = _schema(source)
    MUTATIONS["ttl-enabled-function"][0](document)
    on = tmp_path / "on"
    report = assert_one_verdict(source, _write(document, tmp_path / "on.yaml"), on, allow_code=FUNCTIONS)
    assert report.exit_code == 3, report.render_markdown()
    assert {e[0]: e[2] for e in Savepoint.open(on).iter_entries(FLAT_MAP, "state-name")} == {
        key: TtlValue(f"n={value}", 1234) for key, value in before.items()}
    # TTL switched off again, String -> String through the function: it is given the unwrapped value
    document = _schema(on)
    _state(document).update(value="String", migration={"function": f"{FUNCTIONS}:describe_count"})
    off = tmp_path / "off"
    report = assert_one_verdict(on, _write(document, tmp_path / "off.yaml"), off, allow_code=FUNCTIONS)
    assert report.exit_code == 3, report.render_markdown()
    assert {e[0]: e[2] for e in Savepoint.open(off).iter_entries(FLAT_MAP, "state-name")} == {
        key: f"n=n={value}" for key, value in before.items()}


def test_a_declared_function_builds_a_record_the_rules_cannot(tmp_path: Path):
    """Long -> POJO (as Tuple2 -> POJO): check said 3 and migrate refused although a function was declared."""
    source = CORPUS / SAVEPOINTS[0]
    document = _schema(source)
    MUTATIONS["record-function"][0](document)
    report = assert_one_verdict(source, _write(document, tmp_path / "manifest.yaml"), tmp_path / "out",
                                allow_code=FUNCTIONS)
    assert report.exit_code == 3, report.render_markdown()
    before = {e[0]: e[2] for e in Savepoint.open(source).iter_entries(FLAT_MAP, "state-name")}
    after = {e[0]: e[2] for e in Savepoint.open(tmp_path / "out").iter_entries(FLAT_MAP, "state-name")}
    assert after == {key: count_record(value) for key, value in before.items()} and after


def test_messages_name_the_side_that_lacks_what_the_manifest_asks(tmp_path: Path):
    """Issue 23's misleading lines: field rules for a type without fields blame the old type (not the new POJO that
    has them); a same-name type change says what differs (not "from Enum up.Color to Enum up.Color"); an
    incompatible check without --dry-run does not claim that a dry run showed anything."""
    source = CORPUS / SAVEPOINTS[0]
    document = _schema(source)
    _state(document).update(value=COUNT_POJO, migration={"fields": {"n": {"from": "x"}}})
    report = check(source, _write(document, tmp_path / "rules.yaml"))
    assert report.exit_code == 4
    refused = next(f.message for f in report.findings if f.code == "MIGRATION_REFUSED")
    assert "field rules n are given, but the old type Long has no fields of the same kind" in refused, refused
    assert report.render_markdown().splitlines()[0] == "# Compatibility check: INCOMPATIBLE"
    assert headline_text("incompatible", Verdict.COMPATIBLE_AFTER_MIGRATION, dry_run=False) == "INCOMPATIBLE"

    old = to_snapshot({"enum": "up.Color", "constants": ["RED", "GREEN", "BLUE"]})
    new = to_snapshot({"enum": "up.Color", "constants": ["RED", "GREEN"]})
    with pytest.raises(MigrationPlanError) as changed:
        build_transform(old, new)
    message = str(changed.value)
    assert message.startswith("Enum up.Color changed in a way Flink cannot restore: ") and "BLUE" in message, message
    assert "from Enum up.Color to Enum up.Color" not in message


def test_a_renamed_generated_operator_id_is_a_migration(tmp_path: Path):
    """A SQL operator whose generated id changed (Flink's GROUP BY, restore-tests: no uid), declared with the new
    ``id:`` and ``renamed_from`` the old id: a migration (3) for check, and migrate writes every accumulator under
    the new id, the old one gone."""
    renamed = "0123456789abcdef0123456789abcdef"
    document = _schema(SQL_AGGREGATE)
    body = document["operators"].pop(SQL_AGGREGATE_OPERATOR)
    document["operators"]["aggregate-v2"] = {**body, "id": renamed, "renamed_from": SQL_AGGREGATE_OPERATOR}
    report = assert_one_verdict(SQL_AGGREGATE, _write(document, tmp_path / "manifest.yaml"), tmp_path / "out")
    assert report.exit_code == 3 and "OPERATOR_RENAMED" in {f.code for f in report.findings}, \
        report.render_markdown()
    output = Savepoint.open(tmp_path / "out")
    assert SQL_AGGREGATE_OPERATOR not in {op.operator_id for op in output.operators}
    before = list(Savepoint.open(SQL_AGGREGATE).iter_entries(SQL_AGGREGATE_OPERATOR, "accState"))
    assert before and list(output.iter_entries(renamed, "accState")) == before
