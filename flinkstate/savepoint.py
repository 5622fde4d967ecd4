"""The public Python API for reading a savepoint::

    sp = Savepoint.open("/path/to/savepoint-xyz")          # directory, _metadata, or file: URI
    for op in sp.operators: ...
    for state in sp.keyed_states("stats"): print(state.name, state.kind, state.value_type)
    for key, namespace, value in sp.iter_entries("stats", "count"): ...
    for subtask, kg_range in sp.key_group_ranges("stats"):           # plan splits, e.g. one Spark task each
        for entry in sp.iter_entries("stats", "count", kg_range): ...

Operators are named by uid (hashed as Flink does) or by 32-hex operator id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flinkstate.binary import KeyGroupRange
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.changelog_handles import ChangelogBackendHandle
from flinkstate.format.handles import (
    FileStateHandle,
    IncrementalKeyedStateHandle,
    RelativeFileStateHandle,
)
from flinkstate.format.keyed_header import KeyedBackendHeader, StateMetaInfo, state_meta_bytes
from flinkstate.format.keyed_stream import KeyedStateStream
from flinkstate.format.metadata import CheckpointMetadata, OperatorState, read_metadata
from flinkstate.format.operator_state import OperatorBackendHeader, OperatorStateElement, OperatorStateStream
from flinkstate.format.rocksdb_native import NativeRocksDBStream
from flinkstate.format_errors import SavepointFormatError, StateNotFound
from flinkstate.identity import OperatorRef
from flinkstate.serializers.base import TypeSerializerSnapshot
from flinkstate.serializers.kryo import kryo_version_for_metadata, set_kryo_version
from flinkstate.serializers.pojo import merge_subtask_snapshots
from flinkstate.serializers.registry import snapshot_bytes
from flinkstate.storage.locations import METADATA_FILE, SavepointLocation, StorageError
from flinkstate.storage.uri import open_location


@dataclass(frozen=True)
class KeyedStateInfo:
    """A keyed state as ``describe`` shows it."""

    name: str
    kind: str
    key_type: str
    namespace_type: str
    value_type: str
    user_key_type: str | None

    @classmethod
    def of(cls, header: KeyedBackendHeader, meta: StateMetaInfo) -> KeyedStateInfo:
        def name(snapshot: Any) -> str:
            return snapshot.type_name() if snapshot is not None else "?"

        value = meta.value_serializer
        if meta.kind == "TIMERS":
            value_type = "Long (timestamp)"
        else:
            value_type = name(value)
        user_key = meta.user_key_serializer
        return cls(meta.name, meta.kind, name(header.key_serializer), name(meta.namespace_serializer), value_type,
                   name(user_key) if user_key is not None else None)


class Savepoint:
    """A savepoint (or retained checkpoint) opened for reading: canonical, HashMap native or RocksDB native. Only
    ``_metadata`` is read up front; state files are read lazily, one key-group block (or RocksDB instance) at a
    time."""

    def __init__(self, location: SavepointLocation) -> None:
        self.location = location
        self.metadata: CheckpointMetadata = read_metadata(location.read_metadata(), location.describe(METADATA_FILE))
        # Every file handle is resolved (contained in the savepoint) and its recorded size noted before any state
        # is read: see flinkstate.storage.
        # (A changelog file's recorded size is not its length: format/changelog.py checks it.)
        logs = {id(handle) for handle in self.metadata.changelog_files()}
        location.check_handles((where, _file_name(handle), None if id(handle) in logs else handle.size)
                               for where, handle in self.metadata.file_handles())
        self._streams: dict[tuple[str, int], KeyedStateStream] = {}
        self._operator_streams: dict[tuple[str, int], OperatorStateStream] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str], allow_external_handles: bool | None = None) -> Savepoint:
        """``allow_external_handles``: read legacy savepoints whose absolute state handles point outside the
        savepoint directory (default: the process-wide ``flinkstate.storage.handle_policy``, off)."""
        return cls(open_location(path, allow_external_handles))

    # -- operators ---------------------------------------------------------------------------------------------------

    @property
    def operators(self) -> list[OperatorState]:
        return self.metadata.operators

    def operator(self, uid_or_id: str) -> OperatorState:
        """The operator with this uid (hashed like Flink), 32-hex operator id, or (V5+) recorded uid."""
        wanted = OperatorRef.parse(uid_or_id).operator_id
        for op in self.operators:
            if op.operator_id == wanted or (op.uid is not None and op.uid == uid_or_id):
                return op
        known = ", ".join(op.uid or op.operator_id for op in self.operators)
        raise StateNotFound(f"{self.location.uri}: no operator {uid_or_id!r} (operators: {known})")

    @property
    def kryo_version(self) -> int:
        """The Kryo version of the savepoint's Kryo data: 2 (Kryo 2.24) up to _metadata version 4 (Flink 1.x), 5
        (Kryo 5.6) from version 5 (Flink 2.0; 2.1+ writes 6). Flink 1.x and 2.x write the same Kryo snapshot."""
        return kryo_version_for_metadata(self.metadata.version)

    def _set_kryo_version(self, stream: KeyedStateStream | OperatorStateStream) -> None:
        """Sets :attr:`kryo_version` on the KryoSnapshots of a stream's header, read here once (it is cached), before
        any decoder is built from it. A header that cannot be read is left alone: its error is raised where it is
        read for use, with its context."""
        try:
            if isinstance(stream, OperatorStateStream):
                header = stream.header()
                snapshots: list[Any] = [s for state in (*header.list_states, *header.broadcast_states)
                                        for _, s in state.serializers]
            else:
                keyed = stream.header(tolerant=True)
                snapshots = [keyed.key_serializer, *(s for state in keyed.states for _, s in state.serializers)]
            set_kryo_version(snapshots, self.kryo_version)
        except (SavepointFormatError, StorageError):
            pass

    @staticmethod
    def label(op: OperatorState) -> str:
        return f"operator {op.uid or op.name or op.operator_id}"

    def _resolve(self, operator: str | OperatorState) -> OperatorState:
        return operator if isinstance(operator, OperatorState) else self.operator(operator)

    # -- keyed state -------------------------------------------------------------------------------------------------

    def keyed_streams(self, operator: str | OperatorState) -> list[tuple[int, KeyedStateStream]]:
        """(subtask index, stream) of every subtask holding managed keyed state, by subtask index."""
        op = self._resolve(operator)
        streams = []
        for index in sorted(op.subtasks):
            handle = op.subtasks[index].managed_keyed_state
            if handle is None:
                continue
            cache_key = (op.operator_id, index)
            if cache_key not in self._streams:
                try:
                    # A native RocksDB snapshot reads like a stream: header from its meta file, entries from RocksDB;
                    # a changelog checkpoint's as its materialized part with the logged changes applied.
                    stream: KeyedStateStream
                    if isinstance(handle, IncrementalKeyedStateHandle):
                        stream = NativeRocksDBStream(self.location, handle, op.max_parallelism, self.label(op))
                    elif isinstance(handle, ChangelogBackendHandle):
                        stream = ChangelogStream(self.location, handle, op.max_parallelism, self.label(op))
                    else:
                        stream = KeyedStateStream(self.location, handle, op.max_parallelism, self.label(op))
                    self._streams[cache_key] = stream
                except StorageError as exc:  # a missing or unreadable file: say whose state it holds
                    raise StorageError(f"{self.label(op)}, subtask {index}: keyed state file: {exc}") from None
                self._set_kryo_version(self._streams[cache_key])
            streams.append((index, self._streams[cache_key]))
        return streams

    def key_group_ranges(self, operator: str | OperatorState) -> list[tuple[int, KeyGroupRange]]:
        """(subtask index, key-group range) of each keyed-state stream: the natural split units."""
        return [(index, stream.key_group_range) for index, stream in self.keyed_streams(operator)]

    def keyed_header(self, operator: str | OperatorState, tolerant: bool = False) -> KeyedBackendHeader | None:
        """The operator's keyed states across all its subtasks. Each subtask's stream has a header of its own,
        listing the states that subtask registered: one that never saw a key may lack a state the others have (a
        timer state, a state created lazily). The union keeps the first-seen order. A state's serializer snapshots
        may differ between subtasks only in the subclasses each POJO serializer had cached, which merge into their
        union (:func:`~flinkstate.serializers.pojo.merge_subtask_snapshots`); every subtask has the same key
        serializer. Entries are read with each subtask's own header (:meth:`keyed_streams`)."""
        streams = self.keyed_streams(operator)
        if not streams:
            return None
        self._share_recorded_key(streams, tolerant)
        first = streams[0][1].header(tolerant)
        if first.error is not None or len(streams) == 1:
            return first
        union = KeyedBackendHeader(first.version, first.compressed, first.key_serializer, list(first.states),
                                   first.length)
        position = {state.name: i for i, state in enumerate(first.states)}
        first_seen = dict.fromkeys(position, streams[0][0])
        key_bytes = snapshot_bytes(first.key_serializer) if first.key_serializer is not None else None
        for index, stream in streams[1:]:
            header = stream.header(tolerant)
            if header.error is not None:
                return header
            if (snapshot_bytes(header.key_serializer) if header.key_serializer is not None else None) != key_bytes:
                raise SavepointFormatError(f"{stream.context}: subtask {index} has another key serializer than "
                                           f"subtask {streams[0][0]}", stream.source.path, 0)
            for state in header.states:
                at = position.get(state.name)
                if at is None:
                    position[state.name], first_seen[state.name] = len(union.states), index
                    union.states.append(state)
                    continue
                merged = _merge_state(union.states[at], state)
                if isinstance(merged, str):
                    raise SavepointFormatError(f"{stream.context}: state {state.name}: subtasks "
                                               f"{first_seen[state.name]} and {index} have other serializers "
                                               f"({merged}), not only other subclasses cached by a POJO "
                                               f"serializer", stream.source.path)
                union.states[at] = merged
        return union

    @staticmethod
    def _share_recorded_key(streams: list[tuple[int, KeyedStateStream]], tolerant: bool) -> None:
        """A changelog subtask that records no key serializer reads its keys with the one its sibling subtasks
        record (the job's, one per operator)."""
        unrecorded = [s for _, s in streams if isinstance(s, ChangelogStream) and s.header(tolerant).error is None
                      and not s.records_key_serializer()]
        if not unrecorded or len(unrecorded) == len(streams):
            return
        key = next((h.key_serializer for h in (s.header(tolerant) for _, s in streams if s not in unrecorded)
                    if h.error is None and h.key_serializer is not None), None)
        if key is not None:
            for stream in unrecorded:
                stream.assume_key_serializer(key)

    def unrecorded_key(self, operator: str | OperatorState) -> bool:
        """Whether no subtask of the operator records its key serializer: a changelog checkpoint whose log was never
        materialized and holds no timers (Flink restores it with the new job's key serializer)."""
        streams = self.keyed_streams(operator)
        return bool(streams) and all(isinstance(s, ChangelogStream) and not s.records_key_serializer()
                                     for _, s in streams)

    def assume_key_serializer(self, operator: str | OperatorState, key: TypeSerializerSnapshot) -> None:
        """Reads the operator's keys with ``key`` where the checkpoint records no key serializer (see
        :meth:`unrecorded_key`); every key must then decode to exactly its bytes."""
        for _, stream in self.keyed_streams(operator):
            if isinstance(stream, ChangelogStream) and not stream.records_key_serializer():
                stream.assume_key_serializer(key)

    def keyed_states(self, operator: str | OperatorState) -> list[KeyedStateInfo]:
        header = self.keyed_header(operator)
        return [] if header is None else [KeyedStateInfo.of(header, s) for s in header.states]

    def state_info(self, operator: str | OperatorState, state_name: str) -> KeyedStateInfo:
        op = self._resolve(operator)
        for info in self.keyed_states(op):
            if info.name == state_name:
                return info
        names = ", ".join(i.name for i in self.keyed_states(op)) or "none"
        raise StateNotFound(f"{self.location.uri}: {self.label(op)} has no keyed state {state_name!r} "
                            f"(keyed states: {names})")

    def iter_key_groups(self, operator: str | OperatorState, state_name: str,
                        key_group_range: KeyGroupRange | None = None
                        ) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
        """``(key group, entries)`` per non-empty key group, reading only the blocks inside ``key_group_range``."""
        op = self._resolve(operator)
        self.state_info(op, state_name)
        for _, stream in self.keyed_streams(op):
            if key_group_range is not None and not len(stream.key_group_range.intersection(key_group_range)):
                continue
            yield from stream.iter_blocks(state_name, key_group_range)

    def iter_entries(self, operator: str | OperatorState, state_name: str,
                     key_group_range: KeyGroupRange | None = None) -> Iterator[tuple[Any, ...]]:
        """Entries ``(key, namespace, value)``; MAP state ``(key, namespace, user_key, value)``; timers
        ``(key, namespace, timestamp)``."""
        for _, entries in self.iter_key_groups(operator, state_name, key_group_range):
            yield from entries

    # -- operator state ----------------------------------------------------------------------------------------------

    def operator_state_streams(self, operator: str | OperatorState) -> list[tuple[int, OperatorStateStream]]:
        """(subtask index, stream) of every subtask holding managed operator state (list and broadcast state)."""
        op = self._resolve(operator)
        streams = []
        for index in sorted(op.subtasks):
            handle = op.subtasks[index].managed_operator_state
            if handle is None or handle.delegate is None:
                continue
            cache_key = (op.operator_id, index)
            if cache_key not in self._operator_streams:
                try:
                    self._operator_streams[cache_key] = OperatorStateStream(self.location, handle,
                                                                            f"{self.label(op)}, subtask {index}")
                except StorageError as exc:
                    raise StorageError(f"{self.label(op)}, subtask {index}: operator state file: {exc}") from None
                self._set_kryo_version(self._operator_streams[cache_key])
            streams.append((index, self._operator_streams[cache_key]))
        return streams

    def operator_header(self, operator: str | OperatorState) -> OperatorBackendHeader | None:
        """The operator's list and broadcast states across all its subtasks (None: it has no operator state), each
        with its serializer snapshots: the union of the subtasks' headers in first-seen order, merged as
        :meth:`keyed_header` merges keyed states."""
        streams = self.operator_state_streams(operator)
        if not streams:
            return None
        first = streams[0][1].header()
        union = OperatorBackendHeader(first.version, first.compressed, list(first.list_states),
                                      list(first.broadcast_states), first.length)
        for _, stream in streams[1:]:
            header = stream.header()
            for seen, other in ((union.list_states, header.list_states),
                                (union.broadcast_states, header.broadcast_states)):
                for state in other:
                    at = next((i for i, s in enumerate(seen) if s.name == state.name), None)
                    merged = _merge_state(seen[at], state) if at is not None else state
                    if isinstance(merged, str):
                        raise SavepointFormatError(f"{stream.context}: operator state {state.name}: subtasks have "
                                                   f"other serializers ({merged})", stream.source.path)
                    if at is None:
                        seen.append(merged)
                    else:
                        seen[at] = merged
        return union

    def operator_state_modes(self, operator: str | OperatorState) -> dict[str, str]:
        """name -> distribution mode (SPLIT_DISTRIBUTE, UNION, BROADCAST) of the operator's managed operator states,
        as the metadata's handles record them."""
        op = self._resolve(operator)
        return {name: meta.mode for _, sub in sorted(op.subtasks.items()) if sub.managed_operator_state
                for name, meta in sub.managed_operator_state.states.items()}

    def iter_operator_state(self, operator: str | OperatorState, state_name: str
                            ) -> Iterator[tuple[int, OperatorStateElement]]:
        """``(subtask, element)`` of every stored element of one operator state, subtask by subtask."""
        op = self._resolve(operator)
        if state_name not in self.operator_state_modes(op):
            names = ", ".join(sorted(self.operator_state_modes(op))) or "none"
            raise StateNotFound(f"{self.location.uri}: {self.label(op)} has no operator state {state_name!r} "
                                f"(operator states: {names})")
        for index, stream in self.operator_state_streams(op):
            for element in stream.elements(state_name):
                yield index, element

    # -- description -------------------------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (what ``flinkstate describe --json`` prints)."""
        return {**self.describe_head(), "operators": list(self.describe_operators())}

    def describe_head(self) -> dict[str, Any]:
        """The description without its operators."""
        return {"path": self.location.uri, "metadata_version": self.metadata.version,
                "checkpoint_id": self.metadata.checkpoint_id}

    def describe_operators(self) -> Iterator[dict[str, Any]]:
        """Each operator's description in turn, so that a savepoint of a million operators can be described without
        holding a million descriptions."""
        return (self._describe_operator(op) for op in self.operators)

    def _describe_operator(self, op: OperatorState) -> dict[str, Any]:
        result: dict[str, Any] = {
            "id": op.operator_id, "uid": op.uid, "name": op.name, "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "subtasks": len(op.subtasks), "finished_subtasks": sorted(op.finished_subtasks),
            "fully_finished": op.fully_finished,
            "operator_states": sorted({name for s in op.subtasks.values() if s.managed_operator_state
                                       for name in s.managed_operator_state.states}),
            "coordinator_state_bytes": op.coordinator_state.size if op.coordinator_state else None,
            "key_group_ranges": [],
            "keyed_states": [],
        }
        result["operator_state_details"] = self._describe_operator_states(op)
        try:
            result["key_group_ranges"] = [[i, r.start, r.end] for i, r in self.key_group_ranges(op)]
            header = self.keyed_header(op, tolerant=True)
        except (SavepointFormatError, StorageError) as exc:
            result["error"] = str(exc)
            return result
        if header is not None:
            result["keyed_states"] = [KeyedStateInfo.of(header, s).__dict__ for s in header.states]
            if header.error is not None:
                result["error"] = str(header.error)
        return result


    def _describe_operator_states(self, op: OperatorState) -> list[dict[str, Any]]:
        """Per managed operator state: name, distribution mode and stored type (from the first subtask's stream that
        registers it), or why the type is unknown."""
        details: dict[str, dict[str, Any]] = {name: {"name": name, "mode": mode, "type": None}
                                              for name, mode in sorted(self.operator_state_modes(op).items())}
        for _, stream in self.operator_state_streams(op):
            try:
                header = stream.header()
            except (SavepointFormatError, StorageError) as exc:
                for detail in details.values():
                    detail.setdefault("error", str(exc))
                continue
            for state in [*header.list_states, *header.broadcast_states]:
                entry = details.get(state.name)
                if entry is None or entry["type"] is not None:
                    continue
                value, key = state.serializer("VALUE_SERIALIZER"), state.serializer("KEY_SERIALIZER")
                value_type = value.type_name() if value is not None else "?"
                entry["type"] = f"Map<{key.type_name()}, {value_type}>" if key is not None else value_type
                entry.pop("error", None)
        return list(details.values())


