import java.lang.reflect.Field;
import java.util.*;
import java.util.stream.Stream;

import org.apache.flink.table.runtime.dataview.DataViewUtils;
import org.apache.flink.table.runtime.functions.aggregate.ArrayAggFunction;
import org.apache.flink.table.runtime.functions.aggregate.BuiltInAggregateFunction;
import org.apache.flink.table.runtime.functions.aggregate.ListAggWsWithRetractAggFunction;
import org.apache.flink.table.runtime.functions.aggregate.MaxWithRetractAggFunction;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.IntType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.StructuredType;
import org.apache.flink.util.InstantiationUtil;

/**
 * Writes, with Java serialization (Flink's InstantiationUtil.serializeObject, as RowData snapshots write their
 * LogicalTypes), every serial form of the JDK's collections that tests/test_javacollections.py reads, whether Java
 * finds each pair of them equal, and the accumulator types Flink's planner stores for retracting aggregates
 * (STRUCTURED types whose attributes are a List.copyOf). Output, one per line: "form NAME HEX" and
 * "equal NAME NAME true|false".
 */
public class JdkForms {
    static final Map<String, Object> values = new LinkedHashMap<>();

    static void add(String name, Object value) throws Exception {
        values.put(name, value);
        System.out.println("form " + name + " " + HexFormat.of().formatHex(InstantiationUtil.serializeObject(value)));
    }

    /** An aggregate function's accumulator type as the planner stores it: data views state-backed (RAW fields). */
    static LogicalType accumulator(BuiltInAggregateFunction<?, ?> function) {
        return DataViewUtils.adjustDataViews(function.getAccumulatorDataType(), true).getLogicalType();
    }

    public static void main(String[] args) throws Exception {
        // ImmutableCollections (java.util.CollSer), Collections' own classes, Arrays.asList, the mutable ones
        add("list_of_0", List.of());
        add("list_of_1", List.of("a"));
        add("list_of_2", List.of("a", "b"));
        add("list_of_3", List.of("a", "b", "c"));
        add("list_of_ba", List.of("b", "a"));
        add("list_with_null", Stream.of("a", null).toList());
        add("set_of", Set.of("a", "b"));
        add("set_of_ba", Set.of("b", "a"));
        add("map_of", Map.of("a", "x", "b", "y"));
        add("unmodifiable_array_list", Collections.unmodifiableList(new ArrayList<>(List.of("a", "b"))));
        add("unmodifiable_linked_list", Collections.unmodifiableList(new LinkedList<>(List.of("a", "b"))));
        add("unmodifiable_collection", Collections.unmodifiableCollection(new ArrayList<>(List.of("a", "b"))));
        add("unmodifiable_set", Collections.unmodifiableSet(new LinkedHashSet<>(List.of("a", "b"))));
        add("unmodifiable_map", Collections.unmodifiableMap(new TreeMap<>(Map.of("a", "x", "b", "y"))));
        add("empty_list", Collections.emptyList());
        add("empty_set", Collections.emptySet());
        add("empty_map", Collections.emptyMap());
        add("singleton_list", Collections.singletonList("a"));
        add("singleton_set", Collections.singleton("a"));
        add("singleton_map", Collections.singletonMap("a", "x"));
        add("arrays_as_list", Arrays.asList("a", "b"));
        add("array_list", new ArrayList<>(List.of("a", "b")));
        add("linked_list", new LinkedList<>(List.of("a", "b")));
        add("hash_map", new HashMap<>(Map.of("a", "x", "b", "y")));
        add("linked_hash_map", new LinkedHashMap<>(Map.of("a", "x", "b", "y")));
        add("tree_map", new TreeMap<>(Map.of("a", "x", "b", "y")));
        add("hash_set", new HashSet<>(List.of("a", "b")));
        add("linked_hash_set", new LinkedHashSet<>(List.of("b", "a")));
        add("tree_set", new TreeSet<>(List.of("b", "a")));
        List<String> names = new ArrayList<>(values.keySet());
        for (int i = 0; i < names.size(); i++) {
            for (int j = i + 1; j < names.size(); j++) {
                System.out.println("equal " + names.get(i) + " " + names.get(j) + " "
                        + values.get(names.get(i)).equals(values.get(names.get(j))));
            }
        }

        // The accumulator types the planner stores (data views as RAW fields: state-backed), whose attributes are
        // a List.copyOf; the MAX one again with its attributes in an ArrayList (equal in Java: List.equals).
        LogicalType max = accumulator(new MaxWithRetractAggFunction<>(new BigIntType()));
        add("type_max", max);
        LogicalType maxInt = accumulator(new MaxWithRetractAggFunction<>(new IntType()));
        add("type_max_int", maxInt);
        add("type_list_agg_ws", accumulator(new ListAggWsWithRetractAggFunction()));
        add("type_array_agg", accumulator(new ArrayAggFunction<>(new BigIntType(false), true)));
        StructuredType copy = (StructuredType) max.copy();
        Field attributes = StructuredType.class.getDeclaredField("attributes");
        attributes.setAccessible(true);
        attributes.set(copy, new ArrayList<>((List<?>) attributes.get(copy)));
        add("type_max_array_list", copy);
        System.out.println("equal type_max type_max_array_list " + max.equals(copy));
        System.out.println("equal type_max type_max_int " + max.equals(maxInt));
    }
}
