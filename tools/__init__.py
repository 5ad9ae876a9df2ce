"""Test, demo and ops harnesses of this repository - not part of the installed ``exactly_once`` package.

* :mod:`tools.dev` - ``make demo``, ``make run-interval``, ``make sample`` (run from a checkout);
* :mod:`tools.localrun` - one DAG run through ``airflow dags test`` with the project's own AIRFLOW_HOME;
* :mod:`tools.sample_data` / :mod:`tools.flights_sample` - landing-zone generators of the example DAGs;
* :mod:`tools.chaos` (CLI), :mod:`tools.chaos_run`, :mod:`tools.chaos_fleet`, :mod:`tools.deployment`,
  :mod:`tools.celery_stack` - the chaos runs and throw-away Airflow deployments (one machine or a fleet).
"""
