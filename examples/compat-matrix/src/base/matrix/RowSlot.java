package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.types.Row;

import java.io.IOException;

/** State {@code row}: ValueState<Row(id INT, label STRING, note STRING)>. */
final class RowSlot {
    static final String[] NAMES = {"id", "label", "note"};
    static final TypeInformation<Row> TYPE = Types.ROW_NAMED(NAMES, Types.INT, Types.STRING, Types.STRING);
    private final ValueState<Row> state;

    RowSlot(RuntimeContext ctx) {
        state = ctx.getState(new ValueStateDescriptor<>("row", TYPE));
    }

    /** The row as a JSON object, reading each position under this version's field name. */
    String read() throws IOException {
        Row row = state.value();
        if (row == null) {
            return "null";
        }
        StringBuilder sb = new StringBuilder("{");
        for (int i = 0; i < NAMES.length; i++) {
            Object v = row.getField(i);
            sb.append(i == 0 ? "" : ",").append(MatrixJob.Json.str(NAMES[i])).append(':')
                    .append(v instanceof String ? MatrixJob.Json.str((String) v) : String.valueOf(v));
        }
        return sb.append('}').toString();
    }

    void write(String key, long n) throws IOException {
        state.update(Row.of((int) n, key + "#" + n, "note-" + n));
    }
}
