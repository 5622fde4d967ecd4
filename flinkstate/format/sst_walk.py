"""A second reader of native RocksDB snapshots, independent of RocksDB: a walk of the block-based SST files in pure
Python, so that the verifier can check what the RocksDB binding returned (:mod:`flinkstate.format.rocksdb_native`)
against the files themselves. It reads the subset of the format that Flink's RocksDB (FRocksDB 8.x, format_version
5) writes, and refuses anything else in one line naming the file.

A block-based table (``table/format.cc``, ``table/block_based/``):

* The **footer**, the last 53 bytes (format_version 2 to 5): checksum type (1 byte), the metaindex and index block
  handles (each ``varint64 offset, varint64 size``; zero-padded to 40 bytes), ``u32le format_version``, ``u64le``
  magic ``0x88e241b785f4cff7``.
* Every **block** is followed by a 5-byte trailer: compression type (0 none, 1 Snappy, raw: no framing) and a
  checksum (not checked here: RocksDB checks it on its own read, and a changed byte shows as a difference anyway).
* A block holds entries ``varint32 shared, varint32 non_shared, varint32 value_length, key[shared:] bytes, value``
  (each key shares ``shared`` leading bytes with the one before), then ``u32le restarts[n]`` (offsets of entries
  that share nothing) and ``u32le n``. The top bit of ``n`` says a data block also has a hash index (refused).
* The **index** block's entries map a separator key (>= every key of its data block) to the data block's handle.
  When the table property ``rocksdb.index.value.is.delta.encoded`` is set, entries have no value length, and an
  entry that shares key bytes stores only the size difference to the previous handle (zigzag varint), its block
  starting right after the previous one and its trailer.
* The **metaindex** block maps meta block names to handles: ``rocksdb.properties`` (name -> raw value; numbers
  are varint64) gives the column family of the file, the merge operator, the index layout; ``rocksdb.range_del``
  holds range deletions (refused).
* Data block keys are **internal keys**: user key, then ``u64le (sequence << 8 | type)``. Types: Put 1, Merge 2,
  Delete 0, SingleDelete 7; anything else is refused.

Resolution (what RocksDB's iterator does, :func:`resolved_entries`): all versions of a user key across the files of
one column family, newest (highest sequence number) first; merge operands are collected down to a Put (the base)
or a Delete (no base); the value is Flink's merge operator's result: FRocksDB's ``StringAppendTESTOperator`` joins
base and operands, oldest first, with the delimiter ``,`` (Flink's ``RocksDBListState``: one operand per ``add()``).
A key whose newest version is a deletion is absent.

Memory: one data block per file of the column family.
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import cramjam

from flinkstate.binary import decode_leb128
from flinkstate.format_errors import SavepointFormatError, UnsupportedFormat

FOOTER_LENGTH = 53
TABLE_MAGIC = 0x88E241B785F4CFF7
BLOCK_TRAILER = 5
DELETE, PUT, MERGE, SINGLE_DELETE = 0, 1, 2, 7
#: Flink's list-state merge operator (RocksDBKeyedStateBackend: ``setMergeOperatorName("stringappendtest")``) and the
#: delimiter it joins with.
MERGE_OPERATOR = "StringAppendTESTOperator"
DELIMITER = b","
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_COMPRESSION_NAMES = {2: "zlib", 3: "bzip2", 4: "LZ4", 5: "LZ4HC", 6: "XPRESS", 7: "ZSTD"}
#: Snappy expands at most ~21 times (a 3-byte copy of 64 bytes): a block that says more is corrupted.
_SNAPPY_MAX_RATIO = 24


@dataclass(frozen=True)
class Version:
    """One internal-key entry of a data block."""

    user_key: bytes
    sequence: int
    kind: int
    value: bytes
    file: str


@dataclass
class SstTable:
    """One SST file: its properties and data-block handles (the entries are read block by block)."""

    path: str
    #: how messages name the file (the savepoint's file it was copied from)
    name: str
    properties: dict[str, bytes] = field(default_factory=dict)
    #: per data block: (user key part of its index separator, offset, size)
    blocks: list[tuple[bytes, int, int]] = field(default_factory=list)

    @property
    def column_family(self) -> str:
        return self.properties.get("rocksdb.column.family.name", b"").decode("utf-8", "replace")

    def number(self, name: str) -> int:
        """A varint64 table property (0 when absent)."""
        raw = self.properties.get(name)
        if raw is None:
            return 0
        return _varint(raw, 0, self.name, name)[0]

    # -- reading ----------------------------------------------------------------------------------------------------

    def _read(self, offset: int, size: int, what: str) -> bytes:
        with open(self.path, "rb") as file:
            length = os.fstat(file.fileno()).st_size
            if offset + size > length:  # checked before reading: a corrupted handle may say any size
                raise SavepointFormatError(f"SST file: the {what} at offset {offset} ({size} bytes) runs past the "
                                           f"end of the file ({length} bytes)", self.name, offset)
            data = os.pread(file.fileno(), size, offset)
        if len(data) != size:
            raise SavepointFormatError(f"SST file: the {what} at offset {offset} could not be read whole", self.name,
                                       offset)
        return data

    def block(self, offset: int, size: int, what: str) -> bytes:
        """A block's contents, decompressed (its trailer says how)."""
        raw = self._read(offset, size + BLOCK_TRAILER, what)
        compression = raw[size]
        if compression == 0:
            return raw[:size]
        if compression == 1:
            data = raw[:size]
            try:
                length = cramjam.snappy.decompress_raw_len(data)
                if length > _SNAPPY_MAX_RATIO * size + 64:
                    raise ValueError(f"says {length} bytes")
                return bytes(cramjam.snappy.decompress_raw(data))
            except Exception as exc:  # cramjam raises its own DecompressionError
                raise SavepointFormatError(f"SST file: the {what} is not valid Snappy ({exc})", self.name,
                                           offset) from None
        name = _COMPRESSION_NAMES.get(compression, "unknown")
        raise UnsupportedFormat(f"SST file: the {what} uses compression type {compression} ({name}); this walk "
                                f"reads uncompressed and Snappy blocks only", self.name, offset + size)

    def versions(self, start: bytes = b"") -> Iterator[Version]:
        """The file's entries in internal-key order (user key ascending, then newest first), from the first data
        block that can hold a user key >= ``start``."""
        previous: tuple[bytes, int] | None = None
        for separator, offset, size in self.blocks:
            if separator < start:  # every key of the block is <= its separator: all before start
                continue
            data = self.block(offset, size, "data block")
            for key, value, at, _ in _entries(data, self.name, offset, data_block=True):
                if len(key) < 8:
                    raise SavepointFormatError(f"SST file: an internal key of {len(key)} bytes (at least 8: user "
                                               f"key, sequence and type; byte {at} of the data block)", self.name,
                                               offset)
                tag = _U64.unpack_from(key, len(key) - 8)[0]
                user_key, sequence, kind = key[:-8], tag >> 8, tag & 0xFF
                if kind not in (PUT, MERGE, DELETE, SINGLE_DELETE):
                    raise UnsupportedFormat(f"SST file: an entry of value type {kind} (this walk reads Put, Merge, "
                                            f"Delete and SingleDelete only; byte {at} of the data block)", self.name,
                                            offset)
                order = (user_key, -sequence)
                if previous is not None and order <= previous:
                    raise SavepointFormatError(f"SST file: entries out of order (the key at byte {at} of the data "
                                               f"block is not after the one before)", self.name, offset)
                previous = order
                yield Version(user_key, sequence, kind, value, self.name)


