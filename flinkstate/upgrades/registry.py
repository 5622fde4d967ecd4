"""The deployment registry, ``<savepoint_base>/deployments.json``: what runs now, per deployment, and where.

Each deployment's entry names the version running (everything needed to restart it: rollback never guesses), its
job id, the savepoint it started from, the run that put it there, and the cluster it runs on: the Airflow
connection and the REST address of that cluster. An upgrade may move a job to another cluster (a Flink 1.x job
upgraded onto a 2.x cluster), so the next upgrade of the same deployment must find it there, not on the default
cluster; entries written before the registry recorded clusters have none (the default cluster).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from flinkstate.storage.uri import exists, read_file
from flinkstate.upgrades.journal import JobVersion, UpgradeError, write_durably

REGISTRY_FILE = "deployments.json"


@dataclass(frozen=True)
class ClusterRef:
    """Where a version runs: the Airflow connection (``flink_conn_id``, for the DAG's operators) and the cluster's
    REST address (``flink_url``, for a recovery outside Airflow). Either may be unknown (None)."""

    flink_conn_id: str | None = None
    flink_url: str | None = None

    @classmethod
    def of_journal(cls, data: dict[str, Any], version: str) -> ClusterRef:
        """The cluster a journal's ``old`` or ``new`` version runs on: the new one's own when the run moved the job
        to another cluster (``new_flink_url``), else the old one's."""
        old = cls(data.get("flink_conn_id"), data.get("flink_url"))
        if version == "old":
            return old
        return cls(data.get("new_flink_conn_id") or old.flink_conn_id, data.get("new_flink_url") or old.flink_url)


class DeploymentRegistry:
    """``deployments.json`` beside the savepoints: deployment name -> the version running, its job id, the savepoint
    it started from and its cluster. Written whole and durably (see :func:`write_durably`)."""

    def __init__(self, savepoint_base: str) -> None:
        self.uri = f"{savepoint_base.rstrip('/')}/{REGISTRY_FILE}"

    def load(self) -> dict[str, Any]:
        if not exists(self.uri):
            return {}
        try:
            data = json.loads(read_file(self.uri))
        except ValueError as exc:
            raise UpgradeError(f"{self.uri}: not a deployment registry ({exc})") from None
        return data if isinstance(data, dict) else {}

    def current(self, job_name: str) -> JobVersion | None:
        entry = self.load().get(job_name)
        return JobVersion.from_dict(entry["version"], f"{self.uri}: {job_name}") if entry else None

    def cluster(self, job_name: str) -> ClusterRef:
        """The cluster the deployment's recorded job runs on; unknown (both None) without a record of it."""
        entry = self.load().get(job_name)
        if not isinstance(entry, dict):
            return ClusterRef()
        conn_id, url = entry.get("flink_conn_id"), entry.get("flink_url")
        return ClusterRef(conn_id if isinstance(conn_id, str) and conn_id else None,
                          url if isinstance(url, str) and url else None)

    def record(self, job_name: str, version: JobVersion, job_id: str, savepoint: str | None, run_id: str,
               cluster: ClusterRef | None = None) -> None:
        data = self.load()
        entry = {"version": asdict(version), "job_id": job_id, "savepoint": savepoint, "run_id": run_id,
                 "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        entry.update({key: value for key, value in asdict(cluster or ClusterRef()).items() if value})
        data[job_name] = entry
        write_durably(self.uri, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
