"""Batched backfills: K intervals of one pipeline computed by ONE write job, each still its own transaction.

A backfill of a year is 365 transactions, and each keeps everything a single run has: its own epoch,
frozen inputs, job spec, manifest, gate verdict and report, history row, version, asset event, and
fencing against any other attempt of its interval. Only the write is shared: one job computes every
interval from the union of their frozen inputs (a job's ``compute_batch``, ``docs/JOB_API.md``) and
hands each interval its own files. :class:`BatchRun` runs the per-interval phases of
:class:`~exactly_once.protocol.pipeline.IntervalRun` for every interval, in interval order:

* :meth:`~BatchRun.begin` - every interval not committed yet (a committed one is skipped; ``reprocess``
  replaces it) gets an attempt: this batch's own earlier attempt when it can go on (a retry resumes),
  else a new one. A stateful pipeline's interval chains on the attempt of the interval before it: its
  state comes from the same job, and it commits only after that attempt commits (never if it aborts).
  Writes the :class:`~exactly_once.contracts.BatchSpec` of the attempts whose write has not finished.
* the write - ``spark-submit <job> --batch <url>``, or :func:`exactly_once.job.execute_batch`;
* :meth:`~BatchRun.finish` - pre_commit, validate, commit of each interval in order. An error no retry
  can fix (a failed gate, a fenced attempt) aborts that interval only - and, stateful, the intervals
  chained on it, which could never commit; the rest publishes. A transient error leaves the attempt as
  it is, ``pending``: running the batch again resumes it.
* :meth:`~BatchRun.abort` - the teardown: end every unfinished attempt of this batch.

Everything a phase needs is read back from the transaction log (an attempt's ``meta.run.batch`` names
its batch), so each phase may run in another process, after a crash. The batch's own files live in
``<home>/_batches/<batch id>/``: its spec, the job's scratch output (removed by :meth:`~BatchRun.finish`)
and its heartbeat. :func:`claim` is a write-once record there, for schedulers handing out batches.
"""
from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import liveness
from .config import PipelineConfig
from ..contracts import BATCH_SPEC, COUNTS, SPEC, BatchEntry, BatchSpec, FrozenInput
from ..errors import FINAL, ConfigError, ExactlyOnceError, StorageError
from ..failpoints import failpoint
from ..ids import Interval, TxnRef, check_name
from ..job import check_frozen
from .pipeline import IntervalRun
from ..storage import Storage, to_json
from ..records.txlog import EpochStatus, State

log = logging.getLogger(__name__)
BATCHES = "_batches"


@dataclass
class Outcome:
    """What a batch did with one interval: ``committed`` (by this batch), ``finished`` (another attempt
    committed it and this batch finished its publish), ``skipped`` (committed before), ``failed`` (its attempt was aborted: ``detail`` says why; a single run of the interval is
    the way on), ``pending`` (not finished: a retry of the batch resumes it)."""

    interval: Interval
    status: str
    version: str | None = None
    detail: str = ""
    summary: dict[str, Any] | None = None  # the commit's summary (IntervalRun.commit), to announce

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "interval": self.interval.token}


