package sample;

/** v2: the POJO gains a field, {@code label}. Flink migrates this (COMPATIBLE_AFTER_MIGRATION): restored null. */
public class Stats {
    public static final String VERSION = "v2";

    public String key;
    public long count;
    public long total;
    public String label;

    public Stats() {}

    static Stats next(Stats previous, String key, long n) {
        Stats s = new Stats();
        s.key = key;
        s.count = n;
        s.total = n * (n + 1) / 2;
        s.label = "label-" + key;
        return s;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"count\":" + count + ",\"total\":" + total
                + ",\"label\":" + Json.str(label) + "}";
    }
}
