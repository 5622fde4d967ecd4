"""Kryo in Flink's own test corpus (the vendored subset under tests/corpus): its savepoints hold no Kryo state, and
every Kryo record its serializer tests wrote (KryoSerializerUpgradeTest and friends, Flink 1.11 to 2.3) is a user
class (KryoPojosForMigrationTests' Dog, registered animals with custom serializers, an exception in a Scala Try): with
the Kryo version of its Flink set, each stays opaque and is written back byte for byte, never misread as a JDK value."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import Reader
from flinkstate.kryo_report import kryo_records
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import OpaqueValue, kryo_snapshots, kryo_version_for_metadata
from flinkstate.serializers.kryo_data import KRYO2, KRYO5
from flinkstate.serializers.registry import read_snapshot

CORPUS = Path(__file__).resolve().parent / "corpus"
KRYO_FOLDERS = sorted(p.name for p in (CORPUS / "serializers").iterdir()
                      if p.name.startswith(("kryo-", "scala-try-serializer-")))


def test_the_vendored_corpus_has_kryo_records_of_every_flink_version() -> None:
    versions = {re.sub(r"^.*-(\d+\.\d+)$", r"\1", name) for name in KRYO_FOLDERS}
    assert len(KRYO_FOLDERS) >= 50 and {"1.11", "1.20", "2.0", "2.3"} <= versions


@pytest.mark.parametrize("folder", KRYO_FOLDERS)
def test_user_class_records_stay_opaque_and_round_trip(folder: str) -> None:
    snapshot = read_snapshot(Reader((CORPUS / "serializers" / folder / "serializer-snapshot").read_bytes()),
                             top_level=True)
    found = kryo_snapshots([snapshot])
    assert found
    version = KRYO5 if re.search(r"-2\.\d+$", folder) else KRYO2
    for kryo in found:
        kryo.kryo_version = version
    data = (CORPUS / "serializers" / folder / "test-data").read_bytes()
    value, end = snapshot.tail_decoder()(data, 0)
    assert end == len(data)
    records: list[Any] = []
    kryo_records(value, records)  # a composite (Scala's Try) holds its Kryo record inside
    assert records and all(isinstance(r, OpaqueValue) for r in records), records
    assert snapshot.encode(value) == data



def test_no_savepoint_of_the_corpus_holds_kryo_state() -> None:
    kryo_states = []
    for metadata in sorted((CORPUS / "savepoints").rglob("_metadata")):
        try:
            savepoint = Savepoint.open(metadata.parent)
        except Exception:  # refused savepoints are another test's subject
            continue
        assert savepoint.kryo_version == kryo_version_for_metadata(savepoint.metadata.version)
        for op in savepoint.operators:
            try:
                header = savepoint.keyed_header(op, tolerant=True)
            except Exception:
                continue
            for state in header.states if header is not None else []:
                if kryo_snapshots([s for _, s in state.serializers]):
                    kryo_states.append((str(metadata.parent), state.name))
    assert kryo_states == []
