package matrix;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;

/** The key: a String {@code k-<seq % keys>}. */
final class Keys {
    static final TypeInformation<?> TYPE = Types.STRING;

    static Object of(long seq, int keys) {
        return "k-" + (seq % keys);
    }
}
