"""The Spark Connect client side of the write phase (see ``docs/JOB_API.md`` "Spark Connect").

* one NEW session per write attempt, its id derived from the transaction attempt's
  :attr:`~exactly_once.contracts.JobSpec.session_scope` (staging dir - so table location and
  transaction name - and the begin's unique id) and the attempt number: a later attempt or the abort can
  reach, and interrupt, a dead client's session; two tables, or a re-created table, with the same
  transaction name never share one;
* every query tagged :func:`job_tag`;
* a server that stops answering is given ``EO_SPARK_CONNECT_RETRY_SECONDS`` (default 60) to come back,
  then the write fails with the retryable :class:`~exactly_once.errors.SparkConnectLostError` (pyspark's
  own policy keeps retrying a dead server for over 10 minutes) and Airflow's retry runs the write again.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import socket
import time
import uuid
from typing import Any, Iterator, Sequence

from ..errors import ConfigError, ContractError, SparkConnectLostError

log = logging.getLogger(__name__)
_CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
_SESSION_NS = uuid.UUID("6f1c2d0e-5b8a-4e7f-9a43-2c1d0b9e8f71")
RETRY_ENV = "EO_SPARK_CONNECT_RETRY_SECONDS"
DEFAULT_RETRY_SECONDS = 60.0
MAX_BACKOFF_MS = 5000  # poll a restarting server at least every 5 s
# what pyspark reports when the server died (UNAVAILABLE) or was restarted under a live client
_LOST_MARKS = ("UNAVAILABLE", "INVALID_HANDLE.SESSION_NOT_FOUND", "INVALID_HANDLE.OPERATION_NOT_FOUND",
               "INVALID_HANDLE.SESSION_CHANGED", "Socket closed", "Connection reset")


def job_tag(txn: str) -> str:
    """The Spark Connect operation tag of every query a write of transaction ``txn`` runs."""
    return "eo-" + re.sub(r"[^A-Za-z0-9_.=-]", "_", txn)


def connect_session_id(scope: str, attempt: int) -> str:
    """The session id of write attempt ``attempt`` of the transaction attempt ``scope``
    (:attr:`JobSpec.session_scope`): deterministic, unique per table, transaction and begin."""
    return str(uuid.uuid5(_SESSION_NS, f"{scope}/{attempt}"))


def _with_session_id(remote: str, session_id: str) -> str:
    if not remote.startswith("sc://"):
        raise ContractError(f"a Spark Connect URL starts with sc://, not {remote.split('://')[0]}://")
    base, _, params = remote.partition("/;")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return base.rstrip("/") + "/;" + ";".join([*kept, f"session_id={session_id}"])


def retry_seconds() -> float:
    """How long a write waits for an unreachable server to come back (``EO_SPARK_CONNECT_RETRY_SECONDS``)."""
    raw = os.environ.get(RETRY_ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{RETRY_ENV} must be a number of seconds > 0 (e.g. 60), not {raw!r}")
    return value


def bounded_retry_policy(seconds: float) -> Any:
    """pyspark's default retry policy (UNAVAILABLE and server-advised retries), but each retried call
    gives up once ``seconds`` have passed since its first failure."""
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState

    class _State(RetryPolicyState):
        def __init__(self, policy: Any) -> None:
            super().__init__(policy)
            self._deadline = time.monotonic() + seconds

        def next_attempt(self, exception: BaseException | None = None) -> int | None:
            wait = super().next_attempt(exception)
            left_ms = (self._deadline - time.monotonic()) * 1000
            if wait is None or left_ms <= 0:
                return None
            return int(min(wait, left_ms))

    class BoundedPolicy(DefaultPolicy):
        def __init__(self) -> None:
            super().__init__(max_retries=None, max_backoff=MAX_BACKOFF_MS)

        def to_state(self) -> Any:
            return _State(self)

    return BoundedPolicy()


def is_lost(exc: BaseException) -> bool:
    """True if ``exc`` (from a Spark Connect call) says the server died or restarted under the client."""
    try:
        import grpc

        if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.UNAVAILABLE:
            return True
    except ImportError:  # pragma: no cover - grpc ships with pyspark[connect]
        pass
    text = f"{type(exc).__name__}: {exc}"
    if "StatusCode.UNAVAILABLE" in text:
        return True
    return "SparkConnect" in text and any(mark in text for mark in _LOST_MARKS)


@contextlib.contextmanager
def lost_as_error(remote: str) -> Iterator[None]:
    """Turn "the server is gone" (after the retry budget) into :class:`SparkConnectLostError`."""
    try:
        yield
    except SparkConnectLostError:
        raise
    except Exception as exc:
        if not is_lost(exc):
            raise
        raise SparkConnectLostError(
            f"the Spark Connect server {remote.split('/;')[0]} went away mid-write and did not answer within "
            f"{retry_seconds():.0f} s ({RETRY_ENV}); the write is retried (its queries are interrupted "
            f"first when the server is back): {str(exc).splitlines()[0][:300]}") from exc


@contextlib.contextmanager
def connect_mode() -> Iterator[None]:
    """Scope pyspark's process-wide Spark Connect switch (``SPARK_CONNECT_MODE_ENABLED``, set by
    ``builder.remote()``) to a block: left set, every later classic session of the process - and every
    ``spark-submit`` it starts, which inherits the environment - fails with CONNECT_URL_NOT_SET."""
    before = os.environ.get(_CONNECT_MODE)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_CONNECT_MODE, None)
        else:
            os.environ[_CONNECT_MODE] = before


def _session(remote: str, scope: str, attempt: int) -> Any:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(_with_session_id(remote, connect_session_id(scope, attempt))).create()
    spark.client.set_retry_policies([bounded_retry_policy(retry_seconds())])
    return spark


def connect_session(remote: str, txn: str, attempt: int = 1, *, scope: str) -> Any:
    """A NEW Spark Connect session on ``remote`` for one write attempt of the transaction attempt
    ``scope``, every query tagged with :func:`job_tag` (stop it when done: that releases the session and
    everything it cached)."""
    spark = _session(remote, scope, attempt)
    spark.addTag(job_tag(txn))
    return spark


def stop_session(spark: Any) -> None:
    """Stop a Spark Connect session and collect it now: a session left to the cyclic garbage collector
    (``spark.catalog`` makes a cycle) is closed by ``__del__`` at an arbitrary point - inside pyspark's
    release thread pool's ``submit`` it deadlocks the client (pyspark 4.1)."""
    try:
        spark.stop()
    finally:
        vars(spark).pop("catalog", None)  # the cycle: the cached Catalog refers back to the session
        gc.collect()


