"""The one YAML loader for files that come from elsewhere (manifests, release files): bounded in size, without
aliases, bounded in nesting.

PyYAML's ``safe_load`` builds no objects, but it accepts aliases: a few hundred bytes of ``&a [*b, *b, ...]`` name one
list 10^12 times, and whatever walks the result (a validator printing a value, ``json.dumps``, a comparison) expands
it until the process is killed. Deep nesting exhausts the stack. Neither belongs in a file people write by hand.
"""

from __future__ import annotations

from typing import Any

import yaml

from flinkstate.errors import FlinkStateError

#: A manifest or release file is a few KiB.
MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_YAML_NESTING = 64


class YAMLRefused(FlinkStateError):
    """Text the bounded loader does not accept: too large, not YAML, an alias, or too deep. ``line`` and ``column``
    (1-based) say where, when known; each reader words its own one-line message from them."""

    def __init__(self, source: str, problem: str, line: int | None = None, column: int | None = None) -> None:
        self.source, self.problem, self.line, self.column = source, problem, line, column
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"{source}: {where}{problem}")


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and with a nesting limit."""

    max_nesting = MAX_YAML_NESTING

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves Parser.peek_event untyped
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
        depth = getattr(self, "_depth", 0)
        if depth >= self.max_nesting:
            raise yaml.composer.ComposerError(None, None, f"nested more than {self.max_nesting} levels deep",
                                              self.peek_event().start_mark)  # type: ignore[no-untyped-call]  # as above
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def load_yaml(text: str | bytes, source: str, *, max_bytes: int = MAX_YAML_BYTES,
              max_nesting: int = MAX_YAML_NESTING) -> Any:
    """The data of one YAML document read from ``source`` (named in errors), or :class:`YAMLRefused`: larger than
    ``max_bytes`` (checked before parsing), not UTF-8, not YAML, holding an alias, or nested deeper than
    ``max_nesting``."""
    if len(text) > max_bytes:
        raise YAMLRefused(source, f"larger than {max_bytes // (1024 * 1024)} MiB; refusing to parse it")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YAMLRefused(source, f"byte {exc.start}: not UTF-8 text") from None
    loader = _BoundedLoader(text)
    loader.max_nesting = max_nesting
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise YAMLRefused(source, f"invalid YAML: {problem}", line, column) from None
    finally:
        loader.dispose()