class BatchRun:
    """The intervals ``intervals`` of ``config``'s pipeline as one batch called ``batch_id`` (a safe
    name, the same for every retry of the batch). ``run`` is recorded with every attempt (who asked)."""

    def __init__(self, config: PipelineConfig, intervals: Sequence[Interval], *, batch_id: str,
                 storage_options: Mapping[str, Any] | None = None, reprocess: bool = False,
                 allow_shrinking: bool = False, run: Mapping[str, Any] | None = None) -> None:
        if not intervals:
            raise ConfigError(f"{config.pipeline}: a batch needs at least one interval")
        self.config, self.batch_id = config, check_name(batch_id, "batch id")
        self.intervals = sorted(set(intervals), key=lambda iv: iv.start)
        self.options = dict(storage_options or {})
        self.runs = {iv: IntervalRun(config, iv, storage_options=self.options) for iv in self.intervals}
        self.sink = config.sink_handle(self.options)
        self.storage: Storage = self.sink.storage
        self.dir = self.storage.join(self.sink.home, BATCHES, self.batch_id)
        self.reprocess, self.allow_shrinking = reprocess, allow_shrinking
        self.run_meta = {**dict(run or {}), "batch": self.batch_id}
        self.rolled: dict[Interval, str] = {}  # intervals whose decided commit (another attempt's) begin finished

    # ------------------------------------------------------------------ begin
    def begin(self) -> dict[str, Any]:
        """Give every interval that needs one an attempt (resumed or new), in order; write the batch spec
        of those whose write has not finished. Returns ``{"batch": <spec URL or None: nothing to write>,
        "attempts": {token: txn name}, "outcomes": [...] (skipped and failed intervals)}``. Also rolls
        forward what an earlier batch or run left decided or validated (:meth:`ended` lists them)."""
        entries: list[BatchEntry] = []
        attempts: dict[str, str] = {}
        outcomes: list[Outcome] = []
        prev: TxnRef | None = None  # the interval before: its committed version, or this batch's attempt
        for iv in self.intervals:
            run = self.runs[iv]
            if rolled := run.finish_publishes():  # announced by whoever hosts the batch (ended())
                self.rolled[iv] = str(rolled[-1]["version"])
            self.sink.recover(iv)  # an earlier batch's validated attempts commit here, in order, not recomputed
            mine, committed = self.attempt(iv), self.sink.committed(iv)
            by_me = committed is not None and mine is not None and mine[0] == committed[0]
            if committed is not None and (by_me or not self.reprocess):
                outcomes.append(Outcome(iv, "committed" if by_me else "skipped", committed[0].name,
                                        "" if by_me else "already committed"))
                prev = committed[0]
                continue
            chain = prev if self.config.stateful and prev is not None and prev.interval.end == iv.start \
                and self.sink.status_of(prev).state is not State.COMMITTED else None  # an attempt: chain on it
            txn = mine[0] if mine is not None and self._resumable(run, mine, chain) else None
            if txn is None:
                try:
                    began = run.begin(refresh_sources=self.reprocess, allow_shrinking=self.allow_shrinking,
                                      run=self.run_meta, chain=chain)
                except (ExactlyOnceError, OSError) as exc:
                    outcomes.append(Outcome(iv, "failed", None, f"begin: {type(exc).__name__}: {exc}"))
                    prev = None
                    continue
                txn = TxnRef.from_dict(began["txn"])
            attempts[iv.token], prev = txn.name, txn
            st = self.sink.status_of(txn)
            if st.manifest is None and not self._wrote(txn):
                entries.append(self._entry(txn, st, chained=chain is not None and bool(entries)
                                           and entries[-1].spec == self._spec_url(chain)))
        url = self._write_spec(entries) if entries else None
        log.info("batch %s of %s: %d attempts (%d to write), %d intervals skipped or failed", self.batch_id,
                 self.config.pipeline, len(attempts), len(entries), len(outcomes))
        return {"batch": url, "attempts": attempts, "outcomes": [o.to_dict() for o in outcomes]}

    def attempt(self, iv: Interval) -> tuple[TxnRef, EpochStatus] | None:
        """This batch's newest attempt of ``iv`` (an attempt whose ``meta.run.batch`` names it), if any."""
        for epoch, st in sorted(self.sink.status(iv).items(), reverse=True):
            if batch_of(st) == self.batch_id:
                return self.sink.ref(iv, epoch), st
        return None

    def _resumable(self, run: IntervalRun, mine: tuple[TxnRef, EpochStatus], chain: TxnRef | None) -> bool:
        """Can this batch's earlier attempt go on (a retry resumes it)? Not aborted, still the newest epoch,
        its spec written, and reading the state this batch would give it now."""
        txn, st = mine
        if st.state is State.ABORTED or max(self.sink.status(txn.interval)) != txn.epoch:
            return False
        try:
            expected = chain if chain is not None else run.predecessor()
        except ExactlyOnceError:
            return False  # its begin now fails the same way, and says why
        return st.reads == expected and self.storage.exists(self.storage.join(self.sink.staging_dir(txn), SPEC)) \
            and self._inputs_unchanged(txn, st)

    def _inputs_unchanged(self, txn: TxnRef, st: EpochStatus) -> bool:
        """Are the inputs of an attempt still to be written as it froze them? The write job refuses a
        changed one - and with it every interval of the batch, on every retry: such an attempt is begun
        again instead (freezing the files as they are now, as a new begin of a single run does)."""
        if st.manifest is not None or self._wrote(txn):
            return True  # computed already, from what it froze
        try:
            check_frozen([FrozenInput.from_dict(i) for i in (st.records.get("open") or {}).get("sources") or []],
                         self.options)
        except StorageError as exc:
            log.warning("batch %s: %s is begun again: %s", self.batch_id, txn.name, exc)
            return False
        return True

    def _wrote(self, txn: TxnRef) -> bool:
        return self.storage.exists(self.storage.join(self.sink.staging_dir(txn), COUNTS))

    def _spec_url(self, txn: TxnRef | None) -> str | None:
        return self.storage.url(self.storage.join(self.sink.staging_dir(txn), SPEC)) if txn else None

    def _entry(self, txn: TxnRef, st: EpochStatus, *, chained: bool) -> BatchEntry:
        prev_state = None if chained else self.runs[txn.interval].prev_state_url(st)
        return BatchEntry(self._spec_url(txn) or "", prev_state, chained)

    def _write_spec(self, entries: list[BatchEntry]) -> str:
        scratch = self.storage.join(self.dir, "scratch")
        self.storage.remove_tree(scratch)  # what a crashed attempt of the write left
        spec = BatchSpec(self.config.pipeline, self.config.sink, self.batch_id, tuple(entries),
                         self.storage.url(scratch))
        path = self.storage.join(self.dir, BATCH_SPEC)
        self.storage.write_atomic(path, spec.to_json())
        return self.storage.url(path)

    @contextmanager
    def heartbeat(self, every: float | None = None) -> Iterator[None]:
        """``with batch.heartbeat(): <the write>`` - keep every attempt of the batch (and the batch) alive."""
        paths = [self.storage.join(self.dir, "_heartbeat")]
        paths += [liveness.txn_heartbeat(self.sink, found[0]) for iv in self.intervals
                  if (found := self.attempt(iv)) is not None and found[1].state in (State.OPEN, State.PRE_COMMITTED)]
        with liveness.Heartbeat(self.storage, paths, every):
            yield

    # ------------------------------------------------------------------ finish
    def finish(self) -> list[Outcome]:
        """pre_commit, validate and commit every interval's attempt in order (see the module docstring);
        returns one outcome per interval. Removes the job's scratch output."""
        out = []
        for iv in self.intervals:
            out.append(self._finish_one(iv))
            if out[-1].status == "committed" and out[-1].summary is not None:
                failpoint("batch.between_commits")  # one interval committed, the next not yet started
        self.storage.remove_tree(self.storage.join(self.dir, "scratch"))
        counts: dict[str, int] = {}
        for o in out:
            counts[o.status] = counts.get(o.status, 0) + 1
        log.info("batch %s of %s finished: %s", self.batch_id, self.config.pipeline, counts)
        return out

    def _finish_one(self, iv: Interval) -> Outcome:
        run, found, committed = self.runs[iv], self.attempt(iv), self.sink.committed(iv)
        if committed is not None and (found is None or committed[0].epoch > found[0].epoch) and not self.reprocess:
            if found is not None and found[1].state is not State.COMMITTED:
                self._aborted(run, found[0], "another attempt committed the interval")  # fenced: end it, no leftovers
            if self.rolled.get(iv) == committed[0].name:
                return Outcome(iv, "finished", committed[0].name, "committed before; this batch finished its publish")
            return Outcome(iv, "skipped", committed[0].name, "already committed")
        if found is None:
            return Outcome(iv, "failed", None, "this batch has no attempt of it: its begin failed")
        txn, st = found
        if st.state is State.ABORTED:  # (taken over: the write may have recreated its staging - removed)
            return self._aborted(run, txn, st.reason or "aborted")
        if st.reads is not None and st.state is not State.COMMITTED:
            read = self.sink.status_of(st.reads).state
            if read is State.ABORTED:  # it could never commit: its state came from an aborted attempt
                return self._aborted(run, txn, f"the attempt it chained on, {st.reads.name}, was aborted")
            if read is not State.COMMITTED:
                return Outcome(iv, "pending", txn.name, f"waits for {st.reads.name} to commit")
        if st.manifest is None and not self._wrote(txn) and st.state is State.OPEN:
            return Outcome(iv, "pending", txn.name, "the batch's write did not finish it (run the batch again)")
        try:
            if st.state is not State.COMMITTED:
                run.pre_commit(txn)
                if self.sink.status_of(txn).validation is None:
                    run.validate(txn)
            summary = run.commit(txn)
        except FINAL as exc:
            if self.sink.status_of(txn).state is State.COMMITTED:  # decided before the error
                return Outcome(iv, "pending", txn.name, f"{type(exc).__name__}: {exc} (decided: a retry publishes it)")
            return self._aborted(run, txn, f"{type(exc).__name__}: {exc}")
        except (ExactlyOnceError, OSError) as exc:
            log.warning("batch %s: %s not finished (%s: %s); running the batch again resumes it", self.batch_id,
                        txn.name, type(exc).__name__, exc)
            return Outcome(iv, "pending", txn.name, f"{type(exc).__name__}: {exc}")
        return Outcome(iv, "committed", txn.name, "", summary)

    def _aborted(self, run: IntervalRun, txn: TxnRef, why: str) -> Outcome:
        try:
            run.abort(txn)
        except (ExactlyOnceError, OSError) as exc:
            log.warning("batch %s: abort of %s did not finish: %s", self.batch_id, txn.name, exc)
        return Outcome(txn.interval, "failed", txn.name, why)

    # ------------------------------------------------------------------ abort
    def abort(self) -> list[str]:
        """The batch's teardown: end every unfinished attempt it opened (roll decided ones forward)."""
        done = []
        for iv in self.intervals:
            for epoch, st in self.sink.status(iv).items():
                batch = batch_of(st)
                txn = self.sink.ref(iv, epoch)
                if batch == self.batch_id and (st.state in (State.OPEN, State.PRE_COMMITTED) or (
                        st.state is State.ABORTED and self.storage.exists(self.sink.staging_dir(txn)))):
                    done.append(f"{txn.name}: {self.runs[iv].abort(txn)}")  # aborted: what the write left
        self.storage.remove_tree(self.storage.join(self.dir, "scratch"))
        return done

    def ended(self) -> list[tuple[IntervalRun, dict[str, Any]]]:
        """The publishes this batch finished since the last call, each with its interval's run: its own
        commits, and what it rolled forward for others (a decided commit whose task died, an earlier batch's
        validated attempt) - see :meth:`IntervalRun.ended`. For the Airflow layer to announce."""
        for result in self.sink.take_finished():  # the recovery in begin runs on the batch's own handle
            self.runs[result.txn.interval]._summary(result)
        return [(run, summary) for iv in self.intervals for run in [self.runs[iv]] for summary in run.ended()]

    def run_all(self, write: Callable[[str], Any]) -> list[Outcome]:
        """begin, ``write(batch spec URL)`` (skipped when nothing is left to write), then finish - the
        write AND the finish under the batch's heartbeat: an attempt waits for its turn (the gates of the
        intervals before it) for as long as the finish takes, and a takeover (``recover``/``gc`` with
        ``stale_after``) must not judge it dead meanwhile. An error of the write propagates after the
        batch's attempts are left as they are (a second call resumes them)."""
        begun = self.begin()
        with self.heartbeat():
            if begun["batch"]:
                write(begun["batch"])
            return self.finish()


