package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;

import java.io.IOException;

/** State {@code color}: ValueState<Color> (Flink's EnumSerializer). */
final class ColorSlot {
    private final ValueState<Color> state;

    ColorSlot(RuntimeContext ctx) {
        state = ctx.getState(new ValueStateDescriptor<>("color", Color.class));
    }

    String read() throws IOException {
        Color c = state.value();
        return c == null ? "null" : MatrixJob.Json.str(c.name());
    }

    void write(long n) throws IOException {
        state.update(Color.of(n));
    }
}
