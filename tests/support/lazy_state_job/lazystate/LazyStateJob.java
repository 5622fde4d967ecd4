package lazystate;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;

/**
 * A job for the jar inspector's tests (tests/test_jar_schema.py): operator {@code lazy} registers its ValueState
 * {@code count} in open() but its MapState {@code seen} only on its first element (lazily), and the operator after it
 * has no uid (Flink generates its id) and registers ValueState {@code total} in open().
 *
 * <p>main() needs its arguments: {@code --keys N}, given directly or in a properties file ({@code --config FILE},
 * line {@code keys=N}); without them it fails. {@code --marker-dir DIR}: {@code lazy} creates a file there once it
 * has registered {@code seen}. {@code --hang-in-main true}: main() never returns (for the inspector's time limit).
 */
public final class LazyStateJob {

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        if (options.containsKey("config")) {
            Properties config = new Properties();
            config.load(new StringReader(Files.readString(Paths.get(options.get("config")))));
            for (String name : config.stringPropertyNames()) {
                options.putIfAbsent(name, config.getProperty(name));
            }
        }
        if ("true".equals(options.get("hang-in-main"))) {
            Thread.sleep(Long.MAX_VALUE);
        }
        if (!options.containsKey("keys")) {
            throw new IllegalArgumentException("LazyStateJob needs --keys N (or keys=N in --config FILE)");
        }
        int keys = Integer.parseInt(options.get("keys"));
        String markerDir = options.get("marker-dir");

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.fromSource(
                        new DataGeneratorSource<>(
                                seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(200), Types.LONG),
                        WatermarkStrategy.noWatermarks(),
                        "sequence")
                .uid("sequence-source")
                .keyBy(seq -> "key-" + (seq % keys), Types.STRING)
                .process(new LazyFunction(markerDir))
                .uid("lazy")
                .keyBy(key -> key, Types.STRING)
                .process(new TotalFunction())
                .sinkTo(new DiscardingSink<>());
        env.execute("lazy-state");
    }

    /** {@code count} registered in open(); {@code seen} registered on the first element. */
    static final class LazyFunction extends KeyedProcessFunction<String, Long, String> {
        private final String markerDir;
        private transient ValueState<Long> count;
        private transient MapState<String, Long> seen;

        LazyFunction(String markerDir) {
            this.markerDir = markerDir;
        }

        @Override
        public void open(OpenContext openContext) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<String> out) throws Exception {
            if (seen == null) {
                seen = getRuntimeContext().getMapState(new MapStateDescriptor<>("seen", Types.STRING, Types.LONG));
                if (markerDir != null) {
                    Path dir = Paths.get(markerDir);
                    Files.createDirectories(dir);
                    Files.write(dir.resolve("seen-" + getRuntimeContext().getTaskInfo().getIndexOfThisSubtask()),
                            new byte[0]);
                }
            }
            Long n = count.value();
            count.update(n == null ? 1L : n + 1);
            seen.put(ctx.getCurrentKey(), seq);
            out.collect(ctx.getCurrentKey());
        }
    }

    /** {@code total}, registered in open(), on an operator without a uid. */
    static final class TotalFunction extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Long> total;

        @Override
        public void open(OpenContext openContext) throws IOException {
            total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
        }

        @Override
        public void processElement(String key, Context ctx, Collector<String> out) throws Exception {
            Long n = total.value();
            total.update(n == null ? 1L : n + 1);
        }
    }
}
