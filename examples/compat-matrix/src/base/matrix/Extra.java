package matrix;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/** A second keyed operator (uid {@code extra}) with ValueState<Long> {@code seen}. */
final class Extra {
    static DataStream<String> attach(DataStream<String> in) {
        KeySelector<String, String> identity = s -> s;
        return in.keyBy(identity, Types.STRING).process(new SeenFunction()).uid("extra").name("extra");
    }

    static final class SeenFunction extends KeyedProcessFunction<String, String, String> {
        private transient ValueState<Long> seen;

        @Override
        public void open(OpenContext openContext) {
            seen = getRuntimeContext().getState(new ValueStateDescriptor<>("seen", Types.LONG));
        }

        @Override
        public void processElement(String key, Context ctx, Collector<String> out) throws Exception {
            Long n = seen.value();
            seen.update(n == null ? 1 : n + 1);
            out.collect(key);
        }
    }
}
