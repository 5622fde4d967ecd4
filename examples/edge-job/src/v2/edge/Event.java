package edge;

import java.time.Instant;

/**
 * v2 of the {@code event} POJO: gains a primitive {@code long added} and a boxed {@code Long boxedAdded}, nothing
 * else changes. Flink's own POJO migration restores them as 0 and null (no initializers here on purpose: Flink
 * would keep an initializer's value, and the tests compare with Java's defaults).
 */
public class Event {
    public static final String VERSION = "v2";

    public String key;
    public long n;
    public Instant at;
    public long added;
    public Long boxedAdded;

    public Event() {}

    static Event of(int k, String key, long n) {
        Event e = new Event();
        e.key = key;
        e.n = n;
        e.at = Values.instant(k, n + 1);
        e.added = n * 10;
        e.boxedAdded = -n;
        return e;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"n\":" + n + ",\"at\":" + Json.str(Values.iso(at))
                + ",\"added\":" + added + ",\"boxedAdded\":" + boxedAdded + "}";
    }
}
