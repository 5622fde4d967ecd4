package edge;

/**
 * Not a POJO (final fields, no default constructor), so Flink's type extraction makes it a GenericType and stores
 * it with Kryo: the {@code opaque} state.
 */
public final class Opaque {
    private final String key;
    private final long n;
    private final double ratio;

    public Opaque(String key, long n, double ratio) {
        this.key = key;
        this.n = n;
        this.ratio = ratio;
    }

    static Opaque of(String key, long n) {
        return new Opaque(key, n, n / 8.0);
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"n\":" + n + ",\"ratio\":" + ratio + "}";
    }
}