def open_table(path: str, name: str) -> SstTable:
    """Reads an SST file's footer, metaindex, properties and index; refuses what this walk does not read."""
    table = SstTable(path, name)
    size = os.path.getsize(path)
    if size < FOOTER_LENGTH:
        raise SavepointFormatError(f"SST file of {size} bytes: shorter than a footer ({FOOTER_LENGTH})", name, 0)
    footer = table._read(size - FOOTER_LENGTH, FOOTER_LENGTH, "footer")
    magic = _U64.unpack_from(footer, FOOTER_LENGTH - 8)[0]
    if magic != TABLE_MAGIC:
        raise SavepointFormatError(f"SST file: not a block-based table (magic 0x{magic:016x}, expected "
                                   f"0x{TABLE_MAGIC:016x})", name, size - 8)
    version = _U32.unpack_from(footer, FOOTER_LENGTH - 12)[0]
    if not 2 <= version <= 5:
        raise UnsupportedFormat(f"SST file: block-based table format_version {version} (this walk reads 2 to 5, "
                                f"what Flink's RocksDB writes)", name, size - 12)
    meta_offset, at = _varint(footer, 1, name, "footer")
    meta_size, at = _varint(footer, at, name, "footer")
    index_offset, at = _varint(footer, at, name, "footer")
    index_size, at = _varint(footer, at, name, "footer")
    meta = {key.decode("utf-8", "replace"): value
            for key, value, _, _ in _entries(table.block(meta_offset, meta_size, "metaindex block"), name, meta_offset)}
    handle = meta.get("rocksdb.properties")
    if handle is None:
        raise SavepointFormatError("SST file without a properties block", name, meta_offset)
    p_offset, p_size = _handle(handle, name, "properties handle")
    table.properties = {key.decode("utf-8", "replace"): value for key, value, _, _ in
                        _entries(table.block(p_offset, p_size, "properties block"), name, p_offset)}
    _refuse_unread(table, meta)
    delta = table.number("rocksdb.index.value.is.delta.encoded") != 0
    user_keys = table.number("rocksdb.index.key.is.user.key") != 0
    index = table.block(index_offset, index_size, "index block")
    last: tuple[int, int] | None = None
    for key, value, at, shared in _entries(index, name, index_offset, delta_values=delta):
        if delta and shared:  # RocksDB writes a size delta exactly when the separator shares bytes
            if last is None:
                raise SavepointFormatError("SST file: the index's first entry is delta-encoded", name, index_offset)
            raw, _ = _varint(value, 0, name, "index entry")
            size_delta = (raw >> 1) ^ -(raw & 1)  # zigzag: RocksDB's PutVarsignedint64
            last = (last[0] + last[1] + BLOCK_TRAILER, last[1] + size_delta)
        else:
            last = _handle(value, name, "index entry")
        if not user_keys and len(key) < 8:
            raise SavepointFormatError(f"SST file: an index key shorter than an internal key (byte {at} of the "
                                       f"index block)", name, index_offset)
        table.blocks.append((key if user_keys else key[:-8], *last))
    return table


