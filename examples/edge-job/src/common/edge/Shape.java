package edge;

/**
 * A POJO base class whose state values are instances of its POJO subclasses {@link Circle} and {@link Square}
 * (not registered with Flink): PojoSerializer writes each value with its subclass's name and the subclass's own
 * PojoSerializer, and the snapshot lists those subclass serializers.
 */
public class Shape {
    public String key;
    public long n;

    public Shape() {}

    static Shape of(int k, String key, long n) {
        Shape s;
        if ((n + k) % 2 == 0) {
            Circle c = new Circle();
            c.radius = n / 4.0;
            s = c;
        } else {
            Square q = new Square();
            q.side = n * n;
            s = q;
        }
        s.key = key;
        s.n = n;
        return s;
    }

    String toJson() {
        return "{\"@class\":" + Json.str(getClass().getName()) + ",\"key\":" + Json.str(key) + ",\"n\":" + n
                + extraJson() + "}";
    }

    String extraJson() {
        return "";
    }
}
