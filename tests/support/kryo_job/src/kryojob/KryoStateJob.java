package kryojob;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.GenericTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.OperatorID;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.graph.StreamGraphHasherV2;
import org.apache.flink.streaming.api.graph.StreamNode;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.lang.reflect.Array;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Writes a canonical savepoint whose keyed state holds Kryo data, on an in-process MiniCluster of the Flink
 * distribution on the classpath: KryoStateJob OUT_DIR. Keys k0..k3 (KEYS); every key's state is a pure function of
 * its index (tests/test_kryo_savepoint.py states it). Operator "kryo": a POJO whose Kryo fields (payload: Object,
 * and in Flink 1.x tags: List) are followed by another field, a ListState of Kryo elements, a ValueState of Kryo
 * values (one of them a user class, opaque). Operator "opaque": the same shapes with a user class in the middle, and
 * a ValueState of Legacy (final fields, a double[]: Kryo in both Flinks). Operator "collections": java.util
 * List/Map/Set, Kryo in Flink 1.x and Flink's own collection serializers in 2.x (FLINK-34123, FLINK-35068,
 * FLINK-35555): a ValueState of the POJO Order with such fields, and a MapState whose user values are List&lt;Long&gt;.
 * Prints the path of a native savepoint (HashMap format), then that of the canonical one.
 *
 * <p>Restore mode, the ground truth of what a Flink build does with a savepoint (issue 27: a Flink 1.x savepoint
 * restored by the Flink 2.x build): KryoStateJob OUT_DIR --restore SAVEPOINT_DIR [--backend hashmap|rocksdb]
 * [--restore ...]. Each --restore runs the same job graph (same uids) from that savepoint, one after the other; each
 * key, at its first record, reads every state and compares it with the value the writing run stored. One JSON line
 * per operator, key and state in OUT_DIR/restore-N.jsonl (N from 0, printed on stdout): {"savepoint", "backend",
 * "operator", "key", "state", "outcome"} with outcome "exact", "differs" (and "expected", "actual" as text) or
 * "failed" ("error" and "cause": exception class and message). A restore that fails before any record (the job
 * runs without restarts, so it ends) gives "failed" with key null for each state of the operator it names;
 * states not checked for another reason (the job failed in the other operator, no record in time) "unchecked".
 */
public final class KryoStateJob {
    static final int KEYS = 4;
    /** Operator uid -> its keyed states, in the order a key checks them. */
    static final Map<String, List<String>> STATES = new LinkedHashMap<>();

    static {
        STATES.put("kryo", List.of("holder", "objects", "whole"));
        STATES.put("opaque", List.of("opaque_holder", "mixed", "legacy"));
        STATES.put("collections", List.of("order", "hist"));
    }

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

    /**
     * Not a POJO (final fields, no default constructor): a ValueState of it is Kryo in both Flinks, its double[]
     * written big-endian by Kryo 2.24 and read little-endian by Kryo 5.6 (issue 27's silent misread).
     */
    public static final class Legacy {
        final String sensor;
        final double[] samples;
        final long at;

        Legacy(String sensor, double[] samples, long at) {
            this.sensor = sensor;
            this.samples = samples;
            this.at = at;
        }
    }

    /**
     * A POJO (sorted fields: counts, ids, lines, zstatus) whose java.util fields are Kryo in Flink 1.x and Flink's
     * Map, Set and List serializers in 2.x (each nullable, as are List and Map elements and Set elements).
     */
    public static final class Order {
        public Map<String, Long> counts;
        public Set<Integer> ids;
        public List<String> lines;
        public String zstatus;

        public Order() {}
    }

