"""The compiled fast path of keyed-state decoding, with the pure Python as its reference (as fastavro does).

``_cdecode`` (C, built at install by setup.py; optional) decodes with codec trees compiled once per snapshot from a
*spec*: nested tuples that this module builds from a snapshot. Serializer families without a compiled form become a
``K_PY`` node that calls the family's own Python decoder, so every state gets the compiled block walk and entry
split, and its common fields are decoded in C.

This is the one place that maps snapshots to compiled decoders: :func:`fast_entry_decoder` is what
:func:`flinkstate.format.keyed_entries.make_entry_decoder` asks. The compiled code returns exactly the reference's
values or fails; every failure reruns the reference on the same bytes, so errors are the reference's own.

``_cjson`` (C too, beside it) writes ``dump``'s JSON lines (:func:`fast_json_lines`), ``json.dumps``'s bytes.

``FLINKSTATE_PURE_PYTHON=1`` (read at import) turns the compiled path off; so does a failed build (``COMPILED`` is
then False and ``BUILD_ERROR`` says why).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeGuard

    from flinkstate._speedups._cdecode import EntryDecoder
    from flinkstate.serializers.base import TypeSerializerSnapshot

_cdecode: Any
try:
    # by name: the extension module is optional, and not a source module of the package
    _cdecode = importlib.import_module("flinkstate._speedups._cdecode")
    BUILD_ERROR: str | None = None
except ImportError as exc:  # the build is optional: no compiler, or a platform without one
    _cdecode = None
    BUILD_ERROR = str(exc)
_cjson: Any  # dump's JSON Lines writer, built beside _cdecode (setup.py)
try:
    _cjson = importlib.import_module("flinkstate._speedups._cjson")
    JSON_BUILD_ERROR: str | None = None
except ImportError as exc:
    _cjson = None
    JSON_BUILD_ERROR = str(exc)

#: Set (to anything but "" or "0") to use the pure-Python reference only.
PURE_PYTHON_VARIABLE = "FLINKSTATE_PURE_PYTHON"

# Spec kinds: keep in sync with _cdecode.c.
K_LONG, K_INT, K_SHORT, K_BYTE, K_BOOL, K_FLOAT, K_DOUBLE, K_CHAR = range(8)
K_STRING, K_CONST, K_POJO, K_TUPLE, K_ROW, K_LIST, K_MAP, K_NULLABLE, K_PY, K_BROW = range(8, 18)
# BinaryRowData slots (K_BROW)
S_NULL, S_BOOL, S_I8, S_I16, S_I32, S_I64, S_F32, S_F64, S_TEXT, S_BYTES, S_PY = range(11)
_SLOTS = {"BOOLEAN": S_BOOL, "TINYINT": S_I8, "SMALLINT": S_I16, "INTEGER": S_I32, "INTERVAL_YEAR_MONTH": S_I32,
          "BIGINT": S_I64, "INTERVAL_DAY_TIME": S_I64, "FLOAT": S_F32, "DOUBLE": S_F64, "CHAR": S_TEXT,
          "VARCHAR": S_TEXT, "BINARY": S_BYTES, "VARBINARY": S_BYTES, "NULL": S_NULL}
E_VALUE, E_LIST, E_MAP, E_TIMER = range(4)

_BASE = "org.apache.flink.api.common.typeutils.base."
# SimpleTypeSerializerSnapshot classes by Java name: the name fixes the byte format (Flink's serializer classes).
_SIMPLE_KINDS: dict[str, tuple[Any, ...]] = {}
for _stem, _kind in (("Long", K_LONG), ("Int", K_INT), ("Short", K_SHORT), ("Byte", K_BYTE), ("Boolean", K_BOOL),
                     ("Float", K_FLOAT), ("Double", K_DOUBLE), ("Char", K_CHAR)):
    _SIMPLE_KINDS[f"{_BASE}{_stem}Serializer${_stem}SerializerSnapshot"] = (_kind,)
    _SIMPLE_KINDS[f"{_BASE}{_stem}ValueSerializer${_stem}ValueSerializerSnapshot"] = (_kind,)
_SIMPLE_KINDS[f"{_BASE}StringSerializer$StringSerializerSnapshot"] = (K_STRING,)
_SIMPLE_KINDS[f"{_BASE}VoidSerializer$VoidSerializerSnapshot"] = (K_CONST, None, 1)
_SIMPLE_KINDS[f"{_BASE}NullValueSerializer$NullValueSerializerSnapshot"] = (K_CONST, None, 0)


def pure_python_requested() -> bool:
    return os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")


def extension() -> Any:
    """The compiled extension module ``_cdecode`` (None when it did not build), for this package's other modules."""
    return _cdecode


