package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;

import java.io.IOException;
import java.time.Duration;

/** Variant ttl-enabled: ValueState<Long> {@code count} gains a TTL (one day: nothing expires in a test). */
final class CountSlot {
    private final ValueState<Long> state;

    CountSlot(RuntimeContext ctx) {
        ValueStateDescriptor<Long> descriptor = new ValueStateDescriptor<>("count", Types.LONG);
        descriptor.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofDays(1)).build());
        state = ctx.getState(descriptor);
    }

    Long read() throws IOException {
        return state.value();
    }

    void write(long n) throws IOException {
        state.update(n);
    }
}
