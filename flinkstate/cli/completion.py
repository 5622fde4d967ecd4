"""Shell completion with argcomplete, the standard for argparse programs: ``flinkstate completion bash|zsh|fish``
prints the script to load (``eval "$(flinkstate completion bash)"``), and :func:`autocomplete` answers the shell's
requests from the parser itself, so every subcommand and option completes as it is defined.

Arguments complete by what they take, read from their metavar (one table here rather than a completer on each
argument): savepoints and files as paths, manifests as YAML files or folders, folders as folders; for values that
are not paths (URLs, ids, numbers) flinkstate offers nothing (bash then falls back to its own file names, as the
script registers with ``-o default``; zsh and fish show nothing).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

SHELLS = ("bash", "zsh", "fish")

#: metavar -> what completes there: "files", "yaml" (YAML files and folders to walk into) or "dirs".
PATH_METAVARS = {"SAVEPOINT": "files", "FILE": "files", "JAR": "files", "MANIFEST": "yaml", "DIR": "dirs",
                 "FLINK_HOME": "dirs"}
#: option -> kind, for options that take a path but have no metavar.
PATH_OPTIONS = {"--work-dir": "dirs", "--flink-home": "dirs", "--savepoint-base": "dirs", "--target-directory": "dirs"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "completion", help="print the shell completion script (bash, zsh or fish)",
        description="Print the script that makes the shell complete flinkstate's commands, options and paths.",
        epilog="Load it in the current shell, or put the line in ~/.bashrc (~/.zshrc):\n"
               '  eval "$(flinkstate completion bash)"\n'
               '  eval "$(flinkstate completion zsh)"\n'
               "  flinkstate completion fish | source\n"
               "argcomplete's register-python-argcomplete flinkstate prints the same for bash.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import argcomplete

    print(argcomplete.shellcode(["flinkstate"], shell=args.shell), end="")
    return 0


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answers a completion request and exits when the shell's completion function called this program (argcomplete
    sets ``_ARGCOMPLETE``); does nothing otherwise, without importing argcomplete."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    _assign_completers(parser)
    # An argument the table does not name is not a path: offer nothing for it (see the module's docstring).
    argcomplete.autocomplete(parser, default_completer=argcomplete.SuppressCompleter())


def _assign_completers(parser: argparse.ArgumentParser) -> None:
    from argcomplete.completers import DirectoriesCompleter, FilesCompleter

    kinds = {"files": FilesCompleter(), "yaml": FilesCompleter(("yaml", "yml")), "dirs": DirectoriesCompleter()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in {id(p): p for p in action.choices.values()}.values():
                _assign_completers(sub)
            continue
        if action.choices is not None or action.nargs == 0:
            continue  # argcomplete offers the choices; flags take nothing
        kind = PATH_METAVARS.get(str(action.metavar)) or next(
            (PATH_OPTIONS[o] for o in action.option_strings if o in PATH_OPTIONS), None)
        if kind is not None:
            action.completer = kinds[kind]  # type: ignore[attr-defined]
