"""What Kryo writes for a field's declared type, which reading a user class's record with the old layouts and writing
it with the new ones (:mod:`flinkstate.serializers.kryo_fields`) both follow: the collections and maps whose
serializer takes a field's type arguments, the element type Kryo then writes without class ids, an object array's
element finality (from the element class's layout), and the generic classes bound to a final class (refused in one
line: Kryo writes their fields of that type without their class, per use).
"""

from __future__ import annotations

from collections.abc import Callable

from flinkstate.serializers.kryo_data import KryoOpaque
from flinkstate.serializers.kryo_layout import KryoClassLayout, KryoGeneric, KryoLayouts

#: The classes whose serializer (Kryo's CollectionSerializer / MapSerializer, no header) uses a field's type
#: arguments; a TreeSet/TreeMap (a comparator header) in such a field is refused.
GENERIC_COLLECTIONS = frozenset({"java.util.ArrayList", "java.util.LinkedList", "java.util.HashSet",
                                 "java.util.LinkedHashSet", "java.util.ArrayDeque"})
GENERIC_MAPS = frozenset({"java.util.HashMap", "java.util.LinkedHashMap"})
HEADED = frozenset({"java.util.TreeSet", "java.util.TreeMap", "java.util.PriorityQueue"})
FIXED = {"float": "f", "double": "d", "short": "h"}
WRAPPER_OF = {"int": "java.lang.Integer", "long": "java.lang.Long", "float": "java.lang.Float",
              "double": "java.lang.Double", "boolean": "java.lang.Boolean", "byte": "java.lang.Byte",
              "char": "java.lang.Character", "short": "java.lang.Short"}
#: JDK element classes of an object array whose finality is known here (a user class's comes from its layout).
FINAL_JDK = frozenset({"java.lang.String", *WRAPPER_OF.values()})
OPEN_JDK = frozenset({"java.lang.Object", "java.lang.Number", "java.lang.CharSequence", "java.lang.Comparable",
                      "java.io.Serializable"})



def array_component(name: str) -> str | None:
    """The element class of an object array class (``[Lx;`` -> x, ``[[Lx;`` -> ``[Lx;``), None for any other."""
    if name.startswith("[L") and name.endswith(";"):
        return name[2:-1]
    return name[1:] if name.startswith("[[") else None


def elements_final(name: str, component: str, layouts: KryoLayouts) -> bool:
    """Whether Kryo's ObjectArraySerializer writes the elements of array ``name`` without their classes: its element
    class's modifier is final (an array class's always is, a primitive's too)."""
    if component.startswith("[") or component in FINAL_JDK:
        return True
    if component in OPEN_JDK:
        return False
    layout = layouts.get(component)
    if layout is None or layout.final is None:
        raise KryoOpaque(name, f"an array of {component}, whose layout does not say whether the class is final "
                               f"(Kryo writes the elements' classes only if it is not)")
    return layout.final


def check_array(name: str, generics: tuple[KryoGeneric, ...] | None) -> None:
    """Refuses an array given type arguments (``Box<String>[]``): Kryo 2.24 passes them on to its elements."""
    if generics:
        raise KryoOpaque(name, "an array of a parameterized type: not carried")


def bound_to_final(layouts: KryoLayouts) -> frozenset[str]:
    """The generic classes that some field's type arguments (at any depth) bind to a final class."""
    generic = {name for name, layout in layouts.items() if layout.type_parameters}
    found: set[str] = set()

    def walk(cls: str | None, arguments: tuple[KryoGeneric, ...] | None) -> None:
        if arguments is None:
            return
        while cls is not None and (component := array_component(cls)) is not None:
            cls = component  # Box<String>[]: its elements' binding
        if cls in generic and any(a.final for a in arguments):
            found.add(cls)
        for argument in arguments:
            walk(argument.java_class, argument.generics)

    if generic:
        for layout in layouts.values():
            for field in layout.fields or ():
                walk(field.type, field.generics)
    return frozenset(found)


def check_generic(name: str, layout: KryoClassLayout, generics: tuple[KryoGeneric, ...] | None,
                   bound: Callable[[], frozenset[str]]) -> None:
    """Refuses a generic class met where (or, Kryo 2.24's binding being sticky, anywhere) a type argument binds it
    to a final class: Kryo then writes its T fields without their classes, per use."""
    if layout.type_parameters and (any(g.final for g in generics or ()) or name in bound()):
        raise KryoOpaque(name, "a generic class whose type parameter is bound to a final class (Kryo then writes "
                               "its fields of that type without their class, resolved per use): not carried")


def element_argument(generics: tuple[KryoGeneric, ...] | None, index: int) -> KryoGeneric | None:
    """The type argument ``index`` when Kryo uses its class's serializer for the elements (a final class)."""
    if generics is None or len(generics) <= index:
        return None
    argument = generics[index]
    return argument if argument.final and argument.java_class is not None else None

