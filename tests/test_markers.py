"""The markers that split `make unit` from `make test` stay right: a test that starts Flink, Spark or Airflow must
never run in the quick loop. tests/conftest.py marks tests from the fixtures they use and the names their code uses;
what it cannot see (a module's own fixtures, a module that runs the `airflow` executable) needs a module `pytestmark`,
which these static checks demand. The last test collects real modules and reads the markers pytest applied."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CODE_MARKERS, FIXTURE_MARKERS

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
KNOWN = ("flink", "spark", "airflow", "s3", "browser")

#: Names that start something when a fixture or module-level code uses them (the conftest's CODE_MARKERS, plus the
#: pieces behind the conftest's own session fixtures).
STARTERS: dict[str, str] = {**CODE_MARKERS, "WebhookReceiver": "airflow", "ThreadedMotoServer": "s3"}


def _is_fixture(node: ast.FunctionDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "fixture":
            return True
    return False


def _used(node: ast.AST) -> set[str]:
    """Names, attribute names and string constants used in a piece of code, leaving out annotations (a parameter
    typed LocalFlinkCluster starts nothing)."""
    found: set[str] = set()

    def visit(child: ast.AST) -> None:
        if isinstance(child, ast.arg):
            return  # the parameter's annotation; the name itself is a parameter, not a use
        if isinstance(child, ast.AnnAssign):
            if child.value is not None:
                visit(child.value)
            return
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            for part in (*child.decorator_list, child.args, *child.body):  # not the return annotation
                visit(part)
            return
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Attribute):
            found.add(child.attr)
        elif isinstance(child, ast.alias):
            found.add(child.asname or child.name.rsplit(".", 1)[-1])
        elif isinstance(child, ast.Constant) and isinstance(child.value, str):
            found.add(child.value)
        for grandchild in ast.iter_child_nodes(child):
            visit(grandchild)

    visit(node)
    return found


#: Ways to run a process: with the string "airflow" in the same code, the airflow executable (standalone, dags test).
PROCESS_CALLS = {"Popen", "run", "check_call", "check_output", "call"}


def _runs_airflow(used: set[str]) -> bool:
    return "airflow" in used and bool(PROCESS_CALLS & used)


def _needed(used: set[str]) -> set[str]:
    needed = {marker for name, marker in STARTERS.items() if name in used}
    if _runs_airflow(used):
        needed.add("airflow")
    return needed


def _pytestmark(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"}
    return set()


def _module_needs(tree: ast.Module) -> dict[str, set[str]]:
    """marker -> where the module needs it beyond what conftest marks by itself: its fixtures, its module-level code,
    and the `airflow` executable anywhere (module fixtures are not test code, so conftest's scan does not see them)."""
    needs: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not _is_fixture(node):
            if _runs_airflow(_used(node)):
                needs.setdefault("airflow", set()).add(f"{node.name} runs the airflow executable")
            continue  # test functions and their helpers: conftest marks each test from the names its code uses
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue  # importing a helper starts nothing
        where = f"fixture {node.name}" if isinstance(node, ast.FunctionDef) else f"module code at line {node.lineno}"
        # A fixture that uses a conftest fixture marking the same thing already marks every test using it.
        inherited = ({FIXTURE_MARKERS.get(arg.arg) for arg in node.args.args}
                     if isinstance(node, ast.FunctionDef) else set())
        for marker in _needed(_used(node)) - inherited:
            needs.setdefault(marker, set()).add(where)
    return needs


def _test_modules() -> list[Path]:
    return sorted(path for path in TESTS.glob("test_*.py") if path.name != Path(__file__).name)


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: p.name)
def test_modules_that_start_something_outside_tests_say_so(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    declared = _pytestmark(tree)
    missing = {marker: sorted(where) for marker, where in _module_needs(tree).items() if marker not in declared}
    assert not missing, (f"{path.name} starts something conftest cannot see; add to its pytestmark: "
                         + "; ".join(f"{m} ({', '.join(w)})" for m, w in sorted(missing.items())))


def test_every_conftest_fixture_that_starts_something_marks_its_users() -> None:
    tree = ast.parse((TESTS / "conftest.py").read_text())
    fixtures = [node for node in tree.body if isinstance(node, ast.FunctionDef) and _is_fixture(node)]
    assert {f.name for f in fixtures} >= set(FIXTURE_MARKERS), "FIXTURE_MARKERS names a fixture conftest lacks"
    for fixture in fixtures:
        for marker in _needed(_used(fixture)):
            assert FIXTURE_MARKERS.get(fixture.name) == marker, (
                f"conftest fixture {fixture.name} starts something ({marker}): add it to FIXTURE_MARKERS")


def test_the_scan_sees_what_starts_flink() -> None:
    """The static scan itself: a fixture constructing a cluster needs the mark, a parameter typed with it does not."""
    starts = ast.parse("@pytest.fixture\ndef f(tmp_path):\n    return LocalFlinkCluster(tmp_path)\n")
    typed = ast.parse("@pytest.fixture\ndef f(c: LocalFlinkCluster) -> LocalFlinkCluster:\n    return c\n")
    standalone = ast.parse("def test_x():\n    subprocess.Popen([BIN / 'airflow', 'standalone'])\n")
    compose = ast.parse("def test_y(compose):\n    assert compose['airflow']\n")
    assert _module_needs(starts) == {"flink": {"fixture f"}}
    assert _module_needs(typed) == {}
    assert _module_needs(standalone) == {"airflow": {"test_x runs the airflow executable"}}
    assert _module_needs(compose) == {}
    inherits = ast.parse("@pytest.fixture\ndef f(airflow_home):\n    set_connection('x')\n")
    assert _module_needs(inherits) == {}
    assert _pytestmark(ast.parse("pytestmark = [pytest.mark.flink, pytest.mark.spark]")) == {"flink", "spark"}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Used only as a plugin (-p tests.test_markers) by the test below: prints the markers of every collected test."""
    for item in session.items:
        names = sorted({mark.name for mark in item.iter_markers()} & set(KNOWN))
        print(f"MARKERS {item.nodeid} {','.join(names) or '-'}")


def test_conftest_marks_tests_from_their_fixtures_and_code() -> None:
    modules = ["tests/test_reader.py", "tests/test_s3_output.py", "tests/test_scheduled_upgrades.py"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.test_markers", "-p", "no:cacheprovider",
         *modules], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    marks = dict(line.split(" ")[1:3] for line in result.stdout.splitlines() if line.startswith("MARKERS "))
    reader, s3, scheduled = (f"{module}::" for module in modules)
    expected = {
        # no fixture or name that starts anything: the quick loop runs it
        reader + "test_stream_stays_bounded_by_block": "-",
        # flink_savepoints (through the parametrized fixture `case`) needs flink_cluster
        reader + "test_every_entry_matches_what_the_job_wrote[heap-p1]": "flink",
        # the module's fixture `s3` uses s3_endpoint; nothing else
        s3 + "test_the_output_pickles_without_its_client": "s3",
        # spark_submit and LocalFlinkCluster in the test's code, s3 and flink_savepoints from fixtures
        s3 + "test_spark_job_writes_to_s3_what_the_cli_writes_and_flink_restores_it": "flink,s3,spark",
        # load_dag in the test's code, the Airflow fixtures and the cluster
        scheduled + "test_scheduled_dag_triggers_the_upgrade_of_the_due_job_only": "airflow,flink",
        scheduled + "test_window_is_judged_in_its_time_zone": "-",
    }
    assert {nodeid: marks.get(nodeid) for nodeid in expected} == expected
