"""Rewriting one (operator, subtask) keyed stream, the parallel unit of a migration, and its in-memory twin,
the dry run. Keyed streams are rewritten block by block in the source's order: entries of states that are not
migrated keep their bytes, migrated states are decoded with the old snapshot's codec, transformed
(:func:`migrate_entry`, the one rule the verifier also applies), and encoded with the new one (:class:`StateCodec`).
When the key changes, entries move to the key group Flink hashes the new key to, which may belong to another
subtask: then each subtask reads the operator's every stream and keeps its own key groups.
"""

from __future__ import annotations

import copy
import os
import struct
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from flinkstate._speedups import block_runs, scan_compiled, state_pairs
from flinkstate._speedups.runs import migrate_block
from flinkstate.binary import KeyGroupRange, assign_key_group
from flinkstate.format.handles import KeyGroupsStateHandle
from flinkstate.format.keyed_header import END_OF_KEY_GROUP_MARK, KeyedBackendHeader, StateMetaInfo, state_meta_bytes
from flinkstate.format.keyed_stream import (
    KeyedStateStream,
    KeyedStreamWriter,
    encode_block,
    keyed_stream_file_name,
    raw_key,
)
from flinkstate.format_errors import SavepointFormatError
from flinkstate.jsonify import to_json
from flinkstate.migration.collector import collector_deferred
from flinkstate.migration.entry_codec import StateCodec, identity_encoders, migrate_entry
from flinkstate.migration.native import CanonicalBlocks
from flinkstate.migration.plan import DROP, MigrationError, MigrationPlan, OperatorPlan, StateRewrite, localize
from flinkstate.savepoint import Savepoint
from flinkstate.storage.outputs import SavepointOutput

#: Rewrite a block a run of entries at a time when it can (kept states' runs copied as they are, migrated ones
#: decoded in one compiled pass); off, every entry goes through the reference loop. Tests compare the two.
COPY_RUNS = True
_STATE_ID = struct.Struct(">H")  # a run's state id and the end-of-key-group mark

# --------------------------------------------------------------------------------------------------------------------
# One subtask
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class StateCount:
    read: int = 0
    written: int = 0
    dead_lettered: int = 0


@dataclass
class SubtaskResult:
    operator_id: str  # the source operator id
    subtask: int
    handle: KeyGroupsStateHandle | None
    counts: dict[str, StateCount]  # by new state name
    dead_letters: list[dict[str, Any]]


def _own_snapshots(plan: OperatorPlan, local: KeyedBackendHeader) -> OperatorPlan:
    """A subtask's plan with the subtask's own serializer snapshots where they differ from the operator's merged
    ones (:meth:`Savepoint.keyed_header`: only in the subclasses a POJO serializer had cached). Its entries are
    decoded with its own, and a state whose serializers the plan leaves as they were keeps its own in the output:
    what Flink wrote for that subtask and restores it with (given a cache listing a subclass it never met, it
    would write that subclass with the serializer restored from the cache instead of its current class's)."""
    assert plan.old_header is not None and plan.new_header is not None
    assert [s.name for s in local.states] == [s.name for s in plan.old_header.states]
    old_states, new_states = list(plan.old_header.states), list(plan.new_header.states)
    differs = False
    for index, (own, merged) in enumerate(zip(local.states, plan.old_header.states, strict=True)):
        if own is merged or state_meta_bytes(own) == state_meta_bytes(merged):
            continue
        differs = True
        old_states[index] = own
        rewrite = plan.rewrites[index]
        if rewrite is None:
            continue
        new = new_states[rewrite.new_id]
        if state_meta_bytes(replace(new, name=merged.name)) == state_meta_bytes(merged):
            new_states[rewrite.new_id] = StateMetaInfo(new.name, new.backend_type, list(new.options),
                                                       list(own.serializers))
    if not differs:
        return plan
    return replace(plan, old_header=replace(plan.old_header, states=old_states),
                   new_header=replace(plan.new_header, states=new_states))


class _Rekeyed(Exception):
    """Internal: an entry's new key group is outside this subtask (rekey mode)."""


