package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.java.tuple.Tuple2;

import java.io.IOException;

/** State {@code tuple}: ValueState<Tuple2<Long, String>>. */
final class TupleSlot {
    private final ValueState<Tuple2<Long, String>> state;

    TupleSlot(RuntimeContext ctx) {
        state = ctx.getState(
                new ValueStateDescriptor<>("tuple", new TypeHint<Tuple2<Long, String>>() {}.getTypeInfo()));
    }

    String read() throws IOException {
        Tuple2<Long, String> t = state.value();
        return t == null ? "null" : "[" + t.f0 + "," + MatrixJob.Json.str(t.f1) + "]";
    }

    void write(String key, long n) throws IOException {
        state.update(Tuple2.of(n, key));
    }
}
