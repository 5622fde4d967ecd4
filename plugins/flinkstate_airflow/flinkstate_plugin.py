"""The Airflow plugin of flinkstate: the "Flink upgrades" view (:mod:`flinkstate_airflow.ui`) mounted in Airflow's
api-server at ``/flink-upgrades``, with two entries in the UI: a page in the navigation (every deployment's runs) and
a tab on each DAG run (that run's page: Airflow puts the run's ids into the tab's URL).

Airflow loads every ``.py`` file of the plugins folder and registers the ``AirflowPlugin`` classes it finds, so this
class lives in this one file only. Every Airflow process loads plugins, the scheduler and the workers too: the view's
app is built on its first request, so that Airflow's access check (its api-server's security module) is imported by
the api-server alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from flinkstate_airflow import ui

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _view_with_airflow_access() -> Any:
    """The view, each page behind Airflow's own check: a signed-in user who may read the DAG runs (of the DAG in the
    URL for a run's page, of every DAG for the list)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return ui.create_app(dependencies=[requires_access_dag("GET", DagAccessEntity.RUN)])


class BuiltOnFirstRequest:
    """An ASGI app that builds the real one on its first request."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self.build = build
        self.app: Any = None  # the view's FastAPI app, once built

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            self.app = self.build()
        await self.app(scope, receive, send)


class FlinkStatePlugin(AirflowPlugin):
    # Lists, as AirflowPlugin declares them (Airflow removes a view it refuses from its plugin's list).
    name = "flinkstate"
    fastapi_apps = [  # noqa: RUF012
        {"app": BuiltOnFirstRequest(_view_with_airflow_access), "url_prefix": ui.URL_PREFIX, "name": "Flink upgrades"},
    ]
    external_views = [  # noqa: RUF012
        {"name": "Flink upgrades", "href": f"{ui.URL_PREFIX}/", "url_route": ui.NAV_ROUTE, "destination": "nav",
         "nav_top_level": True},
        # Airflow replaces {DAG_ID} and {RUN_ID} (URL-encoded) in a dag_run view's href.
        {"name": "Flink upgrade", "href": f"{ui.URL_PREFIX}/dags/{{DAG_ID}}/runs/{{RUN_ID}}",
         "url_route": ui.RUN_TAB_ROUTE, "destination": "dag_run"},
    ]
