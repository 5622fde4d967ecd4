package flinkstate.inspector;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The window an operator assigns its records to, as one line: {@code KIND:Assigner(field=value, ...)}, or "" when the
 * operator has none. The savepoint does not record it, yet restoring under another window changes what the state
 * means, so the check compares the line of the version that wrote the savepoint with the new version's.
 *
 * <p>KIND says what the state's namespace holds: {@code slice} for the SQL window TVF operators (a
 * {@code SliceAssigner}: the namespace is only a slice's end timestamp, which another size or slide reinterprets:
 * Flink restores it and misreads the old slices), {@code window} for every other assigner (DataStream's
 * {@code WindowAssigner}, SQL's group windows and unsliced windows: the namespace is the window itself, with its
 * bounds, so an open window ends as it began).
 *
 * <p>The assigner is found by walking the operator's fields (Flink's and the job's classes, not the JDK's), because
 * each operator family keeps it in a field of its own (WindowOperator.windowAssigner,
 * WindowAggOperator.windowProcessor.sliceAssigner, ...). Only its scalar fields are written (size, slide, offset,
 * step, gap, event or processing time, ...), sorted by name; a field position ({@code rowtimeIndex}) is left out,
 * as it moves with the query's columns without changing the windows.
 */
final class WindowSpec {
    private static final int MAX_DEPTH = 6;

    private WindowSpec() {}

    static String of(Object operator) {
        List<String> found = new ArrayList<>();
        walk(operator, 0, Collections.newSetFromMap(new IdentityHashMap<>()), found);
        return String.join("; ", new TreeSet<>(found));  // an assigner a processor shares with its operator: once
    }

    private static void walk(Object value, int depth, Set<Object> seen, List<String> found) {
        if (value == null || depth > MAX_DEPTH || !seen.add(value)) {
            return;
        }
        Class<?> type = value.getClass();
        if (type.isArray() || isJdk(type)) {
            return;
        }
        String kind = kind(type);
        if (kind != null) {
            found.add(kind + ":" + describe(value));
            return;
        }
        for (Field field : fields(type)) {
            if (!field.getType().isPrimitive()) {
                walk(read(field, value), depth + 1, seen, found);
            }
        }
    }

    /** "slice", "window" or null: what the type assigns, by the names of its classes and interfaces. */
    private static String kind(Class<?> type) {
        String kind = null;
        for (Class<?> c : supertypes(type)) {
            String name = c.getSimpleName();
            if (name.endsWith("SliceAssigner")) {
                return "slice";
            }
            if (name.endsWith("WindowAssigner") || name.endsWith("UnsliceAssigner")) {
                kind = "window";
            }
        }
        return kind;
    }

    private static String describe(Object assigner) {
        TreeMap<String, String> values = new TreeMap<>();
        for (Field field : fields(assigner.getClass())) {
            if (field.getName().equals("rowtimeIndex")) {
                continue;
            }
            Object value = read(field, assigner);
            Class<?> type = field.getType();
            if (type.isPrimitive() || value instanceof Number || value instanceof Boolean || value instanceof String
                    || value instanceof Enum || value instanceof java.time.Duration
                    || value instanceof java.time.ZoneId) {
                values.put(field.getName(), String.valueOf(value));
            } else if (value != null && kind(value.getClass()) != null) {
                values.put(field.getName(), describe(value));  // an assigner wrapping another
            }
        }
        StringBuilder text = new StringBuilder(assigner.getClass().getName()
                .substring(assigner.getClass().getName().lastIndexOf('.') + 1)).append('(');
        String separator = "";
        for (var entry : values.entrySet()) {
            text.append(separator).append(entry.getKey()).append('=').append(entry.getValue());
            separator = ", ";
        }
        return text.append(')').toString();
    }

    private static List<Field> fields(Class<?> type) {
        List<Field> fields = new ArrayList<>();
        for (Class<?> c = type; c != null && !isJdk(c); c = c.getSuperclass()) {
            for (Field field : c.getDeclaredFields()) {
                if (!Modifier.isStatic(field.getModifiers()) && !field.isSynthetic()) {
                    fields.add(field);
                }
            }
        }
        return fields;
    }

    private static Object read(Field field, Object owner) {
        try {
            field.setAccessible(true);
            return field.get(owner);
        } catch (RuntimeException | IllegalAccessException e) {
            return null;  // a field the module system closes: not one of Flink's or the job's
        }
    }

    private static List<Class<?>> supertypes(Class<?> type) {
        List<Class<?>> all = new ArrayList<>();
        List<Class<?>> pending = new ArrayList<>(List.of(type));
        while (!pending.isEmpty()) {
            Class<?> c = pending.remove(pending.size() - 1);
            if (c == null || all.contains(c)) {
                continue;
            }
            all.add(c);
            pending.add(c.getSuperclass());
            pending.addAll(List.of(c.getInterfaces()));
        }
        return all;
    }

    private static boolean isJdk(Class<?> type) {
        String name = type.getName();
        return name.startsWith("java.") || name.startsWith("javax.") || name.startsWith("jdk.")
                || name.startsWith("sun.") || name.startsWith("com.sun.");
    }
}
