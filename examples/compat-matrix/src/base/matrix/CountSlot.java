package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;

import java.io.IOException;

/** State {@code count}: ValueState<Long>, the key's event count. */
final class CountSlot {
    private final ValueState<Long> state;

    CountSlot(RuntimeContext ctx) {
        state = ctx.getState(new ValueStateDescriptor<>("count", Types.LONG));
    }

    Long read() throws IOException {
        return state.value();
    }

    void write(long n) throws IOException {
        state.update(n);
    }
}
