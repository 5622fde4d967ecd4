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

    /**
     * A Circle when {@code n + k} is even, else a Square: every key alternates, so every subtask meets both. With
     * {@code byKey}, a Circle when {@code k} is even: each key keeps one subclass, so a subtask whose keys are all even
     * (or all odd) meets only one, and the subtasks' serializer snapshots of the state differ (each PojoSerializer
     * caches the subclasses it met).
     */
    static Shape of(int k, String key, long n, boolean byKey) {
        Shape s;
        if (((byKey ? 0 : n) + k) % 2 == 0) {
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
