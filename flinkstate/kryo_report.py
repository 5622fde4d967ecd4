"""Whether a keyed state's Kryo records decode, pass through byte for byte, or cannot be decoded, judged from a
bounded sample (its first key-group blocks), so that ``describe`` says it before a migration at a cost that does not
grow with the state."""

from __future__ import annotations

from typing import Any

from flinkstate.binary import KeyGroupRange
from flinkstate.format.keyed_header import StateMetaInfo
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import KryoSnapshot, OpaqueValue, kryo_snapshots, kryo_version_for_metadata
from flinkstate.serializers.kryo_data import KRYO2, KryoValue
from flinkstate.storage.locations import StorageError

#: The Kryo sample of a state: at most this many key-group blocks read, and Kryo records looked at.
SAMPLE_BLOCKS = 4
SAMPLE_VALUES = 200


def add_kryo_verdicts(savepoint: Savepoint, description: dict[str, Any]) -> None:
    """Adds ``"kryo"`` (one line) to every keyed state in ``description`` whose value, element or user key
    serializer holds a Kryo serializer."""
    for op in description["operators"]:
        add_operator_kryo_verdicts(savepoint, op)


def add_operator_kryo_verdicts(savepoint: Savepoint, op: dict[str, Any]) -> None:
    """:func:`add_kryo_verdicts` for one operator's description (``describe`` streams them)."""
    if not op["keyed_states"] or "error" in op:
        return
    header = savepoint.keyed_header(op["id"], tolerant=True)
    states = {s.name: s for s in header.states} if header is not None else {}
    for state in op["keyed_states"]:
        meta = states.get(state["name"])
        if meta is not None and meta.kind != "TIMERS":
            verdict = kryo_verdict(savepoint, op["id"], meta)
            if verdict is not None:
                state["kryo"] = verdict


def kryo_verdict(savepoint: Savepoint, operator_id: str, state: StateMetaInfo) -> str | None:
    """What happens to the state's Kryo records, from the values of its first key-group blocks (at most
    :data:`SAMPLE_BLOCKS` read, :data:`SAMPLE_VALUES` looked at); None when the state holds no Kryo data."""
    found = kryo_snapshots([state.value_serializer, state.user_key_serializer])
    if not found:
        return None
    snapshot: KryoSnapshot = found[0]
    sample = kryo_sample(savepoint, operator_id, state)
    if isinstance(sample, str):
        return sample
    values, blocks = sample
    where = f"in the first {len(values)} Kryo records of {blocks} key-group block{'s' if blocks != 1 else ''}"
    return f"{snapshot.describe_values(values)} {where}" if values else f"Kryo: no values in the first {blocks} " \
        f"key-group blocks"


def kryo_sample(savepoint: Savepoint, operator_id: str, state: StateMetaInfo) -> tuple[list[Any], int] | str:
    """The Kryo records (:class:`KryoValue` or :class:`OpaqueValue`) of the state's first key-group blocks and the
    number of blocks read, or why none could be read (one line, as ``describe`` says it)."""
    values: list[Any] = []
    blocks = 0
    try:
        for _, stream in savepoint.keyed_streams(operator_id):
            if isinstance(stream, NativeRocksDBStream):  # reading needs the RocksDB instance rebuilt: not sampled
                return "Kryo: values not sampled (a native RocksDB snapshot: dump or check reads them)"
            present = [key_group for key_group, _, _ in stream.blocks[:SAMPLE_BLOCKS - blocks]]
            if not present:
                continue
            blocks += len(present)
            for _, entries in stream.iter_blocks(state.name, KeyGroupRange(present[0], present[-1])):
                for entry in entries:
                    kryo_records(entry[2:], values)
            if len(values) >= SAMPLE_VALUES or blocks >= SAMPLE_BLOCKS:
                break
    except SavepointFormatError as exc:
        return f"Kryo: not decodable ({exc.what})"
    except StorageError as exc:
        return f"Kryo: not sampled ({exc})"
    return values[:SAMPLE_VALUES], blocks


def kryo_records(item: Any, out: list[Any]) -> None:
    """The Kryo records inside a decoded value (a POJO's fields, a list's elements, a map entry's parts, the
    attributes of a family's value object such as Scala's Try)."""
    if isinstance(item, (KryoValue, OpaqueValue)):
        out.append(item)
    elif isinstance(item, dict):
        for value in item.values():
            kryo_records(value, out)
    elif isinstance(item, (list, tuple)):
        for value in item:
            kryo_records(value, out)
    elif hasattr(item, "__dict__"):
        for value in vars(item).values():
            kryo_records(value, out)


def _flink(kryo_version: int) -> str:
    return "Flink 1.x (Kryo 2.24)" if kryo_version == KRYO2 else "Flink 2.x (Kryo 5.6)"


def metadata_version_refusal(source: Savepoint, metadata_version: int | None) -> str | None:
    """Why ``source`` cannot be given ``_metadata`` version ``metadata_version`` (one line), or None. Kryo bytes are
    copied as they are, and the metadata version says which Kryo reads them: Kryo data of Flink 1.x under Flink 2.x
    metadata (or the reverse) would be read with the other Kryo, by this tool and by Flink, which cannot restore it
    (FLINK-3154: Kryo 2.24 and 5.6 data are not compatible)."""
    if metadata_version is None or kryo_version_for_metadata(metadata_version) == source.kryo_version:
        return None
    for op in source.operators:
        header = source.keyed_header(op, tolerant=True)
        named = [(state.name, [s for _, s in state.serializers]) for state in (header.states if header else [])]
        for _, stream in source.operator_state_streams(op):
            named += [(state.name, [s for _, s in state.serializers])
                      for state in (*stream.header().list_states, *stream.header().broadcast_states)]
        for name, snapshots in named:
            if kryo_snapshots(snapshots):
                return (f"{source.label(op)}, state {name}: Kryo data written by {_flink(source.kryo_version)} "
                        f"cannot be given _metadata version {metadata_version}, which says "
                        f"{_flink(kryo_version_for_metadata(metadata_version))}: it would be read with the other Kryo, "
                        f"and Flink cannot restore it (FLINK-3154); keep the source's _metadata version "
                        f"{source.metadata.version}")
    return None


__all__ = ["SAMPLE_BLOCKS", "SAMPLE_VALUES", "add_kryo_verdicts", "add_operator_kryo_verdicts", "kryo_records",
           "kryo_sample", "kryo_verdict", "metadata_version_refusal"]
