"""Migrations, checked on real Flink 2.3: v1's savepoint migrated for v2 (a field added, with a default) and for v3
(``count`` long -> String, which Flink itself refuses), a uid rename, a state rename, a dropped state, and a user
function failing on some entries under the dead-letter policy. Each migrated savepoint is restored and every key's
state, as the job reports it, is compared with the value recomputed from the key's count."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import operator_id_from_uid
from flinkstate.cli import main
from flinkstate.engine import LocalFlinkCluster
from flinkstate.format.keyed_header import state_meta_bytes
from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.plan import MigrationError, OperatorTarget, StateTarget
from flinkstate.migration.runner import migrate_savepoint
from flinkstate.migration.spec import MigrationSpecError, parse_migration
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.pojo import PojoSnapshot
from flinkstate.serializers.primitives import simple
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.storage.uri import open_output
from tests.support import sample_job
from tests.support.sample_job import expected_count, expected_state, key_index

CORPUS = Path(__file__).parent / "corpus" / "savepoints" / "flink-tests" / "src" / "test" / "resources"
COMPOSITE_MAGIC = (0x000DE704).to_bytes(4, "big")  # CompositeTypeSerializerSnapshot.MAGIC_NUMBER

KEYS = 20  # the session savepoints' key count
#: The migration functions these tests name live here: code is allowed module by module.
TRUSTED = CodePolicy(modules=("tests.test_migration",))
LABEL_DEFAULT = "n/a"


def stats_snapshot(version: str) -> PojoSnapshot:
    """The snapshot Flink writes for sample.Stats of ``version``."""
    fields = [("key", simple("String")), ("total", simple("Long")),
              ("count", simple("String" if version == "v3" else "Long"))]
    if version in ("v2", "v3"):
        fields.append(("label", simple("String")))
    return PojoSnapshot.create("sample.Stats", fields)


def target_for(version: str) -> OperatorTarget:
    rules: dict[str, Any] = {"label": {"default": LABEL_DEFAULT}}
    if version == "v3":
        rules["count"] = {"convert": "to-string"}
    return OperatorTarget("stats", states=[StateTarget("stats", value=stats_snapshot(version),
                                                       migration=parse_migration({"fields": rules}))])


def fail_on_some_keys(stats: dict[str, Any]) -> dict[str, Any]:
    """A user migration function (referenced as tests.test_migration:fail_on_some_keys) that fails for every
    fourth key."""
    if key_index(stats["key"]) % 4 == 0:
        raise ValueError(f"cannot upgrade {stats['key']}")
    return stats


def check_record(record: dict[str, Any], *, stats: str = "v1", count_as_string: bool = False,
                 label: Any = None, absent: tuple[str, ...] = ()) -> int:
    """Every state the job found for one key equals the value recomputed from the count its first sequence
    number implies; ``absent`` states must have been found empty."""
    n = expected_count(record["key"], record["seq"], record["keys"])
    assert n > 0, record
    expected = expected_state(record["key"], n, "v1")
    want_stats = dict(expected["stats"])
    if count_as_string:
        want_stats["count"] = str(n)
    if stats != "v1":
        want_stats["label"] = label
    empty: dict[str, Any] = {"stats": None, "count": None, "recent": [], "buckets": {}}
    want = {"stats": want_stats, "count": n, "recent": expected["recent"], "buckets": expected["buckets"]}
    for name in want:
        assert record[name] == (empty[name] if name in absent else want[name]), (name, record)
    return n


def _migrate(source: Path, out: Path, targets: list[OperatorTarget], **options: Any):
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    report = migrate_savepoint(str(source), targets, open_output(out), **options)
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before, "the source must not change"
    return report


# -- unit level --------------------------------------------------------------------------------------------------------


def test_migrated_headers_carry_flinks_snapshots(flink_savepoints: dict[str, Path], tmp_path: Path):
    for version in ("v2", "v3"):
        out = tmp_path / version
        report = _migrate(flink_savepoints["rocksdb-p2"], out, [target_for(version)])
        header = Savepoint.open(out).keyed_header("stats")
        assert header is not None
        stats = header.states[header.state_index("stats")].value_serializer
        assert snapshot_bytes(stats) == snapshot_bytes(stats_snapshot(version))
        assert [f.name for f in stats.fields] == ["count", "key", "label", "total"]  # Flink's field order
        assert report.counts["stats"]["stats"].written == KEYS and not report.dead_letters
        for _, _, value in Savepoint.open(out).iter_entries("stats", "stats"):
            assert value["label"] == LABEL_DEFAULT
            assert isinstance(value["count"], str if version == "v3" else int)


def test_failing_entries_under_the_fail_policy_leave_no_output(flink_savepoints: dict[str, Path], tmp_path: Path):
    target = OperatorTarget("stats", states=[StateTarget("stats", migration=parse_migration(
        {"function": "tests.test_migration:fail_on_some_keys"}))])
    with pytest.raises(MigrationError, match=r"operator stats, state stats, key 'key-\d+'.*cannot upgrade"):
        _migrate(flink_savepoints["heap-p2"], tmp_path / "out", [target], code=TRUSTED)
    assert list(tmp_path.iterdir()) == [], "neither the output nor its staging directory may remain"


def test_a_to_number_conversion_dead_letters_what_does_not_parse(flink_savepoints: dict[str, Path], tmp_path: Path):
    # key -> Long is not parseable for "key-N": under dead-letter every entry is reported with its key.
    target = OperatorTarget("stats", states=[StateTarget("stats", value=PojoSnapshot.create(
        "sample.Stats", [("key", simple("Long")), ("total", simple("Long")), ("count", simple("Long"))]),
        migration=parse_migration({"fields": {"key": {"convert": "to-number"}}, "on_error": "dead-letter"}))])
    with pytest.raises(MigrationError, match="more than the limit of 0"):  # dead letters need an explicit limit
        _migrate(flink_savepoints["heap-p2"], tmp_path / "refused", [target])
    assert not (tmp_path / "refused").exists()
    report = _migrate(flink_savepoints["heap-p2"], tmp_path / "out", [target], max_dead_letters=KEYS)
    assert report.counts["stats"]["stats"].dead_lettered == KEYS
    assert sorted(d["key"] for d in report.dead_letters) == sorted(f"key-{k}" for k in range(KEYS))
    assert "not an integer" in report.dead_letters[0]["error"]
    assert not list(Savepoint.open(tmp_path / "out").iter_entries("stats", "stats"))


def test_unknown_states_and_impossible_changes_are_refused(flink_savepoints: dict[str, Path], tmp_path: Path):
    with pytest.raises(MigrationError, match="no state 'nope'"):
        _migrate(flink_savepoints["heap-p1"], tmp_path / "a", [OperatorTarget("stats", dropped_states=["nope"])])
    changed = OperatorTarget("stats", states=[StateTarget("stats", value=stats_snapshot("v3"))])
    with pytest.raises(MigrationError, match=r"type changed from Long to String.*declare a conversion"):
        _migrate(flink_savepoints["heap-p1"], tmp_path / "b", [changed])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("raw", "message"), [
    ("oops", "migration: must be a mapping"),
    ({"feilds": {}}, "migration.feilds: unknown key"),
    ({"fields": {"count": {"convert": "to-strng"}}}, "migration.fields.count.convert: unknown conversion"),
    ({"fields": {"a": {"from": "b", "default": 1}}}, "migration.fields.a: 'default' is for added fields"),
    ({"on_error": "ignore"}, "migration.on_error: must be one of fail, dead-letter"),
    ({"function": "no_colon"}, "migration.function: must be 'module:function'"),
    ({"key": {"convert": "to-number"}}, "migration.key: the key is converted once for the whole operator"),
])
def test_spec_errors_name_file_and_path(raw: Any, message: str):
    with pytest.raises(MigrationSpecError) as error:
        parse_migration(raw, "migration", "v2.yaml")
    assert str(error.value).startswith("v2.yaml: ") and message in str(error.value)
    assert "\n" not in str(error.value)


# -- on real Flink -----------------------------------------------------------------------------------------------------


@pytest.mark.flink
@pytest.mark.parametrize(("version", "source", "backend"), [
    ("v2", "heap-p2", "hashmap"), ("v2", "rocksdb-p2-snappy", "rocksdb"),
    ("v3", "heap-p2-snappy", "hashmap"), ("v3", "rocksdb-p2", "rocksdb"),
])
def test_v1_migrated_for_v2_and_v3_restores_on_flink(flink_cluster: LocalFlinkCluster,
                                                     flink_savepoints: dict[str, Path], tmp_path: Path,
                                                     version: str, source: str, backend: str):
    out = tmp_path / "migrated"
    _migrate(flink_savepoints[source], out, [target_for(version)])
    records = sample_job.restore_audit(flink_cluster.client, version, out, tmp_path / "audit", keys=KEYS,
                                       state_backend=backend)
    assert len(records) == KEYS and all(r["version"] == version for r in records)
    for record in records:
        check_record(record, stats=version, count_as_string=version == "v3", label=LABEL_DEFAULT)
        if version == "v3":
            assert isinstance(record["stats"]["count"], str)  # the job's POJO now holds a String


@pytest.mark.flink
def test_uid_rename(flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path):
    # A savepoint whose keyed operator has the uid "stats-legacy", as an older job version would have written it...
    legacy = tmp_path / "legacy"
    _migrate(flink_savepoints["rocksdb-p2"], legacy, [OperatorTarget("stats-legacy", renamed_from="stats")])
    ids = [op.operator_id for op in Savepoint.open(legacy).operators]
    assert operator_id_from_uid("stats-legacy") in ids and operator_id_from_uid("stats") not in ids
    # ... is renamed to the current uid, and the job finds every value under it.
    out = tmp_path / "renamed"
    _migrate(legacy, out, [OperatorTarget("stats", renamed_from="stats-legacy")])
    records = sample_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS,
                                       state_backend="rocksdb")
    assert all(check_record(r) > 0 for r in records)


@pytest.mark.flink
def test_state_rename(flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path):
    legacy = tmp_path / "legacy"
    _migrate(flink_savepoints["heap-p2"], legacy,
             [OperatorTarget("stats", states=[StateTarget("recent-legacy", renamed_from="recent")])])
    assert "recent" not in [s.name for s in Savepoint.open(legacy).keyed_states("stats")]
    out = tmp_path / "renamed"
    _migrate(legacy, out, [OperatorTarget("stats", states=[StateTarget("recent", renamed_from="recent-legacy")])])
    records = sample_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS)
    assert all(check_record(r) > 0 for r in records)


@pytest.mark.flink
def test_dropped_state(flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path):
    out = tmp_path / "dropped"
    report = _migrate(flink_savepoints["rocksdb-p2-snappy"], out,
                      [OperatorTarget("stats", dropped_states=["recent"])])
    assert "recent" not in report.counts["stats"]
    records = sample_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS,
                                       state_backend="rocksdb")
    assert all(check_record(r, absent=("recent",)) > 0 for r in records)


@pytest.mark.flink
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_dead_letter_policy(flink_cluster: LocalFlinkCluster, flink_savepoints: dict[str, Path], tmp_path: Path,
                            backend: str):
    target = OperatorTarget("stats", states=[StateTarget("stats", migration=parse_migration(
        {"function": "tests.test_migration:fail_on_some_keys", "on_error": "dead-letter"}))])
    out = tmp_path / "migrated"
    report = _migrate(flink_savepoints["heap-p2" if backend == "hashmap" else "rocksdb-p2"], out, [target],
                      max_dead_letters=KEYS // 4, code=TRUSTED)
    failing = sorted(f"key-{k}" for k in range(KEYS) if k % 4 == 0)
    assert sorted(d["key"] for d in report.dead_letters) == failing
    assert all(d["state"] == "stats" and "cannot upgrade" in d["error"] for d in report.dead_letters)
    counts = report.counts["stats"]["stats"]
    assert (counts.read, counts.written, counts.dead_lettered) == (KEYS, KEYS - len(failing), len(failing))
    records = sample_job.restore_audit(flink_cluster.client, "v1", out, tmp_path / "audit", keys=KEYS,
                                       state_backend=backend)
    for record in records:
        check_record(record, absent=("stats",) if record["key"] in failing else ())


# -- transforms and the CLI --------------------------------------------------------------------------------------------


def test_builtin_conversions_follow_java():
    from flinkstate.migration.conversions import (
        ConversionError,
        MigrationPlanError,
        conversion,
        java_double_to_string,
    )

    assert conversion("to-string", simple("Long"), simple("String"))(42) == "42"
    assert conversion("to-string", simple("Boolean"), simple("String"))(True) == "true"
    assert [java_double_to_string(x) for x in (1.0, 0.001, 1e7, 1.5e-5, -0.0, 123.456)] == \
        ["1.0", "0.001", "1.0E7", "1.5E-5", "-0.0", "123.456"]
    assert conversion("widen", simple("Int"), simple("Long"))(7) == 7
    assert conversion("widen", simple("Int"), simple("Double"))(7) == 7.0
    to_int = conversion("to-number", simple("String"), simple("Int"))
    assert to_int("-12") == -12
    for bad in ("1.5", " 3", "2147483648", "1_000"):
        with pytest.raises(ConversionError):
            to_int(bad)
    with pytest.raises(MigrationPlanError):  # a narrowing is no widening
        conversion("widen", simple("Long"), simple("Int"))


def test_row_fields_added_and_reordered_by_name():
    from flinkstate.migration.transforms import build_transform
    from flinkstate.serializers.row import RowSnapshot

    old = RowSnapshot(RowSnapshot.CLASS_NAMES[0], [simple("Int"), simple("String"), simple("Double")])
    new = RowSnapshot(RowSnapshot.CLASS_NAMES[0], [simple("Double"), simple("Int"), simple("String"),
                                                   simple("String")])
    names = {"": (["id", "label", "ratio"], ["ratio", "id", "name", "extra"])}
    rules = parse_migration({"fields": {"name": {"from": "label"}, "extra": {"default": "x"}}}).fields
    transform = build_transform(old, new, rules=rules, row_names=names)
    assert transform is not None and transform((1, "a", 0.5)) == (0.5, 1, "a", "x")
    with pytest.raises(Exception, match="Row snapshots store no field names"):
        build_transform(old, new)


def test_avro_reader_writer_resolution():
    import json

    from flinkstate.migration.transforms import avro_transform
    from flinkstate.serializers.avro import AvroSnapshot

    def schema(fields: list[dict[str, Any]]) -> Any:
        text = json.dumps({"type": "record", "name": "Event", "fields": fields})
        return AvroSnapshot(AvroSnapshot.CLASS_NAMES[0], 3, None, text).schema

    writer = schema([{"name": "id", "type": "int"}, {"name": "gone", "type": "string"}])
    reader = schema([{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None},
                     {"name": "n", "type": "double", "default": 1.5}])
    assert avro_transform(writer, reader)({"id": 3, "gone": "x"}) == {"id": 3, "note": None, "n": 1.5}


def test_cli_migrates_with_manifests(flink_savepoints: dict[str, Path], tmp_path: Path):
    from flinkstate.cli import main

    # every operator with state is declared: one the manifest lacks is refused (as check says) without
    # --allow-non-restored-state
    common = """manifest_version: 1
