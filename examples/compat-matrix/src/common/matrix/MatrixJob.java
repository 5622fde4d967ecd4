package matrix;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.datastream.DataStream;
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
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.UUID;

/**
 * The compatibility matrix job: one keyed operator (uid {@code matrix}) holding one state per serializer family the
 * matrix changes (POJO, Row, Tuple, enum, a Long counter), and a second keyed operator (uid {@code extra}).
 *
 * <p>The base version lives in {@code src/base}; each directory under {@code variants/} overrides the few files one
 * change touches (see build.sh). Every value is a function of the key and of n, the key's event count, and on the
 * first event of each key in a run the job writes one JSON line with the state it found to {@code --audit-dir}.
 *
 * <p>Program arguments: {@code --keys N}, {@code --rate EVENTS_PER_SECOND}, {@code --audit-dir DIR},
 * {@code --variant NAME}, {@code --set key=value} (any Flink option, e.g. {@code state.backend.type=rocksdb}).
 */
public final class MatrixJob {

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        Map<String, String> flinkConf = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].equals("--set")) {
                String[] kv = args[i + 1].split("=", 2);
                flinkConf.put(kv[0], kv[1]);
            } else {
                options.put(args[i].substring(2), args[i + 1]);
            }
        }
        int keys = Integer.parseInt(options.getOrDefault("keys", "5"));
        double rate = Double.parseDouble(options.getOrDefault("rate", "50"));
        String variant = options.getOrDefault("variant", "base");
        String auditDir = options.get("audit-dir");

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(flinkConf));
        DataGeneratorSource<Long> source =
                new DataGeneratorSource<>(seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), Types.LONG);
        @SuppressWarnings({"unchecked", "rawtypes"})
        TypeInformation<Object> keyType = (TypeInformation) Keys.TYPE;
        KeySelector<Long, Object> selector = seq -> Keys.of(seq, keys);
        DataStream<String> out =
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "sequence")
                        .uid("sequence-source")
                        .setParallelism(1)
                        .keyBy(selector, keyType)
                        .process(new MatrixFunction(keys, auditDir, variant))
                        .uid("matrix")
                        .name("matrix");
        Extra.attach(out).sinkTo(new DiscardingSink<>()).name("discard");
        env.execute("compat-matrix-" + variant);
    }

    /** Keeps one state per slot; the slots are what the variants change. */
    static final class MatrixFunction extends KeyedProcessFunction<Object, Long, String> {
        private final int keys;
        private final String auditDir;
        private final String variant;
        private transient CountSlot count;
        private transient PojoSlot pojo;
        private transient RowSlot row;
        private transient TupleSlot tuple;
        private transient ColorSlot color;
        private transient Set<String> audited;
        private transient Writer audit;

        MatrixFunction(int keys, String auditDir, String variant) {
            this.keys = keys;
            this.auditDir = auditDir;
            this.variant = variant;
        }

        @Override
        public void open(OpenContext openContext) throws IOException {
            count = new CountSlot(getRuntimeContext());
            pojo = new PojoSlot(getRuntimeContext());
            row = new RowSlot(getRuntimeContext());
            tuple = new TupleSlot(getRuntimeContext());
            color = new ColorSlot(getRuntimeContext());
            audited = new HashSet<>();
            if (auditDir != null) {
                Path dir = Paths.get(auditDir);
                Files.createDirectories(dir);
                String file = String.format("audit-%s-%d-%s.jsonl", variant,
                        getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(), UUID.randomUUID());
                audit = Files.newBufferedWriter(dir.resolve(file), StandardCharsets.UTF_8,
                        StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
            }
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<String> out) throws Exception {
            String key = String.valueOf(ctx.getCurrentKey());
            Long restored = count.read();
            long n = restored == null ? 0 : restored;
            if (audited.add(key) && audit != null) {
                audit.write("{\"variant\":" + Json.str(variant) + ",\"key\":" + Json.str(key) + ",\"seq\":" + seq
                        + ",\"keys\":" + keys + ",\"count\":" + restored + ",\"pojo\":" + pojo.read()
                        + ",\"row\":" + row.read() + ",\"tuple\":" + tuple.read() + ",\"color\":" + color.read()
                        + "}\n");
                audit.flush();
            }
            long next = n + 1;
            count.write(next);
            pojo.write(key, next);
            row.write(key, next);
            tuple.write(key, next);
            color.write(next);
            out.collect(key);
        }

        @Override
        public void close() throws IOException {
            if (audit != null) {
                audit.close();
            }
        }
    }

    /** JSON string literals. */
    static final class Json {
        static String str(String s) {
            if (s == null) {
                return "null";
            }
            return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        }
    }
}
