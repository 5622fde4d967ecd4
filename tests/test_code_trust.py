"""Manifests are data unless code is allowed: a migration function (``function: MODULE:FUNC``) is imported only
with ``--allow-code`` (all but the standard library) or a trusted-module list
(``--allow-code=a,b`` or ``$FLINKSTATE_ALLOW_CODE``). The header-only ``check`` never imports. Every refusal is one
line, before anything is imported or written.

Whether a module was imported is observed, not assumed: the test module ``trusted_fix`` writes a marker file when it
is imported, and every command runs as the installed ``flinkstate`` (or ``spark-submit``) in its own process, with
that module importable through PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flinkstate.migration.code_policy import CodeNotAllowed, CodePolicy, load_function
from tests.test_spark_jobs import MANIFESTS, spark_submit

ROOT = Path(__file__).resolve().parents[1]
FLINKSTATE = ROOT / ".venv" / "bin" / "flinkstate"
KEYS = 20

#: Imported only if allowed: writes $TRUST_MARKER (appending one line per import) and doubles nothing (the value
#: is kept, the migration stays checkable by the verifier).
TRUSTED_FIX = '''
import os
from os import system  # re-exported: must never be callable as trusted_fix:system
with open(os.environ["TRUST_MARKER"], "a") as marker:
    marker.write("imported\\n")


def keep(value):
    return value
'''


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "trusted_fix.py").write_text(TRUSTED_FIX)
    return folder


def _manifest(tmp_path: Path, function: str) -> Path:
    text = (MANIFESTS / "v3-with-conversion.yaml").read_text()
    old = "            count: {convert: to-string}\n"
    assert old in text
    path = tmp_path / "v3-fn.yaml"
    path.write_text(text.replace(old, old + f"          function: {function}\n"))
    return path


def _run(code_dir: Path, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "FLINKSTATE_ALLOW_CODE"}
    environment.update({"PYTHONPATH": str(code_dir), "TRUST_MARKER": str(code_dir / "imported.txt"), **(env or {})})
    return subprocess.run([str(FLINKSTATE), *map(str, args)], capture_output=True, text=True, env=environment,
                          timeout=300)


def _imports(code_dir: Path) -> int:
    marker = code_dir / "imported.txt"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("flinkstate: error: ")
    return lines[0]


# -- the header-only check imports nothing -------------------------------------------------------------------------


def test_check_never_imports_a_manifest_function(flink_savepoints: dict[str, Path], tmp_path: Path,
                                                 code_dir: Path):
    manifest = _manifest(tmp_path, "trusted_fix:keep")
    for extra in ([], ["--allow-code"], ["--allow-code=trusted_fix"], ["--format", "json"]):
        result = _run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest, *extra)
        assert result.returncode == 3, result.stderr  # migration required and possible
    assert _imports(code_dir) == 0, "check (no --dry-run) must not import the manifest's function, even if allowed"
    report = json.loads(_run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest, "--format",
                             "json").stdout)
    assert report["outcome"] == "migrate"
    assert _imports(code_dir) == 0


def test_check_dry_run_needs_the_allowance(flink_savepoints: dict[str, Path], tmp_path: Path, code_dir: Path):
    manifest = _manifest(tmp_path, "trusted_fix:keep")
    error = _one_line_error(_run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest,
                                 "--dry-run"))
    assert error == ("flinkstate: error: operator stats, state stats: migration function trusted_fix:keep: it is "
                     "code, run only when allowed: pass --allow-code MODULES (trusted modules, comma-separated), "
                     "--allow-code=all, or set FLINKSTATE_ALLOW_CODE")
    assert _imports(code_dir) == 0
    # Another module listed: still refused, and the message says what is allowed.
    error = _one_line_error(_run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest,
                                 "--dry-run", "--allow-code=other.fixes,trusted_fix_not"))
    assert "module trusted_fix is not among the allowed modules (other.fixes, trusted_fix_not)" in error
    assert _imports(code_dir) == 0
    # Allowed by the flag, by the environment, and by --allow-code (all): the dry run runs every entry.
    for extra, env in ((["--allow-code=trusted_fix"], None), ([], {"FLINKSTATE_ALLOW_CODE": "trusted_fix"}),
                       (["--allow-code"], None)):
        result = _run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest, "--dry-run",
                      "--format", "json", *extra, env=env)
        assert result.returncode == 3, result.stderr
        dry_run = json.loads(result.stdout)["dry_run"]
        assert dry_run["ran"] and dry_run["failures"] == 0
        assert dry_run["states"]["stats/stats"]["read"] == KEYS
    assert _imports(code_dir) == 3


def test_check_has_no_planner_of_its_own(flink_savepoints: dict[str, Path], tmp_path: Path, code_dir: Path):
    """check's verdict is migrate's plan: there is no other planner to load (the old --migration-planner was code
    that could say "possible" where migrate refused), and planning a declared function imports nothing."""
    manifest = _manifest(tmp_path, "trusted_fix:keep")
    result = _run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest, "--migration-planner",
                  "trusted_fix:planner", "--allow-code=trusted_fix")
    assert result.returncode == 2 and "unrecognized arguments: --migration-planner" in result.stderr
    assert _run(code_dir, "check", flink_savepoints["heap-p2"], "--schema", manifest).returncode == 3
    assert _imports(code_dir) == 0


# -- migrate ---------------------------------------------------------------------------------------------------------


def test_migrate_refuses_code_without_the_allowance_and_writes_nothing(flink_savepoints: dict[str, Path],
                                                                       tmp_path: Path, code_dir: Path):
    out = tmp_path / "out" / "migrated"
    cases = [
        ("trusted_fix:keep", [], "it is code, run only when allowed"),
        ("os:system", ["--allow-code"], "module os is a standard-library module, allowed only when listed by name"),
        ("builtins:exit", ["--allow-code"], "module builtins is a standard-library module"),
        ("subprocess:run", ["--allow-code=trusted_fix"], "module subprocess is not among the allowed modules"),
        # A name an allowed module merely imported is not that module's code.
        ("trusted_fix:system", ["--allow-code=trusted_fix"], "the callable is defined in posix, which is not allowed"),
        ("trusted_fix:__builtins__", ["--allow-code"], "private or special attributes"),
    ]
    for function, extra, expected in cases:
        manifest = _manifest(tmp_path, function)
        error = _one_line_error(_run(code_dir, "migrate", flink_savepoints["heap-p2"], "--schema", manifest,
                                     "--output", out, *extra))
        assert error.startswith(f"flinkstate: error: operator stats, state stats: migration function {function}"), \
            error
        assert expected in error, error
        assert not out.exists() and sorted(p.name for p in out.parent.iterdir()) == [], function
    # trusted_fix:system imported trusted_fix (allowed) to find that the name is posix's: one import, no call.
    assert _imports(code_dir) == 1
    error = _one_line_error(_run(code_dir, "migrate", flink_savepoints["heap-p2"], "--schema",
                                 _manifest(tmp_path, "trusted_fix:keep"), "--output", out, "--allow-code=../evil"))
    assert error == ("flinkstate: error: --allow-code: '../evil' is not a Python module name (expected 'all' or "
                     "module names separated by commas, e.g. mypkg.fixes,other)")


def test_migrate_runs_an_allowed_function(flink_savepoints: dict[str, Path], tmp_path: Path, code_dir: Path):
    manifest = _manifest(tmp_path, "trusted_fix:keep")
    out = tmp_path / "migrated"
    result = _run(code_dir, "migrate", flink_savepoints["heap-p2"], "--schema", manifest, "--output", out,
                  env={"FLINKSTATE_ALLOW_CODE": "trusted_fix"})
    assert result.returncode == 0, result.stderr
    assert f"stats/stats: {KEYS} read, {KEYS} written" in result.stdout
    assert (out / "_metadata").is_file() and not (out / "_metadata.unverified").exists()
    assert _imports(code_dir) == 1


def test_spark_migrate_job_refuses_code_without_the_allowance(flink_savepoints: dict[str, Path], tmp_path: Path):
    manifest = _manifest(tmp_path, "tests.test_migration:fail_on_some_keys")
    result = spark_submit("migrate_state.py", flink_savepoints["heap-p2"], "--schema", manifest, "--output",
                          tmp_path / "out")
    assert result.returncode == 1
    error = result.stdout.strip().splitlines()[-1]
    assert error == ("migrate_state: error: operator stats, state stats: migration function "
                     "tests.test_migration:fail_on_some_keys: it is code, run only when allowed: pass --allow-code "
                     "MODULES (trusted modules, comma-separated), --allow-code=all, or set FLINKSTATE_ALLOW_CODE")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v3-fn.yaml"]


# -- the policy itself -------------------------------------------------------------------------------------------------


def test_code_policy_rules():
    assert CodePolicy.parse("") == CodePolicy() and not CodePolicy().allows_any
    assert CodePolicy.parse("all") == CodePolicy(allow_all=True)
    assert CodePolicy.parse(" mypkg.fixes , other ") == CodePolicy(modules=("mypkg.fixes", "other"))
    listed = CodePolicy(modules=("mypkg",))
    assert listed.allows_module("mypkg") and listed.allows_module("mypkg.fixes.deep")
    assert not listed.allows_module("mypkgs") and not listed.allows_module("other")
    everything = CodePolicy(allow_all=True)
    assert everything.allows_module("mypkg") and not everything.allows_module("os.path")
    assert not everything.allows_module("sys") and not everything.allows_module("__main__")
    assert CodePolicy(allow_all=True, modules=("json",)).allows_module("json")
    assert load_function("tests.test_code_trust:double", CodePolicy(modules=("tests.test_code_trust",)))(21) == 42
    with pytest.raises(CodeNotAllowed, match="private or special"):
        load_function("tests.test_code_trust:_double", everything)
    assert sys.modules.get("trusted_fix") is None


def double(value: int) -> int:
    return value * 2


def _double(value: int) -> int:
    return value * 2