def _refuse_unread(table: SstTable, meta: dict[str, bytes]) -> None:
    """What would change the entries' meaning and this walk does not read, refused in one line."""
    name = table.name
    if table.number("rocksdb.num.range-deletions") or "rocksdb.range_del" in meta:
        raise UnsupportedFormat("SST file with range deletions (this walk does not apply them)", name, 0)
    if "rocksdb.external_sst_file.version" in table.properties:
        raise UnsupportedFormat("an ingested (external) SST file: its sequence numbers live outside it (this walk "
                                "does not read them)", name, 0)
    comparator = table.properties.get("rocksdb.comparator", b"leveldb.BytewiseComparator")
    if comparator != b"leveldb.BytewiseComparator":
        raise UnsupportedFormat(f"SST file ordered by {comparator.decode('utf-8', 'replace')}, not bytewise", name, 0)
    index_type = table.properties.get("rocksdb.block.based.table.index.type", b"")
    if index_type != b"\x00\x00\x00\x00":  # u32le 0: kBinarySearch
        shown = _U32.unpack(index_type)[0] if len(index_type) == 4 else "unrecorded"
        raise UnsupportedFormat(f"SST file with index type {shown} (this walk reads the binary-search index, type 0)",
                                name, 0)
    if table.number("rocksdb.separate.key.value.in.data.block") or table.number("rocksdb.udi.is.primary.index"):
        raise UnsupportedFormat("SST file with a data block layout this walk does not read", name, 0)


def _varint(data: bytes, at: int, name: str, what: str) -> tuple[int, int]:
    """RocksDB's varint (LEB128) at byte ``at`` of ``data`` (a block, the footer, a property): ``(value, end)``."""
    try:
        value, end = decode_leb128(data, at)
    except IndexError:
        raise SavepointFormatError(f"SST file: the varint at byte {at} of the {what} runs past its end", name) \
            from None
    if end - at > 10:
        raise SavepointFormatError(f"SST file: the varint at byte {at} of the {what} is longer than 10 bytes", name)
    return value, end


def _handle(value: bytes, name: str, what: str) -> tuple[int, int]:
    offset, at = _varint(value, 0, name, what)
    size, _ = _varint(value, at, name, what)
    return offset, size


