package listmerge;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.GlobalWindow;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.UUID;

/**
 * A job whose keyed state RocksDB keeps as merge operands (tests/support/list_merge_job.py recomputes every value;
 * keep the two in step).
 *
 * <p>Source: the sequence 0, 1, 2, ... at parallelism 1 and a fixed rate; event time = the sequence number (ms);
 * keyed by {@code "key-" + seq % keys}. Because checkpoint barriers follow the records in order, every snapshot holds
 * the state after exactly a prefix 0..N-1 of the sequence, in both keyed operators.
 *
 * <ul>
 *   <li>{@code lists} (uid): a {@code ListState<String>} "added" filled only with {@code add()} (RocksDB: one merge
 *       operand per element), element {@code "<seq>,<key>"} (a comma inside the element: the list's delimiter is a
 *       comma too). On a key's first event in a run the job audits the list it found.</li>
 *   <li>{@code windows} (uid): tumbling event-time windows of {@code --window-ms} with a {@code ProcessWindowFunction},
 *       whose contents are Flink's list state "window-contents" (again one merge operand per element). The watermark
 *       trails the sequence by {@code --lag-ms}: a huge lag keeps every window open (the snapshots hold them all); a
 *       restored run with lag 0 fires them, and each fired window is audited with every element it held.</li>
 * </ul>
 *
 * <p>Audit lines (JSON, one file per subtask and attempt under {@code --audit-dir}):
 * {@code {"kind":"list","key":K,"seq":S,"found":[...]}} and
 * {@code {"kind":"window","key":K,"start":A,"end":B,"elements":[...]}}.
 *
 * <p>Arguments: {@code --keys N}, {@code --rate EVENTS_PER_SECOND}, {@code --window-ms MS}, {@code --lag-ms MS},
 * {@code --audit-dir DIR}, {@code --checkpoint-interval-ms MS} (0: none), {@code --set key=value} (repeatable: any
 * Flink option, e.g. {@code state.backend.type=rocksdb}), {@code --count-window N} (another version of the job: the
 * {@code windows} operator, same uid, counts N elements per key instead, in a {@code GlobalWindow}: its state's and
 * its timers' namespace is no longer a {@code TimeWindow}, which Flink cannot restore).
 */
