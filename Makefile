# Exactly-once batch pipelines for Airflow + Spark.
# `make demo` and `make test` work on a fresh clone: they create .venv from requirements.lock first.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export EO_DATA_ROOT ?= $(CURDIR)/data
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export PYTHONPATH := $(CURDIR)/plugins:$(PYTHONPATH)
UV_VERSION := 0.13.8

.PHONY: install lock test test-fast mutants demo run-interval backfill sample chaos bench clean check-java ui spark-connect spark-connect-stop dist compat
UI_PORT ?= 8080

$(BIN)/.installed: requirements.lock pyproject.toml
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found (Python 3.11 is required)"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	@echo "installing pinned dependencies from requirements.lock into $(VENV) ..."
	@$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -r requirements.lock
	@$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	@rm -rf plugins/*.egg-info  # build leftover: a 2nd copy of the entry points on sys.path (plugin loaded twice)
	@touch $@

install: $(BIN)/.installed check-java

check-java:
	@command -v java >/dev/null || { echo "error: Java 17+ is required for Spark (apt-get install openjdk-17-jre-headless)"; exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(1[7-9]|2[0-9])' || { echo "error: Java 17+ is required for Spark; found: $$(java -version 2>&1 | head -1)"; exit 1; }

lock:
	$(BIN)/uv pip compile requirements.in --python-version 3.11 -o requirements.lock

test: install  # two pytest processes at once (tools/test_lanes.py); EO_TEST_LANES=1: one
	$(BIN)/python -m tools.test_lanes $(PYTEST_ARGS)

test-fast: install
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

# Mutation testing of the targets and the protocol's decision path with tests/conformance (tools/mutants.py;
# docs/RELIABILITY.md "Mutation testing"). Long (hours on 2 cores): resumable, MUTANTS_ARGS="--rows redis --hours 1".
mutants: install
	nice -n 10 $(BIN)/python -m tools.mutants run $(MUTANTS_ARGS)

demo: install
	@$(BIN)/python -m tools.dev demo $(DEMO_ARGS)

# one interval of any DAG in dags/: DATE=YYYY-MM-DD (the daily interval) or START=<ISO-8601 UTC instant>
run-interval: install
	@test -n "$(DAG)" -a -n "$(DATE)$(START)" || { echo "usage: make run-interval DAG=<dag_id> (DATE=YYYY-MM-DD | START=2013-01-01T05:00:00Z) [REPROCESS=1 [ALLOW_SHRINKING=1]]"; exit 2; }
	@$(BIN)/python -m tools.dev run-interval --dag "$(DAG)" $(if $(DATE),--date "$(DATE)") $(if $(START),--start "$(START)") $(if $(filter 1,$(REPROCESS)),--reprocess) $(if $(filter 1,$(ALLOW_SHRINKING)),--allow-shrinking)

# an example DAG's landing zone under EO_DATA_ROOT: make sample DAG=flights_hourly [SAMPLE_START=2013-01-01 SAMPLE_DAYS=2]
sample: install
	@test -n "$(DAG)" || { echo "usage: make sample DAG=<pv_pipeline|flights_hourly> [SAMPLE_START=YYYY-MM-DD SAMPLE_DAYS=n]"; exit 2; }
	@$(BIN)/python -m tools.dev sample --dag "$(DAG)" $(if $(SAMPLE_START),--start "$(SAMPLE_START)") $(if $(SAMPLE_DAYS),--days "$(SAMPLE_DAYS)")

# A local Airflow (api-server, scheduler, dag-processor, triggerer; PostgreSQL metadata) with the UI on UI_PORT; login: README "Open the Airflow UI"
ui: install
	@$(BIN)/python -m tools.ui --port "$(UI_PORT)"

# A Spark Connect server on 127.0.0.1:15002 in the background (pid/log in .spark-connect/); idempotent.
# EO_SPARK_REMOTE=sc://127.0.0.1:15002 then makes the write phase its client (make demo uses it when up,
# else starts its own for the run and stops it at the end; `make demo DEMO_ARGS="--spark submit"`: spark-submit).
spark-connect: install
	@$(BIN)/python -m tools.spark_connect start

spark-connect-stop:
	@$(BIN)/python -m tools.spark_connect stop

chaos: install
	$(BIN)/python -m tools.chaos $(CHAOS_ARGS)

bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)

# The package users install: sdist + wheel of the library alone (plugins/exactly_once) into DIST_DIR.
DIST_DIR ?= dist
dist: install
	@rm -rf $(DIST_DIR)/exactly_once_pipelines-*
	$(BIN)/uv build -q --out-dir $(DIST_DIR) .
	@rm -rf plugins/*.egg-info
	@ls -1 $(DIST_DIR)/exactly_once_pipelines-*

# The compatibility matrix: one smoke interval on each tested corner, then on each Airflow corner the user path
# (tools/compat_user.py: scheduler, REST, the table page, eo; README "Install into your Airflow"), a cached venv
# per corner under EO_COMPAT_CACHE (~/.cache/eo-compat). COMPAT_ARGS="--corner X" or "--smoke-only" (CI)
compat: install
	$(BIN)/python -m tools.compat $(COMPAT_ARGS)

clean:
	rm -rf data .airflow .airflow-ui .pytest_cache .hypothesis dist

# the intervals of DAG's schedule starting in [START, END] (END inclusive), in order through Airflow; committed
# ones are skipped (REPROCESS=1 re-runs them); exit 0 only if every interval is committed
backfill: install
	@test -n "$(DAG)" -a -n "$(START)" -a -n "$(END)" || { echo "usage: make backfill DAG=<dag_id> START=YYYY-MM-DD END=YYYY-MM-DD (or ISO-8601 instants) [REPROCESS=1 [ALLOW_SHRINKING=1]]"; exit 2; }
	@$(BIN)/python -m tools.backfill --dag "$(DAG)" --start "$(START)" --end "$(END)" $(if $(filter 1,$(REPROCESS)),--reprocess) $(if $(filter 1,$(ALLOW_SHRINKING)),--allow-shrinking)
