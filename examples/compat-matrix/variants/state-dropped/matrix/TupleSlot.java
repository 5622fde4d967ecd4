package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;

/** This version no longer has the {@code tuple} state. */
final class TupleSlot {
    TupleSlot(RuntimeContext ctx) {}

    String read() {
        return "null";
    }

    void write(String key, long n) {}
}