# ------------------------------------------------------------------ claims: who runs which batch
def batch_of(st: EpochStatus) -> str | None:
    """The batch whose attempt ``st`` is (its ``meta.run.batch``), if any."""
    return (((st.records.get("open") or {}).get("meta") or {}).get("run") or {}).get("batch")


def _claims(sink: Any, iv: Interval) -> str:
    return sink.storage.join(sink.home, BATCHES, "_claims", iv.token)


def holder(sink: Any, iv: Interval) -> tuple[int, dict[str, Any]] | None:
    """The newest claim on ``iv``: ``(generation, {"batch": id, ...})``, or None if it never was in a batch."""
    st = sink.storage
    gens = sorted(int(n[1:7]) for n in st.list_names(_claims(sink, iv)) if n.startswith("g") and n.endswith(".json"))
    if not gens:
        return None
    return gens[-1], json.loads(st.read_bytes(st.join(_claims(sink, iv), f"g{gens[-1]:06d}.json")))


def batch_live(sink: Any, batch_id: str, stale_after: float) -> bool:
    """Is batch ``batch_id`` still running? Not if it was marked done, nor if its heartbeat (or, before
    its first beat, its claim) is older than ``stale_after`` seconds on the storage's clock."""
    st = sink.storage
    home = st.join(sink.home, BATCHES, check_name(batch_id, "batch id"))
    if is_done(sink, batch_id):
        return False
    try:
        alive = st.modified_at(st.join(home, "_heartbeat"))
    except FileNotFoundError:
        try:
            alive = st.modified_at(st.join(home, "_intervals.json"))
        except FileNotFoundError:
            return False
    return liveness.storage_now(st, sink.home) - alive <= stale_after