def enabled() -> bool:
    """Whether decoders built now are compiled: the extension imported and the reference not requested."""
    return _cdecode is not None and not pure_python_requested()


def codec_spec(snapshot: TypeSerializerSnapshot) -> tuple[Any, ...]:
    """The compiled form of ``snapshot``'s record decoder. The reference decoder is built first, so a snapshot that
    cannot be decoded fails exactly as it does without the fast path."""
    from flinkstate.serializers.collections import ListSnapshot, MapSnapshot
    from flinkstate.serializers.namespaces import GlobalWindowSnapshot, VoidNamespaceSnapshot
    from flinkstate.serializers.nullable import NullableSnapshot
    from flinkstate.serializers.pojo import PojoSnapshot
    from flinkstate.serializers.row import RowSnapshot
    from flinkstate.serializers.tuple import TupleSnapshot

    reference = snapshot.decoder()
    kind = type(snapshot)
    if kind.__name__ == "SimpleSnapshot" and snapshot.class_name in _SIMPLE_KINDS:
        return _SIMPLE_KINDS[snapshot.class_name]
    if kind is VoidNamespaceSnapshot:
        return (K_CONST, None, 1)
    if kind is GlobalWindowSnapshot:
        return (K_CONST, "GlobalWindow", 1)
    if kind is PojoSnapshot:
        assert isinstance(snapshot, PojoSnapshot)
        if not snapshot.needs_end and all(f.snapshot is not None for f in snapshot.fields):
            names = tuple(f.name for f in snapshot.fields)
            children = tuple(codec_spec(f.snapshot) for f in snapshot.fields)  # type: ignore[arg-type]
            return (K_POJO, names, children, reference)
    elif kind is TupleSnapshot:
        return (K_TUPLE, tuple(codec_spec(n) for n in snapshot.nested))
    elif kind is RowSnapshot:
        assert isinstance(snapshot, RowSnapshot)
        return (K_ROW, tuple(codec_spec(n) for n in snapshot.nested), snapshot.supports_row_kind, reference)
    elif kind is ListSnapshot:
        return (K_LIST, codec_spec(snapshot.nested[0]))
    elif kind is MapSnapshot:
        return (K_MAP, codec_spec(snapshot.nested[0]), codec_spec(snapshot.nested[1]))
    elif kind is NullableSnapshot:
        assert isinstance(snapshot, NullableSnapshot)
        return (K_NULLABLE, codec_spec(snapshot.nested[0]), int(snapshot.null_padding))
    elif kind.__name__ == "RowDataSnapshot":
        return _binary_row_spec(snapshot, reference)
    return (K_PY, reference)


def _binary_row_spec(snapshot: Any, reference: Callable[[bytes, int], tuple[Any, int]]) -> tuple[Any, ...]:
    """A RowData record: common slots decoded in C, the others by the reference's own slot readers."""
    from flinkstate.serializers import binaryrow

    fields: list[tuple[int, int, Any]] = []
    for t in snapshot.types:
        root = binaryrow.source(t).root
        reservation = binaryrow._reservation(t)  # the reference rule itself, not a copy
        if root in _SLOTS:
            fields.append((_SLOTS[root], reservation, None))
        else:
            fields.append((S_PY, reservation, binaryrow.slot_codec(t, 8)[0]))
    return (K_BROW, tuple(fields), reference)


