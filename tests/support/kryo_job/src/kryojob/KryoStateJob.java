package kryojob;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.java.typeutils.GenericTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * Writes a canonical savepoint whose keyed state holds Kryo data, on an in-process MiniCluster of the Flink
 * distribution on the classpath: KryoStateJob OUT_DIR. Keys k0..k3 (KEYS); every key's state is a pure function of
 * its index (tests/test_kryo_savepoint.py states it). Operator "kryo": a POJO whose Kryo fields (payload: Object,
 * and in Flink 1.x tags: List) are followed by another field, a ListState of Kryo elements, a ValueState of Kryo
 * values (one of them a user class, opaque). Operator "opaque": the same shapes with a user class in the middle.
 * Prints the path of a native savepoint (HashMap format), then that of the canonical one.
 */
public final class KryoStateJob {
    static final int KEYS = 4;

    /** A POJO (sorted fields: id, payload, tags, zname): payload and, in Flink 1.x, tags are Kryo-serialized. */
    public static final class Holder {
        public int id;
        public Object payload;
        public List<String> tags;
        public String zname;

        public Holder() {}
    }

    /** A user class: Kryo's FieldSerializer writes it, which is opaque to the reader. */
    public static final class Point {
        public int x;
        public int y;

        public Point() {}

        Point(int x, int y) {
            this.x = x;
            this.y = y;
        }
    }

    static Object payload(int k) {
        switch (k) {
            case 0: {
                Map<String, Integer> map = new HashMap<>();
                map.put("n", k);
                return map;
            }
            case 1: return UUID.fromString("123e4567-e89b-12d3-a456-426614174000");
            case 2: return new ArrayList<Object>(Arrays.asList(k, "x"));
            default: return k;
        }
    }

    static Holder holder(int k, Object payload) {
        Holder h = new Holder();
        h.id = k;
        h.payload = payload;
        h.tags = new ArrayList<>(Arrays.asList("t" + k, "u"));
        h.zname = "name-" + k;
        return h;
    }

    static int index(String key) {
        return Integer.parseInt(key.substring(1));
    }

    static final class KryoStates extends KeyedProcessFunction<String, Long, Long> {
        private final String marker;
        private transient ValueState<Holder> holder;
        private transient ListState<Object> objects;
        private transient ValueState<Object> whole;

        KryoStates(String marker) {
            this.marker = marker;
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            if (holder == null) {
                holder = getRuntimeContext().getState(new ValueStateDescriptor<>("holder", Holder.class));
                objects = getRuntimeContext().getListState(
                        new ListStateDescriptor<>("objects", new GenericTypeInfo<>(Object.class)));
                whole = getRuntimeContext().getState(
                        new ValueStateDescriptor<>("whole", new GenericTypeInfo<>(Object.class)));
            }
            int k = index(ctx.getCurrentKey());
            if (holder.value() == null) {
                holder.update(holder(k, payload(k)));
                Map<String, Integer> map = new HashMap<>();
                map.put("k", k);
                objects.update(Arrays.asList("s" + k, new ArrayList<>(Arrays.asList(1, 2)), map, (long) k));
                whole.update(k == 0 ? new Point(7, 8) : "w" + k);
            }
            if (seq == 40) {
                Files.writeString(Path.of(marker), "done");
            }
        }
    }

    static final class OpaqueStates extends KeyedProcessFunction<String, Long, Long> {
        private transient ValueState<Holder> holder;
        private transient ListState<Object> mixed;

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            if (holder == null) {
                holder = getRuntimeContext().getState(new ValueStateDescriptor<>("opaque_holder", Holder.class));
                mixed = getRuntimeContext().getListState(
                        new ListStateDescriptor<>("mixed", new GenericTypeInfo<>(Object.class)));
            }
            int k = index(ctx.getCurrentKey());
            if (holder.value() == null) {
                holder.update(holder(k, new Point(k, -k)));
                mixed.update(Arrays.asList("a", new Point(k, k), "b"));
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Path out = Path.of(args[0]);
        Files.createDirectories(out);
        Path marker = out.resolve("written");
        Files.deleteIfExists(marker);
        // The context's environment (a local one when run with `java`, `flink run`'s when submitted or inspected by
        // `flinkstate schema --jar`), not an explicit local one, which a client refuses.
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(new Configuration());
        env.setParallelism(1);
        KeyedStream<Long, String> keyed = env.fromSequence(0, Long.MAX_VALUE).uid("source")
                .map(seq -> {
                    Thread.sleep(2); // a few hundred events a second: the job is still running when stopped
                    return seq;
                }).uid("throttle")
                .keyBy(seq -> "k" + (seq % KEYS));
        keyed.process(new KryoStates(marker.toString())).uid("kryo").filter(x -> false).print();
        keyed.process(new OpaqueStates()).uid("opaque").filter(x -> false).print();
        JobClient client = env.executeAsync("kryo-state");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!Files.exists(marker)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the job did not write its state within 120 s");
            }
            Thread.sleep(50);
        }
        // First a native savepoint (the HashMap backend's own format), then the canonical one, which stops the job:
        // every key's state is written once, so both hold the same values.
        String nativeLocation = client.triggerSavepoint(out.resolve("native").toUri().toString(),
                SavepointFormatType.NATIVE).get(120, TimeUnit.SECONDS);
        System.out.println(nativeLocation);
        String location = client.stopWithSavepoint(false, out.resolve("savepoints").toUri().toString(),
                SavepointFormatType.CANONICAL).get(120, TimeUnit.SECONDS);
        System.out.println(location);
        System.exit(0);
    }
}
