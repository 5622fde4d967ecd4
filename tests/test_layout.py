"""The package's shape (issue 14): no import circle inside flinkstate, no import of another module's private name,
no Airflow or Spark under flinkstate, no module far over the size a reader can hold. Static: reads the sources with
``ast``, imports nothing, needs no Flink."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flinkstate"
MAX_LINES = 500

#: Modules allowed over MAX_LINES, each with its reason. Keep this short: split a module rather than list it.
OVERSIZED = {
    # Java serialization of one class graph (CheckpointProperties), reader and writer side by side; 8 lines over.
    "flinkstate/format/checkpoint_properties.py",
}


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: set[str] = field(default_factory=set)


def _modules() -> dict[str, Module]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return modules


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


MODULES = _modules()


def _imported(module: Module) -> list[tuple[str, str | None, int]]:
    """(module imported, name imported from it or None, line) for every import, at any depth (lazy imports and
    TYPE_CHECKING blocks count: they are circles all the same)."""
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, node)
            found += [(target, alias.name, node.lineno) for alias in node.names]
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for module in MODULES.values():
        for target, name, _ in _imported(module):
            if name is not None and f"{target}.{name}" in MODULES:
                graph[module.name].add(f"{target}.{name}")  # from package import submodule
            elif target in MODULES:
                graph[module.name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_circle() -> None:
    # The checker itself: a two-module circle and a self-import are found, a chain is not.
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_inside_flinkstate() -> None:
    assert len(MODULES) > 50  # the walk found the package
    assert _cycles(_graph()) == []


def test_no_private_name_imported_across_modules() -> None:
    reaches = [f"{module.path.relative_to(ROOT)}:{line}: from {target} import {name}"
               for module in MODULES.values() for target, name, line in _imported(module)
               if name is not None and name.startswith("_") and not name.startswith("__")
               and f"{target}.{name}" not in MODULES]
    assert reaches == []


def test_flinkstate_imports_neither_airflow_nor_spark() -> None:
    found = [f"{module.path.relative_to(ROOT)}:{line}: {target}"
             for module in MODULES.values() for target, _, line in _imported(module)
             if target.split(".")[0] in ("airflow", "pyspark", "py4j")]
    assert found == []


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_module_size(module: str) -> None:
    path = MODULES[module].path
    relative = str(path.relative_to(ROOT))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if relative in OVERSIZED:
        assert lines > MAX_LINES, f"{relative} has {lines} lines now: take it off OVERSIZED"
    else:
        assert lines <= MAX_LINES, f"{relative}: {lines} lines (over {MAX_LINES}): split it by concern"


#: Code built on the toolkit, which must use its public API (``from flinkstate import ...``) and nothing deeper; the
#: CLI may also import its own modules.
API_USERS = {
    "flinkstate/cli": ("flinkstate.cli",),
    "plugins/flinkstate_airflow/upgrade.py": (),
    "plugins/flinkstate_airflow/operators.py": (),
    "plugins/flinkstate_airflow/sensors.py": (),
    "plugins/flinkstate_airflow/notifiers.py": (),
    "plugins/flinkstate_airflow/hooks.py": (),
    "plugins/flinkstate_airflow/releases.py": (),
    "plugins/flinkstate_airflow/recheck.py": (),
    "plugins/flinkstate_airflow/ui.py": (),
    "plugins/flinkstate_airflow/flinkstate_plugin.py": (),
    "spark_jobs": (),
    "examples": (),
}


@pytest.mark.parametrize("where", sorted(API_USERS), ids=str)
def test_built_on_the_public_api_only(where: str) -> None:
    own = API_USERS[where]
    path = ROOT / where
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    deeper = []
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            targets = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            deeper += [f"{file.relative_to(ROOT)}:{node.lineno}: {target}" for target in targets
                       if target.startswith("flinkstate.")
                       and not any(target == o or target.startswith(f"{o}.") for o in own)]
    assert len(files) >= 1
    assert deeper == []


def test_public_api_names_resolve() -> None:
    import flinkstate

    missing = [name for name in flinkstate.__all__ if not hasattr(flinkstate, name)]
    assert missing == []
    assert {"open_savepoint", "Savepoint", "manifest_from_savepoint", "check", "MigrationJob",
            "FlinkStateError"} <= set(flinkstate.__all__)
