package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;

import java.util.List;

/** State {@code count} as a ListState<Long> (the last element is the count). */
final class CountSlot {
    private final ListState<Long> state;

    CountSlot(RuntimeContext ctx) {
        state = ctx.getListState(new ListStateDescriptor<>("count", Types.LONG));
    }

    Long read() throws Exception {
        Long last = null;
        for (Long n : state.get()) {
            last = n;
        }
        return last;
    }

    void write(long n) throws Exception {
        state.update(List.of(n));
    }
}
