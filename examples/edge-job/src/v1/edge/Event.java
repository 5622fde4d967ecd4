package edge;

import java.time.Instant;

/** v1 of the {@code event} POJO. */
public class Event {
    public static final String VERSION = "v1";

    public String key;
    public long n;
    public Instant at;

    public Event() {}

    static Event of(int k, String key, long n) {
        Event e = new Event();
        e.key = key;
        e.n = n;
        e.at = Values.instant(k, n + 1);
        return e;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"n\":" + n + ",\"at\":" + Json.str(Values.iso(at)) + "}";
    }
}
