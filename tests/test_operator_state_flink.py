"""Operator state on real Flink 2.3 (issue 25, "one verdict"): a CheckpointedFunction's operator ListState of a POJO
(tests/support/operator_state_job: ``Tally``), v1, a v2 whose ``count`` field is a String instead of a long, and a v3
with a field more.

One v1 run on the session cluster writes the savepoint; then, each against ``schema --jar`` of the version
(the jar inspector): v1 restores it (every restored tally, checked in the job, is the value flinkstate reads from the
savepoint) and ``check`` says it restores as is; v2 fails Flink's restore and ``check`` says INCOMPATIBLE naming the
operator state, and ``migrate`` refuses it in the same line. The jar's schema of the operator states equals
``schema`` of the savepoint, snapshot bytes included (tests/support/jar_truth.py). A POJO field added to the
savepoint's schema (v3): Flink migrates it on restore, every tally restored; check says so (after migration, by
Flink) and migrate copies the operator state as it is.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from flinkstate import check
from flinkstate.engine.jar_schema import JarSchema, inspect_jar
from flinkstate.engine.local import LocalFlinkCluster
from flinkstate.engine.rest import FlinkJobFailed
from flinkstate.manifest import manifest_from_savepoint
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import MigrationError
from flinkstate.savepoint import Savepoint
from tests.support import operator_state_job as job
from tests.support.jar_truth import differences
from tests.support.waiting import wait_for_path

pytestmark = pytest.mark.flink


@dataclass(frozen=True)
class Ground:
    """The savepoint v1 wrote, each version's jar schema, and each version's restore of the savepoint: its audit
    folder and Flink's failure (None: every task ran and the operator wrote what it restored)."""

    savepoint: Path
    schemas: dict[str, JarSchema]
    audits: dict[str, Path]
    failures: dict[str, str | None]


@pytest.fixture(scope="module")
def ground(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory) -> Ground:
    """v1 runs until its operator counted 10 elements and stops with a savepoint, while the jars' schemas are taken
    (v2 and v3 compiled, inspector JVMs); then v1, v2 and v3 restore it side by side (one slot each)."""
    work = tmp_path_factory.mktemp("operator-state")
    client = flink_cluster.client
    job_id = client.submit_jar(job.jar("v1"), entry_class=job.ENTRY_CLASS,
                               program_args=["--audit-dir", str(work / "audit-run")])
    with ThreadPoolExecutor(max_workers=1) as pool:
        schemas = pool.submit(lambda: {version: inspect_jar(job.jar(version), cache_dir=work / "cache")
                                       for version in job.VERSIONS})
        client.wait_until_running(job_id, timeout=120)
        wait_for_path(work / "audit-run" / "seen")
        location = client.stop_with_savepoint(job_id, str(work / "raw"))
        savepoint = Path(shutil.move(location.removeprefix("file:"), work / "savepoint"))
        jar_schemas = schemas.result()
    audits = {version: work / f"audit-{version}" for version in job.VERSIONS}
    restores = {version: client.submit_jar(job.jar(version), entry_class=job.ENTRY_CLASS,
                                           savepoint_path=str(savepoint),
                                           program_args=["--audit-dir", str(audits[version])])
                for version in job.VERSIONS}
    failures: dict[str, str | None] = {}
    for version, restore in restores.items():
        try:
            client.wait_until_running(restore, timeout=120)
            wait_for_path(audits[version] / "restored")
            failures[version] = None
        except FlinkJobFailed as exc:
            failures[version] = str(exc)
        finally:
            if client.job_state(restore) not in ("FAILED", "CANCELED", "FINISHED"):
                client.cancel(restore, wait=True)
    return Ground(savepoint, jar_schemas, audits, failures)


def test_the_jar_schema_of_the_operator_states_is_the_savepoints(ground: Ground) -> None:
    schemas, savepoint = ground.schemas, ground.savepoint
    assert differences(schemas["v1"], savepoint) == []
    written = manifest_from_savepoint(Savepoint.open(savepoint))
    jar = schemas["v1"].manifest()
    assert jar.operators[job.TALLY_UID].to_dict() == written.operators[job.TALLY_UID].to_dict() == {
        "operator_states": {job.TALLY_STATE: {"mode": "SPLIT_DISTRIBUTE", "value": {
            "pojo": "opstate.Tally", "fields": {"count": "Long", "name": "String"}}}}}
    assert set(written.operators["sequence-source"].to_dict()["operator_states"]) == {"SourceReaderState"}
    # the comparison can fail: v2's jar registers another Tally, and nothing else differs
    v2 = schemas["v2"].manifest().operators[job.TALLY_UID].to_dict()
    assert differences(schemas["v2"], savepoint) == [
        f"{job.TALLY_UID}: jar {v2}, savepoint {written.operators[job.TALLY_UID].to_dict()}",
        f"{job.TALLY_UID}: operator state meta info bytes"]
    assert v2["operator_states"][job.TALLY_STATE]["value"]["fields"] == {"count": "String", "name": "String"}