def encoder_spec(snapshot: TypeSerializerSnapshot) -> tuple[Any, ...]:
    """The compiled form of ``snapshot``'s record encoder (the same tree as :func:`codec_spec`; rows and families
    without a compiled form call the reference's own encoder). The reference encoder is built first, so a snapshot
    that cannot encode fails exactly as without the fast path."""
    from flinkstate.serializers.collections import ListSnapshot, MapSnapshot
    from flinkstate.serializers.namespaces import GlobalWindowSnapshot, VoidNamespaceSnapshot
    from flinkstate.serializers.nullable import NullableSnapshot
    from flinkstate.serializers.pojo import PojoSnapshot
    from flinkstate.serializers.tuple import TupleSnapshot

    reference = snapshot.encoder()
    kind = type(snapshot)
    if kind.__name__ == "SimpleSnapshot" and snapshot.class_name in _SIMPLE_KINDS:
        return _SIMPLE_KINDS[snapshot.class_name]
    if kind in (VoidNamespaceSnapshot, GlobalWindowSnapshot):
        return (K_CONST, None, 1)
    if kind is PojoSnapshot:
        assert isinstance(snapshot, PojoSnapshot)
        names = tuple(f.name for f in snapshot.fields)
        return (K_POJO, names, tuple(encoder_spec(f.snapshot) for f in snapshot.fields),  # type: ignore[arg-type]
                reference)
    if kind is TupleSnapshot:
        return (K_TUPLE, tuple(encoder_spec(n) for n in snapshot.nested))
    if kind is ListSnapshot:
        return (K_LIST, encoder_spec(snapshot.nested[0]))
    if kind is MapSnapshot:
        return (K_MAP, encoder_spec(snapshot.nested[0]), encoder_spec(snapshot.nested[1]))
    if kind is NullableSnapshot:
        assert isinstance(snapshot, NullableSnapshot)
        return (K_NULLABLE, encoder_spec(snapshot.nested[0]), int(snapshot.null_padding))
    return (K_PY, reference)


def fast_encoder(snapshot: TypeSerializerSnapshot) -> Callable[[Any, bytearray], None] | None:
    """``snapshot``'s record encoder, compiled: ``(value, out: bytearray) -> None`` like the reference's, writing
    the same bytes; a value it does not take (another type, out of range) is encoded, or refused, by the reference
    itself. None when the fast path is off. (Cached per snapshot by the caller: building one walks the tree.)"""
    if not enabled():
        return None
    encoder: Callable[[Any, bytearray], None] = _cdecode.Encoder(encoder_spec(snapshot), snapshot.encoder())
    return encoder


def fast_codec(snapshot: TypeSerializerSnapshot) -> Callable[[bytes, int], tuple[Any, int]] | None:
    """``snapshot``'s record decoder, compiled (None when the fast path is off). It raises on bytes the reference
    would refuse, but not necessarily the same error: callers that report errors rerun the reference."""
    if not enabled():
        return None
    codec: Callable[[bytes, int], tuple[Any, int]] = _cdecode.Codec(codec_spec(snapshot))
    return codec


def _layout_spec(decoder: Callable[[bytes, int], tuple[Any, int]],
                 snapshot: TypeSerializerSnapshot | None) -> tuple[Any, ...]:
    """A key or namespace decoder of a layout: compiled from its snapshot when the layout's decoder is that
    snapshot's own (cached) decoder, else called as is."""
    if snapshot is not None and snapshot.decoder() is decoder:
        return codec_spec(snapshot)
    return (K_PY, decoder)


