"""``FlinkHook``: a Flink cluster's REST API on an Airflow HTTP connection (default ``flink_default``)."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from flinkstate import FlinkRestClient


class FlinkHook(BaseHook):
    """Owns the connection to a Flink JobManager's REST endpoint and hands out a :class:`FlinkRestClient`.

    The connection is of type ``flink`` (registered by this package's provider info, :mod:`.provider_info`, with its
    form in the UI) or
    ``http``: host, port and schema (http/https) give the base URL; the extra field may set ``{"timeout": seconds}``
    for each REST call. For example
    ``AIRFLOW_CONN_FLINK_DEFAULT='{"conn_type": "flink", "host": "127.0.0.1", "port": 8081}'``.
    """

    conn_name_attr = "flink_conn_id"
    default_conn_name = "flink_default"
    conn_type = "flink"
    hook_name = "Apache Flink (REST API)"

    def __init__(self, flink_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.flink_conn_id = flink_conn_id
        self._client: FlinkRestClient | None = None

    @property
    def base_url(self) -> str:
        conn = self.get_connection(self.flink_conn_id)
        scheme = conn.schema or "http"
        host = conn.host or "127.0.0.1"
        if "://" in host:  # a full URL in the host field
            return host.rstrip("/")
        return f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")

    def get_conn(self) -> FlinkRestClient:
        if self._client is None:
            extra = self.get_connection(self.flink_conn_id).extra_dejson or {}
            self._client = FlinkRestClient(self.base_url, timeout=float(extra.get("timeout", 30)))
        return self._client

    def resolve_job_id(self, job_id: str | None = None, job_name: str | None = None) -> str:
        """The job to act on: ``job_id`` as given, else the one running job named ``job_name``."""
        if job_id:
            return job_id
        if not job_name:
            raise ValueError("give job_id or job_name")
        return self.get_conn().find_job(job_name)


def spark_master(conn_id: str) -> str:
    """The Spark master an Airflow Spark connection names (``local[2]``, ``spark://host:7077``, ``yarn``), as
    SparkSubmitHook builds it from host and port."""
    conn = BaseHook.get_connection(conn_id)
    host = conn.host or "yarn"
    if conn.port and "://" in host:
        return f"{host}:{conn.port}"
    return host