    /** Key k's order: a null element, entry value and set element (k0), empty collections, null fields. */
    static Order order(int k) {
        Order o = new Order();
        o.lines = k == 2 ? null : k == 1 ? new ArrayList<>() : new ArrayList<>(Arrays.asList("sku-" + k, null, "x"));
        if (k != 3) {
            o.counts = new HashMap<>();
            if (k != 2) {
                o.counts.put("n", (long) k);
                o.counts.put("big", (1L << 40) + k);
            }
            if (k == 0) {
                o.counts.put("none", null);
            }
        }
        if (k != 1) {
            o.ids = new HashSet<>();
            if (k != 2) {
                o.ids.addAll(Arrays.asList(k, 100 + k, -7));
            }
            if (k == 0) {
                o.ids.add(null);
            }
        }
        o.zstatus = "status-" + k;
        return o;
    }

    /** Key k's MapState&lt;String, List&lt;Long&gt;&gt;: a null element (k0), an empty list, a null user value (k1). */
    static Map<String, List<Long>> hist(int k) {
        Map<String, List<Long>> hist = new HashMap<>();
        hist.put("h" + k, new ArrayList<>(Arrays.asList((long) k, -10L * k, 1L << 40)));
        hist.put("empty", new ArrayList<>());
        if (k == 0) {
            hist.put("gaps", new ArrayList<>(Arrays.asList(null, 5L)));
        }
        if (k == 1) {
            hist.put("none", null);
        }
        return hist;
    }

