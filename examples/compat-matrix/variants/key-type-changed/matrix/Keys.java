package matrix;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;

/** The key: a Long {@code seq % keys}. */
final class Keys {
    static final TypeInformation<?> TYPE = Types.LONG;

    static Object of(long seq, int keys) {
        return seq % keys;
    }
}
