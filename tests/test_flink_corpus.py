"""Apache Flink's own savepoints and checkpoints (Flink 1.6 to 2.3, vendored in tests/corpus/savepoints, see its
README) as a conformance suite. No Flink cluster: the bytes are the ones Flink's test suite committed.

For every vendored directory:

- open + describe, through the Python API and the CLI: either it reads, or it is refused as unsupported (an
  ``UnsupportedFormat`` / ``UnknownSerializerSnapshot``, one line naming the file and what is unsupported), exactly
  as ``EXPECTED`` says, never with a parse error such as ``bad key length 65536``;
- every keyed state of every subtask that opens: every stored entry decodes, and the counts match ``COUNTS``;
- identity migration (``flinkstate schema`` then ``flinkstate migrate``) of every savepoint whose states all read:
  the same operators (ids, uids, parallelism, max parallelism), master, coordinator and operator state byte for
  byte, and per keyed state the same multiset of entries, decoded and raw.

``EXPECTED`` and ``COUNTS`` are the regression tables: a savepoint that read and now fails, a refusal whose reason
changes kind, or an entry that disappears fails the test. When the reader learns something new (say RowData), the
table is updated on purpose. Each "unsupported" reason was checked against the bytes and Flink's sources:

- ``_metadata version 2``: bytes 4-8 of ``_metadata`` are 2 (``MetadataV2Serializer``, Flink 1.10 and earlier);
  read since ``flinkstate.format.metadata`` reads version 2 (every corpus file written back byte for byte).
- ``INCREMENTAL_KEY_GROUPS_V2``: keyed handle code 11 (``MetadataV2V3SerializerBase``), RocksDB native savepoints and
  incremental checkpoints (SST files beside ``_metadata``); read since ``flinkstate.format.rocksdb_native`` (the
  RocksDB files opened read-only with rocksdict; migrated to canonical savepoints).
- ``CHANGELOG_HANDLE_V2``: handle code 14, the only checkpoint written with the changelog state backend; read since
  ``flinkstate.format.changelog`` (the logged changes applied on the materialized state); migrated in
  tests/test_changelog.py (its schema needs two operators' key type, which the checkpoint does not record).
- ``HashMap (heap) backend's native snapshot format``: handle code 3/12 and blocks written by
  ``HeapSnapshotStrategy`` (every key group present, each block starting with ``i32 keyGroupId``), i.e. HashMap
  checkpoints, HashMap native savepoints and heap savepoints of Flink 1.11/1.12 (before the unified format); read
  since ``flinkstate.format.heap_blocks`` (``HEAP_FORMAT`` lists them; migrated to canonical savepoints).
- ``keyed state proxy version 5``: the Flink 1.6 heap savepoint's ``KeyedBackendSerializationProxy`` (state meta info
  snapshots of version 5, Java-serialized serializers); ``EitherSerializerSnapshot``: Flink 1.7's legacy Either
  snapshot, read since the Either family (``flinkstate.serializers.either``), after which that savepoint stops at
  ``ParameterlessTypeSerializerConfig``, Flink 1.7's legacy config snapshot of its VoidNamespace serializer.
- ``RowDataSerializer$RowDataSerializerSnapshot``: the Table/SQL runtime's RowData serializer; read since the RowData
  family (``flinkstate.serializers.rowdata``), kept for the table's history. Three of the 32 savepoints it blocked
  then stop at another family: ``StreamElementSerializer`` (the delta join's async-wait buffer; read since
  ``flinkstate.serializers.streaming``) and CEP's ``NFAStateSerializerSnapshot`` (MATCH_RECOGNIZE; read since
  ``flinkstate.serializers.cep``).
- ``TypeSerializerSnapshotMigrationITCase$TestSerializerSnapshot``: a serializer class defined by that Flink test.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flinkstate.binary import I32
from flinkstate.cli import main as cli_main
from flinkstate.errors import FlinkStateError
from flinkstate.format.changelog import ChangelogStream
from flinkstate.format.handles import IncrementalKeyedStateHandle, OperatorStreamStateHandle
from flinkstate.format.keyed_header import KeyedBackendHeader
from flinkstate.format.keyed_stream import KeyedStateStream, StreamSource, iter_raw_entries, raw_key
from flinkstate.format.metadata import read_metadata
from flinkstate.format.rocksdb_native import NativeRocksDBStream, iter_raw
from flinkstate.format_errors import UnknownSerializerSnapshot, UnsupportedFormat
from flinkstate.jsonify import to_json
from flinkstate.savepoint import Savepoint

pytestmark = pytest.mark.corpus

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "savepoints"
FLINKSTATE = ROOT / ".venv" / "bin" / "flinkstate"

#: The reasons a savepoint (or some of its operators) may be refused for; EXPECTED names one per savepoint.
V2 = "_metadata version 2 (Flink 1.10 or earlier) is not supported"
ROCKSDB_NATIVE = "keyed state handle INCREMENTAL_KEY_GROUPS_V2 (native RocksDB savepoint or checkpoint) (code 11)"
HEAP_NATIVE = "keyed state is in the HashMap (heap) backend's native snapshot format"
ROW_DATA = "unknown serializer snapshot class org.apache.flink.table.runtime.typeutils.RowDataSerializer$RowData"
TEST_SERIALIZER = ("unknown serializer snapshot class "
                   "org.apache.flink.test.migration.TypeSerializerSnapshotMigrationITCase$TestSerializerSnapshot")
STREAM_ELEMENT = ("unknown serializer snapshot class org.apache.flink.streaming.runtime.streamrecord."
                  "StreamElementSerializer$StreamElementSerializerSnapshot")
CEP_NFA = "unknown serializer snapshot class org.apache.flink.cep.nfa.NFAStateSerializerSnapshot"
PROXY_V5 = "keyed state proxy version 5 (Flink 1.6 or earlier: serializers stored with Java serialization"
EITHER = "unknown serializer snapshot class org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot"
PARAMETERLESS = ("org.apache.flink.api.common.typeutils.ParameterlessTypeSerializerConfig is a "
                 "TypeSerializerConfigSnapshot of Flink 1.7 or earlier")
REASONS = (V2, ROCKSDB_NATIVE, HEAP_NATIVE, ROW_DATA, TEST_SERIALIZER, STREAM_ELEMENT, CEP_NFA, PROXY_V5,
           EITHER, PARAMETERLESS)
#: Messages that describe a parse going wrong rather than what is unsupported: never acceptable for the corpus.
MISLEADING = ("bad key length", "bad value length", "undecodable", "beyond its length", "implausible", "truncated",
              "end-of-key-group", "block ends", "Traceback")

_T = "flink-tests/src/test/resources/"
_R = "flink-table/flink-table-planner/src/test/resources/restore-tests/"
_P = "flink-libraries/flink-state-processing-api/src/test/resources/"
_E = "flink-end-to-end-tests/flink-state-evolution-test/savepoints/"

# fmt: off
#: path below tests/corpus/savepoints -> "reads" | "unsupported: <reason>" (built from a first run, reasons checked).
EXPECTED: dict[str, str] = {
    _E + '1.6': "unsupported: " + PROXY_V5,
    _E + '1.7': "unsupported: " + PARAMETERLESS,
    _P + 'table-state': 'reads',
    _P + 'table-state-avro': 'reads',
    _P + 'table-state-nulls': 'reads',
    _R + 'stream-exec-async-calc_1/async-calc-complex/savepoint': 'reads',
    _R + 'stream-exec-calc_1/calc-coalesce/savepoint': 'reads',
    _R + 'stream-exec-calc_1/calc-filter-pushdown/savepoint': 'reads',
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-source-mini-batch/savepoint': 'reads',
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter-watermark/savepoint': 'reads',
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter/savepoint': 'reads',
    _R + 'stream-exec-correlate_1/async-correlate-catalog-func/savepoint': 'reads',
    _R + 'stream-exec-correlate_1/correlate-cross-join-unnest-map/savepoint': 'reads',
    _R + 'stream-exec-deduplicate_1/deduplicate-asc-proctime/savepoint': 'reads',
    _R + 'stream-exec-delta-join_1/delta-join-with-cache-and-calc-on-cdc-source-without-delete/savepoint': 'reads',
    _R + 'stream-exec-delta-join_2/delta-join-with-cache-and-calc-on-cdc-source-without-delete/savepoint': 'reads',
    _R + 'stream-exec-expand_1/expand/savepoint': 'reads',
    _R + 'stream-exec-group-aggregate_1/agg-with-state-ttl-hint/savepoint': 'reads',
    _R + 'stream-exec-group-window-aggregate_1/group-window-aggregate-hop-event-time/savepoint': 'reads',
    _R + 'stream-exec-incremental-group-aggregate_1/incremental-group-aggregate-complex/savepoint': 'reads',
    _R + 'stream-exec-interval-join_1/interval-join-event-time/savepoint': 'reads',
    _R + 'stream-exec-join_1/join-anti-join/savepoint': 'reads',
    _R + 'stream-exec-join_1/semi-anti-join-with-literal-agg/savepoint': 'reads',
    _R + 'stream-exec-lateral-snapshot-join_1/lateral-snapshot-join-inner/savepoint': 'reads',
    _R + 'stream-exec-limit_1/limit/savepoint': 'reads',
    _R + 'stream-exec-lookup-join_1/lookup-join-async-hint/savepoint': 'reads',
    _R + 'stream-exec-match_1/match-complex/savepoint': 'reads',
    _R + 'stream-exec-mini-batch-assigner_1/mini-batch-assigner-proc-time/savepoint': 'reads',
    _R + 'stream-exec-ml-predict-table-function_1/async-unordered-ml-predict/savepoint': 'reads',
    _R + 'stream-exec-multi-join_1/four-way-complex-preserves-upsert-key-with-restore/savepoint': 'reads',
    _R + 'stream-exec-over-aggregate_1/over-aggregate-bounded-non-partitioned-rows-with-out-of-order-records/savepoint': 'reads',  # noqa: E501
    _R + 'stream-exec-over-aggregate_1/over-aggregate-bounded-non-partitioned-rows/savepoint': 'reads',
    _R + 'stream-exec-over-aggregate_1/over-aggregate-non-time-range-unbounded-avg-append-mode/savepoint': 'reads',
    _R + 'stream-exec-process-table-function_1/from-changelog-retract-partition-by-restore/savepoint': 'reads',
    _R + 'stream-exec-process-table-function_1/process-order-by-restore/savepoint': 'reads',
    _R + 'stream-exec-rank_1/rank-n-test/savepoint': 'reads',
    _R + 'stream-exec-rank_1/rank-test-retract-strategy/savepoint': 'reads',
    _R + 'stream-exec-sink_1/insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1/savepoint': 'reads',
    _R + 'stream-exec-sink_1/sink-bucketing_hash-with-keys-with-count/savepoint': 'reads',
    _R + 'stream-exec-sink_2/insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1/savepoint': 'reads',
    _R + 'stream-exec-sort-limit_1/sort-limit-asc/savepoint': 'reads',
    _R + 'stream-exec-table-source-scan_1/table-source-scan-filter-pushdown/savepoint': 'reads',
    _R + 'stream-exec-table-source-scan_2/table-source-scan-filter-pushdown/savepoint': 'reads',
    _R + 'stream-exec-temporal-join_1/temporal-join-table-join-key-from-map/savepoint': 'reads',
    _R + 'stream-exec-temporal-sort_1/temporal-sort-proctime/savepoint': 'reads',
    _R + 'stream-exec-union_1/union-all-two-sources/savepoint': 'reads',
    _R + 'stream-exec-vector-search-table-function_1/async-vector-search/savepoint': 'reads',
    _R + 'stream-exec-watermark-assigner_1/watermark-assigner-basic-filter/savepoint': 'reads',
    _R + 'stream-exec-watermark-assigner_1/watermark-assigner-pushdown-computed/savepoint': 'reads',
    _R + 'stream-exec-window-aggregate_1/window-aggregate-cumulate-event-time-two-phase-distinct-split/savepoint': 'reads',  # noqa: E501
    _R + 'stream-exec-window-deduplicate_1/window-deduplicate-asc-cumulate-first-row/savepoint': 'reads',
    _R + 'stream-exec-window-join_1/window-join-anti-tumble-event-time/savepoint': 'reads',
    _R + 'stream-exec-window-rank_1/window-rank-cumulate-tvf-min-top-n/savepoint': 'reads',
    _R + 'stream-exec-window-table-function_1/window-table-function-cumulate-tvf-agg-proc-time/savepoint': 'reads',
    _T + 'legacy-raw-state-heap-timers-rocks-db-1.12': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.10-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.10-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.11-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.11-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.12-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.13-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.14-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.18-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.19-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.8-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.8-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.9-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.2-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.10-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.10-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.11-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.11-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.12-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.13-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.14-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.17-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.18-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.19-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.8-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.8-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink1.9-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.2-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint-native': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-checkpoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint': 'reads',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint-native': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.10': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.11': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.12': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.13': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.14': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.15': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.16': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.17': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.18': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.19': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.20': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.8': 'reads',
    _T + 'operatorstate/complexKeyed-flink1.9': 'reads',
    _T + 'operatorstate/complexKeyed-flink2.0': 'reads',
    _T + 'operatorstate/complexKeyed-flink2.1': 'reads',
    _T + 'operatorstate/complexKeyed-flink2.2': 'reads',
    _T + 'operatorstate/complexKeyed-flink2.3': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.10': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.11': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.12': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.13': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.14': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.15': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.16': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.17': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.18': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.19': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.20': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.8': 'reads',
    _T + 'operatorstate/nonKeyed-flink1.9': 'reads',
    _T + 'operatorstate/nonKeyed-flink2.0': 'reads',
    _T + 'operatorstate/nonKeyed-flink2.1': 'reads',
    _T + 'operatorstate/nonKeyed-flink2.2': 'reads',
    _T + 'operatorstate/nonKeyed-flink2.3': 'reads',
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-checkpoint': "unsupported: " + TEST_SERIALIZER,
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-savepoint': "unsupported: " + TEST_SERIALIZER,
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-savepoint-native': "unsupported: " + TEST_SERIALIZER,  # noqa: E501
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-checkpoint': "unsupported: " + TEST_SERIALIZER,
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-savepoint': "unsupported: " + TEST_SERIALIZER,
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-savepoint-native': "unsupported: " + TEST_SERIALIZER,  # noqa: E501
    _T + 'unified-sink-migration-test/savepoint-7bd90b-3a2cda6957cb': 'reads',
}

#: path -> (keyed states read, entries decoded), over every subtask that reads (keyed state = operator + name).
COUNTS: dict[str, tuple[int, int]] = {
    _E + '1.6': (0, 0),
    _E + '1.7': (0, 0),
    _P + 'table-state': (10, 60),
    _P + 'table-state-avro': (10, 60),
    _P + 'table-state-nulls': (9, 45),
    _R + 'stream-exec-async-calc_1/async-calc-complex/savepoint': (0, 0),
    _R + 'stream-exec-calc_1/calc-coalesce/savepoint': (0, 0),
    _R + 'stream-exec-calc_1/calc-filter-pushdown/savepoint': (0, 0),
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-source-mini-batch/savepoint': (1, 2),
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter-watermark/savepoint': (3, 1),
    _R + 'stream-exec-changelog-normalize_1/changelog-normalize-upsert-filter/savepoint': (3, 1),
    _R + 'stream-exec-correlate_1/async-correlate-catalog-func/savepoint': (0, 0),
    _R + 'stream-exec-correlate_1/correlate-cross-join-unnest-map/savepoint': (0, 0),
    _R + 'stream-exec-deduplicate_1/deduplicate-asc-proctime/savepoint': (3, 2),
    _R + 'stream-exec-delta-join_1/delta-join-with-cache-and-calc-on-cdc-source-without-delete/savepoint': (1, 1),
    _R + 'stream-exec-delta-join_2/delta-join-with-cache-and-calc-on-cdc-source-without-delete/savepoint': (1, 1),
    _R + 'stream-exec-expand_1/expand/savepoint': (10, 17),
    _R + 'stream-exec-group-aggregate_1/agg-with-state-ttl-hint/savepoint': (3, 2),
    _R + 'stream-exec-group-window-aggregate_1/group-window-aggregate-hop-event-time/savepoint': (3, 6),
    _R + 'stream-exec-incremental-group-aggregate_1/incremental-group-aggregate-complex/savepoint': (4, 6),
    _R + 'stream-exec-interval-join_1/interval-join-event-time/savepoint': (6, 30),
    _R + 'stream-exec-join_1/join-anti-join/savepoint': (2, 8),
    _R + 'stream-exec-join_1/semi-anti-join-with-literal-agg/savepoint': (22, 24),
    _R + 'stream-exec-lateral-snapshot-join_1/lateral-snapshot-join-inner/savepoint': (8, 3),
    _R + 'stream-exec-limit_1/limit/savepoint': (3, 1),
    _R + 'stream-exec-lookup-join_1/lookup-join-async-hint/savepoint': (0, 0),
    _R + 'stream-exec-match_1/match-complex/savepoint': (7, 8),
    _R + 'stream-exec-mini-batch-assigner_1/mini-batch-assigner-proc-time/savepoint': (3, 5),
    _R + 'stream-exec-ml-predict-table-function_1/async-unordered-ml-predict/savepoint': (0, 0),
    _R + 'stream-exec-multi-join_1/four-way-complex-preserves-upsert-key-with-restore/savepoint': (4, 7),
    _R + 'stream-exec-over-aggregate_1/over-aggregate-bounded-non-partitioned-rows-with-out-of-order-records/savepoint': (6, 18),  # noqa: E501
    _R + 'stream-exec-over-aggregate_1/over-aggregate-bounded-non-partitioned-rows/savepoint': (6, 5),
    _R + 'stream-exec-over-aggregate_1/over-aggregate-non-time-range-unbounded-avg-append-mode/savepoint': (6, 16),
    _R + 'stream-exec-process-table-function_1/from-changelog-retract-partition-by-restore/savepoint': (5, 0),
    _R + 'stream-exec-process-table-function_1/process-order-by-restore/savepoint': (9, 4),
    _R + 'stream-exec-rank_1/rank-n-test/savepoint': (3, 2),
    _R + 'stream-exec-rank_1/rank-test-retract-strategy/savepoint': (4, 9),
    _R + 'stream-exec-sink_1/insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1/savepoint': (1, 1),
    _R + 'stream-exec-sink_1/sink-bucketing_hash-with-keys-with-count/savepoint': (0, 0),
    _R + 'stream-exec-sink_2/insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1/savepoint': (1, 1),
    _R + 'stream-exec-sort-limit_1/sort-limit-asc/savepoint': (3, 3),
    _R + 'stream-exec-table-source-scan_1/table-source-scan-filter-pushdown/savepoint': (0, 0),
    _R + 'stream-exec-table-source-scan_2/table-source-scan-filter-pushdown/savepoint': (0, 0),
    _R + 'stream-exec-temporal-join_1/temporal-join-table-join-key-from-map/savepoint': (6, 7),
    _R + 'stream-exec-temporal-sort_1/temporal-sort-proctime/savepoint': (0, 0),
    _R + 'stream-exec-union_1/union-all-two-sources/savepoint': (0, 0),
    _R + 'stream-exec-vector-search-table-function_1/async-vector-search/savepoint': (0, 0),
    _R + 'stream-exec-watermark-assigner_1/watermark-assigner-basic-filter/savepoint': (0, 0),
    _R + 'stream-exec-watermark-assigner_1/watermark-assigner-pushdown-computed/savepoint': (0, 0),
    _R + 'stream-exec-window-aggregate_1/window-aggregate-cumulate-event-time-two-phase-distinct-split/savepoint': (8, 6),  # noqa: E501
    _R + 'stream-exec-window-deduplicate_1/window-deduplicate-asc-cumulate-first-row/savepoint': (3, 2),
    _R + 'stream-exec-window-join_1/window-join-anti-tumble-event-time/savepoint': (4, 6),
    _R + 'stream-exec-window-rank_1/window-rank-cumulate-tvf-min-top-n/savepoint': (3, 5),
    _R + 'stream-exec-window-table-function_1/window-table-function-cumulate-tvf-agg-proc-time/savepoint': (3, 0),
    _T + 'legacy-raw-state-heap-timers-rocks-db-1.12': (2, 1),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.10-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.10-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.11-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.11-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.12-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.13-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.14-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-rocksdb-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-checkpoint': (0, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-hashmap-checkpoint': (0, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-rocksdb-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.17-rocksdb-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.18-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.19-hashmap-checkpoint': (0, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.8-rocksdb-savepoint': (0, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.8-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.9-rocksdb-savepoint': (0, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-rocksdb-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-rocksdb-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.2-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-checkpoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint-native': (4, 0),
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-rocksdb-savepoint': (4, 0),
    _T + 'new-stateful-udf-migration-itcase-flink1.10-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.10-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.11-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.11-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.12-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.13-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.14-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.15-rocksdb-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.16-rocksdb-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.17-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.18-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.19-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.20-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.8-rocksdb-savepoint': (4, 16),
    _T + 'new-stateful-udf-migration-itcase-flink1.8-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink1.9-rocksdb-savepoint': (4, 16),
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.0-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.1-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.2-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint-native': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-checkpoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint': (8, 32),
    _T + 'new-stateful-udf-migration-itcase-flink2.3-rocksdb-savepoint-native': (8, 32),
    _T + 'operatorstate/complexKeyed-flink1.10': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.11': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.12': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.13': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.14': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.15': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.16': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.17': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.18': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.19': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.20': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.8': (5, 10),
    _T + 'operatorstate/complexKeyed-flink1.9': (5, 10),
    _T + 'operatorstate/complexKeyed-flink2.0': (5, 10),
    _T + 'operatorstate/complexKeyed-flink2.1': (5, 10),
    _T + 'operatorstate/complexKeyed-flink2.2': (5, 10),
    _T + 'operatorstate/complexKeyed-flink2.3': (5, 10),
    _T + 'operatorstate/nonKeyed-flink1.10': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.11': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.12': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.13': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.14': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.15': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.16': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.17': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.18': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.19': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.20': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.8': (0, 0),
    _T + 'operatorstate/nonKeyed-flink1.9': (0, 0),
    _T + 'operatorstate/nonKeyed-flink2.0': (0, 0),
    _T + 'operatorstate/nonKeyed-flink2.1': (0, 0),
    _T + 'operatorstate/nonKeyed-flink2.2': (0, 0),
    _T + 'operatorstate/nonKeyed-flink2.3': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-checkpoint': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-savepoint': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-hashmap-savepoint-native': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-checkpoint': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-savepoint': (0, 0),
    _T + 'type-serializer-snapshot-migration-itcase-flink1.16-rocksdb-savepoint-native': (0, 0),
    _T + 'unified-sink-migration-test/savepoint-7bd90b-3a2cda6957cb': (0, 0),
}
# fmt: on


def corpus_dirs() -> list[str]:
    return (CORPUS / "dirs.txt").read_text(encoding="utf-8").split()


def short(path: str) -> str:
    for prefix, label in ((_T, ""), (_R, "sql/"), (_P, "spapi/"), (_E, "e2e/")):
        if path.startswith(prefix):
            return label + path[len(prefix):].replace("/savepoint", "")
    return path


# --------------------------------------------------------------------------------------------------------------------
# Reading everything through the Python API
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Reading:
    """What the Python API made of one savepoint: refusals (messages), and per (operator id, state) the decoded and
    raw entry multisets of every subtask that read."""

    refusals: list[str] = field(default_factory=list)
    decoded: dict[tuple[str, str], collections.Counter[str]] = field(default_factory=dict)
    raw: dict[tuple[str, str], collections.Counter[tuple[bytes, bytes]]] = field(default_factory=dict)
    api_states: dict[str, set[str]] = field(default_factory=dict)  # what Savepoint.keyed_states lists
    stream_states: dict[str, set[str]] = field(default_factory=dict)  # what the subtasks' headers register

    @property
    def counts(self) -> tuple[int, int]:
        return len(self.decoded), sum(sum(c.values()) for c in self.decoded.values())


def _refusal(exc: FlinkStateError) -> str:
    """An exception's message, after checking it is a refusal (not a parse error) on one line."""
    message = str(exc)
    assert isinstance(exc, (UnsupportedFormat, UnknownSerializerSnapshot)), f"not a refusal: {message}"
    assert "\n" not in message, message
    return message


