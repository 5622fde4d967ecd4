package sample;

/** v1 of the job's POJO state: what a key has seen so far. */
public class Stats {
    public static final String VERSION = "v1";

    public String key;
    public long count;
    public long total;

    public Stats() {}

    /** The state after the key's n-th event: count n, total 1 + 2 + ... + n. */
    static Stats next(Stats previous, String key, long n) {
        Stats s = new Stats();
        s.key = key;
        s.count = n;
        s.total = n * (n + 1) / 2;
        return s;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"count\":" + count + ",\"total\":" + total + "}";
    }
}