    static Legacy legacy(int k) {
        return new Legacy("sensor-" + k, new double[] {36.5 + k, -0.25 * k}, 1714558500123L + k);
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

    /** The values of key k's states, as the writing run stores them. */
    static List<Object> objects(int k) {
        Map<String, Integer> map = new HashMap<>();
        map.put("k", k);
        return new ArrayList<>(Arrays.asList("s" + k, new ArrayList<>(Arrays.asList(1, 2)), map, (long) k));
    }

    static Object whole(int k) {
        return k == 0 ? new Point(7, 8) : "w" + k;
    }

    static Holder opaqueHolder(int k) {
        return holder(k, new Point(k, -k));
    }

    static List<Object> mixed(int k) {
        return new ArrayList<>(Arrays.asList("a", new Point(k, k), "b"));
    }

    static int index(String key) {
        return Integer.parseInt(key.substring(1));
    }

    static ValueStateDescriptor<Holder> holderDescriptor(String name) {
        return new ValueStateDescriptor<>(name, Holder.class);
    }

    static ListStateDescriptor<Object> objectsDescriptor(String name) {
        return new ListStateDescriptor<>(name, new GenericTypeInfo<>(Object.class));
    }

    static ValueStateDescriptor<Legacy> legacyDescriptor() {
        return new ValueStateDescriptor<>("legacy", Legacy.class);  // not a POJO: GenericTypeInfo, Kryo
    }

    static ValueStateDescriptor<Order> orderDescriptor() {
        return new ValueStateDescriptor<>("order", Order.class);
    }

    static MapStateDescriptor<String, List<Long>> histDescriptor() {
        // Flink 1.x: List<Long> is a GenericTypeInfo (Kryo); 2.x's TypeExtractor gives it a NullableListTypeInfo
        return new MapStateDescriptor<>("hist", Types.STRING, TypeInformation.of(new TypeHint<List<Long>>() {}));
    }

    static ValueStateDescriptor<Object> wholeDescriptor() {
        return new ValueStateDescriptor<>("whole", new GenericTypeInfo<>(Object.class));
    }

    /** Registers a state (getState and the like), where Flink checks the restored serializer against the new one. */
    interface StateRegistration<S> {
        S register() throws Exception;
    }

    /** Reads one state of the current key; may throw what Flink throws (a serializer reading restored bytes). */
    interface StateRead {
        Object read() throws Exception;
    }

    /**
     * Restore mode: registers each state once (as the job does), then the first record of each key compares its
     * states with the values the writing run stored, one verdict line per state in the operator's file.
     */
    static final class Checker {
        private final String operator;
        private final String file;
        private final Set<String> checked = new HashSet<>();
        /** State -> why Flink refused to register it (a StateMigrationException): every key's verdict for it. */
        private final Map<String, Throwable> refused = new HashMap<>();

        Checker(String operator, String file) {
            this.operator = operator;
            this.file = file;
        }

        <S> S register(String state, StateRegistration<S> registration) {
            try {
                return registration.register();
            } catch (Throwable e) { // Flink's refusal is the outcome of every key's check of this state
                refused.put(state, e);
                return null;
            }
        }

        boolean first(String key) {
            return checked.add(key);
        }

        void check(String key, String state, Object expected, StateRead read) throws IOException {
            Map<String, Object> line = verdict(operator, key, state);
            Throwable refusal = refused.get(state);
            if (refusal != null) {
                failed(line, refusal, refusal);
            } else {
                try {
                    String want = text(expected);
                    String got = text(read.read());
                    line.put("outcome", want.equals(got) ? "exact" : "differs");
                    if (!want.equals(got)) {
                        line.put("expected", want);
                        line.put("actual", got);
                    }
                } catch (Throwable e) { // anything Flink's read throws is the outcome, not the end of the check
                    failed(line, e, e);
                }
            }
            Files.writeString(Path.of(file), json(line) + "\n", StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
        }
    }

    static final class KryoStates extends KeyedProcessFunction<String, Long, Long> {
        private final String marker;
        private final String verdicts;
        private transient ValueState<Holder> holder;
        private transient ListState<Object> objects;
        private transient ValueState<Object> whole;
        private transient Checker checker;

        KryoStates(String marker, String verdicts) {
            this.marker = marker;
            this.verdicts = verdicts;
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            if (verdicts != null) {
                check(ctx.getCurrentKey());
                return;
            }
            if (holder == null) {
                holder = getRuntimeContext().getState(holderDescriptor("holder"));
                objects = getRuntimeContext().getListState(objectsDescriptor("objects"));
                whole = getRuntimeContext().getState(wholeDescriptor());
            }
            int k = index(ctx.getCurrentKey());
            if (holder.value() == null) {
                holder.update(holder(k, payload(k)));
                objects.update(objects(k));
                whole.update(whole(k));
            }
            if (seq == 40) {
                Files.writeString(Path.of(marker), "done");
            }
        }

        private void check(String key) throws IOException {
            if (checker == null) {
                checker = new Checker("kryo", verdicts);
                holder = checker.register("holder", () -> getRuntimeContext().getState(holderDescriptor("holder")));
                objects = checker.register("objects",
                        () -> getRuntimeContext().getListState(objectsDescriptor("objects")));
                whole = checker.register("whole", () -> getRuntimeContext().getState(wholeDescriptor()));
            }
            if (!checker.first(key)) {
                return;
            }
            int k = index(key);
            checker.check(key, "holder", holder(k, payload(k)), () -> holder.value());
            checker.check(key, "objects", objects(k), () -> list(objects.get()));
            checker.check(key, "whole", whole(k), () -> whole.value());
        }
    }

    static final class OpaqueStates extends KeyedProcessFunction<String, Long, Long> {
        private final String verdicts;
        private transient ValueState<Holder> holder;
        private transient ListState<Object> mixed;
        private transient ValueState<Legacy> legacy;
        private transient Checker checker;

        OpaqueStates(String verdicts) {
            this.verdicts = verdicts;
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            if (verdicts != null) {
                check(ctx.getCurrentKey());
                return;
            }
            if (holder == null) {
                holder = getRuntimeContext().getState(holderDescriptor("opaque_holder"));
                mixed = getRuntimeContext().getListState(objectsDescriptor("mixed"));
                legacy = getRuntimeContext().getState(legacyDescriptor());
            }
            int k = index(ctx.getCurrentKey());
            if (holder.value() == null) {
                holder.update(opaqueHolder(k));
                mixed.update(mixed(k));
                legacy.update(legacy(k));
            }
        }

        private void check(String key) throws IOException {
            if (checker == null) {
                checker = new Checker("opaque", verdicts);
                holder = checker.register("opaque_holder",
                        () -> getRuntimeContext().getState(holderDescriptor("opaque_holder")));
                mixed = checker.register("mixed", () -> getRuntimeContext().getListState(objectsDescriptor("mixed")));
                legacy = checker.register("legacy", () -> getRuntimeContext().getState(legacyDescriptor()));
            }
            if (!checker.first(key)) {
                return;
            }
            int k = index(key);
            checker.check(key, "opaque_holder", opaqueHolder(k), () -> holder.value());
            checker.check(key, "mixed", mixed(k), () -> list(mixed.get()));
            checker.check(key, "legacy", legacy(k), () -> legacy.value());
        }
    }

    static final class CollectionStates extends KeyedProcessFunction<String, Long, Long> {
        private final String verdicts;
        private transient ValueState<Order> order;
        private transient MapState<String, List<Long>> hist;
        private transient Checker checker;

        CollectionStates(String verdicts) {
            this.verdicts = verdicts;
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<Long> out) throws Exception {
            if (verdicts != null) {
                check(ctx.getCurrentKey());
                return;
            }
            if (order == null) {
                order = getRuntimeContext().getState(orderDescriptor());
                hist = getRuntimeContext().getMapState(histDescriptor());
            }
            int k = index(ctx.getCurrentKey());
            if (order.value() == null) {
                order.update(order(k));
                hist.putAll(hist(k));
            }
        }

        private void check(String key) throws IOException {
            if (checker == null) {
                checker = new Checker("collections", verdicts);
                order = checker.register("order", () -> getRuntimeContext().getState(orderDescriptor()));
                hist = checker.register("hist", () -> getRuntimeContext().getMapState(histDescriptor()));
            }
            if (!checker.first(key)) {
                return;
            }
            int k = index(key);
            checker.check(key, "order", order(k), () -> order.value());
            checker.check(key, "hist", hist(k), () -> {
                Map<String, List<Long>> read = new HashMap<>();
                for (Map.Entry<String, List<Long>> entry : hist.entries()) {
                    read.put(entry.getKey(), entry.getValue());
                }
                return read;
            });
        }
    }

    /**
     * The job graph of both modes (the same uids). {@code marker}: the writing run's file saying every key's state is
     * written; {@code verdicts}: restore mode's directory of verdict lines (null when writing).
     */
    static void build(StreamExecutionEnvironment env, String marker, Path verdicts) {
        env.setParallelism(1);
        KeyedStream<Long, String> keyed = env.fromSequence(0, Long.MAX_VALUE).uid("source")
                .map(seq -> {
                    Thread.sleep(2); // a few hundred events a second: the job is still running when stopped
                    return seq;
                }).uid("throttle")
                .keyBy(seq -> "k" + (seq % KEYS));
        keyed.process(new KryoStates(marker, file(verdicts, "kryo"))).uid("kryo").filter(x -> false).print();
        keyed.process(new OpaqueStates(file(verdicts, "opaque"))).uid("opaque").filter(x -> false).print();
        keyed.process(new CollectionStates(file(verdicts, "collections"))).uid("collections").filter(x -> false)
                .print();
    }

    private static String file(Path verdicts, String operator) {
        return verdicts == null ? null : verdicts.resolve(operator + ".jsonl").toString();
    }

    public static void main(String[] args) throws Exception {
        Path out = Path.of(args[0]);
        Files.createDirectories(out);
        if (args.length > 1) {
            restoreAll(out, Arrays.copyOfRange(args, 1, args.length));
            System.exit(0);
        }
        Path marker = out.resolve("written");
        Files.deleteIfExists(marker);
        // The context's environment (a local one when run with `java`, `flink run`'s when submitted or inspected by
        // `flinkstate schema --jar`), not an explicit local one, which a client refuses.
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(new Configuration());
        build(env, marker.toString(), null);
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

    /** --restore SAVEPOINT_DIR [--backend hashmap|rocksdb], repeated: one restore each, in order. */
    static void restoreAll(Path out, String[] args) throws Exception {
        List<String[]> runs = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--restore") && i + 1 < args.length) {
                runs.add(new String[] {args[++i], "hashmap"});
            } else if (args[i].equals("--backend") && i + 1 < args.length && !runs.isEmpty()) {
                runs.get(runs.size() - 1)[1] = args[++i];
            } else {
                throw new IllegalArgumentException("usage: KryoStateJob OUT_DIR [--restore SAVEPOINT_DIR "
                        + "[--backend hashmap|rocksdb]]...; got " + args[i]);
            }
        }
        // One MiniCluster for every restore (each job its own backend): starting one takes seconds
        MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder().withRandomPorts()
                .setNumTaskManagers(1).setNumSlotsPerTaskManager(2).build());
        cluster.start();
        try {
            URI rest = cluster.getRestAddress().get(60, TimeUnit.SECONDS);
            for (int n = 0; n < runs.size(); n++) {
                Path verdicts = out.resolve("restore-" + n + ".jsonl");
                restore(rest, runs.get(n)[0], runs.get(n)[1], out.resolve("restore-" + n), verdicts);
                System.out.println(verdicts);
            }
        } finally {
            cluster.closeAsync().get(60, TimeUnit.SECONDS);
        }
    }