def fast_entry_decoder(state: Any, layout: Any, reference: Callable[..., tuple[Any, ...]]
                       ) -> Callable[..., tuple[Any, ...]] | None:
    """The compiled twin of ``reference`` (the entry decoder :func:`make_entry_decoder` built for ``state`` with
    ``layout``), or None when the fast path is off or the state's values carry no length of their own. The twin
    calls ``reference`` for any entry it fails on, and has a ``scan_block`` method for whole blocks."""
    from flinkstate.format.keyed_header import TIMERS
    from flinkstate.serializers.timer import TimerSnapshot

    if not enabled():
        return None
    value = state.value_serializer
    if value is None:
        return None
    codec = _cdecode.Codec
    if state.kind == TIMERS:
        if type(value) is not TimerSnapshot:
            return None
        value.decoder()
        key, namespace = codec(codec_spec(value.nested[0])), codec(codec_spec(value.nested[1]))
        entry: Callable[..., tuple[Any, ...]] = _cdecode.EntryDecoder(E_TIMER, layout.prefix_bytes, False, key,
                                                                      namespace, None, None, reference)
        return entry
    if value.needs_end:
        return None
    key = codec(_layout_spec(layout.key, layout.key_snapshot))
    namespace = codec(_layout_spec(layout.namespace, state.namespace_serializer))
    value_codec = codec(codec_spec(value))
    if state.kind == "MAP":
        user_key = state.user_key_serializer
        if user_key is None:
            return None
        kind, user_key_codec = E_MAP, codec(codec_spec(user_key))
    else:
        kind, user_key_codec = (E_LIST if state.kind == "LIST" else E_VALUE), None
    entry = _cdecode.EntryDecoder(kind, layout.prefix_bytes, layout.ambiguous, key, namespace, value_codec,
                                  user_key_codec, reference)
    return entry


def fast_json_lines(is_map: bool, fallback: Callable[[Any], str]
                    ) -> Callable[[Sequence[tuple[Any, ...]]], str] | None:
    """``dump``'s JSON lines of a block's entries, compiled: ``lines(entries) -> str``, byte for byte what
    flinkstate/cli/dump.py's reference loop writes for them (``json.dumps`` of the record of ``to_json`` forms).
    Exact built-in values are written in C; any other value by ``fallback`` (the reference's ``dumps(to_json(v))``).
    It raises on anything it cannot write (the caller then writes the block with the reference, which reports it).
    None when the fast path is off or the writer did not build."""
    if not enabled() or _cjson is None:
        return None
    json_lines = _cjson.json_lines

    def lines(entries: Sequence[tuple[Any, ...]]) -> str:
        text: str = json_lines(entries, is_map, fallback)
        return text

    return lines


def is_compiled(decoder: object) -> TypeGuard[EntryDecoder]:
    """Whether ``decoder`` is a compiled entry decoder (with ``scan_block``)."""
    return _cdecode is not None and isinstance(decoder, _cdecode.EntryDecoder)


def state_pairs(stream: Any, data: bytes, key_group: int, block_offset: int, state_id: int | None
                ) -> list[tuple[bytes, bytes]]:
    """``(key bytes, value bytes)`` of the entries of state ``state_id`` (None: all) in one block of ``stream`` (a
    :class:`~flinkstate.format.keyed_stream.KeyedStateStream`; ``data`` as its ``read_block`` returns it), keys
    without the "last of its run" flag: compiled in one pass, else (off, or a block it refuses, which the reference
    then reports) ``stream.raw_entries`` and the keys as ``raw_key`` gives them, the reference."""
    if enabled() and type(data) is bytes:
        try:
            pairs: list[tuple[bytes, bytes]] = _cdecode.raw_pairs(
                data, len(stream.header().states), key_group, stream.prefix_bytes, -1 if state_id is None else state_id)
            return pairs
        except Exception:
            pass
    # keyed_stream.raw_key, inline: keyed_stream imports this module
    return [(bytes((data[ks] & 0x7F,)) + data[ks + 1:ke], data[vs:ve])
            for sid, ks, ke, vs, ve in stream.raw_entries(data, key_group, block_offset)
            if state_id is None or sid == state_id]


def block_runs(stream: Any, data: bytes, key_group: int) -> list[tuple[int, int, int, int]] | None:
    """``[(state id, start, end, count)]``: one block's runs of entries in order (``data`` as ``stream.read_block``
    returns it), each run's bytes after its state id (the entries, its last key flagged) and their number: what the
    migration copies as it is for a state whose bytes are kept. None when the fast path is off or the block is
    malformed (the caller then walks it entry by entry, which reports where)."""
    if not enabled() or type(data) is not bytes:
        return None
    try:
        runs: list[tuple[int, int, int, int]] = _cdecode.block_runs(data, len(stream.header().states), key_group,
                                                                     stream.prefix_bytes)
        return runs
    except Exception:
        return None


