"""Assembling the migrated savepoint's ``_metadata`` on the driver: the source's metadata with each rewritten
subtask's new keyed-state handle, and every other file the new savepoint needs copied into it once
(:func:`copy_stream_handle`). Deterministic: the same results give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from flinkstate.errors import WriteError
from flinkstate.format.changelog_handles import ChangelogBackendHandle
from flinkstate.format.handles import (
    ByteStreamStateHandle,
    FileStateHandle,
    IncrementalKeyedStateHandle,
    KeyGroupsStateHandle,
    RelativeFileStateHandle,
    StreamStateHandle,
)
from flinkstate.format.metadata import (
    AnyKeyedStateHandle,
    CheckpointMetadata,
    OperatorState,
    OperatorSubtaskState,
    write_metadata,
)
from flinkstate.kryo_report import metadata_version_refusal
from flinkstate.migration.plan import MigrationError, MigrationPlan
from flinkstate.migration.rewrite import SubtaskResult
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.kryo import kryo_version_for_metadata
from flinkstate.serializers.kryo_data import KRYO5
from flinkstate.storage.locations import METADATA_FILE, SavepointLocation
from flinkstate.storage.outputs import SavepointOutput

# --------------------------------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------------------------------


def check_metadata_version(source: Savepoint, metadata_version: int | None, kryo_carried: bool = False) -> None:
    """Refuses, before anything is written, a ``_metadata`` version the source's state cannot be given (Kryo data
    is copied as it is, and the metadata version says which Kryo reads it). Kryo data re-encoded for Kryo 5
    (``kryo_carried``) needs a Flink 2.x version."""
    if kryo_carried:
        if metadata_version is None or kryo_version_for_metadata(metadata_version) != KRYO5:
            raise MigrationError(f"{source.location.uri}: Kryo data re-encoded for Flink 2.x (Kryo 5.6) needs the "
                                 f"_metadata version Flink 2.x writes (5 or 6), not "
                                 f"{metadata_version or source.metadata.version}")
        return
    refusal = metadata_version_refusal(source, metadata_version)
    if refusal:
        raise MigrationError(refusal)


def assemble_metadata(source: Savepoint, plan: MigrationPlan, results: list[SubtaskResult],
                      output: SavepointOutput, version: int | None = None) -> CheckpointMetadata:
    """Copies every state file that is not rewritten into ``output`` byte for byte, writes ``_metadata`` (last, so
    a directory without it is visibly unfinished) and returns the new metadata."""
    by_unit = {(r.operator_id, r.subtask): r for r in results}
    missing = [u for u in plan.units() if u not in by_unit]
    if missing:
        raise MigrationError(f"results missing for (operator, subtask) {missing}")
    copied: dict[str, CopiedFile] = {}
    old = source.metadata
    operators = []
    new_ids = {p.new_operator_id for p in plan.operators.values()}
    for op in old.operators:
        op_plan = plan.operators.get(op.operator_id)
        if op_plan is None and op.operator_id in new_ids:
            raise MigrationError(f"operator {op.uid or op.operator_id} clashes with a renamed operator's new id")
        new_op = OperatorState(op.operator_id, op.parallelism, op.max_parallelism, op.name, op.uid,
                               op.coordinator_state, {}, set(op.finished_subtasks), op.fully_finished)
        if op_plan is not None:
            new_op.operator_id = op_plan.new_operator_id
            new_op.uid = op_plan.new_uid
        for index, sub in sorted(op.subtasks.items()):
            result = by_unit.get((op.operator_id, index))
            keyed = result.handle if result is not None else _copy_keyed(sub.managed_keyed_state, source, output,
                                                                           copied)
            new_op.subtasks[index] = OperatorSubtaskState(
                _copy_operator_handle(sub.managed_operator_state, source, output, copied),
                _copy_operator_handle(sub.raw_operator_state, source, output, copied),
                keyed,
                _copy_keyed(sub.raw_keyed_state, source, output, copied),
                list(sub.input_channel_state), list(sub.result_subpartition_state))
        operators.append(new_op)
    metadata = CheckpointMetadata(version or old.version, old.checkpoint_id, list(old.master_states), operators,
                                  old.trailer if (version or old.version) >= 4 else b"")
    output.write_bytes("_metadata", write_metadata(metadata))
    return metadata


def _copy_keyed(handle: AnyKeyedStateHandle | None, source: Savepoint, output: SavepointOutput,
                copied: dict[str, CopiedFile]) -> KeyGroupsStateHandle | None:
    if handle is None:
        return None
    # The planner rewrites native RocksDB state and refuses changelog state first: neither is ever copied half-way.
    if isinstance(handle, IncrementalKeyedStateHandle):
        raise MigrationError(f"keyed state of checkpoint {handle.checkpoint_id}: a native RocksDB snapshot cannot "
                             "be copied into a canonical savepoint")
    if isinstance(handle, ChangelogBackendHandle):
        raise MigrationError("keyed state of a changelog checkpoint cannot be copied into a canonical savepoint")
    return KeyGroupsStateHandle(handle.code, handle.offsets,
                                copy_stream_handle(handle.delegate, source.location, output, copied),
                                handle.state_handle_id)


def _copy_operator_handle(handle: Any, source: Savepoint, output: SavepointOutput,
                          copied: dict[str, CopiedFile]) -> Any:
    if handle is None:
        return None
    return type(handle)(handle.states, copy_stream_handle(handle.delegate, source.location, output, copied))


@dataclass(frozen=True)
class CopiedFile:
    source_name: str
    target_name: str
    size: int


def copy_stream_handle(handle: StreamStateHandle | None, source: SavepointLocation, output: SavepointOutput,
                       copied: dict[str, CopiedFile]) -> StreamStateHandle | None:
    """The handle of the same bytes in the output: inline handles stay inline, file handles are copied byte for
    byte and become relative (absolute ones too, which makes the output self-contained). ``copied`` dedups files
    shared by several handles."""
    if handle is None or isinstance(handle, ByteStreamStateHandle):
        return handle
    if isinstance(handle, RelativeFileStateHandle):
        name = handle.relative_path
    elif isinstance(handle, FileStateHandle):
        name = handle.path
    else:
        raise WriteError(f"cannot copy stream handle {type(handle).__name__}")
    if name not in copied:
        target = Path(unquote(urlparse(name).path) if name.startswith("file:") else name).name
        if target == METADATA_FILE or any(c.target_name == target for c in copied.values()):
            raise WriteError(f"cannot copy {name}: its file name {target} is already used in the output")
        copied[name] = CopiedFile(name, target, output.copy_from(source, name, target))
    entry = copied[name]
    return RelativeFileStateHandle(handle.size, entry.target_name)


__all__ = ["CopiedFile", "assemble_metadata", "copy_stream_handle"]