def read_savepoint(path: Path) -> Reading:
    reading = Reading()
    try:
        sp = Savepoint.open(path)
    except FlinkStateError as exc:
        reading.refusals.append(_refusal(exc))
        return reading
    for op in sp.operators:
        streams = sp.keyed_streams(op)
        if not streams:
            continue
        try:
            reading.api_states[op.operator_id] = {s.name for s in sp.keyed_states(op)}
        except FlinkStateError as exc:
            reading.refusals.append(_refusal(exc))
        # Subtasks may register different states (one that never saw a key never registers a lazily created
        # state): each stream is read with its own header.
        for _, stream in streams:
            try:
                header = stream.header()
            except FlinkStateError as exc:
                reading.refusals.append(_refusal(exc))
                continue
            names = [s.name for s in header.states]
            reading.stream_states.setdefault(op.operator_id, set()).update(names)
            for name in names:
                decoded = reading.decoded.setdefault((op.operator_id, name), collections.Counter())
                for _, entries in stream.iter_blocks(name):
                    decoded.update(json.dumps(to_json(list(e)), sort_keys=True) for e in entries)
            if stream.heap_format:
                _heap_raw(reading, op.operator_id, header, stream)
                continue
            if isinstance(stream, ChangelogStream):  # the log's changes applied: no stored pair per entry
                continue
            if isinstance(stream, NativeRocksDBStream):  # RocksDB's own files: its key/value pairs as stored
                for name in names:
                    raw = reading.raw.setdefault((op.operator_id, name), collections.Counter())
                    raw.update((key, value) for _, key, value in iter_raw(stream, name))
                continue
            for key_group, start, end in stream.blocks:
                data = stream.read_block(key_group, start, end)
                for state_id, ks, ke, vs, ve in iter_raw_entries(data):
                    raw = reading.raw.setdefault((op.operator_id, names[state_id]), collections.Counter())
                    raw[(raw_key(data, ks, ke), data[vs:ve])] += 1
    return reading