def claim_intervals(sink: Any, intervals: Sequence[Interval], batch_id: str, record: Mapping[str, Any], *,
                    stale_after: float) -> list[Interval]:
    """Claim ``intervals`` for batch ``batch_id``, in order, up to the first one another live batch holds
    (or another claimer takes first); returns those claimed - a prefix, held until the batch is done or
    stale. Each claim is a write-once record ``_claims/<interval>/g<generation>.json``: a new generation
    may be created only once the batch of the one before is over, and only one claimer creates it."""
    st, out = sink.storage, []
    st.write_atomic(st.join(sink.home, BATCHES, batch_id, "_intervals.json"),
                    to_json([iv.token for iv in intervals]))
    for iv in intervals:
        held = holder(sink, iv)
        if held is not None and held[1].get("batch") != batch_id and batch_live(sink, held[1]["batch"], stale_after):
            break
        if held is None or held[1].get("batch") != batch_id:
            gen = held[0] + 1 if held else 1
            st.makedirs(_claims(sink, iv))
            if not st.create_exclusive(st.join(_claims(sink, iv), f"g{gen:06d}.json"),
                                       to_json({**dict(record), "batch": batch_id})):
                break
        out.append(iv)
    return out


def mark_done(sink: Any, batch_id: str) -> None:
    """The batch is over: its claims no longer hold anyone back."""
    st = sink.storage
    st.write_atomic(st.join(sink.home, BATCHES, check_name(batch_id, "batch id"), "_done"), b"")


