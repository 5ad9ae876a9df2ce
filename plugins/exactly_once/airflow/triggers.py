"""A run that waits does so in Airflow's triggerer, not in a worker slot: one whose interval a live batch holds
(:class:`BatchWaitTrigger`), and a stateful interval's ``begin`` whose predecessor is not committed yet
(:class:`PredecessorWaitTrigger`).

:class:`BatchWaitTrigger` watches ONE interval of one table: it fires as soon as the interval's newest
committed version is published and another than the one its run saw (the batch published it: batches commit
interval by interval), or the batch that holds it is no longer live (done, released, or its heartbeat older than
``stale_after``). The run's ``begin`` then resumes and decides again (:func:`exactly_once.airflow.batching.before_begin`):
finish at once, wait again, or go on alone. A look costs a listing of the interval's transaction log and one
stat of the batch's heartbeat (a write of the storage's clock probe on S3): nothing that a worker slot and a
task start per poke cost, so a backfill's waiting runs do not slow the batch they wait for.

The trigger's arguments are stored in Airflow's metadata DB and printed by the triggerer: they hold the
table's URL and the storage connection's id, never credentials (the triggerer resolves the connection, as a
task does). A look that fails (storage unreachable, a connection the triggerer cannot resolve) is logged and
the wait goes on: the deferral's timeout (``EO_BATCH_POKE_SECONDS``) then makes the task look itself, and fail
with the error if it meets it too - firing at once would only start the task and defer it again, in a loop.
Neither trigger fires sooner than ``not_before`` (``EO_RESUME_SETTLE_SECONDS`` after its task deferred), and
neither deferral times out sooner: see :class:`PredecessorWaitTrigger`.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any, AsyncIterator

from ..ids import Interval
from .compat import BaseTrigger, TriggerEvent

log = logging.getLogger(__name__)


class _TableWait(BaseTrigger):
    """Look at one table every ``poll`` seconds until :meth:`look` returns an event; fire it, but not before
    ``not_before`` (epoch seconds; see :class:`PredecessorWaitTrigger`)."""

    table: str
    pipeline: str
    sink: str
    table_format: str
    conn_id: str | None
    interval: str
    poll: float
    not_before: float = 0.0

    def open_sink(self) -> Any:
        """The table's sink, with the storage connection's credentials resolved here (never serialized)."""
        from ..protocol.transaction import TwoPhaseCommitSink  # noqa: PLC0415
        from .connections import storage_options  # noqa: PLC0415

        return TwoPhaseCommitSink.at(self.table, pipeline=self.pipeline, sink=self.sink,
                                     storage_options=storage_options(self.conn_id), table_format=self.table_format)

    def look(self, sink: Any) -> dict[str, Any] | None:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async  # noqa: PLC0415 - Airflow's own way to call blocking code here

        sink, failed, event = None, 0, None
        while event is None:
            try:
                sink = sink or await sync_to_async(self.open_sink)()
                event = await sync_to_async(self.look)(sink)
                failed = 0
            except Exception as exc:  # noqa: BLE001 - keep waiting: the deferral's timeout makes the task look
                failed += 1  # itself (and fail with the error if it has it too); firing would loop at once
                if failed == 1 or failed % 60 == 0:
                    log.warning("%s: the look failed %d times in a row (%s: %s); still waiting", self.interval,
                                failed, type(exc).__name__, exc)
            if event is None:
                await asyncio.sleep(self.poll)
        log.info("%s: %s", self.interval, event["why"])
        await asyncio.sleep(max(0.0, self.not_before - time.time()))
        yield TriggerEvent(event)


class BatchWaitTrigger(_TableWait):
    """Fire when ``interval`` of the table at ``table`` is published anew (its newest committed txn, published,
    is another than ``seen``) or batch ``batch`` is no longer live; look every ``poll`` seconds; fire not before
    ``not_before`` (epoch seconds: the deferral plus ``EO_RESUME_SETTLE_SECONDS``, as
    :class:`PredecessorWaitTrigger`; 0 in a trigger serialized before it existed)."""

    def __init__(self, *, table: str, pipeline: str, sink: str, interval: str, batch: str, seen: str | None,
                 stale_after: float, poll: float = 1.0, table_format: str = "files",
                 conn_id: str | None = None, not_before: float = 0.0) -> None:
        super().__init__()
        self.table, self.pipeline, self.sink, self.table_format = table, pipeline, sink, table_format
        self.interval, self.batch, self.seen = interval, batch, seen
        self.stale_after, self.poll, self.conn_id = float(stale_after), float(poll), conn_id
        self.not_before = float(not_before)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "pipeline": self.pipeline, "sink": self.sink, "interval": self.interval,
                 "batch": self.batch, "seen": self.seen, "stale_after": self.stale_after, "poll": self.poll,
                 "table_format": self.table_format, "conn_id": self.conn_id, "not_before": self.not_before})

    def look(self, sink: Any) -> dict[str, Any] | None:
        """One look: the event to fire, or None while the wait goes on."""
        from ..protocol.batch import batch_live  # noqa: PLC0415

        found = sink.committed(Interval.from_token(self.interval))
        name = found[0].name if found is not None and found[1].published else None  # decided is not enough:
        if name is not None and name != self.seen:  # the run would finish a publish its batch is making
            return {"interval": self.interval, "why": f"committed {name}"}
        if not batch_live(sink, self.batch, self.stale_after):
            return {"interval": self.interval, "why": f"batch {self.batch} is over"}
        return None


class PredecessorWaitTrigger(_TableWait):
    """Fire when an interval of the table that ends at ``ends_at`` (ISO-8601) is committed - the predecessor
    whose state a stateful interval's ``begin`` needs - but not before ``not_before``.

    ``not_before``: Airflow's scheduler fails a task as "killed externally" (a try spent) when the executor's
    event for the process that deferred reaches it after the task was queued again for the same try - the
    event then looks like the new process's end (seen on 3.1 and 3.3, see docs/PROTOCOL.md). Resuming no
    sooner than ``EO_RESUME_SETTLE_SECONDS`` after deferring leaves that event the time to arrive."""

    def __init__(self, *, table: str, pipeline: str, sink: str, interval: str, ends_at: str, not_before: float,
                 poll: float = 1.0, table_format: str = "files", conn_id: str | None = None) -> None:
        super().__init__()
        self.table, self.pipeline, self.sink, self.table_format = table, pipeline, sink, table_format
        self.interval, self.ends_at, self.not_before = interval, ends_at, float(not_before)
        self.poll, self.conn_id = float(poll), conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "pipeline": self.pipeline, "sink": self.sink, "interval": self.interval,
                 "ends_at": self.ends_at, "not_before": self.not_before, "poll": self.poll,
                 "table_format": self.table_format, "conn_id": self.conn_id})

    def look(self, sink: Any) -> dict[str, Any] | None:
        """One look: the event to fire (a committed interval ends at ``ends_at``), or None while the wait goes on."""
        end = datetime.fromisoformat(self.ends_at)
        for iv in sink.log.intervals():
            if iv.end == end and sink.committed(iv) is not None:
                return {"interval": self.interval, "why": f"its predecessor {iv.token} is committed"}
        return None
