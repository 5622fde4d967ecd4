"""A savepoint of a real Flink 2.3 job holding the new families as keyed state, end to end: Either (value, list and
map state), a user ``Value`` type, a user ``CopyableValue`` type and Flink's ``JavaSerializer``.

The job (Java source below, compiled here against the Flink distribution) keys a throttled sequence by
``key-(seq % KEYS)``; every state is a function of the key's event count n, and the job checks that function on
every event (a restored state that is off fails the job). The test:

1. stops the job with a savepoint and reads every entry of every state through ``Savepoint``, checking each value
   against the key's count (exact values, OpaqueValue bytes included);
2. runs ``flinkstate schema``, ``check`` (as is) and ``migrate`` (identity) on it, and compares every raw entry;
3. restores the migrated savepoint in Flink: the job runs on from there (its own check passes for every key) and a
   second savepoint holds larger counts, again consistent.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from flinkstate.cli import main as cli_main
from flinkstate.engine import LocalFlinkCluster
from flinkstate.engine.local import find_flink_home
from flinkstate.format.keyed_stream import iter_raw_entries, raw_key
from flinkstate.savepoint import Savepoint
from flinkstate.serializers.either import Either
from flinkstate.serializers.javaserial import JavaObjectValue
from flinkstate.serializers.kryo import OpaqueValue

KEYS = 6
OPERATOR = "families"
VALUE_CLASS = "families.NameValue"
COPYABLE_CLASS = "families.Counter"

SOURCES = {
    "families/NameValue.java": """
package families;

import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;
import org.apache.flink.types.Value;

import java.io.IOException;

/** A user Value type: ValueSerializer writes what write() writes. */
public class NameValue implements Value {
    public String name = "";

    public NameValue() {}

    public NameValue(String name) {
        this.name = name;
    }

    @Override
    public void write(DataOutputView out) throws IOException {
        out.writeUTF(name);
    }

    @Override
    public void read(DataInputView in) throws IOException {
        name = in.readUTF();
    }
}
""",
    "families/Counter.java": """
package families;

import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataOutputView;
import org.apache.flink.types.CopyableValue;

import java.io.IOException;

/** A user CopyableValue type (CopyableValueSerializer). */
public class Counter implements CopyableValue<Counter> {
    public long value;

    public Counter() {}

    public Counter(long value) {
        this.value = value;
    }

    @Override public int getBinaryLength() { return 8; }
    @Override public void copyTo(Counter target) { target.value = value; }
    @Override public Counter copy() { return new Counter(value); }
    @Override public void copy(DataInputView source, DataOutputView target) throws IOException {
        target.writeLong(source.readLong());
    }
    @Override public void write(DataOutputView out) throws IOException { out.writeLong(value); }
    @Override public void read(DataInputView in) throws IOException { value = in.readLong(); }
}
""",
    "families/FamiliesJob.java": """
package families;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.typeutils.EitherTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.runtime.state.JavaSerializer;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.types.Either;
import org.apache.flink.util.Collector;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/** Keyed state of the Either, Value, CopyableValue and Java serialization families, each a function of n. */
public class FamiliesJob {
    static Either<Long, String> either(long n) {
        return n % 2 == 0 ? Either.Left(n) : Either.Right("r" + n);
    }