def test_v1_restores_every_value_and_check_agrees(ground: Ground) -> None:
    savepoint = ground.savepoint
    report = check(savepoint, ground.schemas["v1"].manifest())
    rows = {(row.operator, row.state): row for row in report.rows}
    tally = rows[(job.TALLY_UID, job.TALLY_STATE)]
    assert (tally.kind, tally.flink_verdict.name, tally.verdict.name) == ("OPERATOR_LIST", "COMPATIBLE_AS_IS",
                                                                          "COMPATIBLE_AS_IS")
    assert rows[("sequence-source", "SourceReaderState")].verdict.name == "COMPATIBLE_AS_IS"
    assert report.exit_code == 0
    stored = [element.value for _, element in Savepoint.open(savepoint).iter_operator_state(job.TALLY_UID,
                                                                                             job.TALLY_STATE)]
    assert sorted(v["name"] for v in stored) == ["bucket-0", "bucket-1", "bucket-2"]
    assert sum(v["count"] for v in stored) >= 10
    assert ground.failures["v1"] is None
    assert job.restored_tallies(ground.audits["v1"]) == [f"{v['name']}={v['count']}" for v in stored]


def test_v2_fails_flinks_restore_and_check_and_migrate_refuse_it(ground: Ground, tmp_path: Path) -> None:
    savepoint, schemas = ground.savepoint, ground.schemas
    assert "Can not set java.lang.String field opstate.Tally.count to java.lang.Long" in (ground.failures["v2"] or "")
    assert not (ground.audits["v2"] / "restored").exists()
    report = check(savepoint, schemas["v2"].manifest())
    row = next(r for r in report.rows if (r.operator, r.state) == (job.TALLY_UID, job.TALLY_STATE))
    assert (row.flink_verdict.name, row.verdict.name, report.exit_code) == ("INCOMPATIBLE", "INCOMPATIBLE", 4)
    assert [f.code for f in row.findings] == ["POJO_FIELD_TYPE_CHANGED", "MIGRATION_REFUSED"]
    refusal = row.findings[-1].message
    assert refusal.startswith(f"{savepoint}: operator tally, operator state tallies (OPERATOR_LIST): "
                              f"POJO_FIELD_TYPE_CHANGED: ")
    manifest = tmp_path / "v2.yaml"
    manifest.write_text(schemas["v2"].manifest().dump(sources=True))
    with pytest.raises(MigrationError) as refused:
        MigrationJob(str(savepoint), str(manifest), str(tmp_path / "out")).run()
    assert str(refused.value) == refusal and not (tmp_path / "out").exists()


def test_v3_adds_a_field_flink_migrates_it_on_restore_and_check_and_migrate_say_so(
        ground: Ground, tmp_path: Path) -> None:
    """v3's Tally gains a field: Flink restores the v1 savepoint (every tally, the new field null) and migrates the
    state itself; check says COMPATIBLE_AFTER_MIGRATION by Flink (exit 3), and migrate copies the operator state as
    it is, which is what v3 restored."""
    savepoint = ground.savepoint
    assert ground.failures["v3"] is None
    stored = [element.value for _, element in Savepoint.open(savepoint).iter_operator_state(job.TALLY_UID,
                                                                                             job.TALLY_STATE)]
    assert job.restored_tallies(ground.audits["v3"]) == [f"{v['name']}={v['count']}" for v in stored]
    report = check(savepoint, ground.schemas["v3"].manifest())
    row = next(r for r in report.rows if (r.operator, r.state) == (job.TALLY_UID, job.TALLY_STATE))
    assert (row.flink_verdict.name, row.verdict.name, report.exit_code) == (
        "COMPATIBLE_AFTER_MIGRATION", "COMPATIBLE_AFTER_MIGRATION", 3), report.render_markdown()
    assert row.migration == "flink (on restore; migrate copies it as it is)"
    manifest = tmp_path / "v3.yaml"
    manifest.write_text(ground.schemas["v3"].manifest().dump(sources=True))
    MigrationJob(str(savepoint), str(manifest), str(tmp_path / "out")).run()
    assert [element.value for _, element in Savepoint.open(tmp_path / "out").iter_operator_state(
        job.TALLY_UID, job.TALLY_STATE)] == stored
