package matrix;

import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;

import java.io.IOException;

/** State {@code pojo}: ValueState<Article>. */
final class PojoSlot {
    private final ValueState<Article> state;

    PojoSlot(RuntimeContext ctx) {
        state = ctx.getState(new ValueStateDescriptor<>("pojo", Article.class));
    }

    String read() throws IOException {
        Article item = state.value();
        return item == null ? "null" : item.toJson();
    }

    void write(String key, long n) throws IOException {
        state.update(Article.of(key, n));
    }
}
