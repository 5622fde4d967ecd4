"""Real Airflow in the test process: a throw-away AIRFLOW_HOME with a SQLite database, the project's plugins on
the path, connections from environment variables, and a local HTTP receiver that plays the chat webhook.

Airflow reads its configuration when first imported, so :func:`configure_airflow` must run before anything imports
``airflow``; the ``airflow_home`` fixture in tests/conftest.py does that once per session.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def configure_airflow(home: Path, dags_folder: Path, *extra_dag_folders: Path) -> None:
    """Points Airflow at ``home``; DAGs come from ``dags_folder`` and each extra folder, each a local DAG bundle
    (``dag.test()`` runs only DAGs that a configured bundle serialises into the database)."""
    bundles = [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(dags_folder)}}]
    bundles += [{"name": f"extra-{i}", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                 "kwargs": {"path": str(folder)}} for i, folder in enumerate(extra_dag_folders)]
    os.environ.update({
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        # The upgrade DAG's preflight_checks inspects each version's jar, cached by the jar's hash: in the session's
        # Airflow home, not the user's cache.
        "FLINKSTATE_CACHE_DIR": str(home / "jar-cache"),
    })
    if str(ROOT / "plugins") not in sys.path:
        sys.path.insert(0, str(ROOT / "plugins"))
    from airflow.utils import db

    db.initdb()


def set_connection(conn_id: str, **fields: Any) -> None:
    """An Airflow connection from an environment variable, as deployments commonly define them."""
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(fields)


def load_dag(dag_id: str, folder: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(folder))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


@dataclass
class WebhookReceiver:
    """A local HTTP server standing in for a chat webhook: it records every JSON body posted to it."""

    received: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append({"path": self.path, **json.loads(body or b"{}")})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