def interrupt_writes(remote: str, txn: str, attempts: Sequence[int], *, scope: str) -> list[str]:
    """Interrupt, on ``remote``, every query of the given write attempts of ``txn`` (transaction attempt
    ``scope``) still running - a client killed mid-write leaves its query running on the server - and
    release their sessions. Returns the interrupted operation ids; a closed session has nothing left to
    interrupt, and an unreachable server runs nothing (a restarted one has forgotten the sessions). The
    operations' tasks stop a moment after this returns (:func:`_interrupt_tagged`)."""
    with connect_mode():
        return _interrupt_writes(remote, txn, attempts, scope)


def _interrupt_writes(remote: str, txn: str, attempts: Sequence[int], scope: str) -> list[str]:
    interrupted: list[str] = []
    if not _accepts(remote):
        log.warning("Spark Connect server %s is not reachable: no query of %s can still run there",
                    remote.split("/;")[0], txn)
        return interrupted
    for attempt in attempts:
        try:
            spark = _session(remote, scope, attempt)
        except Exception as exc:  # noqa: BLE001 - a closed session: nothing of it can still run
            log.debug("session of %s attempt %s: %s", txn, attempt, exc)
            continue
        try:
            interrupted += _interrupt_tagged(spark, job_tag(txn))
        except Exception as exc:  # noqa: BLE001
            if "SESSION_CLOSED" not in str(exc):
                raise
        finally:
            try:
                stop_session(spark)
            except Exception:  # noqa: BLE001 - closed already
                pass
    if interrupted:
        log.warning("interrupted %d Spark Connect operation(s) of %s left by dead write attempts",
                    len(interrupted), txn)
    return interrupted


def _interrupt_tagged(spark: Any, tag: str) -> list[str]:
    """Interrupt the session's operations tagged ``tag``; returns their ids.

    The server lists an operation only in the call that interrupts it, and ends the operation at once;
    Spark then kills its running tasks cooperatively, a moment later (each task stops at its next check
    of the kill flag: per row for a file scan or a shuffle read, or at a thread interrupt). So a file can
    still appear in the staging dir shortly after this returns - always under the committer's hidden
    ``_temporary`` names, which no manifest takes in - and an aborted transaction's staging dir is deleted
    again by ``gc`` (its recover pass). A task that never checks the flag (a bare ``spark.range`` write
    whose interrupt Hadoop swallowed) runs on until the server restarts: docs/JOB_API.md "Spark Connect"."""
    return list(spark.interruptTag(tag))


def _accepts(remote: str, timeout: float = 2.0) -> bool:
    hostport = remote[len("sc://"):].split("/")[0]
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port or 15002)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False
