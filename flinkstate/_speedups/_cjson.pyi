"""Type stubs of the compiled module (flinkstate/_speedups/_cjson.c)."""

from collections.abc import Callable, Sequence
from typing import Any

def json_lines(entries: Sequence[tuple[Any, ...]], is_map: bool, fallback: Callable[[Any], str]) -> str: ...
