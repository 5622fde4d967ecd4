package edge;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;

/**
 * The edge-types job: the sample job's shape (an unbounded, throttled sequence keyed by {@code "key-" + (seq %
 * keys)}, one keyed operator, uid {@code edge}) holding the types savepoint tools get wrong: times with nanoseconds
 * and years outside 1970..9999, a POJO that gains fields, Kryo values (a GenericType and a POJO with a Kryo field),
 * and POJO subclass values.
 *
 * <p>Every state value is a function of (key, n), n = events the key has seen (see {@link Values}). On the first
 * event of each key in a run the job appends one JSON line with every state value it found, at full precision, to a
 * file under {@code --audit-dir}; the sequence number of that event says what n must have been restored:
 * n = (seq - keyIndex) / keys.
 *
 * <p>Program arguments: {@code --keys N} (default 10), {@code --rate EVENTS_PER_SECOND} (default 100),
 * {@code --audit-dir DIR}, {@code --checkpoint-interval-ms MS} (default 2000), {@code --max-parallelism N},
 * {@code --set key=value} (repeatable: any Flink option for this job, e.g. {@code state.backend.type=rocksdb}),
 * {@code --shape-by-key true} (each key keeps one {@link Shape} subclass: see {@link Shape#of}).
 */
public final class EdgeJob {

    public static final String OPERATOR_UID = "edge";
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
        boolean shapeByKey = Boolean.parseBoolean(options.getOrDefault("shape-by-key", "false"));

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
                .keyBy(seq -> "key-" + (seq % keys), Types.STRING)
                .process(new EdgeFunction(keys, auditDir, shapeByKey))
                .uid(OPERATOR_UID)
                .name("edge")
                .sinkTo(new DiscardingSink<>())
                .name("discard");

