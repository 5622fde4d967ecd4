"""``TtlAwareSerializerSnapshot`` (flink-runtime, version 1): ``bool isTtlEnabled`` then the wrapped serializer's
versioned snapshot. Flink wraps a state's value serializer (a List state's element, a Map state's value) in it while
it resolves compatibility, so that turning TTL on or off is a migration rather than a type change.

Record: the wrapped serializer's (``TtlAwareSerializer`` delegates every call). Python value: the wrapped value.

Compatibility (``TtlAwareSerializerSnapshot.resolveSchemaCompatibility``): an old snapshot of another class is
incompatible; TTL turned on compares the new TTL serializer's user value serializer with the old one, TTL turned off
the new serializer with the old TTL serializer's user value serializer, and either way a compatible result (as is,
reconfigured or after migration) becomes ``COMPATIBLE_AFTER_MIGRATION``; otherwise the wrapped snapshots decide.
"""

from __future__ import annotations

from typing import Any

from flinkstate.binary import Reader, Writer
from flinkstate.compatibility import AFTER_MIGRATION, INCOMPATIBLE, Compatibility, Finding
from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot
from flinkstate.serializers.registry import read_snapshot, register, write_snapshot
from flinkstate.serializers.ttl import TtlSnapshot

TTL_AWARE_VERSION = 1


@register
class TtlAwareSnapshot(TypeSerializerSnapshot):
    CLASS_NAMES = ("org.apache.flink.runtime.state.ttl.TtlAwareSerializerSnapshot",)

    def __init__(self, inner: TypeSerializerSnapshot, ttl_enabled: bool | None = None,
                 class_name: str | None = None, version: int = TTL_AWARE_VERSION) -> None:
        super().__init__(class_name or self.CLASS_NAMES[0], version)
        self.inner = inner
        # The one-argument Java constructor: TTL is on exactly when the wrapped snapshot is a TTL serializer's.
        self.ttl_enabled = isinstance(inner, TtlSnapshot) if ttl_enabled is None else ttl_enabled

    @classmethod
    def read_payload(cls, class_name: str, version: int, reader: Reader) -> TtlAwareSnapshot:
        if version != TTL_AWARE_VERSION:
            raise reader.error(f"{class_name}: unsupported snapshot version {version}")
        ttl_enabled = reader.bool()
        start = reader.pos
        inner = read_snapshot(reader)
        if isinstance(inner, TtlAwareSnapshot):
            raise reader.error(f"{class_name} wraps another {class_name}", start)
        if ttl_enabled and not isinstance(inner, TtlSnapshot):
            raise reader.error(f"{class_name} says TTL is enabled but wraps {inner.class_name}", start)
        return cls(inner, ttl_enabled, class_name, version)

    def write_payload(self, writer: Writer) -> None:
        writer.bool(self.ttl_enabled)
        write_snapshot(writer, self.inner)

    @property
    def nested(self) -> list[TypeSerializerSnapshot]:
        return [self.inner]

    @property
    def fixed_length(self) -> int:
        return self.inner.fixed_length

    @property
    def needs_end(self) -> bool:  # type: ignore[override]
        return self.inner.needs_end

    def tail_decoder(self) -> Decoder:
        return self.inner.tail_decoder()

    def make_decoder(self) -> Decoder:
        return self.inner.decoder()

    def make_encoder(self) -> Encoder:
        return self.inner.encoder()

    def type_name(self) -> str:
        return f"TtlAware<{self.inner.type_name()}>"

    def hash_code(self, value: Any) -> int:
        return self.inner.hash_code(value)

    def resolve_same_family(self, old: Any, path: str) -> Compatibility:
        if self.ttl_enabled == old.ttl_enabled:
            return self.inner.resolve_compatibility(old.inner, path)
        inner: Compatibility
        if self.ttl_enabled:
            assert isinstance(self.inner, TtlSnapshot)  # read_payload checks it
            inner = self.inner.user.resolve_compatibility(old.inner, path)
        else:
            assert isinstance(old.inner, TtlSnapshot)
            inner = self.inner.resolve_compatibility(old.inner.user, path)
        change = "enabled" if self.ttl_enabled else "disabled"
        if inner.verdict is INCOMPATIBLE:
            return inner
        # resolveCompatibilityForTtlMigration: any compatible result means rewriting every value (timestamps added
        # or dropped).
        result = Compatibility.of(Finding("TTL_CHANGED", path, f"state TTL {change}: every value is rewritten",
                                          AFTER_MIGRATION, old.type_name(), self.type_name()))
        result.findings.extend(inner.findings)
        return result


__all__ = ["TTL_AWARE_VERSION", "TtlAwareSnapshot"]
