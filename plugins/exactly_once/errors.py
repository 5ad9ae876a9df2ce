"""One flat exception hierarchy: every error the library raises is an :class:`ExactlyOnceError`."""
from __future__ import annotations


class ExactlyOnceError(Exception):
    """Base of every error raised by this package."""


class UnsafeIdentifierError(ExactlyOnceError, ValueError):
    """An identifier or path that would reach storage is not on the allow-list or escapes its root."""


class FencedError(ExactlyOnceError):
    """This attempt lost: a newer epoch of the same interval began, or another attempt decided first."""


class TransactionStateError(ExactlyOnceError):
    """A phase was called in a state that does not allow it (e.g. commit before pre_commit)."""


class TransactionAbortedError(TransactionStateError):
    """The transaction was aborted (by this attempt, a teardown, or recovery); it can never commit."""


class StorageError(ExactlyOnceError):
    """Storage is not in the state the log says it must be (missing or altered staged files)."""


class StagedFileChangedError(StorageError):
    """A sealed staged file is gone or not the size its manifest says: it changed after pre_commit.
    ``path`` names it and ``what`` says how ("is gone", "has N bytes where its manifest says M")."""

    def __init__(self, message: str, path: str = "", what: str = "") -> None:
        super().__init__(message)
        self.path, self.what = path, what


class OrderingError(ExactlyOnceError):
    """A stateful interval ran before the interval it depends on was committed."""


class ValidationFailedError(ExactlyOnceError):
    """The completeness / data-quality gate rejected the staged output; nothing was published."""


class FailpointError(ExactlyOnceError):
    """Raised by a failpoint whose action is ``error`` (see :mod:`exactly_once.failpoints`)."""


class ConfigError(ExactlyOnceError):
    """Configuration (environment, connection, pipeline settings) is missing or invalid."""


class OwnershipError(ExactlyOnceError):
    """A table or partition belongs to another pipeline or interval (DESIGN §3 "Partition ownership")."""


class InputChangedError(ExactlyOnceError):
    """The predecessor state a stateful interval read was replaced before it could commit; re-run the
    interval (a new attempt reads the new state)."""

class TargetSchemaError(ExactlyOnceError):
    """The publish target does not fit the staged rows (no such table or column, a type mismatch, a
    missing unique key, duplicate keys); the target's transaction rolled back and nothing was published."""


class TargetUnavailableError(ExactlyOnceError):
    """The publish target could not be reached, or the connection broke mid-publish. Whatever was in
    flight rolled back (or, if the break hit the commit itself, the target's marker tells); publishing
    again is safe and finishes exactly once."""

class SparkConnectLostError(ExactlyOnceError):
    """The Spark Connect server the write ran on died or restarted mid-write and did not answer again
    within ``EO_SPARK_CONNECT_RETRY_SECONDS``. Retryable: the next attempt interrupts what is left of
    this one's queries and writes the staging dir again."""


class SinkRenamedError(ConfigError):
    """A phase got a transaction begun for another sink (or pipeline) than the one its configuration
    names now: the sink was renamed between attempts. Final: that attempt can never go on here; the
    teardown ends it in the sink it was begun in (else ``eo recover <old table-url> --stale-after 0``)."""


class LayoutError(ConfigError):
    """A layout declaration (partitions, sources, schedule) cannot work; refused before any write."""


class ContractError(ConfigError):
    """A job spec or counts document does not follow its contract (:mod:`exactly_once.contracts`)."""


class NoInputError(ExactlyOnceError):
    """A source matched no input file for an interval and does not declare empty intervals normal."""


class InputsShrankError(ExactlyOnceError):
    """A reprocess froze fewer inputs than the interval's committed version read: files it read have left
    the landing zone, and publishing would silently drop their data. Restore them, or reprocess with
    ``allow_shrinking`` when removing them is intended."""


class PredecessorPendingError(OrderingError):
    """A stateful interval's predecessor is not committed (yet): run it first. The begin task waits for it
    (rescheduling, up to ``EO_PREDECESSOR_TIMEOUT_SECONDS``) before failing with this error."""


class CommitWithoutWriteError(TransactionStateError):
    """A commit task ran for an attempt whose write never ran (a clear of the commit task alone) and the
    interval has no committed version to stand on; clear the write task with its downstream instead."""


class PhaseNotRunError(TransactionStateError):
    """A phase found that the phase before it never ran for this attempt (it was marked success in the
    UI without running, or its job exited without its result): no retry can bring the result, and
    nothing is published without it. Clear the named task with Downstream."""


class BatchPendingError(ExactlyOnceError):
    """A batched backfill left intervals unfinished after a transient error (storage, a lost Spark
    server): retryable - the batch's retry resumes their attempts where they stopped."""


class PermissionDeniedError(ExactlyOnceError):
    """An action on a table was refused: no DAG declares the table, or the user who asked may not edit
    the DAG that owns it. No retry can change that; the message names the user and the DAG."""


class AirflowApiError(ExactlyOnceError):
    """Airflow's REST API could not be reached or refused a request of ``eo`` (wrong URL or login, a user
    without the right, a DAG the deployment does not have); the message says which and what to check."""


class ActionPendingError(ExactlyOnceError):
    """An action on a table's interval (``eo reprocess``, ``eo rerun-stale``) was not started: a run that
    acts on the same interval is queued or running (it would do the work twice). The message names that run."""


# the error a commit raises for a transaction aborted for this recorded cause (else FencedError)
ABORT_CAUSES = {"input_changed": InputChangedError, "staged_changed": StorageError,
                "target_refused": TargetSchemaError}


# Errors no retry can fix: the Airflow task fails at once, without retries, and ends its transaction
# (exactly_once.airflow.operators). A broken suite or configuration (ConfigError), a target that does not
# fit the rows (TargetSchemaError) and intervals run out of order (OrderingError; a predecessor still
# pending is waited for by the begin task) are among them: retrying only costs time.
FINAL = (FencedError, TransactionAbortedError, ValidationFailedError, UnsafeIdentifierError, OwnershipError,
         ConfigError, InputChangedError, InputsShrankError, CommitWithoutWriteError, PhaseNotRunError,
         TargetSchemaError, OrderingError)