def _heap_raw(reading: Reading, operator_id: str, header: KeyedBackendHeader, stream: KeyedStateStream) -> None:
    """Raw elements of a HashMap-format stream: (namespace + key bytes, state bytes) per element, a map state's
    element once per user key it holds (its serialized map's i32 size), so that counts compare with the decoded."""
    for block in stream.heap_blocks():
        for state_id, _, elements in block.sections:
            state = header.states[state_id]
            raw = reading.raw.setdefault((operator_id, state.name), collections.Counter())
            for e in elements:
                key, value = block.payload[e.start:e.key_end], block.payload[e.key_end:e.end]
                raw[(key, value)] += I32.unpack_from(value, 0)[0] if state.kind == "MAP" else 1


def outcome(reading: Reading) -> str:
    """``reads``, or ``unsupported: <reason>`` when every refusal names the same known reason."""
    if not reading.refusals:
        return "reads"
    reasons = {next((r for r in REASONS if r in m), m) for m in reading.refusals}
    return "unsupported: " + " | ".join(sorted(reasons))


_READINGS: dict[str, Reading] = {}


def reading_of(path: str) -> Reading:
    if path not in _READINGS:
        _READINGS[path] = read_savepoint(CORPUS / path)
    return _READINGS[path]


# --------------------------------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------------------------------


