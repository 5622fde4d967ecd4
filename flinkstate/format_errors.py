"""Errors raised while reading savepoint bytes. Each message is one line naming the file, the offset, the
operator/state when known, and what is wrong, so the CLI can print it as it is."""

from __future__ import annotations

from flinkstate.errors import FlinkStateError


class SavepointFormatError(FlinkStateError):
    """The bytes do not follow Flink's format (truncated, corrupted, wrong magic, ...)."""

    def __init__(self, what: str, path: str | None = None, offset: int | None = None) -> None:
        self.what = what
        self.path = path
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return ": ".join([*where, self.what])

    def located(self, path: str | None, offset_base: int = 0, context: str | None = None) -> SavepointFormatError:
        """A copy of this error placed in a file (offsets inside a block or an inline stream become file offsets)
        and prefixed with context such as ``operator stats, state count``."""
        what = f"{context}: {self.what}" if context else self.what
        offset = None if self.offset is None else self.offset + offset_base
        error = type(self).__new__(type(self))
        error.__dict__.update(self.__dict__)  # keep subclass fields such as class_name
        SavepointFormatError.__init__(error, what, path if self.path is None else self.path, offset)
        return error


class TruncatedData(SavepointFormatError):
    """A read ran past the end of the available bytes."""


class UnsupportedFormat(SavepointFormatError):
    """A well-formed construct this reader does not support (metadata version, native handle, ...)."""


class UnknownSerializerSnapshot(SavepointFormatError):
    """A serializer snapshot class the registry does not know: its payload has no length, so parsing stops."""

    def __init__(self, class_name: str, path: str | None = None, offset: int | None = None) -> None:
        self.class_name = class_name
        super().__init__(f"unknown serializer snapshot class {class_name}", path, offset)


class StateNotFound(FlinkStateError):
    """An operator or state name that the savepoint does not contain."""


class UnsupportedKeyType(FlinkStateError):
    """Java hashCode (hence key-group assignment) cannot be reproduced for this key type."""
