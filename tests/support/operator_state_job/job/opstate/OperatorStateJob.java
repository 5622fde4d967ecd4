package opstate;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

/**
 * A job for the operator-state ground truth (tests/test_operator_state_flink.py): operator {@code tally}, a
 * {@link CheckpointedFunction}, keeps one {@link Tally} POJO per bucket of the sequence (seq % 3) in its operator
 * {@code ListState} {@code tallies} (split-distribute), registered in initializeState(). The Tally class is the
 * version's (v1/, v2/, v3/: its {@code count} field a long, then a String; v3: v1's and a {@code label}).
 *
 * <p>{@code --audit-dir DIR}: the operator writes {@code seen} there once it has counted 10 elements, and, when
 * restored, {@code restored} with every restored tally ({@code name=count}, one a line, in the state's order), which
 * the test compares with the savepoint's values.
 */
public final class OperatorStateJob {

    public static void main(String[] args) throws Exception {
        String auditDir = args.length >= 2 && "--audit-dir".equals(args[0]) ? args[1] : null;
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        env.fromSource(
                        new DataGeneratorSource<>(
                                seq -> seq, Long.MAX_VALUE, RateLimiterStrategy.perSecond(100), Types.LONG),
                        WatermarkStrategy.noWatermarks(),
                        "sequence")
                .uid("sequence-source")
                .map(new TallyFunction(auditDir))
                .uid("tally")
                .sinkTo(new DiscardingSink<>());
        env.execute("operator-state");
    }

    /** Counts the sequence per bucket into Tally POJOs kept in operator list state. */
    static final class TallyFunction extends RichMapFunction<Long, Long> implements CheckpointedFunction {
        private final String auditDir;
        private final List<Tally> current = new ArrayList<>();
        private transient ListState<Tally> tallies;
        private long counted;

        TallyFunction(String auditDir) {
            this.auditDir = auditDir;
        }

        @Override
        public void initializeState(FunctionInitializationContext context) throws Exception {
            tallies = context.getOperatorStateStore().getListState(new ListStateDescriptor<>("tallies", Tally.class));
            if (context.isRestored()) {
                StringBuilder restored = new StringBuilder();
                for (Tally tally : tallies.get()) {
                    current.add(tally);
                    restored.append(tally.describe()).append('\n');
                }
                audit("restored", restored.toString());
            }
        }

        @Override
        public Long map(Long seq) throws Exception {
            String name = "bucket-" + (seq % 3);
            Tally tally = current.stream().filter(t -> t.name.equals(name)).findFirst().orElse(null);
            if (tally == null) {
                tally = Tally.named(name);
                current.add(tally);
            }
            tally.increment();
            if (++counted == 10) {
                audit("seen", "");
            }
            return seq;
        }

        @Override
        public void snapshotState(FunctionSnapshotContext context) throws Exception {
            tallies.update(current);
        }

        private void audit(String file, String text) throws Exception {
            if (auditDir == null) {
                return;
            }
            Path dir = Paths.get(auditDir);
            Files.createDirectories(dir);
            Path staged = dir.resolve(file + ".tmp");
            Files.write(staged, text.getBytes(StandardCharsets.UTF_8));
            Files.move(staged, dir.resolve(file));
        }
    }
}
