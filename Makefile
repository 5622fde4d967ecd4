# The two commands a new user needs: `make demo` and `make test`. Both set up what they need first.
.PHONY: setup demo test unit lint typecheck cluster-start cluster-stop cluster-status constraints clean

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/python examples/demo.py

# Two runs: the tests that start no Flink, Spark, Airflow or browser spread over every core (pytest-xdist), then the
# others in INTEGRATION_WORKERS processes, whole modules each (--dist loadfile: a module's fixtures, its job runs and
# DAG runs stay in one process; each process has its own Flink cluster, Airflow home and Spark). They wait on JVMs and
# clusters more than they compute, so two of them share two cores well. A run that selects nothing (exit status 5, e.g.
# PYTEST_ARGS naming one module) is no failure.
INTEGRATION_MARKERS = flink or spark or airflow or browser
INTEGRATION_WORKERS ?= 2
test: setup
	.venv/bin/pytest -m "not ($(INTEGRATION_MARKERS))" -n auto $(PYTEST_ARGS) || [ $$? -eq 5 ]
	.venv/bin/pytest -m "$(INTEGRATION_MARKERS)" -n $(INTEGRATION_WORKERS) --dist loadfile $(PYTEST_ARGS) \
		|| [ $$? -eq 5 ]

# The quick loop: every test that needs no Flink cluster, Spark, Airflow or browser (markers: tests/conftest.py),
# except the fault-injection suite (its mutants of Flink's own savepoints alone take 15 s), spread over every core
# (pytest-xdist); under a minute on 2 cores.
UNIT_MARKERS = not flink and not spark and not airflow and not browser and not fuzz
unit: setup
	.venv/bin/pytest -m "$(UNIT_MARKERS)" -n auto $(PYTEST_ARGS)

# ruff, then mypy (strict for flinkstate; configured in pyproject.toml).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/mypy

typecheck: setup
	.venv/bin/mypy

# The demo's cluster (the demo leaves it running; these manage it by hand).
CLUSTER_DIR ?= .work/demo/cluster
cluster-start: setup
	.venv/bin/flinkstate cluster start --work-dir $(CLUSTER_DIR)
cluster-stop:
	@if [ -x .venv/bin/flinkstate ]; then .venv/bin/flinkstate cluster stop --work-dir $(CLUSTER_DIR); fi
cluster-status:
	.venv/bin/flinkstate cluster status --work-dir $(CLUSTER_DIR)

# Re-pin every transitive dependency from the current environments (after changing a requirements file).
constraints:
	( echo "# Full pins of the project environment, generated from a working .venv (make constraints)."; \
	  .venv/bin/pip freeze --exclude-editable | grep -v '^flinkstate' ) > constraints.txt
	( echo "# Full pins of the Flink runtime environment (make constraints)."; .venv-flink/bin/pip freeze ) \
	  > constraints-flink.txt

clean: cluster-stop
	rm -rf .work examples/sample-job/build
