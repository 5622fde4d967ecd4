package kryojob;

import flinkstate.inspector.KryoLayouts;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;

import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializer;
import org.apache.flink.core.memory.DataOutputSerializer;

/**
 * Records of user classes (Kryo's FieldSerializer) written by Flink's own KryoSerializer, one JSON line each
 * ({"name", "type", "hex"}), then {"layouts": [...]}: the class layouts the inspector's KryoLayouts reads from this
 * Kryo (user classes with every kind of field, object arrays of them, generic classes). Run on Flink 1.20.3 (Kryo
 * 2.24) and on Flink 2.3 (Kryo 5.6) with the same values (a seeded Random), so
 * tests/test_kryo_user_classes.py can carry each 1.20.3 record to Kryo 5 and compare it with 2.3's bytes.
 */
public final class KryoUserClasses {
    public enum Color { RED, GREEN, BLUE }

    /** Final fields and no default constructor: not a POJO, Kryo in both Flinks; a double[] among them. */
    public static final class Reading {
        final String sensor;
        final double[] samples;
        final long at;
        final Color color;

        Reading(String sensor, double[] samples, long at, Color color) {
            this.sensor = sensor;
            this.samples = samples;
            this.at = at;
            this.color = color;
        }
    }

    /** Every shape of field: primitives, boxed, user classes (itself too), generic collections, arrays, Object. */
    public static class Node {
        public int id;
        public long big;
        public Integer boxed;
        public String label;
        public Node next;
        public List<Node> children;
        public Map<String, Long> weights;
        public Color color;
        public double[] values;
        public ArrayList<Double> doubles;
        public Object any;
        public char c;
        public boolean flag;
        public float f;
        public short s;
        public byte b;
        public List<List<Long>> nested;
        public Map<String, List<Long>> groups;
        public Reading reading;
        public Set<String> tags;
        public int[] ints;
        public String[] names;
        private transient int cached; // transient: not written by either Kryo

        public Node() {}
    }

    /** Not final: an array of it (Point[]) and a field of it write each value's class. */
    public static class Point {
        public int x;
        public String tag;

        public Point() {}

        Point(int x, String tag) {
            this.x = x;
            this.tag = tag;
        }
    }

    /** A generic class: its T fields are written as class and object where T is not bound to a final class. */
    public static class Box<T> {
        public T item;
        public List<T> items;
        public int size;

        public Box() {}
    }

    /** A generic class bound to a final class in a field (Pair<String>): Kryo then writes its field as a String. */
    public static class Pair<A> {
        public A first;

        public Pair() {}
    }

    /** Object arrays of user classes (final elements or not, enums, nested) and a generic class bound to Point. */
    public static class Holder {
        public Point[] points;
        public Reading[] readings;
        public Color[] colors;
        public Object[] objects;
        public Point[][] grid;
        public Box<Point> box;

        public Holder() {}
    }

    public static class Labelled {
        public Pair<String> pair;

        public Labelled() {}
    }

