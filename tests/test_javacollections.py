"""The JDK collections' serial forms (flinkstate.serializers.javacollections) on bytes the JVM writes in the test run
(tests/support/jdk_forms/JdkForms.java, compiled against the Flink distribution): ``List.of`` / ``Set.of`` /
``Map.of`` (``java.util.CollSer`` and its tag), ``Stream.toList`` with a null, ``Collections``' empty, singleton and
unmodifiable collections, ``Arrays.asList``, ArrayList, LinkedList, the hash and tree maps and sets; and the
accumulator types Flink's planner stores for retracting aggregates, whose STRUCTURED attributes are a ``List.copyOf``.

Each form reads as the collection Java reads; the structural identity agrees with Java's ``equals`` on every pair
(the JVM prints its verdicts); a LogicalType reads and keeps its bytes; the JavaSerializer view shows the elements;
forms no JDK writes (a null in ``List.of``, a repeated ``Set.of`` element, a count that is not the number of
objects, an unknown tag) are refused in one line.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import Reader
from flinkstate.engine.local import find_flink_home
from flinkstate.format_errors import SavepointFormatError
from flinkstate.jsonify import to_json
from flinkstate.serializers.javacollections import LIST, MAP, SET, fingerprint, java_collection, java_list
from flinkstate.serializers.javaserial import JavaSerializerSnapshot
from flinkstate.serializers.logicaltypes import read_java_object, read_logical_type

pytestmark = pytest.mark.flink  # compiles and runs Java against the Flink distribution's jars

SOURCE = Path(__file__).resolve().parent / "support" / "jdk_forms" / "JdkForms.java"
AB = ["a", "b"]
#: form -> (interface, elements as Java reads them: a List's in order, a Set's sorted, a Map's sorted pairs)
FORMS: dict[str, tuple[str, list[Any]]] = {
    "list_of_0": (LIST, []), "list_of_1": (LIST, ["a"]), "list_of_2": (LIST, AB), "list_of_3": (LIST, [*AB, "c"]),
    "list_of_ba": (LIST, ["b", "a"]), "list_with_null": (LIST, ["a", None]), "set_of": (SET, AB),
    "set_of_ba": (SET, AB), "map_of": (MAP, [("a", "x"), ("b", "y")]), "unmodifiable_array_list": (LIST, AB),
    "unmodifiable_linked_list": (LIST, AB), "unmodifiable_collection": ("java.util.Collection", AB),
    "unmodifiable_set": (SET, AB), "unmodifiable_map": (MAP, [("a", "x"), ("b", "y")]), "empty_list": (LIST, []),
    "empty_set": (SET, []), "empty_map": (MAP, []), "singleton_list": (LIST, ["a"]), "singleton_set": (SET, ["a"]),
    "singleton_map": (MAP, [("a", "x")]), "arrays_as_list": (LIST, AB), "array_list": (LIST, AB),
    "linked_list": (LIST, AB), "hash_map": (MAP, [("a", "x"), ("b", "y")]),
    "linked_hash_map": (MAP, [("a", "x"), ("b", "y")]), "tree_map": (MAP, [("a", "x"), ("b", "y")]),
    "hash_set": (SET, AB), "linked_hash_set": (SET, AB), "tree_set": (SET, AB),
}
_AGGREGATES = "org.apache.flink.table.runtime.functions.aggregate."
_MAP_VIEW = "RAW('org.apache.flink.table.api.dataview.MapView', '...')"
_LIST_VIEW = "RAW('org.apache.flink.table.api.dataview.ListView', '...')"
TYPES = {
    "type_max": f"STRUCTURED<'{_AGGREGATES}MaxWithRetractAggFunction$MaxWithRetractAccumulator', `max` BIGINT, "
                f"`mapSize` BIGINT, `map` {_MAP_VIEW}>",
    "type_max_int": f"STRUCTURED<'{_AGGREGATES}MaxWithRetractAggFunction$MaxWithRetractAccumulator', `max` INT, "
                    f"`mapSize` BIGINT, `map` {_MAP_VIEW}>",
    "type_list_agg_ws": f"STRUCTURED<'{_AGGREGATES}ListAggWsWithRetractAggFunction$ListAggWsWithRetractAccumulator', "
                        f"`list` {_LIST_VIEW}, `retractList` {_LIST_VIEW}, `delimiter` STRING>",
    "type_array_agg": f"STRUCTURED<'{_AGGREGATES}ArrayAggFunction$ArrayAggAccumulator', "
                      "`list` RAW('java.util.LinkedList', '...'), `retractList` RAW('java.util.LinkedList', '...')>",
    "type_max_array_list": f"STRUCTURED<'{_AGGREGATES}MaxWithRetractAggFunction$MaxWithRetractAccumulator', "
                           f"`max` BIGINT, `mapSize` BIGINT, `map` {_MAP_VIEW}>",
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], dict[tuple[str, str], bool]]:
    """(form -> the bytes the JVM wrote, (form, form) -> whether Java finds them equal)."""
    work = tmp_path_factory.mktemp("jdk-forms")
    lib = find_flink_home() / "lib"
    jars = ":".join(str(jar) for pattern in ("flink-dist-*.jar", "flink-table-runtime-*.jar",
                                             "flink-table-api-java-uber-*.jar") for jar in lib.glob(pattern))
    subprocess.run(["javac", "-nowarn", "-d", str(work), "-cp", jars, str(SOURCE)], check=True, capture_output=True)
    out = subprocess.run(["java", "-cp", f"{jars}:{work}", "JdkForms"], check=True, capture_output=True,
                         text=True).stdout
    forms, equal = {}, {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "form":
            forms[rest[0]] = bytes.fromhex(rest[1])
        elif kind == "equal":
            equal[(rest[0], rest[1])] = rest[2] == "true"
    assert set(forms) == set(FORMS) | set(TYPES), sorted(forms)
    return forms, equal


def _parse(data: bytes) -> Any:
    reader = Reader(data + b"\xa5")  # something after the stream: it must stop at its end
    parsed, raw = read_java_object(reader, "test object")
    assert raw == data and reader.pos == len(data)
    return parsed


def _elements(kind: str, items: tuple[Any, ...]) -> list[Any]:
    """A collection's elements for comparison: a List's in order, a Set's and a Map's sorted."""
    if kind == MAP:
        return sorted((str(k), str(v)) for k, v in items)
    plain = [None if item is None else str(item) for item in items]
    return sorted(plain) if kind == SET else plain


def test_every_form_reads_as_the_collection_java_reads(written: tuple[dict[str, bytes], Any]) -> None:
    forms, _ = written
    for name, (kind, elements) in FORMS.items():
        found = java_collection(_parse(forms[name]))
        assert found is not None, name
        assert (found.kind, _elements(found.kind, found.items)) == (kind, elements), name
    # where a java.util.List is expected (a ROW's fields, a STRUCTURED type's attributes), only Lists are
    assert java_list(_parse(forms["list_of_3"])) == ["a", "b", "c"]
    for name in ("set_of", "map_of", "unmodifiable_collection", "empty_set"):
        with pytest.raises(ValueError, match=r"expected a java\.util\.List, got java\.util\."):
            java_list(_parse(forms[name]))


def test_identity_agrees_with_javas_equals_on_every_pair(written: tuple[dict[str, bytes], Any]) -> None:
    forms, equal = written
    assert len(equal) == len(FORMS) * (len(FORMS) - 1) // 2 + 2 and sum(equal.values()) > 40
    disagree = [(a, b, same) for (a, b), same in equal.items()
                if a in FORMS and (fingerprint(_parse(forms[a])) == fingerprint(_parse(forms[b]))) != same]
    assert not disagree
    # the same accumulator type with its attributes in an ArrayList is equal in Java: so is its identity
    types = {name: read_logical_type(Reader(forms[name]), name)[0] for name in TYPES}
    assert equal[("type_max", "type_max_array_list")] and not equal[("type_max", "type_max_int")]
    assert types["type_max"].identity == types["type_max_array_list"].identity
    assert types["type_max"].identity != types["type_max_int"].identity


def test_accumulator_types_read_and_keep_their_bytes(written: tuple[dict[str, bytes], Any]) -> None:
    forms, _ = written
    for name, notation in TYPES.items():
        reader = Reader(forms[name] + b"next")
        logical_type, raw = read_logical_type(reader, name)
        assert logical_type.notation() == notation, name
        assert raw == forms[name] and reader.pos == len(forms[name]), name
    assert b"java.util.CollSer" in forms["type_max"]  # Flink 2.x's attributes: List.copyOf


def test_the_java_serializer_view_shows_the_elements(written: tuple[dict[str, bytes], Any]) -> None:
    forms, _ = written
    snapshot = JavaSerializerSnapshot()
    decode = snapshot.decoder()
    for name, (kind, elements) in FORMS.items():
        value, end = decode(forms[name], 0)
        assert end == len(forms[name]) and snapshot.encode(value) == forms[name], name
        view = to_json(value)["value"]
        if kind == MAP:
            assert view == dict(elements), (name, view)
        else:
            assert (sorted(view) if kind == SET else view) == elements, (name, view)


def _patched(data: bytes, old: bytes, new: bytes, occurrence: int = 1) -> bytes:
    """``data`` with the ``occurrence``-th ``old`` replaced by ``new`` (same length)."""
    assert len(old) == len(new)
    at = -1
    for _ in range(occurrence):
        at = data.index(old, at + 1)
    return data[:at] + new + data[at + len(old):]


#: CollSer's class descriptor ends with its fields, TC_ENDBLOCKDATA and a null superclass; its tag follows.
_COLLSER_TAG = b"xp"


def _with_tag(data: bytes, tag: int) -> bytes:
    at = data.index(b"java.util.CollSer")
    at = data.index(_COLLSER_TAG, at) + len(_COLLSER_TAG)
    return data[:at] + struct.pack(">i", tag) + data[at + 4:]


def test_forms_no_jdk_writes_are_refused(written: tuple[dict[str, bytes], Any]) -> None:
    forms, _ = written
    refused = {
        "an unknown tag": (_with_tag(forms["list_of_2"], 5), "java.util.CollSer with tag 0x5"),
        "a null in List.of": (_with_tag(forms["list_with_null"], 1), "java.util.CollSer holding a null"),
        "a repeated Set.of element": (_patched(forms["set_of"], b"t\x00\x01b", b"t\x00\x01a"),
                                      "java.util.CollSer with a repeated Set element"),
        "a repeated Map.of key": (_patched(forms["map_of"], b"t\x00\x01b", b"t\x00\x01a"),
                                  "java.util.CollSer with a repeated Map key"),
        "a count that is not the objects'": (
            _patched(forms["map_of"], b"w\x04\x00\x00\x00\x04", b"w\x04\x00\x00\x00\x03"),
            "java.util.CollSer of size 3 with 4 objects"),
        "an ArrayList of another size": (
            _patched(forms["array_list"], b"xp\x00\x00\x00\x02", b"xp\x00\x00\x00\x03"),
            "java.util.ArrayList of size 3 with 2 objects"),
    }
    for what, (data, message) in refused.items():
        with pytest.raises(ValueError) as caught:
            java_collection(_parse(data))
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value), (what, caught.value)
    # CollSer.readResolve reads the kind from the tag's low 8 bits only
    found = java_collection(_parse(_with_tag(forms["list_of_2"], 0x7F000001)))
    assert found is not None and (found.kind, list(found.items)) == (LIST, AB)
    # inside a LogicalType: one line naming what is wrong, at the type's offset
    data = b"\x00" * 7 + _with_tag(forms["type_max"], 9)
    reader = Reader(data)
    reader.pos = 7
    with pytest.raises(SavepointFormatError) as error:
        read_logical_type(reader, "RowData field 0 logical type")
    assert str(error.value).count("\n") == 0 and error.value.offset == 7
    assert "RowData field 0 logical type: not a LogicalType (java.util.CollSer with tag 0x9" in str(error.value)