        env.execute("edge-types-" + Event.VERSION);
    }

    /** Keeps the edge state; see the class comment and {@link Values} for what each value holds. */
    static final class EdgeFunction extends KeyedProcessFunction<String, Long, String> {
        private static final int RECENT = 3;
        private static final int SLOTS = 3;

        private final int keys;
        private final String auditDir;
        private final boolean shapeByKey;

        private transient ValueState<Long> count;
        private transient ValueState<Instant> instant;
        private transient ValueState<LocalDateTime> localDateTime;
        private transient ValueState<LocalTime> localTime;
        private transient ValueState<Timestamp> sqlTimestamp;
        private transient ValueState<Event> event;
        private transient ValueState<Stamped> stamped;
        private transient ValueState<Opaque> opaque;
        private transient ValueState<Shape> shape;
        private transient ListState<Instant> recent;
        private transient MapState<String, LocalDateTime> slots;
        private transient Set<String> audited;
        private transient Writer audit;

        EdgeFunction(int keys, String auditDir, boolean shapeByKey) {
            this.keys = keys;
            this.auditDir = auditDir;
            this.shapeByKey = shapeByKey;
        }

        @Override
        public void open(OpenContext openContext) throws IOException {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            // The explicit time types: by class, LocalDateTime/LocalTime would be GenericTypes (Kryo).
            instant = getRuntimeContext().getState(new ValueStateDescriptor<>("instant", Types.INSTANT));
            localDateTime =
                    getRuntimeContext()
                            .getState(new ValueStateDescriptor<>("local_date_time", Types.LOCAL_DATE_TIME));
            localTime = getRuntimeContext().getState(new ValueStateDescriptor<>("local_time", Types.LOCAL_TIME));
            sqlTimestamp =
                    getRuntimeContext().getState(new ValueStateDescriptor<>("sql_timestamp", Types.SQL_TIMESTAMP));
            // By class: Flink's type extraction decides (POJO, POJO with a GenericType field, GenericType).
            event = getRuntimeContext().getState(new ValueStateDescriptor<>("event", Event.class));
            stamped = getRuntimeContext().getState(new ValueStateDescriptor<>("stamped", Stamped.class));
            opaque = getRuntimeContext().getState(new ValueStateDescriptor<>("opaque", Opaque.class));
            shape = getRuntimeContext().getState(new ValueStateDescriptor<>("shape", Shape.class));
            recent = getRuntimeContext().getListState(new ListStateDescriptor<>("recent", Types.INSTANT));
            slots =
                    getRuntimeContext()
                            .getMapState(new MapStateDescriptor<>("slots", Types.STRING, Types.LOCAL_DATE_TIME));
            audited = new HashSet<>();
            if (auditDir != null) {
                int subtask = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
                int attempt = getRuntimeContext().getTaskInfo().getAttemptNumber();
                Path dir = Paths.get(auditDir);
                Files.createDirectories(dir);
                String file =
                        String.format(
                                "audit-%s-%d-%d-%s.jsonl", Event.VERSION, subtask, attempt, UUID.randomUUID());
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
            int k = Integer.parseInt(key.substring(key.lastIndexOf('-') + 1));
            Long restored = count.value();
            long n = restored == null ? 0 : restored;
            if (audited.add(key) && audit != null) {
                audit.write(auditLine(key, seq, restored));
                audit.write('\n');
                audit.flush();
            }
            long next = n + 1;
            count.update(next);
            instant.update(Values.instant(k, next));
            localDateTime.update(Values.localDateTime(k, next));
            localTime.update(Values.localTime(k, next));
            sqlTimestamp.update(Values.sqlTimestamp(k, next));
            event.update(Event.of(k, key, next));
            stamped.update(Stamped.of(k, key, next));
            opaque.update(Opaque.of(key, next));
            shape.update(Shape.of(k, key, next, shapeByKey));
            List<Instant> kept = new ArrayList<>();
            for (long m = Math.max(1, next - RECENT + 1); m <= next; m++) {
                kept.add(Values.instant(k, m + 3));
            }
            recent.update(kept);
            slots.put("s" + (next % SLOTS), Values.localDateTime(k, next + 3));
        }

        @Override
        public void close() throws IOException {
            if (audit != null) {
                audit.close();
            }
        }

        private String auditLine(String key, long seq, Long restoredCount) throws Exception {
            StringBuilder sb = new StringBuilder();
            sb.append("{\"version\":").append(Json.str(Event.VERSION));
            sb.append(",\"key\":").append(Json.str(key));
            sb.append(",\"seq\":").append(seq);
            sb.append(",\"keys\":").append(keys);
            sb.append(",\"subtask\":").append(getRuntimeContext().getTaskInfo().getIndexOfThisSubtask());
            sb.append(",\"count\":").append(restoredCount == null ? "null" : restoredCount.toString());
            sb.append(",\"instant\":").append(Json.str(Values.iso(instant.value())));
            sb.append(",\"local_date_time\":").append(Json.str(Values.iso(localDateTime.value())));
            sb.append(",\"local_time\":").append(Json.str(Values.iso(localTime.value())));
            sb.append(",\"sql_timestamp\":").append(Json.str(Values.iso(sqlTimestamp.value())));
            Event e = event.value();
            sb.append(",\"event\":").append(e == null ? "null" : e.toJson());
            Stamped s = stamped.value();
            sb.append(",\"stamped\":").append(s == null ? "null" : s.toJson());
            Opaque o = opaque.value();
            sb.append(",\"opaque\":").append(o == null ? "null" : o.toJson());
            Shape sh = shape.value();
            sb.append(",\"shape\":").append(sh == null ? "null" : sh.toJson());
            sb.append(",\"recent\":[");
            Iterable<Instant> items = recent.get();
            boolean first = true;
            if (items != null) {
                for (Instant t : items) {
                    sb.append(first ? "" : ",").append(Json.str(Values.iso(t)));
                    first = false;
                }
            }
            sb.append("],\"slots\":{");
            Map<String, LocalDateTime> sorted = new TreeMap<>();
            for (Map.Entry<String, LocalDateTime> entry : slots.entries()) {
                sorted.put(entry.getKey(), entry.getValue());
            }
            first = true;
            for (Map.Entry<String, LocalDateTime> entry : sorted.entrySet()) {
                sb.append(first ? "" : ",").append(Json.str(entry.getKey())).append(':')
                        .append(Json.str(Values.iso(entry.getValue())));
                first = false;
            }
            sb.append("}}");
            return sb.toString();
        }
    }
}