    private static final StringBuilder OUT = new StringBuilder();

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) sb.append(String.format("%02x", b));
        return sb.toString();
    }

    private static void write(String name, Class<?> type, Object value) throws Exception {
        @SuppressWarnings("unchecked")
        KryoSerializer<Object> serializer =
                new KryoSerializer<>((Class<Object>) type, new SerializerConfigImpl());
        DataOutputSerializer out = new DataOutputSerializer(64);
        serializer.serialize(value, out);
        OUT.append("{\"name\": \"").append(name).append("\", \"type\": \"").append(type.getName())
                .append("\", \"hex\": \"").append(hex(out.getCopyOfBuffer())).append("\"}\n");
    }

    static Reading reading(int k) {
        return new Reading("s" + k, new double[] {36.5 + k, -0.0, Double.MAX_VALUE}, 1714558500123L + k,
                Color.values()[k % 3]);
    }

    static Node full() {
        Node n = new Node();
        n.id = -42;
        n.big = 1L << 40;
        n.boxed = 7;
        n.label = "h\u00e9llo";
        n.children = new ArrayList<>();
        n.weights = new LinkedHashMap<>();
        n.weights.put("a", 1L);
        n.weights.put("b", null);
        n.color = Color.BLUE;
        n.values = new double[] {0.5, -1.0};
        n.doubles = new ArrayList<>(Arrays.asList(1.5, null, 2.5));
        n.any = new ArrayList<Object>(Arrays.asList(1, "x"));
        n.c = 'Z';
        n.flag = true;
        n.f = -2.25f;
        n.s = (short) -300;
        n.b = (byte) -5;
        n.nested = new ArrayList<>(Arrays.asList(new ArrayList<>(Arrays.asList(1L, 2L)), new ArrayList<>(), null));
        n.groups = new HashMap<>();
        n.groups.put("g", new ArrayList<>(Arrays.asList(3L)));
        n.groups.put("h", null);
        n.reading = reading(1);
        n.tags = new HashSet<>(Arrays.asList("t"));
        n.ints = new int[] {1, -2, 300};
        n.names = new String[] {"a", null};
        n.cached = 99;
        return n;
    }

    /** A random node: fields null or set, children nested up to depth, some shared with the given pool. */
    static Node random(Random r, int depth, List<Node> pool) {
        Node n = new Node();
        pool.add(n);
        n.id = r.nextInt();
        n.big = r.nextLong();
        n.boxed = r.nextBoolean() ? null : r.nextInt(1000) - 500;
        n.label = r.nextBoolean() ? null : "l" + r.nextInt(100);
        if (depth > 0 && r.nextInt(3) == 0) {
            n.next = r.nextBoolean() ? pool.get(r.nextInt(pool.size())) : random(r, depth - 1, pool);
        }
        if (depth > 0 && r.nextBoolean()) {
            n.children = new ArrayList<>();
            for (int i = r.nextInt(3); i > 0; i--) {
                n.children.add(r.nextInt(4) == 0 ? null : random(r, depth - 1, pool));
            }
        }
        if (r.nextBoolean()) {
            n.weights = new HashMap<>();
            for (int i = r.nextInt(3); i > 0; i--) {
                n.weights.put("w" + i, r.nextBoolean() ? null : r.nextLong());
            }
        }
        n.color = r.nextInt(4) == 0 ? null : Color.values()[r.nextInt(3)];
        if (r.nextBoolean()) {
            n.values = new double[r.nextInt(3)];
            for (int i = 0; i < n.values.length; i++) n.values[i] = r.nextGaussian();
        }
        if (r.nextBoolean()) {
            n.doubles = new ArrayList<>();
            for (int i = r.nextInt(3); i > 0; i--) n.doubles.add(r.nextBoolean() ? null : r.nextDouble());
        }
        switch (r.nextInt(5)) {
            case 0: n.any = "any" + r.nextInt(9); break;
            case 1: n.any = r.nextLong(); break;
            case 2: n.any = pool.get(r.nextInt(pool.size())); break;
            case 3: n.any = reading(r.nextInt(5)); break;
            default: n.any = null;
        }
        n.c = (char) ('a' + r.nextInt(26));
        n.flag = r.nextBoolean();
        n.f = r.nextFloat();
        n.s = (short) r.nextInt();
        n.b = (byte) r.nextInt();
        if (r.nextBoolean()) {
            n.nested = new ArrayList<>();
            for (int i = r.nextInt(3); i > 0; i--) {
                n.nested.add(r.nextInt(3) == 0 ? null : new ArrayList<>(Arrays.asList(r.nextLong(), (long) i)));
            }
        }
        if (r.nextBoolean()) {
            n.groups = new HashMap<>();
            n.groups.put("g" + r.nextInt(5), r.nextBoolean() ? null : new ArrayList<>(Arrays.asList(r.nextLong())));
        }
        n.reading = r.nextBoolean() ? null : reading(r.nextInt(5));
        if (r.nextBoolean()) n.tags = new HashSet<>(Arrays.asList("t" + r.nextInt(5)));
        if (r.nextBoolean()) n.ints = new int[] {r.nextInt(), r.nextInt(100)};
        if (r.nextBoolean()) n.names = new String[] {r.nextBoolean() ? null : "n" + r.nextInt(9)};
        return n;
    }

    /** A point, or one met before (shared within the record). */
    static Point point(Random r, List<Point> pool) {
        if (!pool.isEmpty() && r.nextInt(3) == 0) return pool.get(r.nextInt(pool.size()));
        Point p = new Point(r.nextInt(200) - 100, r.nextBoolean() ? null : "t" + r.nextInt(9));
        pool.add(p);
        return p;
    }

    static Point[] points(Random r, List<Point> pool) {
        Point[] points = new Point[r.nextInt(4)];
        for (int i = 0; i < points.length; i++) points[i] = r.nextInt(4) == 0 ? null : point(r, pool);
        return points;
    }

    /** A random holder: each array and the box null or set, elements null, new or shared. */
    static Holder randomHolder(Random r) {
        List<Point> pool = new ArrayList<>();
        Holder h = new Holder();
        if (r.nextBoolean()) h.points = points(r, pool);
        if (r.nextBoolean()) {
            h.readings = new Reading[r.nextInt(3)];
            for (int i = 0; i < h.readings.length; i++) {
                h.readings[i] = r.nextInt(3) == 0 ? null : reading(r.nextInt(5));
            }
        }
        if (r.nextBoolean()) {
            h.colors = new Color[r.nextInt(4)];
            for (int i = 0; i < h.colors.length; i++) {
                h.colors[i] = r.nextInt(4) == 0 ? null : Color.values()[r.nextInt(3)];
            }
        }
        if (r.nextBoolean()) {
            h.objects = new Object[r.nextInt(4)];
            for (int i = 0; i < h.objects.length; i++) {
                switch (r.nextInt(5)) {
                    case 0: h.objects[i] = "o" + i; break;
                    case 1: h.objects[i] = (long) r.nextInt(); break;
                    case 2: h.objects[i] = point(r, pool); break;
                    case 3: h.objects[i] = h.points; break;
                    default: h.objects[i] = null;
                }
            }
        }
        if (r.nextBoolean()) {
            h.grid = new Point[r.nextInt(3)][];
            for (int i = 0; i < h.grid.length; i++) h.grid[i] = r.nextInt(3) == 0 ? null : points(r, pool);
        }
        if (r.nextBoolean()) {
            h.box = new Box<>();
            h.box.item = r.nextBoolean() ? null : point(r, pool);
            if (r.nextBoolean()) {
                h.box.items = new ArrayList<>();
                for (int i = r.nextInt(3); i > 0; i--) h.box.items.add(r.nextInt(3) == 0 ? null : point(r, pool));
            }
            h.box.size = r.nextInt();
        }
        return h;
    }

    public static void main(String[] args) throws Exception {
        Node full = full();
        full.next = full; // a back-reference to the enclosing object
        Node child = new Node();
        child.label = "child";
        full.children.add(child);
        full.children.add(child); // a shared user object
        full.children.add(null);
        write("node_full", Object.class, full);
        write("node_empty", Object.class, new Node());
        write("node_typed", Node.class, full); // the serializer's own type: registered, written by id
        write("reading", Object.class, reading(2));
        write("enum", Object.class, Color.GREEN);
        Reading shared = reading(0);
        write("list_shared", Object.class, new ArrayList<Object>(Arrays.asList("a", shared, shared, null, "b")));
        Map<String, Object> map = new HashMap<>();
        map.put("p", child);
        map.put("q", Color.RED);
        write("map_of_user", Object.class, map);
        Point p = new Point(3, "p");
        Holder h = new Holder();
        h.points = new Point[] {p, null, p, new Point(-1, null)}; // a shared element, a null
        h.readings = new Reading[] {reading(0), null};
        h.colors = new Color[] {Color.RED, null, Color.BLUE};
        h.objects = new Object[] {"s", 5L, p, null, h.readings}; // a reference to the array above
        h.grid = new Point[][] {{p}, null, {}};
        h.box = new Box<>();
        h.box.item = p;
        h.box.items = new ArrayList<>(Arrays.asList(p, null, new Point(9, "q")));
        h.box.size = 2;
        write("holder", Object.class, h);
        write("holder_empty", Object.class, new Holder());
        write("points_whole", Object.class, h.points);
        write("points_typed", Point[].class, h.points); // the serializer's own (array) type: registered
        write("readings_whole", Object.class, h.readings);
        write("arrays_in_list", Object.class, new ArrayList<Object>(Arrays.asList(h.points, h.readings, h.points)));
        Box<Object> box = new Box<>();
        box.item = "top";
        box.items = new ArrayList<>(Arrays.asList(1L, "x", null, p));
        write("box_whole", Object.class, box);
        Labelled labelled = new Labelled();
        labelled.pair = new Pair<>();
        labelled.pair.first = "f";
        write("pair_bound_final", Object.class, labelled);
        Random holders = new Random(2727);
        for (int i = 0; i < 10; i++) {
            write("holder_random_" + i, Object.class, randomHolder(holders));
        }
        Random r = new Random(27);
        for (int i = 0; i < 25; i++) {
            write("random_" + i, Object.class, random(r, 3, new ArrayList<>()));
        }
        KryoSerializer<Object> serializer = new KryoSerializer<>(Object.class, new SerializerConfigImpl());
        OUT.append("{\"layouts\": ").append(KryoLayouts.layoutsJson(serializer.getKryo(),
                List.of(Node.class, Reading.class, Color.class, Holder.class, Labelled.class))).append("}\n");
        System.out.print(OUT);
    }
}
