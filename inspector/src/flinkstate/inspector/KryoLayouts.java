package flinkstate.inspector;

import com.esotericsoftware.kryo.Kryo;
import com.esotericsoftware.kryo.Serializer;
import com.esotericsoftware.kryo.serializers.FieldSerializer;

import java.lang.reflect.Field;
import java.lang.reflect.GenericArrayType;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.Type;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The class layouts a Kryo instance uses for user classes (issue 27): what Kryo itself says, asked through its own
 * objects, so that Kryo 2.24 (Flink 1.x) and Kryo 5.6 (Flink 2.x) each report their own field order, field inclusion,
 * known types and generics. One source for both Kryo versions: the parts whose names differ (Kryo 2.24's
 * {@code varIntsEnabled} and {@code ObjectField.generics}, Kryo 5's {@code varEncoding} and
 * {@code ReflectField.genericType}) are read by reflection.
 *
 * <p>Per class: {@code class}, {@code serializer} (the class of the serializer Kryo's getSerializer gives),
 * {@code type_parameters} (a generic class's count), {@code final} (its modifier: an array of it carries no element
 * classes when set), then for an enum its {@code constants} in ordinal order, for a
 * FieldSerializer its {@code fields} in Kryo's order: {@code name}, {@code type} (declared class), {@code value_class}
 * (the class Kryo treats as known: no class id written; null when it writes class and object), {@code can_be_null},
 * {@code var_int} (int and long fields as variable-length), and {@code generics}: the type arguments Kryo passes to the
 * field's serializer, each {@code class} (null when not a class), {@code final} (kryo.isFinal) and, in Kryo 5, its
 * own {@code generics} (Kryo 5 passes them down to nested collections; Kryo 2.24 one level only).
 */
public final class KryoLayouts {
    private KryoLayouts() {}

    /** The JSON array of the layouts of {@code roots} and every class reachable through their fields. */
    public static String layoutsJson(Kryo kryo, Collection<Class<?>> roots) {
        Deque<Class<?>> queue = new ArrayDeque<>(roots);
        Set<Class<?>> seen = new LinkedHashSet<>();
        List<String> layouts = new ArrayList<>();
        while (!queue.isEmpty()) {
            Class<?> type = queue.poll();
            while (type.isArray()) {
                type = type.getComponentType();
            }
            if (!isUserClass(type) || !seen.add(type)) {
                continue;
            }
            try {
                layouts.add(layout(kryo, type, queue));
            } catch (RuntimeException | LinkageError e) {
                // Kryo cannot make a serializer of it (nor write one in state): no layout, refused where it is met
            }
        }
        return "[" + String.join(", ", layouts) + "]";
    }

    /**
     * The job jar's own classes that Kryo may meet in its state (the roots of {@link #layoutsJson}): every concrete
     * class or enum of the jar, not anonymous, local or synthetic, and not one of the job's functions or operators
     * (Flink serializes those with Java serialization, never into state). A class the jar's loader cannot load
     * (a missing optional dependency) is left out: Kryo could not write it either.
     */
    public static List<Class<?>> jarClasses(java.io.File jar, ClassLoader loader) throws java.io.IOException {
        List<Class<?>> classes = new ArrayList<>();
        try (java.util.jar.JarFile file = new java.util.jar.JarFile(jar)) {
            for (java.util.jar.JarEntry entry : java.util.Collections.list(file.entries())) {
                String name = entry.getName();
                if (!name.endsWith(".class") || name.startsWith("META-INF/") || name.endsWith("module-info.class")) {
                    continue;
                }
                Class<?> type;
                try {
                    type = Class.forName(name.substring(0, name.length() - 6).replace('/', '.'), false, loader);
                } catch (ClassNotFoundException | LinkageError e) {
                    continue;
                }
                boolean concrete = type.isEnum() || !Modifier.isAbstract(type.getModifiers());
                if (concrete && !type.isAnonymousClass() && !type.isLocalClass() && !type.isSynthetic()
                        && !type.isInterface() && !isJobCode(type) && isUserClass(type)) {
                    classes.add(type);
                }
            }
        }
        classes.sort(java.util.Comparator.comparing(Class::getName));
        return classes;
    }

    private static boolean isJobCode(Class<?> type) {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            for (Class<?> i : c.getInterfaces()) {
                if (i.getName().equals("org.apache.flink.api.common.functions.Function")
                        || i.getName().startsWith("org.apache.flink.streaming.api.operators.")
                        || java.util.Arrays.stream(i.getInterfaces()).anyMatch(
                                s -> s.getName().equals("org.apache.flink.api.common.functions.Function"))) {
                    return true;
                }
            }
            if (c.getName().startsWith("org.apache.flink.")) {
                return true; // a subclass of one of Flink's classes (a function, an operator, a source)
            }
        }
        return false;
    }

    /** A class Kryo serializes with no built-in serializer of the JDK: what needs a layout. */
    static boolean isUserClass(Class<?> type) {
        if (type.isPrimitive() || type.isInterface() || type == Object.class) {
            return false;
        }
        String name = type.getName();
        return !(name.startsWith("java.") || name.startsWith("javax.") || name.startsWith("sun.")
                || name.startsWith("jdk.") || name.startsWith("scala.") || name.startsWith("org.apache.flink."));
    }

    private static String layout(Kryo kryo, Class<?> type, Deque<Class<?>> queue) {
        Map<String, String> out = new LinkedHashMap<>();
        out.put("class", quote(type.getName()));
        Serializer<?> serializer = kryo.getSerializer(type);
        out.put("serializer", quote(serializer.getClass().getName()));
        out.put("type_parameters", Integer.toString(type.getTypeParameters().length));
        // Kryo's ObjectArraySerializer writes each element's class only when the element class is not final
        out.put("final", String.valueOf(Modifier.isFinal(type.getModifiers())));
        if (type.isEnum()) {
            List<String> constants = new ArrayList<>();
            for (Object constant : type.getEnumConstants()) {
                constants.add(quote(((Enum<?>) constant).name()));
            }
            out.put("constants", "[" + String.join(", ", constants) + "]");
        } else if (serializer instanceof FieldSerializer) {
            List<String> fields = new ArrayList<>();
            for (Object cached : ((FieldSerializer<?>) serializer).getFields()) {
                fields.add(field(kryo, (FieldSerializer.CachedField) cached, queue));
            }
            out.put("fields", "[" + String.join(", ", fields) + "]");
        }
        return object(out);
    }

    private static String field(Kryo kryo, FieldSerializer.CachedField cached, Deque<Class<?>> queue) {
        Field field = cached.getField();
        Map<String, String> out = new LinkedHashMap<>();
        out.put("name", quote(field.getName()));
        out.put("type", quote(field.getType().getName()));
        Class<?> valueClass = (Class<?>) read(cached, "valueClass");
        out.put("value_class", valueClass == null ? "null" : quote(valueClass.getName()));
        out.put("can_be_null", String.valueOf(read(cached, "canBeNull")));
        Object varInt = has(cached, "varEncoding") ? read(cached, "varEncoding") : read(cached, "varIntsEnabled");
        out.put("var_int", String.valueOf(varInt));
        String generics = "null";
        if (has(cached, "genericType")) { // Kryo 5: a GenericType tree
            Object genericType = read(cached, "genericType");
            Object[] arguments = genericType == null ? null : (Object[]) read(genericType, "arguments");
            generics = kryo5Generics(kryo, arguments, queue);
        } else if (has(cached, "generics")) { // Kryo 2.24: the classes setGenerics gets
            Class<?>[] classes = (Class<?>[]) read(cached, "generics");
            if (classes != null) {
                List<String> parts = new ArrayList<>();
                for (Class<?> c : classes) {
                    parts.add(generic(kryo, c, "null"));
                    if (c != null) {
                        queue.add(c);
                    }
                }
                generics = "[" + String.join(", ", parts) + "]";
            }
        }
        out.put("generics", generics);
        queue.add(field.getType());
        collect(field.getGenericType(), queue);
        return object(out);
    }

    private static String kryo5Generics(Kryo kryo, Object[] arguments, Deque<Class<?>> queue) {
        if (arguments == null) {
            return "null";
        }
        List<String> parts = new ArrayList<>();
        for (Object argument : arguments) {
            Class<?> c = argument == null ? null : raw((Type) read(argument, "type"));
            Object[] nested = argument == null ? null : (Object[]) read(argument, "arguments");
            parts.add(generic(kryo, c, kryo5Generics(kryo, nested, queue)));
            if (c != null) {
                queue.add(c);
            }
        }
        return "[" + String.join(", ", parts) + "]";
    }

    private static String generic(Kryo kryo, Class<?> c, String nested) {
        Map<String, String> out = new LinkedHashMap<>();
        out.put("class", c == null ? "null" : quote(c.getName()));
        out.put("final", String.valueOf(c != null && kryo.isFinal(c)));
        out.put("generics", nested);
        return object(out);
    }

    private static Class<?> raw(Type type) {
        if (type instanceof Class) {
            return (Class<?>) type;
        }
        if (type instanceof ParameterizedType) {
            return (Class<?>) ((ParameterizedType) type).getRawType();
        }
        if (type instanceof GenericArrayType) {
            Class<?> component = raw(((GenericArrayType) type).getGenericComponentType());
            return component == null ? null : java.lang.reflect.Array.newInstance(component, 0).getClass();
        }
        return null; // a type variable or a wildcard: Kryo resolves it at run time, not a class here
    }

    /** The classes a field's generic type names (List<Point> reaches Point). */
    private static void collect(Type type, Deque<Class<?>> queue) {
        if (type instanceof Class) {
            queue.add((Class<?>) type);
        } else if (type instanceof ParameterizedType) {
            for (Type argument : ((ParameterizedType) type).getActualTypeArguments()) {
                collect(argument, queue);
            }
        } else if (type instanceof GenericArrayType) {
            collect(((GenericArrayType) type).getGenericComponentType(), queue);
        }
    }

    private static boolean has(Object target, String name) {
        return find(target.getClass(), name) != null;
    }

    private static Object read(Object target, String name) {
        Field field = find(target.getClass(), name);
        if (field == null) {
            throw new IllegalStateException(target.getClass().getName() + " has no field " + name);
        }
        try {
            field.setAccessible(true);
            return field.get(target);
        } catch (IllegalAccessException e) {
            throw new IllegalStateException(e);
        }
    }

    private static Field find(Class<?> type, String name) {
        for (Class<?> c = type; c != null; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (f.getName().equals(name) && !Modifier.isStatic(f.getModifiers())) {
                    return f;
                }
            }
        }
        return null;
    }

    private static String object(Map<String, String> fields) {
        List<String> parts = new ArrayList<>();
        fields.forEach((k, v) -> parts.add(quote(k) + ": " + v));
        return "{" + String.join(", ", parts) + "}";
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
