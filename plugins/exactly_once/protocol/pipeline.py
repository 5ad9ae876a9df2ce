"""The phases of one interval of one pipeline, as plain methods - what the Airflow tasks call.

:class:`IntervalRun` adds to the protocol what a *pipeline* needs: the partitions the interval owns
(:mod:`~exactly_once.protocol.layout`), frozen, replayable source positions (:mod:`~exactly_once.protocol.inputs`),
the predecessor's committed state (stateful pipelines), the write job's :class:`~exactly_once.contracts.JobSpec`,
the two-layer gate (completeness from the job's counts + the table's own suite), and after a commit a report of
late files and of later intervals made stale. Nothing here imports Airflow: a test, the ``eo`` CLI or a DAG drive
the same run.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from typing import Any, Mapping

from . import liveness
from .. import advice
from .config import PipelineConfig
from ..contracts import COUNTS, SPEC, STATE, FrozenInput, JobSpec, SourceInputs
from ..errors import (CommitWithoutWriteError, ConfigError, OrderingError, OwnershipError, PhaseNotRunError,
                     PredecessorPendingError, SinkRenamedError, TransactionAbortedError, TransactionStateError,
                     ValidationFailedError)
from ..failpoints import failpoint
from ..ids import Interval, TxnRef
from .inputs import dropped_inputs, frozen_now, late_inputs, replayable, replayed
from .layout import Source
from .ordering import stale_from
from ..storage import redact, storage_for
from ..records.txlog import EpochStatus, State

log = logging.getLogger(__name__)


class IntervalRun:
    """One interval of one pipeline. Each public method is one Airflow task and is safe to retry.

    ``storage_options`` are the resolved credentials of ``config.storage_conn_id`` (the Airflow layer
    resolves them once per task). Refuses (before anything is written) an interval whose declared
    partitions it cannot own alone.
    """

    def __init__(self, config: PipelineConfig, interval: Interval, *,
                 storage_options: Mapping[str, Any] | None = None) -> None:
        if config.storage_conn_id and storage_options is None:
            raise ConfigError(f"{config.pipeline}: resolve the connection {config.storage_conn_id!r} and pass "
                              "storage_options (exactly_once.airflow.connections.storage_options)")
        self.config = config
        self.interval = interval
        self.options = dict(storage_options or {})
        self.partitions = config.partitions.check_interval(interval)  # type: ignore[union-attr]
        self.sink = config.sink_handle(self.options)
        self.storage = self.sink.storage
        self._ended: dict[str, dict[str, Any]] = {}  # summaries of the publishes this run finished (ended())

    # ------------------------------------------------------------------ begin
    def begin(self, *, refresh_sources: bool = False, allow_shrinking: bool = False,
              run: dict[str, Any] | None = None, chain: TxnRef | None = None) -> dict[str, Any]:
        """Open a transaction: check ownership and ordering, freeze (or replay) the sources, write the spec.

        Returns ``{"txn": ..., "spec": <job spec URL>, "inputs": n}`` for the next tasks (XCom). Raises,
        before anything is written: OwnershipError (another interval owns one of the partitions),
        OrderingError (a stateful interval's predecessor is not committed), NoInputError (a source
        matched no file and does not allow empty intervals), InputsShrankError (sources frozen now lack
        files the committed version read, unless ``allow_shrinking``; those dropped are recorded in
        ``meta.dropped_inputs``). ``chain`` (a batch, :mod:`exactly_once.protocol.batch`): the predecessor is that
        attempt of the previous interval, not committed yet; this one commits only after it.
        """
        self._check_owners()
        prev = self._chained(chain) if chain is not None else self.predecessor()
        inputs, replayed = self._inputs(refresh_sources)
        dropped = [] if replayed else self._dropped_inputs(inputs, allow_shrinking)
        meta = {"run": run or {}, "partitions": list(self.partitions), "refresh_sources": refresh_sources,
                "replayed": replayed, "prev": prev.name if prev else None, "dropped_inputs": dropped}
        flat = [{"source": name, **fi.to_dict()} for name, fis in inputs.items() for fi in fis]
        txn = self.sink.begin(self.interval, sources=flat, meta=meta, reads=prev, reads_pending=chain is not None)
        staging = self.sink.staging_dir(txn)
        spec = JobSpec(
            pipeline=self.config.pipeline, sink=self.config.sink, txn=txn.name,
            interval_start=self.interval.start.isoformat(), interval_end=self.interval.end.isoformat(),
            partitions=self.partitions,
            sources=tuple(SourceInputs(s.name, s.format, s.options, tuple(inputs[s.name]))
                          for s in self._sources()),
            staging_dir=self.storage.url(staging), data_dir=self.storage.url(self.sink.data_dir(txn)),
            prev_state=self.storage.url(self.storage.join(self.sink.checkpoint_dir(prev), STATE)) if prev else None,
            stateful=self.config.stateful, begin_id=uuid.uuid4().hex,
            heartbeat=self.storage.url(liveness.txn_heartbeat(self.sink, txn)))
        spec_path = self.storage.join(staging, SPEC)
        self.storage.write_atomic(spec_path, spec.to_json())
        log.info("begin %s: %d input files (%s), partitions %s, previous checkpoint %s", txn.name, len(flat),
                 "replayed" if replayed else "frozen now", ", ".join(self.partitions), prev.name if prev else "-")
        return {"txn": txn.to_dict(), "spec": self.storage.url(spec_path), "inputs": len(flat),
                "table": self.storage.url(self.sink.table)}  # where the attempt lives, should the sink be renamed

    def _sources(self) -> tuple[Source, ...]:
        return self.config.sources  # type: ignore[return-value]

    def _check_owners(self) -> None:
        """Refuse if another interval of this sink has an attempt, not aborted, with one of our partitions
        (an aborted attempt never blocks the interval that owns the partition: docs/RELIABILITY.md)."""
        mine = set(self.partitions)
        for iv in self.sink.log.intervals():
            if iv == self.interval or iv.end <= self.interval.start or iv.start >= self.interval.end:
                continue  # only intervals that overlap this one in time can share its partitions
            for st in self.sink.status(iv).values():
                if st.state is State.ABORTED:
                    continue
                theirs = set(((st.records.get("open") or {}).get("meta") or {}).get("partitions") or [])
                clash = sorted(mine & theirs)
                if clash:
                    raise OwnershipError(
                        f"{self.config.pipeline}: interval {self.interval} would publish {clash[0]}, which "
                        f"interval {iv} owns (its e{st.epoch} is {st.state.value}); two intervals may never "
                        "publish one partition - make the partition template finer or run the intervals of the "
                        "DAG's own schedule (an unfinished attempt releases it once it ends: by its run's teardown, or "
                        "`eo recover <table-url>` once it is stale)")

    def predecessor(self) -> TxnRef | None:
        """The committed version whose state this interval reads: that of the interval whose end is this
        interval's start. None for a stateless pipeline and for the first interval (``config.start``)."""
        cfg = self.config
        if not cfg.stateful:
            return None
        if cfg.start is None:
            raise ConfigError(f"{cfg.pipeline}: a stateful pipeline needs start= (its first interval, "
                              "which reads no state)")
        if self.interval.start <= cfg.start:  # type: ignore[operator]
            return None
        found, before = [], self.intervals_before()
        for iv in before:
            self.sink.recover(iv)  # a lost acknowledgement there must not look like "not committed"
            committed = self.sink.committed(iv)
            if committed:
                found.append(committed[0])
        if len(found) > 1:
            raise OrderingError(f"{cfg.pipeline}: several committed intervals end at {self.interval.start}: "
                                f"{[t.interval.token for t in found]}; a stateful pipeline needs one schedule")
        if not found:
            its_start = before[0].start.isoformat() if len(before) == 1 else "<its start>"
            raise PredecessorPendingError(
                f"{cfg.pipeline}: interval {self.interval} needs the state of the interval that ends at "
                f"{self.interval.start.isoformat()}, which is not committed; run that interval first: "
                f"{advice.run_interval(cfg.pipeline, its_start)}; or set start= to make this the first interval")
        return found[0]

    def intervals_before(self) -> list[Interval]:
        """The logged intervals that end where this one starts (a stateful pipeline's predecessor: one)."""
        return [i for i in self.sink.log.intervals() if i.end == self.interval.start]

    def _chained(self, chain: TxnRef) -> TxnRef:
        if not self.config.stateful or chain.interval.end != self.interval.start:
            raise OrderingError(f"{self.config.pipeline}: {chain.name} is not the predecessor of {self.interval} "
                                "(only a stateful pipeline chains, on the interval that ends at its start)")
        return chain

    def _inputs(self, refresh: bool) -> tuple[dict[str, list[FrozenInput]], bool]:
        """The inputs per source: replayed from the committed attempt or the newest live attempt that got
        past its write (so a retry computes the same answer), else frozen now from the landing zone
        (:mod:`.inputs`). Recovery runs first, so an attempt whose gate failed (or that is superseded) is
        aborted and never replayed."""
        if not refresh:
            self.sink.recover(self.interval)
            chosen = replayable(self.sink.status(self.interval))
            if chosen is not None:
                return replayed(chosen, self._sources()), True
        shrinking = refresh and self.sink.committed(self.interval) is not None
        return frozen_now(self.config.pipeline, self.config.root, self.options, self._sources(), self.interval,
                          shrinking=shrinking), False

    def _dropped_inputs(self, inputs: Mapping[str, list[FrozenInput]], allow: bool) -> list[str]:
        """Files (``source:rel``) the committed version read that are not among ``inputs``; raises
        InputsShrankError if there are any and ``allow`` is false (:func:`.inputs.dropped_inputs`)."""
        committed = self.sink.committed(self.interval)
        if committed is None:
            return []
        gone = dropped_inputs(self.config.pipeline, self.interval, committed, inputs, self._sources(), allow,
                              table=redact(self.storage.url(self.sink.table)))
        if gone:
            log.warning("%s %s: reprocess drops %d input file(s) of %s (allow_shrinking): %s", self.config.pipeline,
                        self.interval, len(gone), committed[0].name, ", ".join(gone[:20]))
        return gone

    # ------------------------------------------------------------------ pre_commit
    def _own(self, txn: TxnRef) -> TxnRef:
        """``txn`` if it is a transaction of this run's sink and interval; SinkRenamedError (final) for an
        attempt begun for another sink."""
        if self.renamed(txn):
            raise SinkRenamedError(self._renamed_message(txn))
        if txn.interval != self.interval:
            raise TransactionStateError(f"{txn.name} is a transaction of {txn.interval}, not of this run's "
                                        f"interval {self.interval}")
        return txn

    def job_spec(self, txn: TxnRef) -> JobSpec:
        """The job spec ``begin`` wrote for ``txn`` (StorageError-like errors when it is gone)."""
        return JobSpec.from_json(self.storage.read_bytes(self.storage.join(self.sink.staging_dir(txn), SPEC)))

    def counts(self, txn: TxnRef) -> dict[str, Any]:
        """The counts the write job recorded (written last, so their presence means the job finished);
        from the log once pre-committed. Refuses another interval's, pipeline's or an unknown transaction."""
        status = self.sink.status_of(self._own(txn))
        if status.manifest is not None:  # pre-committed: the counts are in the log
            return status.records["pre_committed"].get("counts", {})
        _refuse_aborted(txn, status, newer=max(self.sink.status(txn.interval), default=0) > txn.epoch)
        try:
            return self.storage.read_json(self.storage.join(self.sink.staging_dir(txn), COUNTS))
        except FileNotFoundError:
            raise self._not_run(txn, f"the write job left no {COUNTS}", "write") from None

    def _not_run(self, txn: TxnRef, found: str, task: str) -> PhaseNotRunError:
        """The phase before this one never ran for ``txn`` ("Mark success" in the UI, or a job that exited
        without its result): final - no retry of this phase can bring that result."""
        return PhaseNotRunError(
            f"{txn.name}: {found}: the {task} task did not run for this attempt (marked success?) - clear it "
            "with Downstream (or the whole run) to run it; nothing of this attempt is published")

    def pre_commit(self, txn: TxnRef) -> dict[str, Any]:
        """Seal the staged output (manifest in the log, with the write job's counts; a partition's data files
        take their row counts from the job - ``rows_written`` for a partition of one file, ``_file_rows.json``
        for one of several -, not from Parquet footers; the gate then checks them against the files).

        Refuses (OwnershipError, before any partition is claimed) staged data outside the partitions
        this interval owns.
        """
        counts = self.counts(txn)  # refuses a transaction of another interval
        self._check_staged_partitions(txn)
        written = counts.get("rows_written")  # the gate checks them against the staged rows before any commit
        manifest = self.sink.pre_commit(txn, extra={"counts": counts, "state_fingerprint": self._fingerprint(txn)},
                                        rows=written if isinstance(written, dict) else None,
                                        file_rows=self.file_rows(txn))
        log.info("pre_commit %s: %s files, %s rows sealed", txn.name, manifest.files, manifest.rows)
        return {"files": manifest.files, "rows": manifest.rows, "counts": counts}

    def file_rows(self, txn: TxnRef) -> dict[str, dict[str, int]] | None:
        """The write job's rows per file of its partitions of several files (``_file_rows.json``), if any."""
        from ..job.files import read_file_rows

        return read_file_rows(self.storage, self.sink.staging_dir(txn))

    def _check_staged_partitions(self, txn: TxnRef) -> None:
        st = self.sink.status(self.interval).get(txn.epoch)
        if st is not None and st.manifest is not None:
            return  # already sealed
        owned = tuple(p + "/" for p in self.partitions)
        for entry in self.storage.walk_files(self.sink.data_dir(txn)):
            if entry.rel.rsplit("/", 1)[-1].startswith(("_", ".")) and "/" not in entry.rel:
                continue  # _SUCCESS and the like at the top
            if not entry.rel.startswith(owned):
                raise OwnershipError(
                    f"{txn.name}: the job wrote {entry.rel}, outside the partitions interval {self.interval} "
                    f"owns ({', '.join(self.partitions)}); write only to JobContext.output_dir(partition)")

    # ------------------------------------------------------------------ validate
    def validate(self, txn: TxnRef) -> dict[str, Any]:
        """Run the gate on the staged data: the completeness check from the job's counts, then the
        table's own suite (if configured); record the verdict in the log.

        Raises ValidationFailedError (one line per failed expectation) when it fails; the transaction
        can then never commit, and the teardown aborts it.
        """
        st = self.sink.status_of(self._own(txn))
        if st.manifest is None:  # (a retry after the gate failed finds its manifest and fails as before)
            self.counts(txn)  # an aborted attempt, or a write that did not run, is refused first
            raise self._not_run(txn, "it is not pre-committed (no manifest in the log)", "pre_commit")
        from ..quality import validate_staged  # GX is heavy: imported only by the validate task

        spec = self.job_spec(txn)
        outcome = validate_staged(
            suite_path=self.config.suite, table=self.config.sink, staging_dir=spec.staging_dir,
            partitions=list(spec.partitions), counts=self.counts(txn), prev_state_dir=self.prev_state_url(st),
            file_rows=st.manifest.rows_by_file(),  # what pre_commit sealed (from the job or the footers)
            report_root=f"{self.config.reports_url}/data_docs", run_name=f"{self.config.pipeline}.{txn.name}",
            max_malformed_ratio=self.config.max_malformed_ratio, storage_options=self.options)
        passed = self.sink.record_validation(txn, outcome.passed, {
            "failures": outcome.failures, "report": outcome.report_path, **outcome.summary})
        failpoint("validate.after")
        result = {"passed": passed, "failures": outcome.failures, "report": outcome.report_path}
        if not passed:
            error = ValidationFailedError(f"{txn.name} failed the quality gate: "
                                          + "; ".join(outcome.failures or ["see report"]))
            error.report = outcome.report_path  # type: ignore[attr-defined]
            raise error
        log.info("validate %s: passed; report %s", txn.name, outcome.report_path)
        return result

    def prev_state_url(self, st: EpochStatus) -> str | None:
        """Where the state this attempt read is now: its predecessor's checkpoint once published, its
        staging while it is not (a predecessor chained in the same batch)."""
        if st.reads is None:
            return None
        checkpoint = self.storage.join(self.sink.checkpoint_dir(st.reads), STATE)
        if not self.storage.exists(checkpoint) and self.storage.exists(
                staged := self.storage.join(self.sink.staging_dir(st.reads), STATE)):
            return self.storage.url(staged)
        return self.storage.url(checkpoint)

    # ------------------------------------------------------------------ commit / abort
    def commit(self, txn: TxnRef) -> dict[str, Any]:
        """Publish; then report late files of this interval and later intervals made stale.

        A commit whose own attempt never wrote (``txn`` OPEN: the UI's "Clear" of the commit task re-runs
        ``begin`` with it, but not the write) publishes nothing: if the interval has a committed,
        published version it returns ``{"version": <that>, "already_committed": True}``; otherwise it
        raises CommitWithoutWriteError saying which task to clear instead. An attempt that wrote but was
        never pre-committed, or has no verdict ("Mark success" on pre_commit or validate), is refused with
        PhaseNotRunError: nothing unvalidated is ever published.
        """
        t0 = time.perf_counter()
        st = self.sink.status_of(self._own(txn))  # refuses another pipeline's or an unknown transaction
        if st.state is State.OPEN:
            if self._write_finished(txn):
                raise self._not_run(txn, "its write finished but it is not pre-committed", "pre_commit")
            return self._nothing_written(txn)
        if st.state is State.PRE_COMMITTED and st.validation is None and self.sink.require_validation:
            raise self._not_run(txn, "no quality verdict is recorded", "validate")
        return self._summary(self.sink.commit(txn), t0)

    def _summary(self, result: Any, t0: float | None = None) -> dict[str, Any]:
        """The run summary of a publish (``result``: its CommitResult), written to the reports; kept for
        :meth:`ended` when this run finished the publish."""
        txn = result.txn
        summary = {"version": txn.name, "partitions": result.partitions, "files": result.files,
                   "rows": result.rows, "commit_seconds": round(time.perf_counter() - t0, 4) if t0 else None,
                   "stale_intervals": self.stale_after(), "late_files": self.late_files()}
        log.info("commit %s: %s, %s rows", txn.name, result.partitions, result.rows)
        if summary["stale_intervals"]:
            log.warning("reprocessing %s made later checkpoints stale; re-run in order: %s", self.interval,
                        ", ".join(summary["stale_intervals"]))
        self._write_report(summary)
        if result.finished:
            self._ended[txn.name] = summary
        return summary

    def ended(self) -> list[dict[str, Any]]:
        """The run summaries of the publishes this run finished since the last call: those whose completion
        record it wrote (``CommitResult.finished``) - by :meth:`commit`, :meth:`finish_publishes`, :meth:`abort`
        or the recovery inside :meth:`begin`. One run finishes each publish, whatever raced it: the Airflow
        layer announces exactly these (``exactly_once.airflow.endings``)."""
        for result in self.sink.take_finished():
            if result.txn.name not in self._ended:  # a table's recover finishes other intervals' publishes too
                self._ended[result.txn.name] = self.at(result.txn.interval)._summary(result)
        out, self._ended = list(self._ended.values()), {}
        return out

    def at(self, interval: Interval) -> "IntervalRun":
        """This run's pipeline and sink handle at ``interval`` (itself at its own): a publish of another
        interval that this run finished (a table's recover) is summarised and announced as that interval's."""
        if interval == self.interval:
            return self
        other = IntervalRun(self.config, interval, storage_options=self.options)
        other.sink, other.storage = self.sink, self.storage
        return other

    def finish_publishes(self) -> list[dict[str, Any]]:
        """Finish every decided but unpublished commit of this interval (a commit task that died after
        the decision, a killed worker, "Mark failed" on commit) and return their run summaries (as
        :meth:`commit` returns them), so the task that finished them can announce them."""
        done = []
        for epoch, st in sorted(self.sink.status(self.interval).items()):
            if st.state is State.COMMITTED and not st.published:
                done.append(self.commit(self.sink.ref(self.interval, epoch)))
        return done

    def _nothing_written(self, txn: TxnRef) -> dict[str, Any]:
        found = self.sink.committed(self.interval)
        if found is not None and found[1].published:
            log.info("commit of %s: its write never ran (only begin and commit were re-run, as a clear of "
                     "the commit task does); %s is committed and live - nothing to publish", txn.name, found[0].name)
            return {"version": found[0].name, "already_committed": True, "attempt": txn.name}
        raise CommitWithoutWriteError(
            f"{txn.name} has nothing to commit: its write, pre_commit and validate did not run (clearing the "
            f"commit task re-runs begin with it, which opened a new attempt). No version of {self.interval} "
            "is committed yet: clear the write task with 'Downstream' selected, or the whole run")

    def _write_finished(self, txn: TxnRef) -> bool:
        return self.storage.exists(self.storage.join(self.sink.staging_dir(txn), COUNTS))

    def undecided_output(self, txn: TxnRef) -> bool:
        """Has ``txn`` output that an abort now would throw away (undecided, and its write finished)?"""
        st = self.sink.status_of(self._own(txn))
        undecided = st.state in (State.OPEN, State.PRE_COMMITTED)
        return undecided and (st.manifest is not None or self._write_finished(txn))

    def renamed(self, txn: TxnRef) -> bool:
        """Was ``txn`` begun for another sink or pipeline than the configuration names now?"""
        return (txn.pipeline, txn.sink) != (self.config.pipeline, self.config.sink)

    def _renamed_message(self, txn: TxnRef, table: str | None = None) -> str:
        return (f"{txn.name} was begun for {txn.pipeline}/{txn.sink}, but the configuration now names "
                f"{self.config.pipeline}/{self.config.sink} (table {redact(self.config.table_url)}): the sink was "
                "renamed between attempts, and this attempt can never go on. Clear the whole run (begin with "
                "Downstream) to write the interval into the new sink; the teardown ends the old attempt, else "
                f"run: eo recover {redact(table) if table else '<old table-url>'} --stale-after 0")

    def abort(self, txn: TxnRef, *, table: str | None = None) -> str:
        """Teardown: end the transaction without leftovers (roll a decided commit forward instead).

        An attempt of a renamed sink is ended in the table it was begun in (``table``: begin's result),
        through that table's owner record; an undecided one is aborted there, a decided commit is left
        to ``eo recover <table>``. SinkRenamedError if that table is unknown or not the attempt's."""
        if self.renamed(txn):
            return self._abort_renamed(txn, table)
        state = self.sink.abort(self._own(txn), keep=self.config.keep_rejected)
        log.info("abort %s: %s%s", txn.name, state.value,
                 " (nothing to undo)" if state is State.COMMITTED else ", staging removed")
        return state.value

    def _abort_renamed(self, txn: TxnRef, table: str | None) -> str:
        from .transaction import TwoPhaseCommitSink  # noqa: PLC0415 - the sink the attempt was begun in

        old = TwoPhaseCommitSink.open(table, storage_options=self.options) if table else None
        if old is None or (old.pipeline, old.sink) != (txn.pipeline, txn.sink):
            raise SinkRenamedError(self._renamed_message(txn, table))
        st = old.status_of(txn)
        if st.state is State.COMMITTED:
            if not st.published:
                raise SinkRenamedError(self._renamed_message(txn, table))
            return st.state.value
        state = old.abort(txn, keep=self.config.keep_rejected, reason="the sink was renamed between attempts")
        log.warning("abort %s of the renamed sink %s/%s in %s: %s", txn.name, txn.pipeline, txn.sink, redact(table),
                    state.value)
        return state.value

    def abort_unhanded(self, run_id: str) -> list[str]:
        """Teardown when ``begin`` handed no transaction on: abort the interval's unfinished epochs that
        a ``begin`` of run ``run_id`` opened (recorded in their meta), never another run's."""
        done = []
        for epoch, st in self.sink.status(self.interval).items():
            began_by = (((st.records.get("open") or {}).get("meta") or {}).get("run") or {}).get("run_id")
            if began_by == run_id and st.state in (State.OPEN, State.PRE_COMMITTED):
                txn = self.sink.ref(self.interval, epoch)
                done.append(f"{txn.name}: {self.abort(txn)}")
        return done

    # ------------------------------------------------------------------ reports
    def late_files(self) -> dict[str, list[str]]:
        """Files that landed for this interval after its sources were frozen (all sources together)."""
        found = self.sink.committed(self.interval)
        if not found:
            return {"new": [], "changed": [], "missing": []}
        out = late_inputs(found[1], self.config.root, self.options, self._sources(), self.interval)
        if out["new"] or out["changed"]:
            log.warning("%d late and %d changed input files of %s are not in the committed version; reprocess "
                        "with: %s", len(out["new"]), len(out["changed"]), self.interval,
                        advice.reprocess(self.config.pipeline, redact(self.storage.url(self.sink.table)),
                                         self.interval.start.isoformat()))
        return out

    def stale_after(self) -> list[str]:
        """Later committed intervals whose input state differs from what this interval now commits
        (:func:`~exactly_once.protocol.ordering.stale_from`; none for a stateless pipeline). Returns tokens."""
        return stale_from(self.sink, self.interval) if self.config.stateful else []

    def _fingerprint(self, txn: TxnRef) -> str | None:
        """A content fingerprint of the staged keyed state: sha256 of its rows, sorted.

        Parquet bytes differ between two runs that wrote the same rows, so the rows are compared. The
        state is one row per key (small by nature); an unreadable state gives None (= unknown).
        """
        import pyarrow.parquet as pq

        state_dir = self.storage.join(self.sink.staging_dir(txn), STATE)
        rows: list[str] = []
        for entry in self.storage.walk_files(state_dir):
            if entry.rel.endswith(".parquet") and not entry.rel.rsplit("/", 1)[-1].startswith((".", "_")):
                with self.storage.open(self.storage.join(state_dir, entry.rel), "rb") as f:
                    rows += [json.dumps(r, sort_keys=True, default=str) for r in pq.read_table(f).to_pylist()]
        return hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest() if rows else None

    def _write_report(self, summary: dict[str, Any]) -> None:
        reports, root = storage_for(self.config.reports_url, **self.options)  # a fleet's may be on S3
        path = reports.join(root, "runs", self.config.pipeline, f"{summary['version']}.json")
        reports.makedirs(reports.join(root, "runs", self.config.pipeline))
        reports.write_atomic(path, json.dumps(summary, indent=2, sort_keys=True).encode())


def _refuse_aborted(txn: TxnRef, st: EpochStatus, newer: bool = False) -> None:
    """An aborted attempt (the teardown or a failed phase ended it; its staging is gone) never goes on.
    ``newer``: a newer attempt of the interval exists (it fenced or took over this one)."""
    if st.state is State.ABORTED:
        if newer or (st.reason or "").startswith("fenced"):  # a newer attempt (a rollback, a reprocess) owns it
            raise TransactionAbortedError(f"{txn.name} was aborted ({st.reason}); it can never commit. Nothing to "
                                          "do: the newer attempt decides the interval (see `eo history`); re-running "
                                          "the interval now would replace what it did")
        raise TransactionAbortedError(f"{txn.name} was aborted ({st.reason or 'no reason recorded'}); it can "
                                      "never commit - re-run the interval")

