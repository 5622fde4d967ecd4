"""Issue 25, the job is the truth: ``flinkstate schema --jar`` against real Flink 2.3 (and 1.20.3, 2.2.0).

Ground truth: for each job jar, the manifest the jar inspector derives (main() run as ``flink run`` builds a job,
each operator opened with empty state and snapshotted) equals ``schema`` of a savepoint the same jar wrote on a real
cluster, operator by operator, and every serializer snapshot is the same bytes (key serializer, each keyed state's
meta info, each operator state's meta info). The savepoints: the session's sample-job v1 savepoints (HashMap and
RocksDB, snappy on and off, parallelism 1 and 2) and the 1.20.3 / 2.2.0 ones, and, taken here in one batch of short
runs on the session cluster (in waves of the cluster's slots), sample-job v2 and v3, the 16 compatibility-matrix
variants (the base version: the session's savepoints on HashMap and RocksDB) and a job that registers one state
lazily. The SQL jobs, the edge job, the Kryo job and the changelog jobs are compared in their own modules, on the
savepoints those take anyway (tests/support/jar_truth.py); the Flink 1.20.3 builds of the edge job and the matrix's
base here, on the savepoints they wrote on Flink 1.20.3 (conftest's older_flink_savepoints). Plus: what the
comparison says when the jar is another version (it can fail), the lazily registered state reported as such, main()
needing arguments or a config file, failing, hanging; the cache; the CLI.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from flinkstate import FlinkStateError, audit_savepoint, check
from flinkstate.cli import main as cli_main
from flinkstate.engine.jar_schema import inspect_jar, trial_restore, unregistered_states
from flinkstate.engine.local import LocalFlinkCluster
from flinkstate.manifest import manifest_from_savepoint
from flinkstate.migration.trial import apply_trial
from flinkstate.savepoint import Savepoint
from tests.support import compat_matrix, edge_job, sample_job
from tests.support.jar_truth import differences
from tests.support.java_build import build_jar
from tests.support.waiting import wait_for_path

pytestmark = pytest.mark.flink  # every test starts the inspector's JVM on Flink's runtime; most use the cluster

LAZY_SOURCES = Path(__file__).resolve().parent / "support" / "lazy_state_job"
LAZY_ENTRY_CLASS = "lazystate.LazyStateJob"
#: Every version of the compatibility-matrix job (examples/compat-matrix/variants/: POJO, Row, Tuple, enum and Long
#: states; TTL wrapping; a state of another kind, a removed state, a removed operator...) but the base version, whose
#: savepoints (HashMap and RocksDB) the session takes for the compatibility ground truth.
MATRIX_VARIANTS = tuple(sorted(path.name for path in (compat_matrix.JOB_DIR / "variants").iterdir() if path.is_dir()))
SAMPLE_VERSIONS = ("v2", "v3")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jar-schema-cache")


@pytest.fixture(scope="module")
def lazy_jar() -> Path:
    return build_jar(LAZY_SOURCES, LAZY_SOURCES / "build" / "lazy-state-job.jar", LAZY_ENTRY_CLASS)


@pytest.fixture(scope="module")
def taken(flink_cluster: LocalFlinkCluster, tmp_path_factory: pytest.TempPathFactory,
          lazy_jar: Path) -> dict[str, Path]:
    """name -> savepoint written on the session cluster by that jar: sample-v2, sample-v3, matrix-<variant>, lazy.
    The jobs run side by side (one slot each), as many at a time as the cluster has slots, and are each stopped with
    a savepoint once every key was seen."""
    work = tmp_path_factory.mktemp("jar-schema-savepoints")
    client = flink_cluster.client

    def sample(version: str) -> tuple[str, Callable[[], object]]:
        run = sample_job.submit(client, version, work / f"audit-{version}", keys=5, rate=400, wait=False)
        return run.job_id, run.wait_for_keys

    def matrix(variant: str) -> tuple[str, Callable[[], object]]:
        job = compat_matrix.submit(client, variant, work / f"audit-{variant}", backend="hashmap", rate=200)
        return job.job_id, job.wait_for_keys

    def lazy() -> tuple[str, Callable[[], object]]:
        marker = work / "lazy-marker"
        job_id = client.submit_jar(lazy_jar, entry_class=LAZY_ENTRY_CLASS, parallelism=1,
                                   program_args=["--keys", "3", "--marker-dir", str(marker)])
        return job_id, lambda: wait_for_path(marker / "seen-0")

    starts: dict[str, Callable[[], tuple[str, Callable[[], object]]]] = {
        **{f"sample-{v}": functools.partial(sample, v) for v in SAMPLE_VERSIONS},
        **{f"matrix-{v}": functools.partial(matrix, v) for v in MATRIX_VARIANTS},
        "lazy": lazy,
    }
    names = list(starts)
    savepoints = {}
    for wave in range(0, len(names), flink_cluster.slots):
        waits = {name: starts[name]() for name in names[wave:wave + flink_cluster.slots]}
        for name, (job_id, wait) in waits.items():
            client.wait_until_running(job_id, timeout=120)
            wait()
            location = client.stop_with_savepoint(job_id, str(work / f"raw-{name}"))
            savepoints[name] = Path(shutil.move(location.removeprefix("file:"), work / name))
    return savepoints


def test_sample_job_jars_give_the_schema_of_the_savepoints_they_write(
        flink_savepoints: dict[str, Path], taken: dict[str, Path], cache: Path) -> None:
    v1 = inspect_jar(sample_job.jar("v1"), cache_dir=cache)
    assert {op.label for op in v1.operators if op.keyed or op.operator} == {"sequence-source", "stats"}
    assert len(v1.manifest().operators["stats"].states) == 6  # 4 states and the two timer queues
    for name, savepoint in flink_savepoints.items():  # HashMap and RocksDB, snappy or not, parallelism 1 and 2
        assert differences(v1, savepoint) == [], name
    for version in SAMPLE_VERSIONS:
        schema = inspect_jar(sample_job.jar(version), cache_dir=cache, program_args=["--keys", "5"])
        assert differences(schema, taken[f"sample-{version}"]) == [], version


def test_compatibility_matrix_jars_give_the_schema_of_the_savepoints_they_write(
        taken: dict[str, Path], compat_matrix_base_savepoints: dict[str, Path], cache: Path) -> None:
    assert len(MATRIX_VARIANTS) == 16
    # The JVMs two at a time: each mostly waits on class loading
    versions = ("base", *MATRIX_VARIANTS)
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = pool.map(lambda variant: inspect_jar(compat_matrix.jar(variant), cache_dir=cache,
                                                     program_args=["--variant", variant]), versions)
        schemas = dict(zip(versions, found, strict=True))
    for backend, savepoint in compat_matrix_base_savepoints.items():
        assert differences(schemas["base"], savepoint) == [], backend
    for variant in MATRIX_VARIANTS:
        assert differences(schemas[variant], taken[f"matrix-{variant}"]) == [], variant
    # what the variants change is seen: base's schema against a variant's savepoint
    assert differences(schemas["base"], taken["matrix-key-type-changed"])[0].startswith("matrix: jar ")


def test_a_jar_of_another_version_differs_where_the_versions_do(
        flink_savepoints: dict[str, Path], cache: Path) -> None:
    """The comparison can fail: v2's POJO Stats has a label field more than v1's, and nothing else differs."""
    v2 = inspect_jar(sample_job.jar("v2"), cache_dir=cache, program_args=["--keys", "5"])
    found = differences(v2, flink_savepoints["heap-p1"])
    assert len(found) == 2, found
    assert found[0].startswith("stats: jar ") and "'label': 'String'" in found[0]
    assert found[1] == "stats, state stats: meta info bytes"


def test_older_flink_versions_jars_give_the_schema_of_their_savepoints(
        flink_matrix_savepoints: dict[str, tuple[Path, dict[str, object]]], cache: Path) -> None:
    for version in ("1.20.3", "2.2.0"):
        schema = inspect_jar(sample_job.jar("v1", sample_job.JOB_DIR / "build" / f"flink-{version}"),
                             flink_home=schema_home(version), cache_dir=cache)
        assert schema.flink_version == version
        for name, (savepoint, _) in flink_matrix_savepoints.items():
            if name.startswith(f"{version}/"):
                assert differences(schema, savepoint) == [], name
        # Flink's own verdict (check --trial) on that Flink: its savepoint restores into its jar's operators, every
        # key group and state as is, and the check agrees with it.
        savepoint = next(path for name, (path, _) in sorted(flink_matrix_savepoints.items())
                         if name.startswith(f"{version}/"))
        trial = trial_restore(schema.jar, savepoint, full=True, flink_home=schema_home(version))
        assert trial.flink_version == version
        stats = next(op for op in trial.operators if op.uid == "stats")
        assert stats.restore_failure is None and stats.open_failure is None and stats.key_groups > 0
        assert {state.name: state.outcome for state in stats.states if not state.name.startswith("_timer")} == {
            name: "AS_IS" for name in ("stats", "count", "recent", "buckets")}, stats
        report = check(savepoint, schema.manifest())
        assert apply_trial(report, trial) == 0 and report.exit_code == 0, report.render_markdown()
        # audit --jar: the jar tells which operators have a uid where a 1.x savepoint's metadata does not say
        uids = {op.operator_id: op.uid for op in schema.operators}
        codes = {(e.operator, e.code) for e in audit_savepoint(Savepoint.open(savepoint), uids).exposures}
        if version == "1.20.3":
            assert not {code for _, code in codes} & {"OPERATOR_UID_UNKNOWN", "GENERATED_OPERATOR_ID"}, codes
            assert "OPERATOR_UID_UNKNOWN" in {e.code for e in audit_savepoint(Savepoint.open(savepoint)).exposures}


def test_flink1_builds_of_the_edge_job_and_the_matrix_give_the_schema_of_their_savepoints(
        flink1_job_savepoints: dict[str, Path], cache: Path) -> None:
    """The other major: the edge job (Kryo registrations, java.time, POJO subclasses, TTL ...) and the matrix's base
    compiled against Flink 1.20.3 and run on it; the jar inspector on Flink 1.20.3's classes gives what they wrote
    (HashMap), every snapshot the same bytes."""
    build = "flink-1.20.3"
    jars = {"edge-job": (edge_job.jar("v1", edge_job.JOB_DIR / "build" / build), ["--keys", "10", "--rate", "400"]),
            "compat-matrix-base": (compat_matrix.jar("base", compat_matrix.JOB_DIR / "build" / build),
                                   ["--variant", "base"])}
    assert set(flink1_job_savepoints) == set(jars)
    for job, (jar, program_args) in jars.items():
        schema = inspect_jar(jar, flink_home=schema_home("1.20.3"), cache_dir=cache, program_args=program_args)
        assert schema.flink_version == "1.20.3"
        assert Savepoint.open(flink1_job_savepoints[job]).metadata.version <= 4  # Flink 1.x wrote it
        assert differences(schema, flink1_job_savepoints[job]) == [], job


def schema_home(version: str) -> Path:
    return sample_job.ROOT / ".flink-dists" / version / "pyflink"


def test_a_state_registered_lazily_is_reported_as_such(taken: dict[str, Path], lazy_jar: Path, cache: Path) -> None:
    schema = inspect_jar(lazy_jar, cache_dir=cache, program_args=["--keys", "3"])
    jar_manifest = schema.manifest()
    savepoint_manifest = manifest_from_savepoint(Savepoint.open(taken["lazy"]))
    # the uid-less operator: the id Flink generated for it on the cluster
    uidless = [op for op in savepoint_manifest.operators.values() if op.uid is None]
    assert len(uidless) == 1 and jar_manifest.find(uidless[0].operator_id) is not None
    assert list(jar_manifest.find(uidless[0].operator_id).states) == [  # type: ignore[union-attr]
        "total", "_timer_state/processing_user-timers", "_timer_state/event_user-timers"]
    assert differences(schema, taken["lazy"])[-1] == "lazy, state seen: meta info bytes"  # the uid-less one agrees
    timers = ["_timer_state/processing_user-timers", "_timer_state/event_user-timers"]
    assert set(savepoint_manifest.operators["lazy"].states) == {"count", "seen", *timers}
    assert set(jar_manifest.operators["lazy"].states) == {"count", *timers}
    without_seen = savepoint_manifest.operators["lazy"].to_dict()
    del without_seen["states"]["seen"]
    assert jar_manifest.operators["lazy"].to_dict() == without_seen
    assert differences(schema, taken["lazy"]) == [
        f"lazy: jar {jar_manifest.operators['lazy'].to_dict()}, savepoint "
        f"{savepoint_manifest.operators['lazy'].to_dict()}",
        "lazy, state seen: meta info bytes"]
    unregistered = unregistered_states(savepoint_manifest, jar_manifest)
    assert [(u.operator, u.state, u.kind) for u in unregistered] == [("lazy", "seen", "MAP")]
    assert unregistered[0].line() == (
        "operator lazy, state seen (MAP): the savepoint holds it but the jar does not register it when the operator "
        "opens (registered lazily on first use, or removed): register it in open(), or declare it in the manifest "
        "(renamed_from, or dropped_states)")


def test_main_needing_arguments_or_a_config_file_failing_or_hanging(
        lazy_jar: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "job.properties"
    config.write_text("keys=3\n")
    from_config = inspect_jar(lazy_jar, cache_dir=cache, program_args=["--config", str(config)])
    assert not from_config.cached and 0 < from_config.seconds < 60
    again = inspect_jar(lazy_jar, cache_dir=cache, program_args=["--config", str(config)])
    assert again.cached and again.seconds == 0 and again.manifest().to_dict() == from_config.manifest().to_dict()
    assert "count" in from_config.manifest().operators["lazy"].states

    with pytest.raises(FlinkStateError) as failed:
        inspect_jar(lazy_jar, cache_dir=cache)
    assert str(failed.value) == (f"{lazy_jar}: main() of {LAZY_ENTRY_CLASS} failed: "
                                 f"java.lang.IllegalArgumentException: LazyStateJob needs --keys N (or keys=N in "
                                 f"--config FILE)")
    missing = tmp_path / "missing.properties"
    with pytest.raises(FlinkStateError) as failed:
        inspect_jar(lazy_jar, cache_dir=cache, program_args=["--config", str(missing)])
    assert str(failed.value) == (f"{lazy_jar}: main() of {LAZY_ENTRY_CLASS} failed: "
                                 f"java.nio.file.NoSuchFileException: {missing}")
    with pytest.raises(FlinkStateError) as failed:
        inspect_jar(lazy_jar, cache_dir=cache, program_args=["--hang-in-main", "true"], timeout=4)
    assert str(failed.value) == (f"{lazy_jar}: main() or an operator's open() did not finish within 4 s (the time "
                                 f"limit; the JVM was stopped)")

    # the CLI: one line, exit status 1, no traceback
    assert cli_main(["schema", "--jar", str(lazy_jar), "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert err == (f"flinkstate: error: {lazy_jar}: main() of {LAZY_ENTRY_CLASS} failed: "
                   f"java.lang.IllegalArgumentException: LazyStateJob needs --keys N (or keys=N in --config FILE)\n")


def test_the_cli_writes_the_manifest_schema_writes_of_a_savepoint(
        flink_savepoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv("FLINKSTATE_CACHE_DIR", str(cache))
    from_jar, from_savepoint = tmp_path / "jar.yaml", tmp_path / "savepoint.yaml"
    assert cli_main(["schema", "--jar", str(sample_job.jar("v1")), "-o", str(from_jar), "--", "--keys", "7"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"flinkstate: schema of {sample_job.jar('v1')} (Flink 2.3.0): 2 stateful operators of 3, "
                          f"in ") and err.endswith(" s (one JVM)\n"), err
    assert cli_main(["schema", str(flink_savepoints["heap-p2"]), "-o", str(from_savepoint)]) == 0
    jar_document = yaml.safe_load(from_jar.read_text())
    assert jar_document["job"] == "keyed-stats-v1"
    assert jar_document["operators"] == yaml.safe_load(from_savepoint.read_text())["operators"]
    assert cli_main(["schema", "--jar", str(sample_job.jar("v1")), "-o", str(from_jar), "--", "--keys", "7"]) == 0
    assert capsys.readouterr().err.endswith(", from the cache\n")