def state_span(stream: Any, data: bytes, key_group: int, state_id: int) -> tuple[int, int, int] | None:
    """``(start, end, count)``: the bytes of the entries of state ``state_id`` in one block of ``stream`` (``data``
    as its ``read_block`` returns it) when they are one run, as Flink's full-snapshot writer emits them, and their
    number; ``(0, 0, 0)`` when it has none. None when the fast path is off, the entries are in several runs, or the
    block is malformed: the caller then compares the entries one by one (:func:`state_pairs`, which reports a
    malformed block)."""
    if not enabled() or type(data) is not bytes:
        return None
    try:
        span: tuple[int, int, int] | None = _cdecode.state_span(data, len(stream.header().states), key_group,
                                                                 stream.prefix_bytes, state_id)
        return span
    except Exception:
        return None


def fast_canonical(reference: Callable[[Any], Any]) -> Callable[[Any], Any] | None:
    """``reference`` (flinkstate.migration.canonical.canonical, the verifier's comparable form of a decoded value)
    built in C for the exact built-in types (None, bool, str, bytes, int, float, list, tuple, dict); other types,
    with their subtrees, go to ``reference``. None when the fast path is off."""
    if not enabled():
        return None

    def canonical(value: Any) -> Any:
        return _cdecode.canonical(value, reference)

    return canonical


def state_encoding(key: TypeSerializerSnapshot, state: Any
                   ) -> tuple[int, bool, tuple[Any, Any, Any, Any]] | None:
    """How the compiled checks re-encode a state's entries as :class:`flinkstate.migration.rewrite.StateCodec` does:
    its entry kind, whether key and namespace carry their lengths, and the compiled encoders of key, namespace,
    value and user key (None for all but MAP). None when the fast path is off, for timers (their key is the timer
    serializer's; the reference checks them), or a state without its serializers."""
    from flinkstate.format.keyed_header import TIMERS

    if not enabled() or state.kind == TIMERS:
        return None
    namespace, value, user_key = state.namespace_serializer, state.value_serializer, state.user_key_serializer
    if namespace is None or value is None or (state.kind == "MAP" and user_key is None):
        return None
    kind = E_MAP if state.kind == "MAP" else E_LIST if state.kind == "LIST" else E_VALUE
    ambiguous = key.fixed_length < 0 and namespace.fixed_length < 0
    return kind, ambiguous, (fast_encoder(key), fast_encoder(namespace), fast_encoder(value),
                             fast_encoder(user_key) if user_key is not None else None)


def reencode_checker(key: TypeSerializerSnapshot, state: Any, prefix_bytes: int
                     ) -> Callable[[bytes, int, int, int, list[tuple[Any, ...]]], int] | None:
    """The verifier's exactness check of whole blocks, compiled: ``check(data, key_group, state_id, state_count,
    entries)`` re-encodes ``entries`` (the block's decoded entries of state ``state_id``) with ``key`` and ``state``'s
    own serializers, as :class:`flinkstate.migration.rewrite.StateCodec` does, and compares each with the bytes in
    the block: -1 when every entry re-encodes exactly, else the index of the first that does not (the caller then
    reruns the reference, entry by entry, which reports it). Raises on a block it cannot walk. None when the fast
    path is off, or for timers (their key is the timer serializer's; the reference checks them)."""
    encoding = state_encoding(key, state)
    if encoding is None:
        return None
    kind, ambiguous, encoders = encoding
    check = _cdecode.reencode_check

    def checker(data: bytes, key_group: int, state_id: int, state_count: int, entries: list[tuple[Any, ...]]
                ) -> int:
        index: int = check(data, key_group, state_id, state_count, prefix_bytes, entries, kind, ambiguous, *encoders)
        return index

    return checker


def same_entries_reference(want: list[Any], got: list[Any], canonical: Callable[[Any], Any]) -> int:
    """The pure-Python twin of the compiled ``same_entries``: -1 when both lists have the same length and their
    items the same canonical forms pair by pair (``canonical`` is flinkstate.migration.canonical.canonical), else
    the index of the first pair that differs (the shorter list's length on a length difference)."""
    for index, (a, b) in enumerate(zip(want, got, strict=False)):
        if canonical(a) != canonical(b):
            return index
    return -1 if len(want) == len(got) else min(len(want), len(got))