def _merge_state(seen: StateMetaInfo, other: StateMetaInfo) -> StateMetaInfo | str:
    """One state's meta info from two subtasks merged (:func:`merge_subtask_snapshots`), or what differs."""
    if state_meta_bytes(seen) == state_meta_bytes(other):
        return seen
    if (seen.backend_type, seen.options) != (other.backend_type, other.options):
        return f"{seen.backend_type} {dict(seen.options)} against {other.backend_type} {dict(other.options)}"
    if [key for key, _ in seen.serializers] != [key for key, _ in other.serializers]:
        return (f"serializer snapshots {', '.join(key for key, _ in seen.serializers)} against "
                f"{', '.join(key for key, _ in other.serializers)}")
    serializers = []
    for (key, mine), (_, theirs) in zip(seen.serializers, other.serializers, strict=True):
        merged = merge_subtask_snapshots(mine, theirs)
        if merged is None:
            return f"{key} {mine.type_name()} against {theirs.type_name()}"
        serializers.append((key, merged))
    return StateMetaInfo(seen.name, seen.backend_type, list(seen.options), serializers)


def _file_name(handle: FileStateHandle | RelativeFileStateHandle) -> str:
    return handle.path if isinstance(handle, FileStateHandle) else handle.relative_path


def open_savepoint(path: str | os.PathLike[str], allow_external_handles: bool | None = None) -> Savepoint:
    return Savepoint.open(path, allow_external_handles)
