package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeHint;
import org.apache.flink.api.java.tuple.Tuple3;

import java.io.IOException;

/** State {@code tuple}: ValueState<Tuple3<Long, String, Integer>>. */
final class TupleSlot {
    private final ValueState<Tuple3<Long, String, Integer>> state;

    TupleSlot(RuntimeContext ctx) {
        state = ctx.getState(
                new ValueStateDescriptor<>("tuple", new TypeHint<Tuple3<Long, String, Integer>>() {}.getTypeInfo()));
    }

    String read() throws IOException {
        Tuple3<Long, String, Integer> t = state.value();
        return t == null ? "null" : "[" + t.f0 + "," + MatrixJob.Json.str(t.f1) + "," + t.f2 + "]";
    }

    void write(String key, long n) throws IOException {
        state.update(Tuple3.of(n, key, (int) n));
    }
}
