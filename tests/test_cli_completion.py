"""Shell completion as a user gets it: ``eval "$(flinkstate completion bash)"`` in a real bash, then what bash offers
for a partly typed command line (argcomplete's protocol, run through bash's own completion function)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.sample_job import ROOT

VENV_BIN = ROOT / ".venv" / "bin"

# Loads the script as a user would, then plays what bash does on TAB: COMP_* set, the function registered with
# `complete -F` called, COMPREPLY printed one candidate a line.
BASH_DRIVER = r'''
eval "$(flinkstate completion bash)"
complete -p flinkstate
line="$1"
COMP_LINE="$line"; COMP_POINT=${#COMP_LINE}
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=()
function=$(complete -p flinkstate | sed -E 's/.* -F ([^ ]+) .*/\1/')
"$function" flinkstate "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
'''


def _complete(line: str, cwd: Path = ROOT) -> tuple[str, list[str]]:
    """(the `complete -p` line, the candidates bash offers for ``line``)."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", BASH_DRIVER, "driver", line], capture_output=True, text=True, env=env,
                            cwd=cwd, timeout=60)
    assert result.returncode == 0, result.stderr
    registration, *candidates = result.stdout.splitlines()
    return registration, [c.rstrip() for c in candidates if c.strip()]


def test_bash_completes_subcommands():
    registration, candidates = _complete("flinkstate mi")
    assert registration.startswith("complete ") and registration.endswith(" flinkstate")
    assert candidates == ["migrate"]
    assert sorted(_complete("flinkstate c")[1]) == ["check", "cluster", "completion"]


def test_bash_completes_a_subcommands_options_and_the_global_ones():
    _, candidates = _complete("flinkstate migrate --")
    for option in ("--schema", "--old-schema", "--output", "--report", "--metadata-version", "--allow-code",
                   "--verbose", "--quiet", "--s3-endpoint-url", "--help"):
        assert option in candidates, (option, candidates)
    assert "--format" not in candidates and "--dry-run" not in candidates  # check's, not migrate's
    assert len(candidates) == len(set(candidates))
    assert _complete("flinkstate check x --format ")[1] == ["markdown", "json", "html"]


def test_bash_completes_paths_where_they_go(tmp_path: Path):
    (tmp_path / "savepoints" / "savepoint-1a2b").mkdir(parents=True)
    (tmp_path / "v2.yaml").write_text("operators: []\n")
    (tmp_path / "notes.txt").write_text("x")
    assert _complete("flinkstate describe savepoints/sa", cwd=tmp_path)[1] == ["savepoints/savepoint-1a2b/"]
    # A manifest: YAML files and folders, not other files.
    assert sorted(_complete("flinkstate check sp --schema ", cwd=tmp_path)[1]) == ["savepoints/", "v2.yaml"]
    # A folder: folders only.
    assert _complete("flinkstate migrate sp --output ", cwd=tmp_path)[1] == ["savepoints/"]
    # Not a path (a URL): flinkstate offers nothing (bash's `-o default` may still offer file names).
    assert _complete("flinkstate jobs --flink-url ", cwd=tmp_path)[1] == []


def test_completion_prints_the_script_for_each_shell():
    for shell, marker in (("bash", "complete -o"), ("zsh", "#compdef flinkstate"), ("fish", "complete --command")):
        result = subprocess.run([str(VENV_BIN / "flinkstate"), "completion", shell], capture_output=True, text=True)
        assert result.returncode == 0 and result.stderr == ""
        assert marker in result.stdout and "_ARGCOMPLETE" in result.stdout, (shell, result.stdout[:300])
    bad = subprocess.run([str(VENV_BIN / "flinkstate"), "completion", "tcsh"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'tcsh'" in bad.stderr


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_the_zsh_script_is_valid_zsh():
    script = subprocess.run([str(VENV_BIN / "flinkstate"), "completion", "zsh"], capture_output=True, text=True,
                            check=True).stdout
    result = subprocess.run(["zsh", "-n"], input=script, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_the_zsh_and_fish_protocol_answers_with_descriptions(shell: str):
    # What the zsh and fish scripts run on TAB (argcomplete's protocol: COMP_LINE/COMP_POINT in, candidates on fd 8,
    # separated by \v); those shells show each candidate with its help text.
    line = "flinkstate mi"
    # The variables each script sets (argcomplete's shell_integration): zsh splits "candidate:description" itself,
    # fish gets candidate and description separated by a tab.
    protocol = {"_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": shell, "_ARGCOMPLETE_SUPPRESS_SPACE": "1",
                **({"_ARGCOMPLETE_DFS": "\t", "_ARGCOMPLETE_IFS": "\n"} if shell == "fish" else {})}
    env = {**os.environ, **protocol, "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", "flinkstate 8>&1 1>/dev/null 2>/dev/null"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0
    separator = ":" if shell == "zsh" else "\t"
    assert result.stdout.split("\v" if shell == "zsh" else "\n") == [
        f"migrate{separator}rewrite a savepoint for a new job version"]
