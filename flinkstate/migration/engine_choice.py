"""How a job on a savepoint runs cheapest: in one Python process, or as Spark tasks.

A Spark job's tasks pay for themselves only on a large savepoint. Starting spark-submit's JVM and session takes 13 to
28 s on 2 cores, and even with a session already up (the upgrade DAG's pre-started application) each Spark stage
costs a few tenths of a second to schedule and to start its Python workers. One process decodes, migrates and
verifies at about 1M entries/s (about 20 MB/s of savepoint and more). So a savepoint of at most
:data:`IN_PROCESS_MAX_BYTES` of files is migrated in one process: by the Airflow task itself (``--in-process``), or by
the driver of an application already up. The output is byte for byte the same on either path. This module is the one
rule both the Airflow operators and the pre-started Spark application apply."""

from __future__ import annotations

from flinkstate.savepoint import Savepoint

#: Savepoints up to this many bytes of files run in one process: at the rate one process migrates and verifies, it
#: ends before a spark-submit would have started, and before a session already up would have run its stages.
IN_PROCESS_MAX_BYTES = 256 * 1024 * 1024


def savepoint_bytes(savepoint: str) -> int:
    """The size of a savepoint's files (local or s3://): what a migration reads and writes about once."""
    location = Savepoint.open(savepoint).location
    return sum(location.size(name) for name in location.list())


def fits_one_process(savepoint: str, max_bytes: int) -> tuple[bool, str]:
    """(whether a job on ``savepoint`` runs in one process, why), by the size of its files against ``max_bytes``
    (``in_process_max_bytes``)."""
    size = savepoint_bytes(savepoint)
    if size <= max_bytes:
        return True, f"the savepoint's {size:,} bytes are at most in_process_max_bytes ({max_bytes:,})"
    return False, f"the savepoint's {size:,} bytes are more than in_process_max_bytes ({max_bytes:,})"
