"""PySpark entry points over flinkstate (``spark-submit spark_jobs/<job>.py ...``). They read and write savepoint
bytes through flinkstate only and never call Flink's REST API."""
