package kryojob;

import java.lang.reflect.Field;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Currency;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.LinkedList;
import java.util.List;
import java.util.Locale;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

import org.apache.flink.api.common.serialization.SerializerConfigImpl;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializer;
import org.apache.flink.core.memory.DataOutputSerializer;

/**
 * Writes JDK values with Flink's own KryoSerializer (the one GenericTypeInfo creates), one JSON line per value:
 * {"name", "type", "hex"} with the record's bytes, then {"snapshot": type, "hex"} for each serializer's snapshot
 * and {"registration": id, "class", "serializer"} for the Kryo instance's registrations. The Python tests know the
 * values by name (tests/test_kryo_flink.py) and compare what they decode.
 */
public final class KryoBytes {
    /** A user class: Kryo's FieldSerializer writes it, which stays opaque. */
    public static final class Point {
        public int x;
        public String label;

        public Point() {}

        Point(int x, String label) {
            this.x = x;
            this.label = label;
        }
    }

    private static final StringBuilder OUT = new StringBuilder();

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes) sb.append(String.format("%02x", b));
        return sb.toString();
    }

    private static <T> void write(String name, Class<T> type, Object value) throws Exception {
        @SuppressWarnings("unchecked")
        KryoSerializer<Object> serializer =
                new KryoSerializer<>((Class<Object>) (Class<?>) type, new SerializerConfigImpl());
        DataOutputSerializer out = new DataOutputSerializer(64);
        serializer.serialize(value, out);
        OUT.append("{\"name\": \"").append(name).append("\", \"type\": \"").append(type.getName())
                .append("\", \"hex\": \"").append(hex(out.getCopyOfBuffer())).append("\"}\n");
    }

    public static void main(String[] args) throws Exception {
        String shared = new String("dup");
        List<Object> sharedList = new ArrayList<>(Arrays.asList(1, 2));
        LinkedHashMap<String, Object> linked = new LinkedHashMap<>();
        linked.put("b", 2L);
        linked.put("a", "x");
        TreeMap<String, Integer> tree = new TreeMap<>();
        tree.put("z", 26);
        tree.put("a", 1);
        HashMap<String, Integer> hash = new HashMap<>();
        hash.put("one", 1);
        ArrayList<Object> mixed = new ArrayList<>(Arrays.asList(7, "seven", null, 7L, true));
        ArrayList<Object> sameType = new ArrayList<>(Arrays.asList("a", "b", "c"));
        ArrayList<Object> withNull = new ArrayList<>(Arrays.asList("a", null));

        write("int", Object.class, 42);
        write("int_negative", Object.class, -1);
        write("long", Object.class, -7L);
        write("long_big", Object.class, 1L << 40);
        write("string", Object.class, "h\u00e9llo");
        write("string_ascii", Object.class, "hello");
        write("string_empty", Object.class, "");
        write("boolean", Object.class, true);
        write("double", Object.class, 1.5d);
        write("float", Object.class, -2.25f);
        write("short", Object.class, (short) -300);
        write("byte", Object.class, (byte) -5);
        write("char", Object.class, 'Z');
        write("big_decimal", Object.class, new BigDecimal("-123.4500"));
        write("big_decimal_big", Object.class, new BigDecimal("123456789012345678901234567890.5"));
        write("big_integer", Object.class, new BigInteger("123456789012345678901234567890"));
        write("big_integer_negative", Object.class, BigInteger.valueOf(-129));
        write("date", Object.class, new Date(1714558500123L));
        write("sql_timestamp", Object.class, Timestamp.valueOf("2024-05-01 10:15:00.123456789"));
        write("sql_date", Object.class, new java.sql.Date(1714521600000L));
        write("uuid", Object.class, UUID.fromString("123e4567-e89b-12d3-a456-426614174000"));
        write("enum", Object.class, TimeUnit.SECONDS);
        write("currency", Object.class, Currency.getInstance("EUR"));
        write("locale", Object.class, new Locale("de", "CH"));
        write("charset", Object.class, StandardCharsets.UTF_8);
        write("instant", Object.class, Instant.ofEpochSecond(1714558500L, 123456789));
        write("local_date", Object.class, LocalDate.of(2024, 5, 1));
        write("local_time", Object.class, LocalTime.of(10, 15, 0, 1));
        write("local_date_time", Object.class, LocalDateTime.of(2024, 5, 1, 10, 15, 0, 123456789));
        write("duration", Object.class, Duration.ofSeconds(90, 5));
        write("array_list_mixed", Object.class, mixed);
        write("array_list_same", Object.class, sameType);
        write("array_list_null", Object.class, withNull);
        write("array_list_empty", Object.class, new ArrayList<>());
        write("array_list_registered", ArrayList.class, sameType);
        write("linked_list", Object.class, new LinkedList<>(Arrays.asList(1, 2, 3)));
        write("hash_set", Object.class, new HashSet<>(Arrays.asList(3)));
        write("linked_hash_set", Object.class, new LinkedHashSet<>(Arrays.asList("x", "y")));
        write("tree_set", Object.class, new TreeSet<>(Arrays.asList(5, 1)));
        write("hash_map", Object.class, hash);
        write("linked_hash_map", Object.class, linked);
        write("tree_map", Object.class, tree);
        write("empty_list", Object.class, Collections.emptyList());
        write("empty_map", Object.class, Collections.emptyMap());
        write("singleton_list", Object.class, Collections.singletonList("only"));
        write("singleton_map", Object.class, Collections.singletonMap("k", 9));
        write("arrays_as_list", Object.class, Arrays.asList("p", "q"));
        write("int_array", Object.class, new int[] {1, -2, 300});
        write("long_array", Object.class, new long[] {1L, -2L});
        write("byte_array", Object.class, new byte[] {1, 2, -1});
        write("string_array", Object.class, new String[] {"a", null, "b"});
        write("double_array", Object.class, new double[] {0.5, -1.0});
        write("shared_string", Object.class, new ArrayList<>(Arrays.asList(shared, shared)));
        write("shared_list", Object.class, new ArrayList<>(Arrays.asList(sharedList, sharedList)));
        write("nested", Object.class, new ArrayList<>(Arrays.asList(new ArrayList<>(Arrays.asList("i")), hash)));
        write("map_of_lists", Object.class, Collections.singletonMap("l", new ArrayList<>(Arrays.asList(1L))));
        write("user_class", Object.class, new Point(3, "p"));
        write("list_with_user_class", Object.class, new ArrayList<>(Arrays.asList("a", new Point(1, "q"))));
        write("null_value", Object.class, null);

        // The snapshot of a serializer for Object and its Kryo registrations (the same for every value above).
        KryoSerializer<Object> serializer = new KryoSerializer<>(Object.class, new SerializerConfigImpl());
        serializer.serialize("init", new DataOutputSerializer(16));
        DataOutputSerializer snap = new DataOutputSerializer(64);
        TypeSerializerSnapshot.writeVersionedSnapshot(snap, serializer.snapshotConfiguration());
        OUT.append("{\"snapshot\": \"java.lang.Object\", \"hex\": \"").append(hex(snap.getCopyOfBuffer())).append("\"}\n");
        Field field = KryoSerializer.class.getDeclaredField("kryo");
        field.setAccessible(true);
        com.esotericsoftware.kryo.Kryo kryo = (com.esotericsoftware.kryo.Kryo) field.get(serializer);
        for (int id = 0; id < 200; id++) { // Kryo 5 reports the first free id (9), not the highest
            com.esotericsoftware.kryo.Registration r = kryo.getRegistration(id);
            if (r == null) continue;
            OUT.append("{\"registration\": ").append(id).append(", \"class\": \"").append(r.getType().getName())
                    .append("\", \"serializer\": \"").append(r.getSerializer().getClass().getName()).append("\"}\n");
        }
        System.out.print(OUT);
    }
}