operators:
  sequence-source: {}
  stats:
    key: String
    states:
      count: {kind: VALUE, value: Long}
      recent: {kind: LIST, value: "Tuple2<Long, String>"}
      buckets: {kind: MAP, user_key: String, value: {row: {id: Integer, label: String, ratio: Double}}}
"""
    v3 = common + """      stats:
        kind: VALUE
        value: {pojo: sample.Stats, fields: {count: String, key: String, label: String, total: Long}}
        migration:
          fields:
            count: {convert: to-string}
            label: {default: n/a}
"""
    (tmp_path / "v3.yaml").write_text(v3)
    out = tmp_path / "out"
    assert main(["migrate", str(flink_savepoints["heap-p2"]), "--schema", str(tmp_path / "v3.yaml"),
                 "--output", str(out)]) == 0
    values = [v for _, _, v in Savepoint.open(out).iter_entries("stats", "stats")]
    assert len(values) == KEYS and all(isinstance(v["count"], str) and v["label"] == "n/a" for v in values)
    report = (tmp_path / "out.report" / "report.json").read_text()
    assert "COMPATIBLE_AS_IS" in report
    # Without the conversion the change is refused, and nothing is left behind.
    (tmp_path / "bad.yaml").write_text(v3.replace("count: {convert: to-string}", "total: {}"))
    assert main(["migrate", str(flink_savepoints["heap-p2"]), "--schema", str(tmp_path / "bad.yaml"),
                 "--output", str(tmp_path / "bad")]) == 1
    assert not (tmp_path / "bad").exists() and not (tmp_path / ".bad.inprogress").exists()


def test_a_snapshot_that_flink_restores_as_is_keeps_its_bytes_through_the_migration(tmp_path: Path):
    """Flink reads a composite snapshot's outer version and ignores it (Timer's), so a savepoint can carry bytes that
    print like the manifest's type and are not its snapshot. Flink restores it as is, so check says restore and
    migrate keeps the state's bytes and its snapshot, exactly as written (the output checks 0 again); a migration
    must not rewrite what Flink itself restores unchanged. (Found by the fuzz suite: a flipped outer version once
    gave a refusal naming no file and two equal types.)"""
    source = CORPUS / "new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint"
    savepoint, manifest, output = tmp_path / "savepoint", tmp_path / "manifest.yaml", tmp_path / "migrated"
    shutil.copytree(source, savepoint)
    assert main(["schema", str(savepoint), "-o", str(manifest)]) == 0
    flipped = 0
    for state_file in savepoint.iterdir():  # every subtask's header alike (they must agree)
        data = bytearray(state_file.read_bytes())
        at = data.find(b"TimerSerializerSnapshot")
        while at >= 0:
            magic = data.index(COMPOSITE_MAGIC, at)
            data[magic + 4:magic + 8] = (0x10000000).to_bytes(4, "big")  # the outer snapshot version
            flipped += 1
            at = data.find(b"TimerSerializerSnapshot", magic)
        state_file.write_bytes(bytes(data))
    assert flipped
    assert main(["check", str(savepoint), "--schema", str(manifest)]) == 0
    assert main(["migrate", str(savepoint), "--schema", str(manifest), "--output", str(output)]) == 0
    assert main(["check", str(output), "--schema", str(manifest)]) == 0
    written = Savepoint.open(output)
    for op in Savepoint.open(savepoint).operators:
        old, new = Savepoint.open(savepoint).keyed_header(op), written.keyed_header(op.operator_id)
        assert (old is None) == (new is None)
        if old is not None and new is not None:
            assert [state_meta_bytes(s) for s in old.states] == [state_meta_bytes(s) for s in new.states]
