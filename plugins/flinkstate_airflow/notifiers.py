"""``WebhookReportNotifier``: posts a message (and a Markdown report) to a Slack-compatible webhook, and logs it.

Usable as a task or DAG callback (``on_failure_callback=WebhookReportNotifier(...)``) and called directly by
operators that alert (e.g. an incompatible check). The webhook is an Airflow HTTP connection (default
``flink_upgrade_webhook``) whose host/port/schema give the URL and whose extra may hold ``{"endpoint": "/path"}``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.providers.http.hooks.http import HttpHook
from airflow.sdk import BaseNotifier

from flinkstate import printable, slack_text

log = logging.getLogger(__name__)

#: Slack limits a message's text; longer reports are cut with a note of where the full one is.
MAX_TEXT = 35_000


class WebhookReportNotifier(BaseNotifier):
    """Posts ``{"text": message + report}`` (Slack's incoming-webhook format) to ``http_conn_id``.

    ``report`` may be Markdown text or a path to a Markdown file (read when the notification is sent). Both
    ``message`` and ``report`` are templated.
    """

    template_fields: Sequence[str] = ("message", "report")

    def __init__(self, message: str, *, report: str | None = None, http_conn_id: str = "flink_upgrade_webhook",
                 endpoint: str | None = None) -> None:
        super().__init__()
        self.message, self.report = message, report
        self.http_conn_id, self.endpoint = http_conn_id, endpoint

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        # DAG-level callbacks may be handed a serialized DAG, which has no template environment (dag.test() does
        # this in Airflow 3.3); an alert must still go out, so render with a plain sandboxed environment then.
        dag = context.get("dag")
        if jinja_env is None and dag is not None and not hasattr(dag, "get_template_env"):
            from jinja2.sandbox import SandboxedEnvironment

            jinja_env = SandboxedEnvironment()
        super().render_template_fields(context, jinja_env)

    def notify(self, context: Any) -> None:
        send_alert(compose(self.message, self.report), http_conn_id=self.http_conn_id, endpoint=self.endpoint)


def send_alert(text: str, *, http_conn_id: str = "flink_upgrade_webhook", endpoint: str | None = None,
               succeeded: bool = False) -> None:
    """Posts one alert (already composed) to the webhook, and logs it. The one exit of every alert: names from
    savepoints, manifests and DAG params in it (the check report's among them) go out as plain text
    (:func:`flinkstate.slack_text`), and to the log printable."""
    # A run that succeeded is news, not a problem: INFO; any other alert (a refusal, a failure, a rollback) WARNING.
    log.log(logging.INFO if succeeded else logging.WARNING, "flink upgrade alert:\n%s",
            "\n".join(printable(line) for line in text.split("\n")))
    text = slack_text(text)
    hook = HttpHook(method="POST", http_conn_id=http_conn_id)
    if endpoint is None:
        endpoint = (hook.get_connection(http_conn_id).extra_dejson or {}).get("endpoint", "")
    response = hook.run(endpoint, json={"text": text[:MAX_TEXT]}, headers={"Content-Type": "application/json"})
    log.info("webhook %s answered %s", http_conn_id, response.status_code)


def run_view_url(ti: Any) -> str:
    """Where a person sees this task's upgrade run: its DAG run's "Flink upgrade" tab in the Airflow UI (the run's
    page of :mod:`flinkstate_airflow.ui`, beside the run's tasks and their logs), at the api-server's
    ``[api] base_url`` (Airflow's own fallback when it is not set, as its task log links)."""
    try:
        from airflow.configuration import conf

        from flinkstate_airflow.ui import run_tab_url  # here: the DAG files that import this module need no FastAPI

        return run_tab_url(conf.get("api", "base_url", fallback="http://localhost:8080"), ti.dag_id, ti.run_id)
    except Exception:  # the alert must go out all the same: say which run to look for
        return f"DAG run {ti.run_id} of {ti.dag_id}, its Flink upgrade tab"


def compose(message: str, report: str | None) -> str:
    """The message, then the report (read from a file if it names one), cut to Slack's limit."""
    body = ""
    if report:
        path = Path(report)
        body = path.read_text() if len(report) < 4096 and "\n" not in report and path.is_file() else report
    text = f"{message}\n\n{body}".strip() if body else message
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + (f"\n\n(report cut; full report: {report})" if report else "\n\n(cut)")
    return text
