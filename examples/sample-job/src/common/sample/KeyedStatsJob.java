package sample;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;

/**
 * The sample stateful job: an unbounded, throttled sequence 0, 1, 2, ... keyed by {@code "key-" + (seq % keys)}.
 *
 * <p>Every state value is a deterministic function of the key and of n, the number of events that key has seen, so
 * a test recomputes the exact expected state from n alone. Because the source is a single ordered sequence whose
 * position is part of the savepoint, the first event a key receives after a restore (sequence number s) also says
 * what n must have been restored: n = (s - keyIndex) / keys.
 *
 * <p>On the first event of each key in a run (fresh start or restore) the job appends one JSON line describing the
 * state it found to a file under {@code --audit-dir}: that is how tests check a restore value by value.
 *
 * <p>Program arguments: {@code --keys N} (default 10), {@code --rate EVENTS_PER_SECOND} (default 100),
 * {@code --audit-dir DIR}, {@code --checkpoint-interval-ms MS} (default 2000), {@code --max-parallelism N},
 * {@code --set key=value} (repeatable: any Flink configuration option for this job, e.g.
 * {@code state.backend.type=rocksdb}), {@code --crash-on-start true} (every task attempt fails in open(): a release
 * that cannot run, for rollback tests).
 */
public final class KeyedStatsJob {

