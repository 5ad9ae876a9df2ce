"""Defaults from the environment, resolved where a deployment is configured: in DAG files, the Airflow
layer and the ``eo`` command - never inside :class:`~exactly_once.protocol.config.PipelineConfig`.

``EO_DATA_ROOT`` (default ``./data`` of the working directory) holds ``landing/``, ``warehouse/`` and
``reports/``; it may be a local path or ``s3://bucket/prefix``. ``EO_REPORTS_DIR`` moves the reports
(a local dir, or ``s3://...`` for a fleet); ``EO_STORAGE_CONN_ID`` names the Airflow connection holding
S3 credentials.
"""
from __future__ import annotations

import os


def data_root() -> str:
    """``EO_DATA_ROOT`` as an absolute local path or an ``s3://`` URL (default ``./data``)."""
    root = os.environ.get("EO_DATA_ROOT") or "data"
    return root.rstrip("/") if "://" in root else os.path.abspath(root)


def reports_dir(root: str | None = None) -> str:
    """Where Data Docs and run summaries go: ``EO_REPORTS_DIR`` - a local directory, or a storage URL
    (``s3://bucket/reports``) that every worker of a fleet and the API server share; default
    ``<root>/reports``, or ``./data/reports`` when the data root is on S3."""
    root = root or data_root()
    default = f"{root}/reports" if "://" not in root else os.path.join("data", "reports")
    chosen = os.environ.get("EO_REPORTS_DIR") or default
    return chosen.rstrip("/") if "://" in chosen else os.path.abspath(chosen)


def storage_conn_id() -> str | None:
    """``EO_STORAGE_CONN_ID``: the Airflow connection with the S3 credentials, if any."""
    return os.environ.get("EO_STORAGE_CONN_ID") or None


def target_url() -> str | None:
    """``EO_TARGET_URL``: a database / Redis target's URL with its credentials, for ``eo`` commands on a
    table whose bound target (in its owner record, never with a password) needs them."""
    return os.environ.get("EO_TARGET_URL") or None


def from_env() -> dict[str, str | None]:
    """``root``, ``reports`` and ``storage_conn_id`` for a PipelineConfig, from the environment:
    ``PipelineConfig(pipeline=..., sink=..., **settings.from_env(), ...)`` in a DAG file."""
    root = data_root()
    return {"root": root, "reports": reports_dir(root), "storage_conn_id": storage_conn_id()}


def predecessor_wait() -> tuple[float, float]:
    """``(poke, timeout)`` seconds a stateful begin waits for its predecessor interval to commit: it looks
    itself every ``EO_PREDECESSOR_POKE_SECONDS`` (default 30) unless the triggerer ends its wait first, for
    up to ``EO_PREDECESSOR_TIMEOUT_SECONDS`` (default 6 h; 0 fails at once)."""
    return (float(os.environ.get("EO_PREDECESSOR_POKE_SECONDS") or 30),
            float(os.environ.get("EO_PREDECESSOR_TIMEOUT_SECONDS") or 6 * 3600))


def resume_settle_seconds() -> float:
    """``EO_RESUME_SETTLE_SECONDS`` (default 30): a task that deferred to wait resumes no sooner than this
    after deferring (Airflow fails a task re-queued before the executor's event for its previous process
    arrived: :class:`~exactly_once.airflow.triggers.PredecessorWaitTrigger`)."""
    return float(os.environ.get("EO_RESUME_SETTLE_SECONDS") or 30)


def first_event_wait() -> tuple[float, float]:
    """How long a task announcing a table waits for the task that announces its first asset event to finish
    (``EO_FIRST_EVENT_WAIT_SECONDS``, default 120), asking Airflow every ``EO_FIRST_EVENT_POLL_SECONDS``
    (default 0.5) - :mod:`exactly_once.airflow.first_event`."""
    return (float(os.environ.get("EO_FIRST_EVENT_WAIT_SECONDS") or 120),
            float(os.environ.get("EO_FIRST_EVENT_POLL_SECONDS") or 0.5))


def heartbeat_seconds() -> float:
    """``EO_HEARTBEAT_SECONDS`` (default 30): how often the write task touches its transaction's
    heartbeat. Keep ``stale_after`` (``eo recover``/``gc``) many times larger."""
    return float(os.environ.get("EO_HEARTBEAT_SECONDS") or 30)
