"""What Airflow's ProvidersManager reads of this package (the ``apache_airflow_provider`` entry point of the
``flinkstate-airflow`` distribution, ``plugins/pyproject.toml``): the ``flink`` connection type and its hook."""

from __future__ import annotations

from typing import Any

#: The distribution's name, which Airflow requires the provider info to repeat.
PACKAGE_NAME = "flinkstate-airflow"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": PACKAGE_NAME,
        "name": "flinkstate",
        "description": "Safe upgrades of stateful Apache Flink jobs: savepoint checks, state migration, rollback.",
        "connection-types": [{
            "connection-type": "flink",
            "hook-class-name": "flinkstate_airflow.hooks.FlinkHook",
            "hook-name": "Apache Flink (REST API)",
            # The form (Airflow 3.2+ reads it from here, without importing the hook): a JobManager's REST address;
            # no login, which Flink's REST API does not have.
            "ui-field-behaviour": {
                "hidden-fields": ["login", "password"],
                "relabeling": {"host": "JobManager host (or a full URL)", "port": "REST port",
                               "schema": "Scheme (http or https)"},
                "placeholders": {"host": "127.0.0.1", "port": "8081", "schema": "http", "extra": '{"timeout": 30}'},
            },
        }],
        "hook-class-names": ["flinkstate_airflow.hooks.FlinkHook"],
    }
