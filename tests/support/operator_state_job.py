"""The operator-state job (tests/support/operator_state_job/: OperatorStateJob.java, and each version's Tally POJO in
v1/, v2/ and v3/) seen from the tests: its jars, and what its operator writes into its audit folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.java_build import build_jar

SOURCE_DIR = Path(__file__).resolve().parent / "operator_state_job"
ENTRY_CLASS = "opstate.OperatorStateJob"
VERSIONS = ("v1", "v2", "v3")
TALLY_UID, TALLY_STATE = "tally", "tallies"


def jar(version: str) -> Path:
    """The job with ``version``'s Tally class, compiled when a source is newer than its jar."""
    sources = SOURCE_DIR / "build" / f"src-{version}"
    for part in ("job", version):  # copy2 keeps the times build_jar compares
        shutil.copytree(SOURCE_DIR / part, sources, dirs_exist_ok=True, copy_function=shutil.copy2)
    return build_jar(sources, SOURCE_DIR / "build" / f"operator-state-job-{version}.jar", ENTRY_CLASS)


def restored_tallies(audit_dir: Path) -> list[str]:
    """What the restored operator read from its list state, ``name=count`` in the state's order."""
    return (audit_dir / "restored").read_text().splitlines()