    static ArrayList<Long> javaValue(long n) {
        return new ArrayList<>(List.of(n, n * n));
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> conf = new HashMap<>();
        conf.put("restart-strategy.type", "none");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(
                Configuration.fromMap(conf));
        env.enableCheckpointing(1000);
        int keys = Integer.parseInt(args[0]);
        DataGeneratorSource<Long> source = new DataGeneratorSource<>(
                seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(100), Types.LONG);
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "sequence")
                .uid("sequence-source")
                .setParallelism(1)
                .keyBy(seq -> "key-" + (seq % keys), Types.STRING)
                .process(new Families())
                .uid("families")
                .sinkTo(new DiscardingSink<>());
        env.execute("families");
    }

    static class Families extends KeyedProcessFunction<String, Long, Long> {
        transient ValueState<Long> count;
        transient ValueState<Either<Long, String>> either;
        transient ListState<Either<Long, String>> eithers;
        transient MapState<String, Either<Long, String>> eitherMap;
        transient ValueState<NameValue> name;
        transient ValueState<Counter> counter;
        transient ValueState<Serializable> java;

        @Override
        @SuppressWarnings({"unchecked", "rawtypes"})
        public void open(OpenContext context) {
            TypeInformation<Either<Long, String>> eitherType = new EitherTypeInfo<>(Types.LONG, Types.STRING);
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            either = getRuntimeContext().getState(new ValueStateDescriptor<>("either", eitherType));
            eithers = getRuntimeContext().getListState(new ListStateDescriptor<>("eithers", eitherType));
            eitherMap = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("either_map", Types.STRING, eitherType));
            name = getRuntimeContext().getState(new ValueStateDescriptor<>("name", NameValue.class));
            counter = getRuntimeContext().getState(new ValueStateDescriptor<>("counter", Counter.class));
            java = getRuntimeContext().getState(
                    new ValueStateDescriptor<Serializable>("java", (JavaSerializer) new JavaSerializer<>()));
        }

        static void check(boolean ok, String what) {
            if (!ok) {
                throw new IllegalStateException("restored state is off: " + what);
            }
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            String key = ctx.getCurrentKey();
            Long before = count.value();
            long n = before == null ? 1 : before + 1;
            if (before != null) {  // every state must be the function of the stored count
                long m = before;
                check(either(m).equals(either.value()), key + " either");
                List<Either<Long, String>> list = new ArrayList<>();
                eithers.get().forEach(list::add);
                check(list.equals(List.of(either(m - 1), either(m))), key + " eithers");
                check(either(m).equals(eitherMap.get("a")) && Either.Right("b" + m).equals(eitherMap.get("b")),
                        key + " either_map");
                check(("n" + m).equals(name.value().name), key + " name");
                check(counter.value().value == 10 * m, key + " counter");
                check(javaValue(m).equals(java.value()), key + " java");
            }
            count.update(n);
            either.update(either(n));
            eithers.update(List.of(either(n - 1), either(n)));
            eitherMap.put("a", either(n));
            eitherMap.put("b", Either.Right("b" + n));
            name.update(new NameValue("n" + n));
            counter.update(new Counter(10 * n));
            java.update(javaValue(n));
            out.collect(n);
        }
    }
}
""",
}


def _either(n: int) -> Either:
    return Either.left(n) if n % 2 == 0 else Either.right(f"r{n}")


def _utf(text: str) -> bytes:
    return len(text).to_bytes(2, "big") + text.encode()


@pytest.fixture(scope="module")
def families_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("families-job")
    for name, text in SOURCES.items():
        (work / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (work / "src" / name).write_text(text)
    classpath = str(find_flink_home() / "lib" / "*")
    subprocess.run(["javac", "-nowarn", "--release", "17", "-cp", classpath, "-d", str(work / "classes"),
                    *[str(work / "src" / name) for name in SOURCES]], check=True, capture_output=True)
    jar = work / "families.jar"
    subprocess.run(["jar", "--create", "--file", str(jar), "-C", str(work / "classes"), "."], check=True)
    return jar


def _run_until_savepoint(cluster: LocalFlinkCluster, jar: Path, target: Path, restore: Path | None = None) -> Path:
    client = cluster.client
    job = client.submit_jar(jar, entry_class="families.FamiliesJob", program_args=[str(KEYS)], parallelism=1,
                            savepoint_path=str(restore) if restore else None)
    client.wait_until_running(job, timeout=120)
    deadline = time.monotonic() + 60
    while client.checkpoints(job).completed < 2:  # a few seconds of events, and the job's checks have run
        assert client.job_state(job) == "RUNNING", client.exceptions(job)
        assert time.monotonic() < deadline, "no checkpoint within 60 s"
        time.sleep(0.5)
    assert client.num_restarts(job) == 0
    location = client.stop_with_savepoint(job, str(target.parent))
    shutil.move(location.removeprefix("file:"), target)
    return target


def _states(savepoint: Path) -> dict[str, dict[str, Any]]:
    """state -> key -> value (MAP state: dict of user key -> value) for the families operator."""
    sp = Savepoint.open(savepoint)
    result: dict[str, dict[str, Any]] = {}
    for state in ("count", "either", "eithers", "name", "counter", "java"):
        result[state] = {key: value for key, _, value in sp.iter_entries(OPERATOR, state)}
    result["either_map"] = {}
    for key, _, user_key, value in sp.iter_entries(OPERATOR, "either_map"):
        result["either_map"].setdefault(key, {})[user_key] = value
    return result


def _check_states(states: dict[str, dict[str, Any]]) -> dict[str, int]:
    counts = states["count"]
    assert sorted(counts) == [f"key-{k}" for k in range(KEYS)]
    for key, n in counts.items():
        assert states["either"][key] == _either(n) and type(states["either"][key]) is Either
        assert states["eithers"][key] == [_either(n - 1), _either(n)]
        assert states["either_map"][key] == {"a": _either(n), "b": Either.right(f"b{n}")}
        assert states["name"][key] == OpaqueValue(f"Value<{VALUE_CLASS}>", _utf(f"n{n}"))
        assert states["counter"][key] == OpaqueValue(f"CopyableValue<{COPYABLE_CLASS}>", (10 * n).to_bytes(8, "big"))
        java = states["java"][key]
        assert isinstance(java, JavaObjectValue)
        assert dict(java) == {"class": "java.util.ArrayList", "value": [n, n * n]}
    return counts


def _raw(savepoint: Path) -> dict[tuple[str, bytes], bytes]:
    sp = Savepoint.open(savepoint)
    values = {}
    for _, stream in sp.keyed_streams(OPERATOR):
        names = [s.name for s in stream.header().states]
        for key_group, start, end in stream.blocks:
            data = stream.read_block(key_group, start, end)
            for state_id, ks, ke, vs, ve in iter_raw_entries(data):
                values[(names[state_id], raw_key(data, ks, ke))] = bytes(data[vs:ve])
    return values


@pytest.mark.flink
def test_families_savepoint_end_to_end(flink_cluster: LocalFlinkCluster, families_jar: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    savepoint = _run_until_savepoint(flink_cluster, families_jar, tmp_path / "sp1")
    counts = _check_states(_states(savepoint))

    manifest = tmp_path / "schema.yaml"
    assert cli_main(["schema", str(savepoint), "-o", str(manifest)]) == 0
    text = manifest.read_text()
    for notation in ("Either<Long, String>", f"value: {VALUE_CLASS}", f"copyable_value: {COPYABLE_CLASS}",
                     "JavaSerializable"):
        assert notation in text, text
    assert cli_main(["check", str(savepoint), "--schema", str(manifest), "--format", "json"]) == 0
    assert '"COMPATIBLE_AS_IS"' in capsys.readouterr().out
    migrated = tmp_path / "migrated"
    assert cli_main(["migrate", str(savepoint), "--schema", str(manifest), "--output", str(migrated), "-q"]) == 0
    assert _raw(migrated) == _raw(savepoint)

    # Flink restores the migrated savepoint; its own check runs on every key's first event after the restore.
    again = _run_until_savepoint(flink_cluster, families_jar, tmp_path / "sp2", restore=migrated)
    later = _check_states(_states(again))
    assert all(later[key] > counts[key] for key in counts), (counts, later)
