"""Crash-safe upgrades of a running Flink job, one module each: :mod:`.journal` (the phases and outcomes, the
persisted upgrade journal with its compare-and-swap writes, the deployment registry) and :mod:`.recovery` (the
decision a dead run would have made, the old version restored from the stop savepoint or the verified upgrade
finished, and the watchdog's sweep with its alerts). Used by the Airflow DAGs (``plugins/flinkstate_airflow``) and
``flinkstate upgrade``, through the public API (``from flinkstate import UpgradeJournal, recover, ...``); imports
neither Airflow nor Spark.

Layout beside the savepoints (``savepoint_base`` is a local folder or ``s3://bucket/prefix``)::

    <savepoint_base>/deployments.json            what runs: deployment -> version, job id, savepoint it started from
    <savepoint_base>/journal/<deployment>.json   the last upgrade of each deployment: phase, job ids, savepoints
"""
