package sample;

/**
 * v3: {@code count} changes type from long to String. Flink refuses this (INCOMPATIBLE): the POJO serializer cannot
 * migrate a field whose type changed.
 */
public class Stats {
    public static final String VERSION = "v3";

    public String key;
    public String count;
    public long total;
    public String label;

    public Stats() {}

    static Stats next(Stats previous, String key, long n) {
        Stats s = new Stats();
        s.key = key;
        s.count = Long.toString(n);
        s.total = n * (n + 1) / 2;
        s.label = "label-" + key;
        return s;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"count\":" + Json.str(count) + ",\"total\":" + total
                + ",\"label\":" + Json.str(label) + "}";
    }
}