    static void restore(URI rest, String savepoint, String backend, Path work, Path verdicts) throws Exception {
        Files.createDirectories(work);
        Configuration conf = new Configuration();
        conf.set(StateRecoveryOptions.SAVEPOINT_PATH, savepoint);
        conf.set(StateBackendOptions.STATE_BACKEND, backend);
        // No restarts: a restore that fails ends the job, instead of Flink's restart loop
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        // No jar to ship: the cluster runs in this JVM, whose classpath has the job's classes
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createRemoteEnvironment(rest.getHost(),
                rest.getPort(), conf);
        build(env, null, work);
        StreamGraph graph = env.getStreamGraph();
        graph.setJobName("kryo-state-restore");
        Map<String, String> operatorIds = operatorIds(graph);
        JobClient client = env.executeAsync(graph);
        CompletableFuture<JobExecutionResult> result = client.getJobExecutionResult();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!result.isDone() && !allChecked(work) && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        Throwable failure = null;
        if (result.isDone()) {
            try {
                result.get();
            } catch (ExecutionException e) {
                failure = e.getCause();
            }
        } else {
            client.cancel().get(60, TimeUnit.SECONDS);
            try {
                result.get(60, TimeUnit.SECONDS);
            } catch (ExecutionException | TimeoutException e) {
                // cancelled: the verdicts are written
            }
        }
        StringBuilder lines = new StringBuilder();
        for (String operator : STATES.keySet()) {
            Path file = work.resolve(operator + ".jsonl");
            List<String> written = Files.exists(file) ? Files.readAllLines(file) : List.of();
            for (String line : written) {
                lines.append(line.substring(0, line.length() - 1)).append(", \"savepoint\": ")
                        .append(quote(savepoint)).append(", \"backend\": ").append(quote(backend)).append("}\n");
            }
            if (written.size() == KEYS * STATES.get(operator).size()) {
                continue;
            }
            Throwable named = naming(failure, operatorIds.get(operator));
            for (String state : STATES.get(operator)) {
                Map<String, Object> line = verdict(operator, null, state);
                if (named != null) {
                    failed(line, named, failure);
                } else {
                    line.put("outcome", "unchecked");
                    line.put("error", failure == null ? "no record of every key within 60 s (" + written.size()
                            + " verdicts)" : "the job failed elsewhere: " + describe(root(failure)));
                }
                line.put("savepoint", savepoint);
                line.put("backend", backend);
                lines.append(json(line)).append('\n');
            }
        }
        Files.writeString(verdicts, lines.toString(), StandardCharsets.UTF_8);
    }

