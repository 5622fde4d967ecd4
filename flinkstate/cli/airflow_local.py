"""A local Airflow for ``flinkstate upgrade run --local``, set up as the demo sets it: an ``AIRFLOW_HOME`` of its own,
the project's ``dags/`` and ``plugins/`` folders, the connections the upgrade DAG uses as ``AIRFLOW_CONN_*`` JSON
(``flink_default``, ``spark_default`` and the alert webhook ``flink_upgrade_webhook``), its database migrated once,
and the run made by ``airflow dags test flink_state_upgrade -c CONF`` in a child process. flinkstate imports no
Airflow: the ``airflow`` executable beside this Python, else the one on ``PATH``, does the work.

The webhook is a receiver in this process: it keeps the run's alert (to print it) and passes it on to the user's
webhook when one is given, answering with that webhook's status, so a webhook that fails fails the run as it would
without this command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from flinkstate import FlinkStateError, printable

#: Where flinkstate's sources are, beside the project's dags/ and plugins/ (a checkout or an editable install).
PROJECT = Path(__file__).resolve().parents[2]
DAG_ID = "flink_state_upgrade"
#: Its approval step's task (plugins/flinkstate_airflow/approval.py): while it runs, a person's answer is awaited.
APPROVAL_TASK = "approve_stop"
#: Written into AIRFLOW_HOME once its database is migrated: later runs skip the ~20 s of `airflow db migrate`.
MIGRATED_MARKER = "flinkstate-db-migrated"


def airflow_executable() -> str:
    """The ``airflow`` beside the running Python (its virtual environment), else the one on ``PATH``."""
    beside = Path(sys.executable).parent / "airflow"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("airflow")
    if found is None:
        raise FlinkStateError(f"--local: no 'airflow' executable beside {sys.executable} or on PATH: install "
                              "apache-airflow there, or run the upgrade on a running Airflow with --airflow-url")
    return found


def project_folder(given: str | None, name: str, marker: str) -> Path:
    """``--dags-folder`` / ``--plugins-folder``, else the project's own (beside flinkstate's sources)."""
    folder = Path(given) if given else PROJECT / name
    if not (folder / marker).exists():
        raise FlinkStateError(f"--local: {folder} has no {marker}: give --{name}-folder (the flinkstate project's "
                              f"{name}/ folder)")
    return folder.resolve()


class AlertReceiver:
    """The ``flink_upgrade_webhook`` of a local run: keeps each alert's text (Slack-compatible ``{"text": ...}``)
    and passes it on to ``forward_to`` when given."""

    def __init__(self, forward_to: str | None = None) -> None:
        self.alerts: list[str] = []
        self.forward_problems: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    text = json.loads(body or b"{}").get("text")
                except (ValueError, AttributeError):
                    text = None
                receiver.alerts.append(str(text) if text is not None else body.decode(errors="replace"))
                self.send_response(receiver.forward(body))
                self.end_headers()

            def log_message(self, *args: Any) -> None:  # the alert is printed once, by the command
                pass

        self.forward_to = forward_to
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])

    def forward(self, body: bytes) -> int:
        """Passes the alert on; the status to answer Airflow with (502 when the user's webhook is unreachable)."""
        if not self.forward_to:
            return 200
        try:
            response = requests.post(self.forward_to, data=body, headers={"Content-Type": "application/json"},
                                     timeout=30)
        except requests.RequestException as exc:
            self.forward_problems.append(f"the alert could not be passed on to {self.forward_to}: "
                                         f"{type(exc).__name__}")
            return 502
        if response.status_code >= 400:
            self.forward_problems.append(f"the webhook {self.forward_to} answered {response.status_code}")
        return response.status_code

    @contextmanager
    def serving(self) -> Iterator[AlertReceiver]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


class LocalAirflow:
    """One AIRFLOW_HOME and the environment every ``airflow`` command of a local run gets."""

    def __init__(self, home: Path, *, dags_folder: Path, plugins_folder: Path, flink_url: str, spark_master: str,
                 webhook_port: int) -> None:
        self.home = home
        self.airflow = airflow_executable()
        bin_dir = str(Path(self.airflow).parent)  # spark-submit is looked up on PATH: the venv's, beside airflow
        # The child imports the plugin package and this very flinkstate (not another installed copy).
        python_path = [str(plugins_folder), str(PROJECT), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_FLINK_DEFAULT": json.dumps({"conn_type": "http", "host": flink_url}),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_connection(spark_master)),
            "AIRFLOW_CONN_FLINK_UPGRADE_WEBHOOK": json.dumps({"conn_type": "http", "host": "127.0.0.1",
                                                              "port": webhook_port, "schema": "http"}),
            "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join(python_path),
            # Spark in local mode binds to the host's address unless told: loopback, as the platform notes say.
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        }

    def migrate_once(self) -> None:
        """``airflow db migrate``, unless this AIRFLOW_HOME was migrated by an earlier run."""
        self.home.mkdir(parents=True, exist_ok=True)
        marker = self.home / MIGRATED_MARKER
        if marker.exists():
            return
        done = subprocess.run([self.airflow, "db", "migrate"], env=self.env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            raise FlinkStateError(f"--local: 'airflow db migrate' in {self.home} failed (exit {done.returncode}): "
                                  f"{printable(last[0])}")
        marker.write_text("airflow db migrate succeeded; delete this file to migrate again (after an Airflow "
                          "upgrade)\n")

    def start_run(self, conf: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        """``airflow dags test flink_state_upgrade -c CONF``, its (long) output to ``log``."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as sink:
            return subprocess.Popen([self.airflow, "dags", "test", DAG_ID, "-c", json.dumps(conf)], env=self.env,
                                    stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def spark_connection(master: str) -> dict[str, Any]:
    """The ``spark_default`` connection for a Spark master URL: ``local[2]`` in the host field (its URI form
    ``spark://local[2]`` silently becomes ``--master yarn``, as the platform notes say)."""
    return {"conn_type": "spark", "host": master}
