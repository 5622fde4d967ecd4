"""User code in a migration (``function: module:name`` rules): which modules may be imported and run
(``--allow-code``, ``FLINKSTATE_ALLOW_CODE``), and loading a function once allowed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

from flinkstate.errors import FlinkStateError
from flinkstate.migration.conversions import MigrationPlanError, Transform

# --------------------------------------------------------------------------------------------------------------------
# User functions
# --------------------------------------------------------------------------------------------------------------------


#: The environment variable that allows code when no ``--allow-code`` is given: ``all`` or a comma-separated list of
#: trusted modules (the same values as the flag).
ALLOW_CODE_ENV = "FLINKSTATE_ALLOW_CODE"
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_HOW_TO_ALLOW = (f"it is code, run only when allowed: pass --allow-code MODULES (trusted modules, comma-separated), "
                 f"--allow-code=all, or set {ALLOW_CODE_ENV}")


class CodeNotAllowed(MigrationPlanError):
    """A manifest (or ``--migration-planner``) names Python code that the code policy does not allow."""


@dataclass(frozen=True)
class CodePolicy:
    """Which Python code a manifest may run. A manifest is data: its ``function: module:function`` is imported and
    called only when this policy allows it. ``allow_all`` admits any module except the standard library and
    builtins (``os:system``, ``builtins:exec``); ``modules`` admits exactly those modules and their submodules,
    standard ones included when named. The default allows nothing. Frozen and plain: it is pickled to Spark tasks."""

    allow_all: bool = False
    modules: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str | None, source: str = "--allow-code") -> CodePolicy:
        """``all`` (or ``*``), a comma-separated module list, or empty/None (nothing)."""
        value = (text or "").strip()
        if not value:
            return cls()
        if value in ("all", "*"):
            return cls(allow_all=True)
        modules = tuple(m.strip() for m in value.split(",") if m.strip())
        bad = [m for m in modules if not _MODULE_NAME.fullmatch(m)]
        if bad:
            raise FlinkStateError(f"{source}: {bad[0][:80]!r} is not a Python module name (expected 'all' or "
                                  f"module names separated by commas, e.g. mypkg.fixes,other)")
        return cls(modules=modules)

    @classmethod
    def resolve(cls, flag: str | None) -> CodePolicy:
        """The policy of a command: ``--allow-code`` when given with a value, else ``$FLINKSTATE_ALLOW_CODE``."""
        if flag and flag.strip():
            return cls.parse(flag)
        return cls.parse(os.environ.get(ALLOW_CODE_ENV), ALLOW_CODE_ENV)

    @property
    def allows_any(self) -> bool:
        return self.allow_all or bool(self.modules)

    def describe(self) -> str:
        return "all modules but the standard library" if self.allow_all else (
            ", ".join(self.modules) if self.modules else "none")

    def _listed(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def allows_module(self, module: str) -> bool:
        if self._listed(module):
            return True
        if not self.allow_all:
            return False
        top = module.partition(".")[0]
        return top not in sys.stdlib_module_names and top not in sys.builtin_module_names and top != "__main__"

    def check(self, reference: str, what: str = "migration function") -> tuple[str, list[str]]:
        """(module, attribute path) of an allowed ``module:function``, or :class:`CodeNotAllowed`. Nothing is
        imported here."""
        module_name, _, attribute = reference.partition(":")
        parts = attribute.split(".")
        if not _MODULE_NAME.fullmatch(module_name) or not attribute or not all(p.isidentifier() for p in parts):
            raise CodeNotAllowed(f"{what} {reference[:120]!r}: expected module:function")
        if any(p.startswith("_") for p in parts):
            raise CodeNotAllowed(f"{what} {reference}: private or special attributes (starting with '_') are never "
                                 f"loaded")
        if not self.allows_any:
            raise CodeNotAllowed(f"{what} {reference}: {_HOW_TO_ALLOW}")
        if not self.allows_module(module_name):
            why = "a standard-library module, allowed only when listed by name" if self.allow_all else \
                f"not among the allowed modules ({self.describe()})"
            raise CodeNotAllowed(f"{what} {reference}: module {module_name} is {why}; {_HOW_TO_ALLOW}")
        return module_name, parts


def load_function(reference: str, policy: CodePolicy | None = None, what: str = "migration function") -> Transform:
    """``module:function`` (``function`` possibly dotted, e.g. ``Class.method``) as a callable, if ``policy``
    (default: nothing allowed) admits the module. The callable must be defined in an allowed module too: a name
    that an allowed module merely imported (``mymod:system`` after ``from os import system``) is refused."""
    module_name, parts = (policy or CodePolicy()).check(reference, what)
    try:
        target: Any = importlib.import_module(module_name)
        for part in parts:
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise MigrationPlanError(f"cannot load {what} {reference}: {exc}") from None
    if not callable(target):
        raise MigrationPlanError(f"{what} {reference} is not callable")
    defined_in = getattr(target, "__module__", None)
    if not isinstance(defined_in, str) or not (policy or CodePolicy()).allows_module(defined_in):
        raise CodeNotAllowed(f"{what} {reference}: the callable is defined in {defined_in or 'no module'}, which "
                             f"is not allowed ({(policy or CodePolicy()).describe()})")
    return target  # type: ignore[no-any-return]


# The command-line option of every program that may run a manifest's migration functions (the CLI's migrate and
# check, the Spark jobs): one spelling and one help text.
ALLOW_CODE_HELP = ("a manifest is data; its migration functions (function: MODULE:FUNC) are Python code, imported "
                   "only when allowed: --allow-code MODULES (comma-separated trusted modules and their submodules) "
                   f"or --allow-code=all (any module but the standard library). Default: ${ALLOW_CODE_ENV} (same "
                   "values), else no code")


def add_allow_code_argument(parser: argparse.ArgumentParser, help_text: str = ALLOW_CODE_HELP) -> None:
    # nargs="?": the bare flag means all; give a list as --allow-code=a,b (or after SAVEPOINT) so that it cannot
    # take SAVEPOINT for a module list.
    parser.add_argument("--allow-code", nargs="?", const="all", metavar="MODULES", help=help_text)


__all__ = ["ALLOW_CODE_ENV", "ALLOW_CODE_HELP", "CodeNotAllowed", "CodePolicy", "add_allow_code_argument",
           "load_function"]