public final class ListMergeJob {
    private ListMergeJob() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> options = new HashMap<>();
        Map<String, String> flinkConf = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            String value = args[i + 1];
            if (args[i].equals("--set")) {
                int eq = value.indexOf('=');
                if (eq <= 0) {
                    throw new IllegalArgumentException("--set expects key=value, got: " + value);
                }
                flinkConf.put(value.substring(0, eq), value.substring(eq + 1));
            } else {
                options.put(args[i].replaceFirst("^--", ""), value);
            }
        }
        int keys = Integer.parseInt(options.getOrDefault("keys", "8"));
        double rate = Double.parseDouble(options.getOrDefault("rate", "400"));
        long windowMs = Long.parseLong(options.getOrDefault("window-ms", "40"));
        long lagMs = Long.parseLong(options.getOrDefault("lag-ms", "0"));
        long checkpointInterval = Long.parseLong(options.getOrDefault("checkpoint-interval-ms", "0"));
        String auditDir = options.get("audit-dir");

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(flinkConf));
        if (checkpointInterval > 0) {
            env.enableCheckpointing(checkpointInterval);
        }
        DataGeneratorSource<Long> source =
                new DataGeneratorSource<>(seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), Types.LONG);
        WatermarkStrategy<Long> watermarks =
                WatermarkStrategy.<Long>forBoundedOutOfOrderness(Duration.ofMillis(lagMs))
                        .withTimestampAssigner((seq, previous) -> seq);
        KeyedStream<Long, String> keyed =
                env.fromSource(source, watermarks, "sequence")
                        .uid("sequence-source")
                        .setParallelism(1)
                        .keyBy(seq -> "key-" + (seq % keys), Types.STRING);
        keyed.process(new Lists(auditDir)).uid("lists").name("lists").sinkTo(new DiscardingSink<>());
        long countWindow = Long.parseLong(options.getOrDefault("count-window", "0"));
        if (countWindow > 0) {
            keyed.countWindow(countWindow)
                    .process(new CountWindows())
                    .uid("windows")
                    .name("windows")
                    .sinkTo(new DiscardingSink<>());
        } else {
            keyed.window(TumblingEventTimeWindows.of(Duration.ofMillis(windowMs)))
                    .process(new Windows(auditDir))
                    .uid("windows")
                    .name("windows")
                    .sinkTo(new DiscardingSink<>());
        }
        env.execute("list-merge");
    }

    /** One audit file per subtask and attempt (none without --audit-dir). */
    static Writer openAudit(String auditDir, String kind, int subtask, int attempt) throws IOException {
        if (auditDir == null) {
            return null;
        }
        Path dir = Paths.get(auditDir);
        Files.createDirectories(dir);
        String file = String.format("audit-%s-%d-%d-%s.jsonl", kind, subtask, attempt, UUID.randomUUID());
        return Files.newBufferedWriter(
                dir.resolve(file), StandardCharsets.UTF_8, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
    }

    /** The elements are plain ASCII without quotes or backslashes: no escaping needed. */
    static String quoted(String s) {
        return '"' + s + '"';
    }

    /** ListState filled with add() only; audits the list a key finds at its first event of the run. */
    static final class Lists extends KeyedProcessFunction<String, Long, String> {
        private final String auditDir;
        private transient ListState<String> added;
        private transient Set<String> audited;
        private transient Writer audit;

        Lists(String auditDir) {
            this.auditDir = auditDir;
        }

        @Override
        public void open(OpenContext openContext) throws IOException {
            added = getRuntimeContext().getListState(new ListStateDescriptor<>("added", Types.STRING));
            audited = new HashSet<>();
            audit = openAudit(auditDir, "lists", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    getRuntimeContext().getTaskInfo().getAttemptNumber());
        }

        @Override
        public void processElement(Long seq, Context ctx, Collector<String> out) throws Exception {
            String key = ctx.getCurrentKey();
            if (audited.add(key) && audit != null) {
                StringBuilder line = new StringBuilder("{\"kind\":\"list\",\"key\":").append(quoted(key))
                        .append(",\"seq\":").append(seq).append(",\"found\":[");
                boolean first = true;
                Iterable<String> found = added.get();
                if (found != null) {
                    for (String element : found) {
                        line.append(first ? "" : ",").append(quoted(element));
                        first = false;
                    }
                }
                audit.write(line.append("]}\n").toString());
                audit.flush();
            }
            added.add(seq + "," + key);
        }

        @Override
        public void close() throws IOException {
            if (audit != null) {
                audit.close();
            }
        }
    }

    /** Audits every window it fires with the elements Flink held for it. */
    static final class Windows extends ProcessWindowFunction<Long, String, String, TimeWindow> {
        private final String auditDir;
        private transient Writer audit;

        Windows(String auditDir) {
            this.auditDir = auditDir;
        }

        @Override
        public void open(OpenContext openContext) throws IOException {
            audit = openAudit(auditDir, "windows", getRuntimeContext().getTaskInfo().getIndexOfThisSubtask(),
                    getRuntimeContext().getTaskInfo().getAttemptNumber());
        }

        @Override
        public void process(String key, Context context, Iterable<Long> elements, Collector<String> out)
                throws IOException {
            if (audit == null) {
                return;
            }
            StringBuilder line = new StringBuilder("{\"kind\":\"window\",\"key\":").append(quoted(key))
                    .append(",\"start\":").append(context.window().getStart())
                    .append(",\"end\":").append(context.window().getEnd()).append(",\"elements\":[");
            boolean first = true;
            for (Long element : elements) {
                line.append(first ? "" : ",").append(element);
                first = false;
            }
            audit.write(line.append("]}\n").toString());
            audit.flush();
        }

        @Override
        public void close() throws IOException {
            if (audit != null) {
                audit.close();
            }
        }
    }

    /** The count-window version's function: each window's number of elements. */
    static final class CountWindows extends ProcessWindowFunction<Long, String, String, GlobalWindow> {
        @Override
        public void process(String key, Context context, Iterable<Long> elements, Collector<String> out) {
            long count = 0;
            for (Long ignored : elements) {
                count++;
            }
            out.collect(key + ":" + count);
        }
    }
}