def test_heap_format_list_is_what_the_reader_detects() -> None:
    """``HEAP_FORMAT`` is exactly the savepoints whose streams the reader takes for the HashMap backend's format."""
    found = []
    for path in corpus_dirs():
        if EXPECTED[path] != "reads":
            continue
        sp = Savepoint.open(CORPUS / path)
        streams = [stream for op in sp.operators for _, stream in sp.keyed_streams(op)]
        for stream in streams:
            stream.header()
        if any(stream.heap_format for stream in streams):
            found.append(path)
    assert found == HEAP_FORMAT


def test_every_vendored_savepoint_has_an_expectation() -> None:
    assert sorted(EXPECTED) == corpus_dirs()
    assert sorted(COUNTS) == sorted(p for p in corpus_dirs() if not EXPECTED[p].startswith("unsupported: " + V2)
                                    and ROCKSDB_NATIVE not in EXPECTED[p])


@pytest.mark.parametrize("path", corpus_dirs(), ids=short)
def test_read_via_python_api(path: str) -> None:
    reading = reading_of(path)
    for message in reading.refusals:
        assert str(CORPUS) in message, f"refusal does not name the file: {message}"
        assert not any(m in message for m in MISLEADING), message
    assert outcome(reading) == EXPECTED[path]
    if path in COUNTS:
        assert reading.counts == COUNTS[path]
    for key, decoded in reading.decoded.items():
        if path in CHANGELOG_FORMAT:  # entries are the log applied, not stored pairs (tests/test_changelog.py)
            continue
        # every stored entry of the state decoded (none skipped, none invented)
        assert sum(decoded.values()) == sum(reading.raw.get(key, collections.Counter()).values()), key


