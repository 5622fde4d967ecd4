"""flinkstate: read, check and migrate Apache Flink savepoints from Python, and drive a local Flink.

Pure Python: this package imports neither Airflow nor Spark, so that both can build on it.
"""

__version__ = "0.1.0"
