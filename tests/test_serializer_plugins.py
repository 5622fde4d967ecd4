"""Serializer plugins: a job's own ``TypeSerializerSnapshot`` class, which Flink writes without a length (so that an
unknown one stops the reader), read by an installed package's entry point in the group ``flinkstate.serializers``.

The plugin here is the one a team would write for Flink's own ``TypeSerializerMigrationITCase$TestSerializer`` (a
Long serializer whose snapshot holds a UTF string), and the savepoints are the ones Flink's test suite wrote with it
(vendored corpus, Flink 1.16: HashMap and RocksDB, canonical and native savepoints, checkpoints). The plugin is
installed as pip installs one: a module and its ``.dist-info`` with ``entry_points.txt`` on the path of a real
``flinkstate`` process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_flink_corpus import CORPUS

ITCASE = CORPUS / "flink-tests/src/test/resources/"
KINDS = ("hashmap-savepoint", "hashmap-checkpoint", "hashmap-savepoint-native", "rocksdb-savepoint",
         "rocksdb-checkpoint", "rocksdb-savepoint-native")
OPERATOR, STATE = "20ba6b65f97481d5570070de90e4e791", "testState"
CLASS = "org.apache.flink.test.migration.TypeSerializerSnapshotMigrationITCase$TestSerializerSnapshot"
FLINKSTATE = Path(sys.executable).parent / "flinkstate"

PLUGIN = '''
"""The reader of TypeSerializerSnapshotMigrationITCase's TestSerializerSnapshot: UTF payload, Long records."""
from __future__ import annotations

from typing import Any

import flinkstate

LONG = flinkstate.type_snapshot("Long")


@flinkstate.register_serializer_snapshot
class TestSerializerSnapshot(flinkstate.TypeSerializerSnapshot):
    CLASS_NAMES = ("@CLASS@",)

    def __init__(self, class_name: str, version: int, payload: str) -> None:
        super().__init__(class_name, version)
        self.payload = payload

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: flinkstate.Reader) -> TestSerializerSnapshot:
        return cls(class_name, version, reader.utf())

    def write_payload(self, writer: flinkstate.Writer) -> None:
        writer.utf(self.payload)

    def make_decoder(self) -> Any:
        return LONG.decoder()

    def make_encoder(self) -> Any:
        return LONG.encoder()

    def type_name(self) -> str:
        return f"TestSerializer({self.payload})"
'''.replace("@CLASS@", CLASS)


def install(site: Path, name: str, source: str) -> Path:
    """A plugin package as pip leaves it: the module, and its dist-info naming the entry point."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{name}.py").write_text(source, encoding="utf-8")
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[flinkstate.serializers]\n{name} = {name}\n", encoding="utf-8")
    return site


def run(argv: list[str], site: Path | None) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(site) if site else ""}
    done = subprocess.run([str(FLINKSTATE), *argv], capture_output=True, text=True, env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("site"), "itcase_serializers", PLUGIN)


def values(dump: str) -> dict[int, int]:
    entries = [json.loads(line) for line in dump.splitlines()]
    return {entry["key"][0]: entry["value"] for entry in entries}


def test_without_the_plugin_the_class_is_refused_in_one_line() -> None:
    status, _, stderr = run(["dump", str(ITCASE / "type-serializer-snapshot-migration-itcase-flink1.16-hashmap-"
                                                  "savepoint"), "--operator", OPERATOR, "--state", STATE], None)
    assert status == 1 and len(stderr.splitlines()) == 1, stderr
    assert f"unknown serializer snapshot class {CLASS}" in stderr


@pytest.mark.parametrize("kind", KINDS)
def test_the_plugin_reads_every_value_flink_wrote(plugin: Path, kind: str) -> None:
    """The ITCase's job keys (i, i) by i and keeps i: four keys, each value its key, on every backend and kind."""
    status, stdout, stderr = run(["dump", str(ITCASE / f"type-serializer-snapshot-migration-itcase-flink1.16-{kind}"),
                                  "--operator", OPERATOR, "--state", STATE], plugin)
    assert (status, stderr) == (0, "")
    assert values(stdout) == {0: 0, 1: 1, 2: 2, 3: 3}


def test_schema_check_and_migrate_carry_the_plugins_snapshot(plugin: Path, tmp_path: Path) -> None:
    """The manifest holds the plugin's type by name and its exact snapshot bytes; check finds nothing; an identity
    migration publishes the same values, verified; without the plugin that manifest is refused in one line."""
    source = ITCASE / "type-serializer-snapshot-migration-itcase-flink1.16-hashmap-savepoint"
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    assert run(["schema", str(source), "-o", str(manifest)], plugin)[0] == 0
    assert "plugin: TestSerializer(configPayload)" in manifest.read_text(encoding="utf-8")
    status, stdout, stderr = run(["check", str(source), "--schema", str(manifest), "--format", "json"], plugin)
    assert (status, json.loads(stdout)["findings"]) == (0, []), stderr
    status, _, stderr = run(["migrate", str(source), "--schema", str(manifest), "--output", str(output)], plugin)
    assert (status, stderr) == (0, "")
    status, stdout, _ = run(["dump", str(output), "--operator", OPERATOR, "--state", STATE], plugin)
    assert status == 0 and values(stdout) == {0: 0, 1: 1, 2: 2, 3: 3}
    status, _, stderr = run(["check", str(source), "--schema", str(manifest)], None)
    assert status == 1 and len(stderr.splitlines()) == 1 and "read by no serializer plugin" in stderr, stderr


def test_a_broken_plugin_is_named_in_one_line(tmp_path: Path) -> None:
    site = install(tmp_path / "site", "broken_serializers", "raise RuntimeError('no such codec')\n")
    status, _, stderr = run(["describe", str(ITCASE / "type-serializer-snapshot-migration-itcase-flink1.16-"
                                                      "hashmap-savepoint")], site)
    assert status == 1 and "Traceback" not in stderr, stderr
    assert stderr.splitlines() == ["flinkstate: error: serializer plugin broken_serializers (broken_serializers, "
                                   "entry point group flinkstate.serializers) failed to load: RuntimeError: "
                                   "no such codec"]
