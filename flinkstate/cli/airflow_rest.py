"""A running Airflow's public REST API (v2), as ``flinkstate upgrade run --airflow-url`` uses it: a JWT from ``POST
/auth/token`` (the simple auth manager's, or any auth manager that issues one for a user name and password), a DAG run
triggered with a conf, its state and task instances polled, and one XCom read. HTTP only: flinkstate imports no
Airflow. Every failure is one line naming Airflow's address and what was asked (never a traceback)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import requests

from flinkstate import FlinkStateError, printable


class AirflowError(FlinkStateError):
    """Airflow could not be reached, refused a request, or answered something else than its API does."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AirflowApi:
    """Airflow's REST API at ``base_url`` (the api-server's address, e.g. ``http://127.0.0.1:8080``)."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token: str | None = None
        self._session = session or requests.Session()

    def sign_in(self, user: str, password: str) -> None:
        """A bearer token for ``user`` (``POST /auth/token``), sent with every later request."""
        answer = self._call("POST", "/auth/token", {"username": user, "password": password})
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise AirflowError(f"Airflow at {self.base_url}: POST /auth/token answered no access_token")
        self.token = token

    def dag(self, dag_id: str) -> dict[str, Any]:
        return self._object("GET", f"/api/v2/dags/{_part(dag_id)}")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
        """A new run of ``dag_id`` with ``conf``, now (no logical date: a manual run's)."""
        return self._object("POST", f"/api/v2/dags/{_part(dag_id)}/dagRuns", {"logical_date": None, "conf": conf})

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._object("GET", f"/api/v2/dags/{_part(dag_id)}/dagRuns/{_part(run_id)}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        answer = self._object("GET", f"/api/v2/dags/{_part(dag_id)}/dagRuns/{_part(run_id)}/taskInstances")
        instances = answer.get("task_instances")
        if not isinstance(instances, list):
            raise AirflowError(f"Airflow at {self.base_url}: the task instances of run {printable(run_id)} are not "
                               "a list")
        return [t for t in instances if isinstance(t, dict)]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        """The value a task pushed under ``key`` (None when it pushed none)."""
        try:
            answer = self._object("GET", f"/api/v2/dags/{_part(dag_id)}/dagRuns/{_part(run_id)}/taskInstances/"
                                         f"{_part(task_id)}/xcomEntries/{_part(key)}")
        except AirflowError as exc:
            if exc.status == 404:
                return None
            raise
        value = answer.get("value")
        # The API hands out the stored form: the value itself, or (by XCom backend) its JSON text.
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    def run_page(self, dag_id: str, run_id: str) -> str:
        """The run's page in the Airflow UI."""
        return f"{self.base_url}/dags/{_part(dag_id)}/runs/{_part(run_id)}"

    # ------------------------------------------------------------------ plumbing

    def _object(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        answer = self._call(method, path, body)
        if not isinstance(answer, dict):
            raise AirflowError(f"Airflow at {self.base_url}: {method} {path} answered {type(answer).__name__}, not "
                               "a JSON object")
        return answer

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            response = self._session.request(method, f"{self.base_url}{path}", json=body, headers=headers,
                                             timeout=self.timeout)
        except requests.Timeout:
            raise AirflowError(f"Airflow's REST API at {self.base_url} did not answer {method} {path} within "
                               f"{self.timeout:g} s") from None
        except requests.RequestException as exc:  # refused, reset, no such host, a malformed address
            reason = type(exc).__name__ if isinstance(exc, requests.ConnectionError) else printable(exc)
            raise AirflowError(f"cannot reach Airflow's REST API at {self.base_url} ({reason}): is its api-server "
                               "running there?") from None
        if response.status_code >= 400:
            hint = (": give --airflow-user and --airflow-password (or $FLINKSTATE_AIRFLOW_USER and "
                    "$FLINKSTATE_AIRFLOW_PASSWORD)" if response.status_code in (401, 403) and path != "/auth/token"
                    else "")
            raise AirflowError(f"Airflow at {self.base_url}: {method} {path}: {response.status_code} "
                               f"{printable(response.reason)}{_detail(response)}{hint}", status=response.status_code)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise AirflowError(f"Airflow at {self.base_url}: {method} {path} answered something that is not JSON "
                               "(is this Airflow's api-server?)") from None


def _part(name: str) -> str:
    """A DAG, run, task or XCom id as one URL path segment (a manual run id holds ':' and '+')."""
    return quote(name, safe="")


def _detail(response: requests.Response) -> str:
    """Airflow's own reason (FastAPI's ``detail``: a text, or a list of validation errors), in one line."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return ""
    if isinstance(detail, list):
        detail = "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return f": {printable(detail)[:500]}" if detail else ""