class _SubtaskMigrator:
    def __init__(self, source: Savepoint, plan: OperatorPlan, subtask: int) -> None:
        self.source = source
        self.subtask = subtask
        self.streams = dict(source.keyed_streams(plan.source))
        self.stream = self.streams[subtask]
        # Blocks in the canonical layout, whatever the source's format (native snapshots are converted).
        self.blocks = {index: CanonicalBlocks(stream, partial(identity_encoders, stream, plan.source))
                       for index, stream in self.streams.items()}
        # Each stream's blocks use its own header's state ids. In place, a subtask keeps its own state list; rekeyed,
        # entries come from every stream, so the output lists every state and each stream's ids are mapped.
        if plan.key_transform is None:
            plan = _own_snapshots(localize(plan, self.stream.header()), self.stream.header())
        assert plan.old_header is not None
        union_index = {state.name: i for i, state in enumerate(plan.old_header.states)}
        self.stream_ids = {index: [union_index[state.name] for state in stream.header().states]
                           for index, stream in self.streams.items()} if plan.key_transform is not None else {}
        self.plan = plan
        self.prefix_bytes = self.stream.prefix_bytes
        # Only states whose entries are decoded need codecs: a state kept as bytes may have none (Kryo, unknown).
        self.codecs = [StateCodec(plan, r, self.prefix_bytes) if r is not None and (r.touches_values or
                       plan.key_transform is not None) else None for r in plan.rewrites]
        assert plan.new_header is not None
        self.counts = {s.name: StateCount() for s in plan.new_header.states}
        self.dead_letters: list[dict[str, Any]] = []
        self.label = f"operator {plan.new_uid or plan.new_operator_id}"
        #: Dry runs count every failure, whatever the error policy, and keep only the first few as examples.
        self.collect_failures = False
        self.max_examples: int | None = None

    def _failed(self, rewrite: StateRewrite, entry: tuple[Any, ...] | None, key_group: int, exc: Exception,
                dead_letter: bool) -> None:
        key = entry[0] if entry else None
        if not dead_letter and not self.collect_failures:
            raise MigrationError(f"{self.label}, state {rewrite.old_name}, key {to_json(key)!r} (key group "
                                 f"{key_group}): {type(exc).__name__}: {exc}") from exc
        record = {"operator": self.plan.new_uid or self.plan.new_operator_id, "state": rewrite.old_name,
                  "key_group": key_group, "key": to_json(key),
                  "namespace": to_json(entry[1]) if entry else None, "error": f"{type(exc).__name__}: {exc}"}
        if entry is not None and rewrite.kind == "MAP":
            record["user_key"] = to_json(entry[2])
        if self.collect_failures:
            record["on_error"] = "dead-letter" if dead_letter else "fail"
        if self.max_examples is None or len(self.dead_letters) < self.max_examples:
            self.dead_letters.append(record)
        self.counts[rewrite.new_name].dead_lettered += 1

    def _decode(self, codec: StateCodec, data: bytes, span: tuple[int, int, int, int], key_group: int,
                stream: KeyedStateStream | None = None) -> tuple[Any, ...]:
        """One stored entry, decoded with the old serializers. Bytes that do not decode are a format error naming
        the file, the operator, the state and the key group: never a failed conversion (no dead letter hides it)."""
        try:
            return codec.decode(data, *span)
        except SavepointFormatError as exc:
            what = exc.what
        except (struct.error, IndexError, ValueError, UnicodeDecodeError, KeyError, OverflowError) as exc:
            what = f"undecodable entry ({type(exc).__name__}: {exc})"
        source = (stream or self.stream).source.path
        raise SavepointFormatError(f"{self.label}, state {codec.rewrite.old_name}, key group {key_group}: {what}",
                                   source) from None

    def _convert(self, codec: StateCodec, entry: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return migrate_entry(codec.rewrite, entry)

    def _encode(self, codec: StateCodec, entry: tuple[Any, ...], key_group: int, raw_key: bytes | None
                ) -> tuple[bytes, bytes] | None:
        return codec.encode_entry(entry, key_group, raw_key)

    # -- the common case: keys stay where they are ---------------------------------------------------------------

    def run_in_place(self, writer: KeyedStreamWriter, key_group_range: KeyGroupRange | None = None) -> None:
        """Rewrites the stream's blocks (only those in ``key_group_range``, a unit of a split stream)."""
        stream, plan = self.stream, self.plan
        recompress = plan.new_header.compressed != plan.old_header.compressed  # type: ignore[union-attr]
        only_copies = not recompress and all(r is not None and not r.touches_values and r.new_id == i
                                             for i, r in enumerate(plan.rewrites))
        blocks = self.blocks[self.subtask]
        for key_group, start, end in stream.blocks:
            if key_group_range is not None and key_group not in key_group_range:
                continue
            if only_copies and not blocks.native:
                # No state of this operator changes its bytes: the stored block is copied as it is (only the
                # header changed), but still scanned for the entry counts.
                raw = stream.source.read(start, end - start)
                self._count_block(stream.read_block(key_group, start, end), key_group, start)
                writer.write_raw_block(key_group, raw)
                continue
            data = blocks.read(key_group, start, end)
            if not data:  # a native snapshot's key group without entries
                continue
            if only_copies:  # a native block, already in the canonical layout: written (compressed if asked) as is
                self._count_block(data, key_group, start)
                writer.write_block(key_group, data)
                continue
            writer.write_block(key_group, self._rewrite_block(data, key_group, start))

    def _count_block(self, data: bytes, key_group: int, block_offset: int) -> None:
        for state_id, *_ in self.stream.raw_entries(data, key_group, block_offset):
            rewrite = self.plan.rewrites[state_id]
            assert rewrite is not None
            count = self.counts[rewrite.new_name]
            count.read += 1
            count.written += 1

    def _rewrite_block(self, data: bytes, key_group: int, block_offset: int) -> bytes:
        """One key group's block rewritten (uncompressed): run by run when it can (:meth:`_rewrite_runs`), else
        entry by entry (:meth:`_rewrite_entries`, the reference); both write the same bytes."""
        if COPY_RUNS:
            rewritten = self._rewrite_runs(data, key_group, block_offset)
            if rewritten is not None:
                return rewritten
        return encode_block(self._rewrite_entries(data, key_group, block_offset))

    def _rewrite_runs(self, data: bytes, key_group: int, block_offset: int) -> bytes | None:
        """The block rewritten a run of entries at a time (compiled walk): a kept state's run is copied as it is,
        its bytes after the state id being exactly what :func:`encode_block` makes of its entries (the last key
        flagged); a migrated state's run whose keys are kept is decoded, migrated and written entry by entry in one
        compiled step (:func:`migrate_block`), else decoded in one compiled pass and migrated below. None (before
        anything is counted) when the fast path is off, the block is malformed or does not decode (the reference
        then reports it), or a state has more than one run (not Flink's writer: the reference merges them)."""
        runs = block_runs(self.stream, data, key_group)
        if runs is None:
            return None
        rewrites, codecs = self.plan.rewrites, self.codecs
        new_ids = [r.new_id for r in (rewrites[run[0]] for run in runs) if r is not None]
        if len(set(new_ids)) != len(new_ids):
            return None
        state_count = len(self.stream.header().states)
        decoded: dict[int, tuple[list[tuple[Any, ...]], list[tuple[bytes, bytes]]]] = {}
        migrated: dict[int, bytearray] = {}  # runs written by the compiled one-step migration
        for state_id, _, _, count in runs:
            rewrite = rewrites[state_id]
            if rewrite is None or not rewrite.touches_values:
                continue
            codec = codecs[state_id]
            assert codec is not None
            if rewrite.user_key_transform is None and not rewrite.reencode and not rewrite.runs_code:
                # Keys kept: each entry decoded, migrated and written in one step (None: the loop below does it)
                run = migrate_block(codec.decode, data, key_group, state_id, state_count, self.prefix_bytes,
                                    rewrite.kind, rewrite.transform, DROP, codec.value_enc)
                if run is not None:
                    migrated[state_id] = run
                    continue
            entries = scan_compiled(codec.decode, data, key_group, state_id, state_count, self.prefix_bytes)
            pairs = state_pairs(self.stream, data, key_group, block_offset, state_id)
            if entries is None or len(entries) != count or len(pairs) != count:
                return None
            decoded[state_id] = entries, pairs
        out = bytearray()
        for state_id, start, end, count in runs:
            rewrite = rewrites[state_id]
            if rewrite is None:
                continue
            tally = self.counts[rewrite.new_name]
            if not rewrite.touches_values:
                tally.read += count
                tally.written += count
                out += _STATE_ID.pack(rewrite.new_id)
                out += data[start:end]
                continue
            if state_id in migrated:
                tally.read += count
                tally.written += count
                out += _STATE_ID.pack(rewrite.new_id)
                out += migrated[state_id]
                continue
            codec = codecs[state_id]
            assert codec is not None
            keep_keys = rewrite.user_key_transform is None and not rewrite.reencode
            written = []
            for entry, (key, _) in zip(*decoded[state_id], strict=True):
                tally.read += 1
                pair = self._migrate_one(codec, rewrite, entry, key_group, key if keep_keys else None)
                if pair is not None:
                    tally.written += 1
                    written.append(pair)
            if written:
                out += encode_block(((rewrite.new_id, written),))[:-_STATE_ID.size]  # without the end mark
        if out:
            out += _STATE_ID.pack(END_OF_KEY_GROUP_MARK)
        return bytes(out)

    def _migrate_one(self, codec: StateCodec, rewrite: StateRewrite, entry: tuple[Any, ...], key_group: int,
                     kept_key: bytes | None) -> tuple[bytes, bytes] | None:
        """The stored bytes of one decoded entry's migration (``kept_key``: the key's bytes, kept); None when it is
        dropped, stores nothing, or failed (dead-lettered; a failure under the fail policy raises)."""
        try:
            new_entry = self._convert(codec, entry)
            if new_entry is None:
                return None
            return self._encode(codec, new_entry, key_group, kept_key)
        except MigrationError:
            raise
        except SavepointFormatError as exc:
            # Offsets in a decompressed block are not file offsets: name the block instead.
            raise SavepointFormatError(f"{self.label}, state {rewrite.old_name}, key group {key_group}: "
                                       f"{exc.what}", self.stream.source.path) from None
        except Exception as exc:  # conversions raise ConversionError, user functions anything
            self._failed(rewrite, entry, key_group, exc, rewrite.dead_letter)
            return None

    def _rewrite_entries(self, data: bytes, key_group: int, block_offset: int
                         ) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
        runs: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        rewrites, codecs = self.plan.rewrites, self.codecs
        for state_id, ks, ke, vs, ve in self.stream.raw_entries(data, key_group, block_offset):
            rewrite = rewrites[state_id]
            if rewrite is None:
                continue
            count = self.counts[rewrite.new_name]
            count.read += 1
            if not rewrite.touches_values:
                pair = (raw_key(data, ks, ke), data[vs:ve])
            else:
                codec = codecs[state_id]
                assert codec is not None
                entry = self._decode(codec, data, (ks, ke, vs, ve), key_group)
                # Keys keep their bytes unless a MapState user key was rewritten.
                kept_key = None if rewrite.user_key_transform is not None or rewrite.reencode \
                    else raw_key(data, ks, ke)
                encoded = self._migrate_one(codec, rewrite, entry, key_group, kept_key)
                if encoded is None:
                    continue
                pair = encoded
            count.written += 1
            if runs and runs[-1][0] == rewrite.new_id:
                runs[-1][1].append(pair)
            else:
                runs.append((rewrite.new_id, [pair]))
        return runs

    # -- key changes: entries move between key groups (and subtasks) -------------------------------------------------

    def run_rekeyed(self, writer: KeyedStreamWriter, key_group_range: KeyGroupRange,
                    max_parallelism: int) -> None:
        plan = self.plan
        key_f = plan.key_transform
        assert key_f is not None
        buckets: dict[int, dict[int, list[tuple[bytes, bytes]]]] = {}
        for index, stream in sorted(self.streams.items()):
            ids = self.stream_ids[index]
            for key_group, start, end in stream.blocks:
                data = self.blocks[index].read(key_group, start, end)
                if not data:
                    continue
                for local_id, ks, ke, vs, ve in stream.raw_entries(data, key_group, start):
                    state_id = ids[local_id]
                    rewrite = plan.rewrites[state_id]
                    codec = self.codecs[state_id]
                    if rewrite is None or codec is None:
                        continue
                    entry = self._decode(codec, data, (ks, ke, vs, ve), key_group, stream)
                    count = self.counts[rewrite.new_name]
                    dead_letter = rewrite.dead_letter or plan.key_dead_letter
                    try:
                        new_key = key_f(entry[0])
                    except Exception as exc:
                        if key_group in key_group_range:  # reported once: by the subtask owning the old key group
                            count.read += 1
                            self._failed(rewrite, entry, key_group, exc, dead_letter)
                        continue
                    new_group = assign_key_group(codec.key_hash(new_key), max_parallelism)
                    if new_group not in key_group_range:
                        continue  # another subtask's
                    count.read += 1
                    try:
                        new_entry = self._convert(codec, (new_key, *entry[1:]))
                        encoded = self._encode(codec, new_entry, new_group, None) if new_entry else None
                    except MigrationError:
                        raise
                    except Exception as exc:  # a user function may raise anything
                        self._failed(rewrite, entry, new_group, exc, dead_letter)
                        continue
                    if encoded is None:
                        continue
                    self.counts[rewrite.new_name].written += 1
                    buckets.setdefault(new_group, {}).setdefault(rewrite.new_id, []).append(encoded)
        for key_group in key_group_range:
            runs = buckets.get(key_group)
            if runs:
                # RocksDB writes a key group's states by id and keys in byte order: do the same, deterministically.
                writer.write_block(key_group, encode_block((sid, sorted(runs[sid])) for sid in sorted(runs)))


@collector_deferred()  # the hot loop: no full collections walking its lists (see the module)
def migrate_subtask(source: Savepoint, plan: MigrationPlan, operator_id: str, subtask: int,
                    output: SavepointOutput, key_group_range: KeyGroupRange | None = None,
                    file_name: str | None = None) -> SubtaskResult:
    """Rewrites the keyed stream of one (source operator id, subtask) into ``output``; the file name derives from
    the new operator id and the subtask, so the result does not depend on who runs it. With ``key_group_range`` (a
    sub-range of the subtask's; not for a key transform, whose entries move between key groups), only that range's
    blocks are rewritten, into ``file_name``: a stream of its own (header, then the range's blocks) whose blocks
    :mod:`flinkstate.migration.units` concatenates with the other ranges' into the subtask's stream."""
    op_plan = plan.operators[operator_id]
    assert op_plan.new_header is not None
    op_plan_for_run = copy.copy(op_plan)
    if plan.compressed is not None:
        header = copy.copy(op_plan.new_header)
        header.compressed = plan.compressed
        op_plan_for_run.new_header = header
    migrator = _SubtaskMigrator(source, op_plan_for_run, subtask)
    run_header = migrator.plan.new_header
    assert run_header is not None
    name = file_name or keyed_stream_file_name(op_plan.new_operator_id, subtask)
    kg_range = migrator.stream.key_group_range
    if key_group_range is not None:
        if op_plan.key_transform is not None:
            raise MigrationError(f"operator {op_plan.new_uid or op_plan.new_operator_id}: a key transform moves "
                                 f"entries between key groups; its streams cannot be split by key-group range")
        kg_range = kg_range.intersection(key_group_range)
    with output.open(name) as sink:
        writer = KeyedStreamWriter(sink, run_header, kg_range, name)
        if op_plan.key_transform is not None:
            migrator.run_rekeyed(writer, kg_range, op_plan.source.max_parallelism)
        else:
            migrator.run_in_place(writer, None if key_group_range is None else kg_range)
        handle = writer.finish()
    return SubtaskResult(operator_id, subtask, handle, migrator.counts, migrator.dead_letters)


@dataclass
class DryRunResult:
    """What migrating one (operator, subtask[, key-group range]) would do: per new state, entries read, converted
    (``written``) and failed (``dead_lettered``), and the first failing entries as examples."""

    operator_id: str
    subtask: int
    key_group_range: KeyGroupRange | None
    counts: dict[str, StateCount]
    examples: list[dict[str, Any]]

    @property
    def failed_under_fail_policy(self) -> bool:
        return any(example.get("on_error") == "fail" for example in self.examples)


@collector_deferred()  # the hot loop: no full collections walking its lists (see the module)
def dry_run_subtask(source: Savepoint, plan: MigrationPlan, operator_id: str, subtask: int,
                    key_group_range: KeyGroupRange | None = None, max_examples: int = 5) -> DryRunResult:
    """Decodes every entry of one subtask's keyed stream (or of one key-group range of it) with the old serializers
    and applies the planned migration in memory, encoding the new values and throwing them away. Nothing is
    written. Every failure is counted whatever the state's error policy; the first ``max_examples`` are kept."""
    op_plan = plan.operators[operator_id]
    migrator = _SubtaskMigrator(source, op_plan, subtask)
    migrator.collect_failures, migrator.max_examples = True, max_examples
    if op_plan.key_transform is not None:
        # New keys move between key groups: the whole operator is read by one task, as a real run does.
        assert migrator.plan.new_header is not None  # a plan with a key transform has keyed state
        with open(os.devnull, "wb") as sink:
            writer = KeyedStreamWriter(sink, migrator.plan.new_header, migrator.stream.key_group_range, os.devnull)
            migrator.run_rekeyed(writer, migrator.stream.key_group_range, op_plan.source.max_parallelism)
    else:
        stream, blocks = migrator.stream, migrator.blocks[subtask]
        for key_group, start, end in stream.blocks:
            if key_group_range is None or key_group in key_group_range:
                data = blocks.read(key_group, start, end)
                if data:
                    migrator._rewrite_block(data, key_group, start)
    return DryRunResult(operator_id, subtask, key_group_range, migrator.counts, migrator.dead_letters)


__all__ = ["DryRunResult", "StateCodec", "StateCount", "SubtaskResult", "dry_run_subtask", "identity_encoders",
           "migrate_entry", "migrate_subtask"]