@pytest.mark.parametrize("path", corpus_dirs(), ids=short)
def test_api_lists_every_state_the_subtasks_register(path: str) -> None:
    """``Savepoint.keyed_states`` (describe, dump, schema, migrate) must list the union of the subtasks' states:
    in Flink's DataStream migration tests a subtask that saw no key never registered the lazily created ValueState."""
    reading = reading_of(path)
    for operator_id, names in reading.api_states.items():
        assert names == reading.stream_states.get(operator_id, names), operator_id


def _run_cli(argv: list[str]) -> tuple[int, str, str]:
    """The CLI in this process (the same code path as the ``flinkstate`` script, minus the interpreter start)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(argv)
    return status, out.getvalue(), err.getvalue()


def _check_cli_refusal(path: str, status: int, stdout: str, stderr: str) -> None:
    reason = EXPECTED[path].removeprefix("unsupported: ")
    assert status == 1, stderr
    lines = stderr.splitlines()
    assert lines, "refused without a message"
    # describe lists what it can and reports each unreadable operator on its own line; each line is a whole
    # message naming the file and the reason
    for line in lines:
        assert line.startswith("flinkstate: error: "), stderr
        assert str(CORPUS / path) in line, line
        assert any(r in line for r in reason.split(" | ")), line
        assert not any(m in line for m in MISLEADING), line


@pytest.mark.parametrize("path", corpus_dirs(), ids=short)
def test_describe_cli(path: str) -> None:
    status, stdout, stderr = _run_cli(["describe", str(CORPUS / path)])
    if EXPECTED[path] == "reads":
        assert (status, stderr) == (0, "")
        assert stdout.startswith(f"savepoint {CORPUS / path}\n")
    else:
        _check_cli_refusal(path, status, stdout, stderr)


def _cli_samples() -> list[str]:
    """One savepoint per (expected outcome, metadata version) for the real ``flinkstate`` process."""
    seen: dict[tuple[str, bytes], str] = {}
    for path in corpus_dirs():
        version = (CORPUS / path / "_metadata").read_bytes()[4:8]
        seen.setdefault((EXPECTED.get(path, ""), version), path)
    return sorted(seen.values())


@pytest.mark.parametrize("path", _cli_samples(), ids=short)
def test_describe_cli_process(path: str) -> None:
    done = subprocess.run([str(FLINKSTATE), "describe", str(CORPUS / path)], capture_output=True, text=True,
                          timeout=60, check=False)
    if EXPECTED[path] == "reads":
        assert (done.returncode, done.stderr) == (0, "")
    else:
        _check_cli_refusal(path, done.returncode, done.stdout, done.stderr)


def _identity_candidates() -> list[str]:
    """The canonical savepoints that read: native snapshots become canonical ones, which tests/test_native_migrate.py
    checks (value by value, RocksDB's bytes, the handle kinds)."""
    native = {*HEAP_FORMAT, *ROCKSDB_NATIVE_FORMAT, *CHANGELOG_FORMAT}
    return [p for p in corpus_dirs() if EXPECTED.get(p) == "reads" and p not in native]


#: Changelog-backend checkpoints (flinkstate.format.changelog): they read, and migrate to canonical savepoints
#: (tests/test_changelog.py, with the key type the checkpoint does not record given to schema).
CHANGELOG_FORMAT: list[str] = [_T + 'new-stateful-udf-migration-itcase-flink1.17-hashmap-checkpoint']

#: Savepoints whose keyed state is in the HashMap backend's own snapshot format (flinkstate.format.heap_blocks): they
#: read, and a migration writes canonical savepoints from them (tests/test_native_migrate.py).
# fmt: off
HEAP_FORMAT: list[str] = [
    _P + 'table-state',
    _P + 'table-state-avro',
    _P + 'table-state-nulls',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.10-savepoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.11-savepoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.15-hashmap-savepoint-native',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.16-hashmap-savepoint-native',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint-native',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink1.8-savepoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.0-hashmap-savepoint-native',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.1-hashmap-savepoint-native',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-checkpoint',
    _T + 'new-stateful-broadcast-udf-migration-itcase-flink2.3-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink1.10-savepoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.11-savepoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.12-savepoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.15-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.16-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink1.20-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink1.8-savepoint',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink2.0-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink2.1-hashmap-savepoint-native',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-checkpoint',
    _T + 'new-stateful-udf-migration-itcase-flink2.3-hashmap-savepoint-native',
    _T + 'operatorstate/complexKeyed-flink1.10',
    _T + 'operatorstate/complexKeyed-flink1.11',
    _T + 'operatorstate/complexKeyed-flink1.12',
    _T + 'operatorstate/complexKeyed-flink1.8',
    _T + 'operatorstate/complexKeyed-flink1.9',
]
# fmt: on



def _rocksdb_native(path: str) -> bool:
    """Whether any subtask's keyed state is a native RocksDB snapshot (handle code 5 or 11)."""
    try:
        metadata = read_metadata((CORPUS / path / "_metadata").read_bytes(), path)
    except FlinkStateError:
        return False
    return any(isinstance(sub.managed_keyed_state, IncrementalKeyedStateHandle)
               for op in metadata.operators for sub in op.subtasks.values())


#: RocksDB native savepoints and retained checkpoints: read (flinkstate.format.rocksdb_native) and migrated to a
#: canonical savepoint.
ROCKSDB_NATIVE_FORMAT = [p for p in corpus_dirs() if _rocksdb_native(p)]


def _operator_state_bytes(sp: Savepoint, handle: OperatorStreamStateHandle | None) -> tuple[Any, ...] | None:
    if handle is None:
        return None
    modes = sorted((name, meta.mode, meta.offsets) for name, meta in handle.states.items())
    if handle.delegate is None:
        return (modes, None)
    source = StreamSource(sp.location, handle.delegate)
    return (modes, source.read(0, source.size))


def _operator_view(sp: Savepoint) -> dict[str, dict[str, Any]]:
    view = {}
    for op in sp.operators:
        view[op.operator_id] = {
            "uid": op.uid, "parallelism": op.parallelism, "max_parallelism": op.max_parallelism,
            "coordinator": op.coordinator_state.data if op.coordinator_state else None,
            "finished": (sorted(op.finished_subtasks), op.fully_finished),
            "operator_state": {i: (_operator_state_bytes(sp, s.managed_operator_state),
                                   _operator_state_bytes(sp, s.raw_operator_state))
                               for i, s in sorted(op.subtasks.items())
                               if s.managed_operator_state or s.raw_operator_state},
            "keyed_subtasks": sorted(i for i, s in op.subtasks.items() if s.managed_keyed_state),
        }
    return view


def assert_same_operators(before: Savepoint, after: Savepoint) -> None:
    """A migration's output keeps the source's master states and, per operator id, its uid, parallelism, coordinator
    and non-keyed state, finished subtasks and keyed subtasks."""
    assert [(m.name, m.version, m.payload) for m in after.metadata.master_states] == \
        [(m.name, m.version, m.payload) for m in before.metadata.master_states]
    old_view, new_view = _operator_view(before), _operator_view(after)
    assert sorted(new_view) == sorted(old_view), "operator ids changed"
    for operator_id, old in old_view.items():
        new = new_view[operator_id]
        if old["uid"] is None:  # no uid recorded (metadata < 5): a migration may add none either way
            new = {**new, "uid": None}
        assert new == old, operator_id


@pytest.mark.parametrize("path", _identity_candidates(), ids=short)
def test_identity_migration(path: str, tmp_path: Path) -> None:
    source = CORPUS / path
    manifest, output = tmp_path / "m.yaml", tmp_path / "out"
    status, _, stderr = _run_cli(["schema", str(source), "-o", str(manifest)])
    assert (status, stderr) == (0, "")
    status, _, stderr = _run_cli(["migrate", str(source), "--schema", str(manifest), "--output", str(output)])
    assert (status, stderr) == (0, ""), stderr
    before, after = Savepoint.open(source), Savepoint.open(output)
    assert_same_operators(before, after)
    old_read, new_read = read_savepoint(source), read_savepoint(output)
    assert new_read.refusals == []
    assert new_read.decoded == old_read.decoded
    assert new_read.raw == old_read.raw


def test_identity_migration_process(tmp_path: Path) -> None:
    """The same through the real ``flinkstate`` processes, on one metadata-version-4 savepoint (no uids recorded:
    operator ids must be carried as they are)."""
    path = _T + "new-stateful-broadcast-udf-migration-itcase-flink1.20-hashmap-savepoint"
    source, manifest, output = CORPUS / path, tmp_path / "m.yaml", tmp_path / "out"
    schema = subprocess.run([str(FLINKSTATE), "schema", str(source)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert (schema.returncode, schema.stderr) == (0, "")
    manifest.write_text(schema.stdout, encoding="utf-8")
    migrate = subprocess.run([str(FLINKSTATE), "migrate", str(source), "--schema", str(manifest), "--output",
                              str(output)], capture_output=True, text=True, timeout=120, check=False)
    assert (migrate.returncode, migrate.stderr) == (0, "")
    assert sorted(_operator_view(Savepoint.open(output))) == sorted(_operator_view(Savepoint.open(source)))
    assert read_savepoint(output).raw == read_savepoint(source).raw


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The figures the lead reports (printed even without -s), checked against the tables."""
    paths = corpus_dirs()
    readings = {p: reading_of(p) for p in paths}
    opened = [p for p in paths if not (V2 in EXPECTED[p] or ROCKSDB_NATIVE in EXPECTED[p])]
    states = sum(r.counts[0] for r in readings.values())
    entries = sum(r.counts[1] for r in readings.values())
    by_reason = collections.Counter(EXPECTED[p] for p in paths)
    lines = [f"Flink corpus: {len(paths)} savepoint directories, {len(opened)} open, "
             f"{by_reason['reads']} read completely; {states} keyed states read ({entries} entries); refused:"]
    lines += [f"  {n:3d} {reason.removeprefix('unsupported: ')}" for reason, n in sorted(by_reason.items())
              if reason != "reads"]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert {p: outcome(r) for p, r in readings.items()} == EXPECTED
    assert sum(c[0] for c in COUNTS.values()) == states


def _source(path: str) -> str:
    for prefix, name in ((_T, "_T"), (_R, "_R"), (_P, "_P"), (_E, "_E")):
        if path.startswith(prefix):
            return f"{name} + {path[len(prefix):]!r}"
    return repr(path)


def _reason_source(value: str) -> str:
    for name in ("V2", "ROCKSDB_NATIVE", "HEAP_NATIVE", "ROW_DATA", "TEST_SERIALIZER", "STREAM_ELEMENT",
                 "CEP_NFA", "PROXY_V5", "EITHER", "PARAMETERLESS"):
        if value == "unsupported: " + globals()[name]:
            return f'"unsupported: " + {name}'
    return repr(value)


def _emit(line: str) -> None:
    print(line + ("  # noqa: E501" if len(line) > 120 else ""))


if __name__ == "__main__":
    # Regenerates the two tables from the current reader: review every change before pasting it in.
    print("EXPECTED")
    for p in corpus_dirs():
        _emit(f"    {_source(p)}: {_reason_source(outcome(reading_of(p)))},")
    print("COUNTS")
    for p in corpus_dirs():
        if not any(r in outcome(_READINGS[p]) for r in (V2, ROCKSDB_NATIVE)):
            _emit(f"    {_source(p)}: {_READINGS[p].counts!r},")
    sys.exit(0)
