package edge;

import java.time.LocalDateTime;

/**
 * A POJO one of whose fields Flink stores with Kryo: {@code LocalDateTime} is neither a basic nor a SQL time type
 * for the type extractor and has no default constructor, so the field becomes a GenericType. Flink sorts POJO fields
 * by name (key, n, seen, tag), so the Kryo field sits in the middle of the record, not at its end.
 */
public class Stamped {
    public String key;
    public long n;
    public LocalDateTime seen;
    public String tag;

    public Stamped() {}

    static Stamped of(int k, String key, long n) {
        Stamped s = new Stamped();
        s.key = key;
        s.n = n;
        s.seen = Values.localDateTime(k, n + 2);
        s.tag = "t" + n;
        return s;
    }

    String toJson() {
        return "{\"key\":" + Json.str(key) + ",\"n\":" + n + ",\"seen\":" + Json.str(Values.iso(seen))
                + ",\"tag\":" + Json.str(tag) + "}";
    }
}
