"""What each finding code of the check means, in one sentence: the one table the reports explain codes from.

A finding's ``message`` says what changed in this savepoint (which field, from what to what); the sentence here says
what the code means whatever the state, and what Flink does about it. Every code a rule can emit
(:class:`~flinkstate.compatibility.Finding`) has its line: tests/test_report_html.py reads the rules' sources and
fails on a code missing here.
"""

from __future__ import annotations

FINDING_CODES: dict[str, str] = {
    # -- any serializer family: the common first checks and composites
    "TYPE_CHANGED": "The state's type is now another serializer's, which cannot read the old bytes: Flink refuses "
                    "the savepoint unless the values are migrated.",
    "ARITY_CHANGED": "A composite type has a different number of nested types, so the old bytes cannot be read.",
    "UNKNOWN_SERIALIZER": "The savepoint holds a serializer whose compatibility rule this tool does not know, so it "
                          "cannot promise a safe restore.",
    "VALUE_CLASS_CHANGED": "A Flink Value type's class changed, which Flink refuses.",
    "ARRAY_COMPONENT_CLASS_CHANGED": "An array's element class changed, which Flink refuses.",
    "NULLABLE_PADDING_CHANGED": "The null marker's padding changed, so Flink rewrites every value on restore.",
    "LEGACY_EITHER_SNAPSHOT": "The savepoint's Either serializer snapshot is from Flink 1.7 or earlier, which Flink "
                              "1.17 and later cannot restore.",
    # -- POJOs
    "POJO_CLASS_CHANGED": "The POJO's class changed, which Flink refuses.",
    "POJO_FIELD_ADDED": "A POJO field was added: Flink migrates the values, the new field starting as the declared "
                        "default or null.",
    "POJO_FIELD_REMOVED": "A POJO field was removed: Flink migrates the values and its old values are dropped.",
    "POJO_FIELD_TYPE_CHANGED": "A POJO field's type changed, which Flink refuses on its own: the values must be "
                               "converted by a declared migration.",
    "POJO_FIELD_ORDER_NOT_CANONICAL": "The savepoint's POJO fields are not in Flink's order: Flink judges it "
                                      "compatible and RocksDB would misread every value.",
    "POJO_SUBCLASS_REMOVED": "A registered POJO subclass is gone, so values of that subclass cannot be read.",
    "POJO_SUBCLASS_REGISTRATION_CHANGED": "The registered POJO subclasses changed order: Flink reconfigures its "
                                          "serializer and keeps the bytes.",
    "POJO_NONREGISTERED_SUBCLASSES": "The old serializer cached subclasses that were not registered: Flink "
                                     "reconfigures its serializer and keeps the bytes.",
    # -- Rows, Tuples and the Table runtime's RowData
    "ROW_FIELD_ADDED": "A Row field was added: Row fields are matched by position, and a changed arity is "
                       "incompatible.",
    "ROW_FIELD_REMOVED": "A Row field was removed: Row fields are matched by position, and a changed arity is "
                         "incompatible.",
    "ROW_FIELD_TYPE_CHANGED": "A Row field's type changed, which Flink refuses on its own.",
    "ROW_FIELD_RENAMED": "Row fields were renamed: Flink matches them by position, so the values keep their "
                         "places.",
    "ROW_FIELDS_REORDERED": "Row fields were swapped by name with equal types: Flink restores them as is, into the "
                            "wrong fields.",
    "ROW_KIND_FLAG_CHANGED": "The Row's RowKind header was switched on or off, so Flink rewrites every value.",
    "ROWDATA_TYPE_CHANGED": "A Table runtime row's logical type changed, which Flink refuses.",
    "TUPLE_ARITY_CHANGED": "The Tuple has a different number of fields, which Flink refuses.",
    "TUPLE_FIELD_TYPE_CHANGED": "A Tuple field's type changed, which Flink refuses on its own.",
    # -- enums, Avro, Kryo, Scala and runtime types
    "ENUM_CLASS_CHANGED": "The enum's class changed, which Flink refuses.",
    "ENUM_CONSTANT_ADDED": "Enum constants were appended: Flink reconfigures its serializer and keeps the bytes.",
    "ENUM_CONSTANTS_REORDERED": "Enum constants were reordered or inserted: Flink keeps the old order, so stored "
                                "values keep their meaning.",
    "ENUM_CONSTANT_REMOVED": "An enum constant was removed, so Flink fails to read the old serializer snapshot.",
    "AVRO_SCHEMA_EVOLVED": "The Avro schema evolved compatibly: Flink migrates the values.",
    "AVRO_SCHEMA_INCOMPATIBLE": "The new Avro schema cannot read the old data.",
    "KRYO_CLASS_CHANGED": "The type serialized by Kryo changed, which Flink refuses.",
    "KRYO_REGISTRATION_ABSENT": "A Kryo registration or default serializer can no longer be resolved, which Flink "
                                "refuses.",
    "KRYO_REGISTRATIONS_CHANGED": "Kryo registrations changed order: Flink keeps the old order and appends new "
                                  "ones.",
    "SCALA_CASE_CLASS_CHANGED": "The Scala case class changed, which Flink refuses.",
    "SCALA_COLLECTION_BUILDER_CHANGED": "The Scala collection's builder changed, which Flink refuses.",
    "SCALA_ENUM_CHANGED": "The Scala enumeration changed in a way Flink refuses.",
    "SORTED_MAP_COMPARATOR_CHANGED": "The SortedMap's comparator changed (its sort keys, types, orders or null "
                                     "ordering), which Flink refuses.",
    "LINKED_LIST_NULL_MASK_CHANGED": "The linked list's null mask was added or removed, so Flink rewrites every "
                                     "value.",
    "NFA_PREVIOUS_TIMESTAMP_CHANGED": "The CEP computation states gain or lose their previous timestamp, so Flink "
                                      "rewrites them.",
    "NULL_TRANSACTION_SUPPORT_CHANGED": "The sink's support for null pending transactions changed, so Flink "
                                        "rewrites the state.",
    # -- TTL
    "TTL_CHANGED": "The state's TTL setting changed, so every value is rewritten.",
    "TTL_ENABLED": "TTL was switched on: Flink 2.x rewrites the values with their last-access time.",
    "TTL_DISABLED": "TTL was switched off: Flink 2.x rewrites the values without their last-access time.",
    # -- keys, namespaces, states and operators
    "KEY_TYPE_CHANGED": "The operator's key type changed: keys are never migrated by Flink, so the keys must be "
                        "converted by a declared migration.",
    "KEY_NOT_RECORDED": "The checkpoint does not record the key serializer (a changelog never materialized) and "
                        "Flink restores the keys with the new type unchecked, so the check read every logged key "
                        "with it.",
    "NAMESPACE_CHANGED": "The state's namespace type changed, and namespaces are never migrated.",
    "MAP_USER_KEY_CHANGED": "A MapState's user key type changed, which RocksDB cannot migrate (it migrates values "
                            "only).",
    "STATE_KIND_CHANGED": "The state's kind changed (VALUE to LIST, for one): Flink requires the same kind.",
    "STATE_ADDED": "A new state: it starts empty.",
    "STATE_RENAMED": "The state was renamed: Flink restores the old name and starts the new one empty, unless the "
                     "migration renames it.",
    "STATE_DROPPED": "The state is dropped by the new version's schema: the migration removes it.",
    "STATE_NOT_DECLARED": "The new version does not declare this state: Flink still restores it with its old "
                          "serializer and keeps it.",
    "STATE_NOT_REGISTERED": "The new job does not register this state when it opens: it is restored unseen, and "
                            "lost if it was renamed, so the schema must say whether it stays or goes.",
    "OPERATOR_STATE_MODE_CHANGED": "An operator state's distribution mode changed (split to union list, or back): "
                                   "Flink fails when the operator registers it.",
    "OPERATOR_STATE_KIND_CHANGED": "A list state became a broadcast state or the other way round: Flink keeps the "
                                   "two apart, so the old one is restored unseen and the new one starts empty.",
    "OPERATOR_STATE_NOT_REGISTERED": "The new job does not register this operator state when it initializes: Flink "
                                     "restores it unseen and keeps it, and it is lost if it was renamed, so the "
                                     "schema must say it goes.",
    "OPERATOR_STATE_DROPPED": "The schema drops this operator state, but Flink keeps it unseen in every later "
                              "savepoint (flinkstate does not remove operator state).",
    "OPERATOR_STATE_NOT_DECLARED": "The new version does not declare this operator state: Flink still restores it "
                                   "with its old serializer and keeps it.",
    "OPERATOR_ADDED": "A new operator: it starts without state.",
    "OPERATOR_REMOVED": "An operator with state is gone: Flink refuses the savepoint unless allowNonRestoredState "
                        "skips its state.",
    "OPERATOR_RENAMED": "The operator's uid changed: Flink cannot map the old state to it unless the migration "
                        "moves it.",
    "MAX_PARALLELISM_CHANGED": "The max parallelism changed, so Flink cannot map the key groups.",
    "WINDOW_CHANGED": "The operator's window changed, which Flink restores as is: a SQL slice window then misreads "
                      "its slices, a DataStream window fires its open windows at their old end.",
    # -- the plan and Flink's own trial
    "MIGRATION_REFUSED": "flinkstate migrate would refuse this state's migration, so the upgrade cannot run.",
    "TRIAL_DISAGREES": "Flink's own trial restore answered otherwise than the check: trust Flink's answer.",
}


def explain(code: str) -> str:
    """The code's sentence, or one saying it is unknown (a report written by another version of the tool)."""
    return FINDING_CODES.get(code, "A finding this version of flinkstate does not describe.")


__all__ = ["FINDING_CODES", "explain"]