    /** Operator uid -> its operator id (hex), as Flink derives it from the uid and names it in failures. */
    static Map<String, String> operatorIds(StreamGraph graph) {
        Map<Integer, byte[]> hashes = new StreamGraphHasherV2().traverseStreamGraphAndGenerateHashes(graph);
        Map<String, String> ids = new HashMap<>();
        for (StreamNode node : graph.getStreamNodes()) {
            if (node.getTransformationUID() != null) {
                ids.put(node.getTransformationUID(), new OperatorID(hashes.get(node.getId())).toHexString());
            }
        }
        return ids;
    }

    /** The first exception in failure's chain whose message names the operator (Flink's restore failures do). */
    static Throwable naming(Throwable failure, String operatorId) {
        for (Throwable e = failure; e != null && operatorId != null; e = e.getCause()) {
            if (e.getMessage() != null && e.getMessage().contains(operatorId)) {
                return e;
            }
        }
        return null;
    }

    static boolean allChecked(Path work) throws IOException {
        for (Map.Entry<String, List<String>> operator : STATES.entrySet()) {
            Path file = work.resolve(operator.getKey() + ".jsonl");
            if (!Files.exists(file) || Files.readAllLines(file).size() < KEYS * operator.getValue().size()) {
                return false;
            }
        }
        return true;
    }