def is_done(sink: Any, batch_id: str) -> bool:
    """Was batch ``batch_id`` marked done?"""
    st = sink.storage
    return st.exists(st.join(sink.home, BATCHES, check_name(batch_id, "batch id"), "_done"))


def claim_announcement(sink: Any, batch_id: str, interval: Interval, by: str) -> bool:
    """May ``by`` (who asks: an Airflow task instance) announce batch ``batch_id``'s version of ``interval``?
    True for exactly one claimer (a write-once record ``_announced/<interval>`` in the batch's dir naming it),
    and again for that claimer (a later try of a task whose try failed). False once the batch's dir is gone
    (gc removes a batch only after it is long over: its versions were announced then)."""
    st = sink.storage
    home = st.join(sink.home, BATCHES, check_name(batch_id, "batch id"))
    if not st.exists(st.join(home, "_intervals.json")):
        return False
    path = st.join(home, "_announced", interval.token)
    st.makedirs(st.join(home, "_announced"))
    return st.create_exclusive(path, by.encode()) or st.read_bytes(path).decode() == by


def hosted_intervals(sink: Any, batch_id: str) -> list[Interval]:
    """The intervals batch ``batch_id`` set out to claim (for its teardown); [] if unknown."""
    st = sink.storage
    try:
        return [Interval.from_token(t) for t in json.loads(st.read_bytes(
            st.join(sink.home, BATCHES, check_name(batch_id, "batch id"), "_intervals.json")))]
    except FileNotFoundError:
        return []


def collect(sink: Any, *, min_age: float, stale_after: float, now: float) -> list[str]:
    """gc of the batches' bookkeeping (``now``: the storage's clock): the dir of a batch that is over (done,
    or stale for ``stale_after``) whose attempts have all ended and that nothing touched for ``min_age``
    s; and every claim but the newest of each interval (a new claim needs only the newest). A removed
    batch reads as over (:func:`batch_live`). Returns what was removed."""
    st, root, removed = sink.storage, sink.storage.join(sink.home, BATCHES), []
    claims = st.join(root, "_claims")
    for token in st.list_names(claims):
        gens = sorted(n for n in st.list_names(st.join(claims, token)) if n.startswith("g") and n.endswith(".json"))
        for name in gens[:-1]:
            path = st.join(claims, token, name)
            if now - st.modified_at(path) >= min_age:
                st.remove_tree(path)
                removed.append(path)
    for batch_id in st.list_names(root):
        home = st.join(root, batch_id)
        if batch_id.startswith("_") or batch_live(sink, batch_id, stale_after):
            continue
        touched = max((st.modified_at(st.join(home, e.rel)) for e in st.walk_files(home)), default=0.0)
        if now - touched < min_age or _unfinished(sink, batch_id):
            continue
        st.remove_tree(home)
        removed.append(home)
    return removed


def _unfinished(sink: Any, batch_id: str) -> bool:
    """Does an attempt the batch began (its hosted intervals) still wait to end?"""
    for iv in hosted_intervals(sink, batch_id):
        for status in sink.status(iv).values():
            if batch_of(status) == batch_id and status.state in (State.OPEN, State.PRE_COMMITTED):
                return True
    return False