def canonical_equality(canonical: Callable[[Any], Any]) -> Callable[[Any, Any], bool]:
    """What the compiled comparisons ask of a type they do not compare in place: equal canonical forms."""
    def equal(a: Any, b: Any) -> bool:
        return bool(canonical(a) == canonical(b))

    return equal


def fast_same_entries(canonical: Callable[[Any], Any]) -> Callable[[list[Any], list[Any]], int] | None:
    """The compiled ``same_entries(want, got)``: -1 when the lists are equal pair by pair as Java compares values
    (``canonical``'s forms equal), else the index of the first pair it cannot call equal. It builds no canonical
    form: exact built-in types are compared in place (the same type at every node, floats by bits, dicts in order),
    any other type by ``canonical(a) == canonical(b)``. It may answer "not equal" for pairs whose canonical forms
    are equal (dicts in another order, NaNs of two payloads), never the reverse: the caller then compares canonical
    forms, which decide. None when the fast path is off."""
    if not enabled():
        return None
    same_entries = _cdecode.same_entries
    reference = canonical_equality(canonical)

    def compiled(want: list[Any], got: list[Any]) -> int:
        index: int = same_entries(want, got, reference)
        return index

    return compiled


def scan_compiled(decoder: object, data: bytes, key_group: int, wanted: int, state_count: int, prefix_bytes: int
                  ) -> list[tuple[Any, ...]] | None:
    """The entries of state ``wanted`` in one key-group block, walked and decoded in one compiled pass; None when
    ``decoder`` is not compiled or the pass failed (the caller's reference walk then reports why)."""
    if not is_compiled(decoder) or type(data) is not bytes:
        return None
    entries: list[tuple[Any, ...]] = []
    try:
        decoder.scan_block(data, key_group, wanted, state_count, prefix_bytes, entries)
    except Exception:
        return None
    return entries


def native_group_scanner(decoder: object) -> Callable[[Iterator[tuple[bytes, bytes]], tuple[bytes, bytes], int,
                                                      list[tuple[Any, ...]]], tuple[bytes, bytes] | None] | None:
    """``decoder``'s compiled ``scan_pairs``: one key group of a native RocksDB snapshot's ``(key, value)`` pairs
    taken from RocksDB's iterator and decoded in one call (the reference:
    :func:`flinkstate.format.rocksdb_native.take_key_group`); None when ``decoder`` is not compiled. Its errors are
    the reference's (an entry it fails on is decoded by the reference decoder)."""
    if not is_compiled(decoder):
        return None
    return decoder.scan_pairs


def raw_entries_compiled(data: bytes, state_count: int | None, key_group: int | None = None, prefix_bytes: int = 1
                         ) -> list[tuple[int, int, int, int, int]] | None:
    """``(state id, ks, ke, vs, ve)`` of every entry of an uncompressed block, split in one compiled pass (state ids
    checked against ``state_count`` and key-group prefixes against ``key_group`` when given); None when the fast
    path is off or the block is malformed (the caller's reference walk then reports where)."""
    if not enabled() or type(data) is not bytes:
        return None
    try:
        entries: list[tuple[int, int, int, int, int]] = _cdecode.raw_entries(
            data, -1 if state_count is None else state_count, -1 if key_group is None else key_group, prefix_bytes)
    except Exception:
        return None
    return entries


__all__ = ["BUILD_ERROR", "JSON_BUILD_ERROR", "PURE_PYTHON_VARIABLE", "block_runs", "canonical_equality",
           "codec_spec", "enabled", "encoder_spec", "extension", "fast_canonical", "fast_codec", "fast_encoder",
           "fast_entry_decoder", "fast_json_lines", "fast_same_entries", "is_compiled", "native_group_scanner",
           "pure_python_requested", "raw_entries_compiled", "reencode_checker", "same_entries_reference",
           "scan_compiled", "state_encoding", "state_pairs", "state_span"]