    static Map<String, Object> verdict(String operator, String key, String state) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("operator", operator);
        line.put("key", key);
        line.put("state", state);
        return line;
    }

    static void failed(Map<String, Object> line, Throwable error, Throwable chain) {
        line.put("outcome", "failed");
        line.put("error", describe(error));
        line.put("cause", describe(root(chain)));
    }

    static Throwable root(Throwable e) {
        while (e.getCause() != null && e.getCause() != e) {
            e = e.getCause();
        }
        return e;
    }

    static String describe(Throwable e) {
        return e.getClass().getName() + ": " + e.getMessage();
    }

    static List<Object> list(Iterable<Object> values) {
        if (values == null) {
            return null;
        }
        List<Object> list = new ArrayList<>();
        values.forEach(list::add);
        return list;
    }

    /**
     * A value as text, with every class named (an Integer read back as a Long differs): strings quoted,
     * collections with their elements (sets sorted), maps sorted by key, arrays by element, this job's classes by
     * field.
     */
    static String text(Object value) {
        if (value == null) {
            return "null";
        }
        Class<?> type = value.getClass();
        if (value instanceof String) {
            return quote((String) value);
        }
        if (value instanceof Iterable) {
            List<String> parts = new ArrayList<>();
            for (Object element : (Iterable<?>) value) {
                parts.add(text(element));
            }
            if (value instanceof Set) { // a HashSet's iteration order depends on its capacity: sorted, as maps are
                parts.sort(null);
            }
            return type.getSimpleName() + "[" + String.join(", ", parts) + "]";
        }
        if (value instanceof Map) {
            Map<String, String> sorted = new TreeMap<>();
            ((Map<?, ?>) value).forEach((k, v) -> sorted.put(text(k), text(v)));
            List<String> parts = new ArrayList<>();
            sorted.forEach((k, v) -> parts.add(k + "=" + v));
            return type.getSimpleName() + "{" + String.join(", ", parts) + "}";
        }
        if (type.isArray()) {
            List<String> parts = new ArrayList<>();
            for (int i = 0; i < Array.getLength(value); i++) {
                parts.add(text(Array.get(value, i)));
            }
            return type.getComponentType().getSimpleName() + "[" + String.join(", ", parts) + "]";
        }
        if (type.getName().startsWith("kryojob.")) {
            List<String> parts = new ArrayList<>();
            for (Field field : type.getDeclaredFields()) {
                if (!Modifier.isStatic(field.getModifiers())) {
                    try {
                        parts.add(field.getName() + "=" + text(field.get(value)));
                    } catch (IllegalAccessException e) {
                        throw new IllegalStateException(e);
                    }
                }
            }
            return type.getSimpleName() + "{" + String.join(", ", parts) + "}";
        }
        return type.getSimpleName() + "(" + value + ")";
    }

    static String json(Map<String, Object> line) {
        List<String> parts = new ArrayList<>();
        line.forEach((k, v) -> parts.add(quote(k) + ": " + (v == null ? "null" : quote(v.toString()))));
        return "{" + String.join(", ", parts) + "}";
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
