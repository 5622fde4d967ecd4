"""The compatibility-matrix job (examples/compat-matrix) seen from the tests: its jars, manifests and audit lines.

On the first event of each key in a run, the job writes what it found for that key: the restored count and the
restored POJO, Row, Tuple and enum values (JSON). A key's count after the event with sequence number ``seq`` is
``(seq - index) // keys``, so a restored count can be checked exactly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flinkstate.engine.rest import FlinkRestClient
from tests.support.sample_job import wait_for_all_keys

ROOT = Path(__file__).resolve().parents[2]
JOB_DIR = ROOT / "examples" / "compat-matrix"
MANIFESTS = JOB_DIR / "manifests"
ENTRY_CLASS = "matrix.MatrixJob"


def jar(variant: str, build_dir: Path | None = None) -> Path:
    """The variant's jar: Flink 2.3's build, or the one in ``build_dir`` (build/flink-1.20.3: the base only)."""
    path = (build_dir or JOB_DIR / "build") / f"compat-matrix-{variant}.jar"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run 'make setup' to build the compatibility matrix")
    return path


def manifest(variant: str) -> Path:
    return MANIFESTS / f"{variant}.yaml"


def key_index(key: str) -> int:
    return int(key.rsplit("-", 1)[-1])


def restored_count(record: dict[str, Any]) -> int:
    """What the key's count must have been restored as, from the sequence number of its first event."""
    return (record["seq"] - key_index(record["key"])) // record["keys"]


@dataclass
class MatrixRun:
    client: FlinkRestClient
    job_id: str
    audit_dir: Path
    keys: int

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(line) for path in sorted(self.audit_dir.glob("audit-*.jsonl"))
                for line in path.read_text().splitlines() if line.strip()]

    def wait_for_keys(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        return wait_for_all_keys(self.audit, self.keys, self.audit_dir, timeout)


def submit(client: FlinkRestClient, variant: str, audit_dir: Path, *, backend: str, keys: int = 4,
           rate: float = 40, savepoint_path: str | os.PathLike[str] | None = None,
           allow_non_restored_state: bool = False, build_dir: Path | None = None) -> MatrixRun:
    """Submits one version of the matrix job (parallelism 1) without waiting for it to run."""
    args = ["--keys", str(keys), "--rate", str(rate), "--audit-dir", str(audit_dir), "--variant", variant,
            "--set", f"state.backend.type={backend}"]
    job_id = client.submit_jar(jar(variant, build_dir), entry_class=ENTRY_CLASS, program_args=args, parallelism=1,
                               savepoint_path=os.fspath(savepoint_path) if savepoint_path else None,
                               allow_non_restored_state=allow_non_restored_state)
    return MatrixRun(client, job_id, Path(audit_dir), keys)


# -- migration functions the tests declare in manifests (imported only with --allow-code=tests.support.compat_matrix) --


def tuple3_of_tuple2(value: tuple[int, str]) -> tuple[int, str, int]:
    """Tuple2<Long, String> -> Tuple3<Long, String, Integer>: what the tuple-arity-changed version writes for n."""
    n, key = value
    return n, key, n


def color_without_blue(value: str) -> str:
    """The enum-constant-removed version has no BLUE: such values become RED."""
    return "RED" if value == "BLUE" else value
