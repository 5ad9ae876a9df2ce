"""The few Airflow names that moved between the supported minors (3.1 to 3.3): import them from here."""
try:  # Airflow 3.2+
    from airflow.sdk.exceptions import (AirflowFailException, AirflowRescheduleException, AirflowSkipException,
                                        DownstreamTasksSkipped, TaskDeferred)
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (AirflowFailException, AirflowRescheduleException,  # type: ignore[no-redef]
                                    AirflowSkipException, DownstreamTasksSkipped, TaskDeferred)
from airflow.triggers.base import BaseTrigger, TriggerEvent  # the same module in 3.1 to 3.3

TRIGGER_FAIL = "__fail__"  # next_method of a deferred task resumed to fail (the scheduler's timeout, 3.1 to 3.3)
TRIGGER_TIMEOUT = "Trigger timeout"  # its next_kwargs["error"] when the deferral's timeout passed


def dag_bag_class() -> type:
    """Airflow's DagBag (``airflow.dag_processing.dagbag`` from 3.2, ``airflow.models.dagbag`` in 3.1);
    imported on call: it loads the scheduler's models."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]
    return DagBag


def exponential_backoff() -> float | bool:
    """``retry_exponential_backoff`` doubling each retry's delay: a multiplier from Airflow 3.2, a flag
    (base 2) in 3.1, which refuses a float - and 3.2+ reads True as a multiplier of 1 (no backoff)."""
    from airflow import __version__

    major, minor = (int(x) for x in __version__.split(".")[:2])
    return 2.0 if (major, minor) >= (3, 2) else True


__all__ = ["AirflowFailException", "AirflowRescheduleException", "AirflowSkipException", "BaseTrigger",
           "DownstreamTasksSkipped", "TRIGGER_FAIL", "TRIGGER_TIMEOUT", "TaskDeferred", "TriggerEvent", "dag_bag_class",
           "exponential_backoff"]
