"""Celery settings of the test deployment's workers (``[celery] celery_config_options``).

Airflow's own defaults, plus one thing for speed: in a worker (``EO_WORKER_HOSTNAME`` set) the modules
every task of the pipeline imports are imported once, in the worker's main process, before Celery forks
its pool; the task processes fork from there with them loaded, as the LocalExecutor's preloaded
forkserver does (:data:`tools.localrun.SCHEDULER_PRELOAD`). Correctness never depends on it: a module
that fails to import here is imported by the task itself.
"""
from __future__ import annotations

import importlib
import logging
import os

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from tools.localrun import SCHEDULER_PRELOAD

CELERY_CONFIG = dict(DEFAULT_CELERY_CONFIG)

if os.environ.get("EO_WORKER_HOSTNAME"):
    for _name in SCHEDULER_PRELOAD:
        try:
            importlib.import_module(_name)
        except Exception as exc:  # noqa: BLE001 - only start-up time depends on it
            logging.getLogger(__name__).warning("preloading %s failed: %s", _name, exc)