    public static final String OPERATOR_UID = "stats";
    public static final String SOURCE_UID = "sequence-source";

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        Map<String, String> flinkConf = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String name = args[i];
            if (!name.startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("expected --name value pairs, got: " + name);
            }
            String value = args[++i];
            if (name.equals("--set")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--set expects key=value, got: " + value);
                }
                flinkConf.put(value.substring(0, eq), value.substring(eq + 1));
            } else {
                options.put(name.substring(2), value);
            }
        }
        int keys = Integer.parseInt(options.getOrDefault("keys", "10"));
        double rate = Double.parseDouble(options.getOrDefault("rate", "100"));
        long checkpointInterval = Long.parseLong(options.getOrDefault("checkpoint-interval-ms", "2000"));
        String auditDir = options.get("audit-dir");
        boolean crashOnStart = Boolean.parseBoolean(options.getOrDefault("crash-on-start", "false"));

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(flinkConf));
        if (options.containsKey("max-parallelism")) {
            env.setMaxParallelism(Integer.parseInt(options.get("max-parallelism")));
        }
        if (checkpointInterval > 0) {
            env.enableCheckpointing(checkpointInterval);
        }

        DataGeneratorSource<Long> source =
                new DataGeneratorSource<>(
                        seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), Types.LONG);

        env.fromSource(source, WatermarkStrategy.noWatermarks(), "sequence")
                .uid(SOURCE_UID)
                .setParallelism(1)
                .keyBy(seq -> keyOf(seq, keys), Types.STRING)
                .process(new StatsFunction(keys, auditDir, crashOnStart))
                .uid(OPERATOR_UID)
                .name("stats")
                .sinkTo(new DiscardingSink<>())
                .name("discard");

        env.execute("keyed-stats-" + Stats.VERSION);
    }

    static String keyOf(long seq, int keys) {
        return "key-" + (seq % keys);
    }

    /** Row(id INT, label STRING, ratio DOUBLE), the MapState value type. */
    static final TypeInformation<Row> BUCKET_TYPE =
            Types.ROW_NAMED(
                    new String[] {"id", "label", "ratio"}, Types.INT, Types.STRING, Types.DOUBLE);

    /** Keeps the sample state; see the class comment for what each value holds. */
    static final class StatsFunction extends KeyedProcessFunction<String, Long, String> {
        private static final long TIMER_PERIOD_MS = 600_000L;
        private static final int RECENT = 3;
        private static final int BUCKETS = 4;

        private final int keys;
        private final String auditDir;
        private final boolean crashOnStart;

        private transient ValueState<Stats> stats;
        private transient ValueState<Long> count;
        private transient ListState<Tuple2<Long, String>> recent;
        private transient MapState<String, Row> buckets;
        private transient Set<String> audited;
        private transient Writer audit;

        StatsFunction(int keys, String auditDir, boolean crashOnStart) {
            this.keys = keys;
            this.auditDir = auditDir;
            this.crashOnStart = crashOnStart;
        }

        @Override
        public void open(OpenContext openContext) throws IOException {
            if (crashOnStart) {
                throw new IllegalStateException("sample job " + Stats.VERSION + " crashes on start (--crash-on-start)");
            }
            stats = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", Stats.class));
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            recent =
                    getRuntimeContext()
                            .getListState(
                                    new ListStateDescriptor<>(
                                            "recent", new TypeHint<Tuple2<Long, String>>() {}.getTypeInfo()));
            buckets =
                    getRuntimeContext()
                            .getMapState(new MapStateDescriptor<>("buckets", Types.STRING, BUCKET_TYPE));
            audited = new HashSet<>();
            if (auditDir != null) {
                int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
                int attempt = getRuntimeContext().getTaskInfo().getAttemptNumber();
                Path dir = Paths.get(auditDir);
                Files.createDirectories(dir);
                String file =
                        String.format(
                                "audit-%s-%d-%d-%s.jsonl", Stats.VERSION, subtask, attempt, UUID.randomUUID());
                audit =
                        Files.newBufferedWriter(
                                dir.resolve(file),
                                StandardCharsets.UTF_8,
                                StandardOpenOption.CREATE_NEW,
                                StandardOpenOption.WRITE);
            }
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<String> out) throws Exception {
            String key = ctx.getCurrentKey();
            Long restored = count.value();
            long n = restored == null ? 0 : restored;
            if (audited.add(key) && audit != null) {
                audit.write(auditLine(key, seq, restored));
                audit.write('\n');
                audit.flush();
            }
            long next = n + 1;
            count.update(next);
            stats.update(Stats.next(stats.value(), key, next));
            List<Tuple2<Long, String>> kept = new ArrayList<>();
            for (long m = Math.max(1, next - RECENT + 1); m <= next; m++) {
                kept.add(Tuple2.of(m, key + "#" + m));
            }
            recent.update(kept);
            buckets.put("b" + (next % BUCKETS), Row.of((int) next, key + "#" + next, next / 8.0));
            if (n == 0) {
                ctx.timerService()
                        .registerProcessingTimeTimer(
                                ctx.timerService().currentProcessingTime() + TIMER_PERIOD_MS);
            }
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<String> out) {
            ctx.timerService().registerProcessingTimeTimer(timestamp + TIMER_PERIOD_MS);
        }

        @Override
        public void close() throws IOException {
            if (audit != null) {
                audit.close();
            }
        }

        private String auditLine(String key, long seq, Long restoredCount) throws Exception {
            StringBuilder sb = new StringBuilder();
            sb.append("{\"version\":").append(Json.str(Stats.VERSION));
            sb.append(",\"key\":").append(Json.str(key));
            sb.append(",\"seq\":").append(seq);
            sb.append(",\"keys\":").append(keys);
            sb.append(",\"subtask\":").append(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
            sb.append(",\"count\":").append(restoredCount == null ? "null" : restoredCount.toString());
            Stats s = stats.value();
            sb.append(",\"stats\":").append(s == null ? "null" : s.toJson());
            sb.append(",\"recent\":[");
            Iterable<Tuple2<Long, String>> items = recent.get();
            boolean first = true;
            if (items != null) {
                for (Tuple2<Long, String> t : items) {
                    sb.append(first ? "" : ",").append('[').append(t.f0).append(',').append(Json.str(t.f1)).append(']');
                    first = false;
                }
            }
            sb.append("],\"buckets\":{");
            Map<String, Row> sorted = new TreeMap<>();
            for (Map.Entry<String, Row> e : buckets.entries()) {
                sorted.put(e.getKey(), e.getValue());
            }
            first = true;
            for (Map.Entry<String, Row> e : sorted.entrySet()) {
                Row r = e.getValue();
                sb.append(first ? "" : ",").append(Json.str(e.getKey())).append(":[")
                        .append(r.getField(0)).append(',').append(Json.str((String) r.getField(1))).append(',')
                        .append(r.getField(2)).append(']');
                first = false;
            }
            sb.append("}}");
            return sb.toString();
        }
    }
}