def _entries(block: bytes, name: str, base: int, *, data_block: bool = False, delta_values: bool = False
             ) -> Iterator[tuple[bytes, bytes, int, int]]:
    """``(key, value, offset in block, shared key bytes)`` of a block's entries, each checked to lie inside the
    block, the restart points to start entries that share nothing. With ``delta_values`` (an index block whose
    values are delta-encoded) entries have no value length: the value is one varint (a size delta) when the key
    shares bytes, else two (a whole handle)."""
    if len(block) < 4:
        raise SavepointFormatError(f"SST file: a block of {len(block)} bytes (no restart count)", name, base)
    packed = _U32.unpack_from(block, len(block) - 4)[0]
    if packed & 0x80000000:
        if data_block:
            raise UnsupportedFormat("SST file: a data block with a hash index (this walk reads binary-search "
                                    "blocks)", name, base)
        raise SavepointFormatError("SST file: a meta or index block marked with a hash index", name, base)
    restarts_at = len(block) - 4 - 4 * packed
    if packed == 0 or restarts_at < 0:
        raise SavepointFormatError(f"SST file: a block of {len(block)} bytes cannot hold {packed} restart points",
                                   name, base)
    restarts = set(struct.unpack_from(f"<{packed}I", block, restarts_at))
    at, key, seen = 0, b"", 0
    while at < restarts_at:
        start = at
        shared, at = _varint(block, at, name, "block entry")
        non_shared, at = _varint(block, at, name, "block entry")
        if delta_values:
            value_length = -1
        else:
            value_length, at = _varint(block, at, name, "block entry")
        if start in restarts:
            seen += 1
            if shared:
                raise SavepointFormatError(f"SST file: the entry at byte {start} of a block, a restart point, "
                                           f"shares key bytes", name, base)
        if shared > len(key) or at + non_shared > restarts_at:
            raise SavepointFormatError(f"SST file: the key of the entry at byte {start} of a block runs past the "
                                       f"block", name, base)
        key = key[:shared] + block[at:at + non_shared]
        at += non_shared
        if value_length < 0:  # a delta-encoded index value: whole handle (shares nothing) or one signed varint
            end = at
            for _ in range(1 if shared else 2):
                _, end = _varint(block, end, name, "index entry")
            if end > restarts_at:
                raise SavepointFormatError(f"SST file: the value of the entry at byte {start} of a block runs past "
                                           f"the block", name, base)
            value, at = block[at:end], end
        else:
            if at + value_length > restarts_at:
                raise SavepointFormatError(f"SST file: the value of the entry at byte {start} of a block runs past "
                                           f"the block", name, base)
            value, at = block[at:at + value_length], at + value_length
        yield key, value, start, shared
    if seen != len(restarts) and restarts_at:  # an empty block has the one restart point 0 and no entry
        raise SavepointFormatError(f"SST file: {len(restarts) - seen} restart points do not start an entry", name,
                                   base)


def resolved_entries(tables: Sequence[SstTable], start: bytes = b"") -> Iterator[tuple[bytes, bytes, str]]:
    """``(user key, value, file)`` of every live key >= ``start`` of one column family's files, in key order, the
    value resolved as RocksDB reads it (see the module docstring); ``file`` names the file of its newest version."""
    streams = [table.versions(start) for table in tables]
    merged = heapq.merge(*streams, key=lambda v: (v.user_key, -v.sequence))
    current: list[Version] = []
    for version in merged:
        if current and version.user_key != current[0].user_key:
            entry = _resolve(current, tables)
            if entry is not None and entry[0] >= start:
                yield entry
            current = []
        if current and version.sequence == current[-1].sequence:
            raise SavepointFormatError(f"SST files {current[-1].file} and {version.file} hold the same key with "
                                       f"the same sequence number {version.sequence}", version.file)
        current.append(version)
    if current:
        entry = _resolve(current, tables)
        if entry is not None and entry[0] >= start:
            yield entry


def _resolve(versions: list[Version], tables: Sequence[SstTable]) -> tuple[bytes, bytes, str] | None:
    """One user key's value from its versions, newest first."""
    operands: list[bytes] = []
    base: bytes | None = None
    for version in versions:
        if version.kind == MERGE:
            operands.append(version.value)
            continue
        if version.kind == PUT:
            base = version.value
        break  # a Put, or a deletion: nothing older counts
    if base is None and not operands:
        return None
    if operands:
        _check_merge_operator(versions[0], tables)
    parts = ([base] if base is not None else []) + operands[::-1]
    return versions[0].user_key, DELIMITER.join(parts), versions[0].file


def _check_merge_operator(version: Version, tables: Sequence[SstTable]) -> None:
    table = next(t for t in tables if t.name == version.file)
    operator = table.properties.get("rocksdb.merge.operator", b"nullptr").decode("utf-8", "replace")
    if operator != MERGE_OPERATOR:
        raise UnsupportedFormat(f"SST file of column family {table.column_family} holds merge operands of merge "
                                f"operator {operator} (this walk applies Flink's {MERGE_OPERATOR} only)", table.name)


def column_family_tables(files: Sequence[tuple[str, str]]) -> dict[str, list[SstTable]]:
    """Column family name -> its SST tables, from ``(path, name for messages)`` of every SST file of one RocksDB
    instance (the column family from each file's properties)."""
    by_family: dict[str, list[SstTable]] = {}
    for path, name in files:
        table = open_table(path, name)
        by_family.setdefault(table.column_family, []).append(table)
    return by_family


__all__ = ["DELIMITER", "MERGE_OPERATOR", "SstTable", "Version", "column_family_tables", "open_table",
           "resolved_entries"]
