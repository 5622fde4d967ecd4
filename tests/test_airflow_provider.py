"""The Airflow pieces installed as a provider (``flinkstate-airflow``, plugins/pyproject.toml): Airflow's own
ProvidersManager (behind `airflow providers list` and the UI's connection form) finds it through its
``apache_airflow_provider`` entry point, with the ``flink`` connection type, its hook and its form; a ``flink``
connection drives the hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow  # Airflow's providers manager and CLI

ROOT = Path(__file__).resolve().parents[1]


def test_the_flink_connection_type_has_its_hook_and_form() -> None:
    from airflow.providers_manager import ProvidersManager
    from flinkstate_airflow.hooks import FlinkHook

    manager = ProvidersManager()  # what `airflow providers list|hooks` and the connection form read
    assert manager.providers["flinkstate-airflow"].version == "0.1.0"
    hook = manager.hooks["flink"]
    assert hook is not None and hook.hook_class_name == "flinkstate_airflow.hooks.FlinkHook"
    assert hook.connection_id_attribute_name == "flink_conn_id" and hook.package_name == "flinkstate-airflow"
    assert FlinkHook.conn_type == "flink"
    form = manager.field_behaviours["flink"]
    assert form["hidden_fields"] == ["login", "password"]
    assert form["relabeling"]["port"] == "REST port"
    # The provider is this checkout's package (an editable install), not a copy of it.
    import flinkstate_airflow

    assert Path(flinkstate_airflow.__file__).resolve().parent == ROOT / "plugins" / "flinkstate_airflow"


@pytest.mark.parametrize(("connection", "url"), [
    ({"conn_type": "flink", "host": "127.0.0.1", "port": 8081}, "http://127.0.0.1:8081"),
    ({"conn_type": "flink", "host": "jm.example", "port": 443, "schema": "https"}, "https://jm.example:443"),
    ({"conn_type": "flink", "host": "https://flink.example/api/"}, "https://flink.example/api"),
], ids=["host-port", "https", "url"])
def test_a_flink_connection_drives_the_hook(monkeypatch: pytest.MonkeyPatch, connection: dict, url: str) -> None:
    from flinkstate_airflow.hooks import FlinkHook

    monkeypatch.setenv("AIRFLOW_CONN_FLINK_PROVIDER_TEST", json.dumps({**connection, "extra": {"timeout": 7}}))
    client = FlinkHook("flink_provider_test").get_conn()
    assert client.base_url == url and client.timeout == 7.0
