"""Airflow pieces for safe Flink upgrades, shaped like an Airflow provider: a hook owns the Flink connection and its
REST client; operators and sensors are thin wrappers with declared templated fields; a notifier posts reports.

Airflow puts ``plugins/`` on ``sys.path``, so DAGs import ``flinkstate_airflow.<module>``.
"""
