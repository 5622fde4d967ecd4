"""The engine side: talking to a Flink cluster over its REST API, and running a local standalone cluster from the
PyPI ``apache-flink`` distribution for demos and tests."""

from flinkstate.engine.local import LocalFlinkCluster, find_flink_home, require_java
from flinkstate.engine.rest import (
    CheckpointStats,
    FlinkJobFailed,
    FlinkRestClient,
    FlinkRestError,
    FlinkTimeout,
    FlinkUnreachable,
    SavepointFailed,
)

__all__ = [
    "CheckpointStats",
    "FlinkJobFailed",
    "FlinkRestClient",
    "FlinkRestError",
    "FlinkTimeout",
    "FlinkUnreachable",
    "LocalFlinkCluster",
    "SavepointFailed",
    "find_flink_home",
    "require_java",
]
