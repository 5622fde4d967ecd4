"""Serializer snapshot families (one module each) and the registry that maps Java snapshot class names to them."""

from flinkstate.serializers.base import Decoder, Encoder, TypeSerializerSnapshot, UnknownSnapshot
from flinkstate.serializers.registry import known_class_names, lookup, read_snapshot, snapshot_bytes, write_snapshot

__all__ = ["Decoder", "Encoder", "TypeSerializerSnapshot", "UnknownSnapshot", "known_class_names", "lookup",
           "read_snapshot", "snapshot_bytes", "write_snapshot"]
