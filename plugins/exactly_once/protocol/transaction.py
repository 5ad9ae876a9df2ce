"""The two-phase-commit sink: Flink's TwoPhaseCommitSinkFunction, for one batch output per interval.

One *transaction* publishes one sink's output for one data interval. Its states, each entered by an
exclusive-create record in the :mod:`transaction log <exactly_once.records.txlog>` before anything relies on it::

    OPEN --pre_commit--> PRE_COMMITTED --[validated]--> COMMITTED --(publish)--> published
      \\______________________\\______________________--> ABORTED

* ``begin``      recover the interval, allocate the next epoch, freeze the sources, make the staging dir.
* ``pre_commit`` list every staged file (size, rows, checksum) in a manifest and claim its partitions
                 for the interval; from here a commit never needs to recompute anything.
* ``validate``   (the gate, optional per sink) record the data-quality verdict; a sink that requires it
                 never commits a transaction without a passing verdict - not even during recovery.
* ``commit``     seal the staged files and check them against the manifest, then the *decision*: the
                 exclusive create of the ``outcome`` record. The *publish* that follows is done by the
                 sink's :mod:`target <exactly_once.targets>`, idempotently, and is rolled forward by
                 whoever comes next (a retry, ``abort``, ``recover``) - Flink's ``recoverAndCommit``.
* ``abort``      decide ABORTED, delete the staging dir; on a committed one: finish its publish. Idempotent.

Fencing: an epoch older than the newest begun epoch of its interval is refused before it decides, and only one
outcome record can exist per epoch, so of any number of concurrent attempts exactly one publishes. A stateful
transaction names the predecessor version it read (``reads``); before deciding, every transaction writes an
``intent`` record, then checks its predecessor (a newer committed or committing version there aborts it:
InputChangedError) and fences the successors that read an older version of it. Two deciders always see each
other's intent, so no interval ever commits on replaced state. A batch may chain a predecessor not committed
yet (``begin(reads_pending=True)``): it commits only after that one, and aborts if that one aborts. Internals
(log, staging, versions) live in ``home``, outside the table dir readers list; gc is in :mod:`exactly_once.ops`.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import liveness, ordering
from .decisions import (check_validated, claim_verdict, decide, gated, known_status, published_version, raise_aborted,
                        staged_refusal, validation_ok)
from ..records import manifest as manifests
from ..errors import (ConfigError, ExactlyOnceError, FencedError, InputChangedError, PredecessorPendingError,
                     StorageError, TargetSchemaError, TransactionAbortedError, TransactionStateError)
from ..failpoints import failpoint
from ..ids import Interval, TxnRef, check_name, check_partition
from ..records.manifest import Manifest
from ..records.ownership import PartitionClaims, bind_table, bound_target, owner_record
from ..storage import MANIFEST, Storage, default_home, storage_for, to_json
from .staging import retire_staging
from ..targets import target_for, target_from_binding
from ..targets.base import PublishTarget, refused_after_decision
from ..records.txlog import EpochStatus, State, TxLog

log = logging.getLogger(__name__)
Validator = Callable[[TxnRef, Manifest], tuple[bool, dict[str, Any]]]


@dataclass
class CommitResult:
    """What a commit did: per partition ``published`` / ``already`` / ``superseded``, and totals.
    ``extra["stale"]`` lists successor intervals that committed on this interval's older state."""

    txn: TxnRef
    partitions: dict[str, str]
    files: int
    rows: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    finished: bool = False  # this call wrote the publish's completion record: its one finisher, whatever raced it


class TwoPhaseCommitSink:
    """Exactly-once publication of one table (sink) of one pipeline.

    Layout: the table directory ``table`` holds only live data (``<partition>/``); everything else is
    under ``home`` (default :func:`default_home`)::

        _owner.json                   the pipeline this table belongs to, its table_format, owner id and target
        _claims/<partition>.json      the interval that owns each partition
        _txlog/<interval>/...         the transaction log
        _staging/<txn>/data/<partition>/...   what the writer produces (sealed/ once committing)
        _staging/<txn>/...            anything else the writer keeps (state, counts, quarantine)
        _checkpoints/<txn>/           that "anything else" once the transaction committed
        _versions/<partition>/<txn>/  published versions (local files target; Delta: <table>/<txn>/)
    """

    def __init__(self, storage: Storage, table: str, *, pipeline: str, sink: str, home: str | None = None,
                 target: PublishTarget | None = None, require_validation: bool = False,
                 checksums: bool = True, table_format: str = "files") -> None:
        self.storage = storage
        self.table = table
        self.pipeline = check_name(pipeline, "pipeline id")
        self.sink = check_name(sink, "sink name")
        self.home = home or default_home(table)
        self.table_format = table_format
        self.target = target or target_for(storage, table, self.home, table_format, self.pipeline, self.sink)
        self.require_validation, self.checksums = require_validation, checksums
        self.log = TxLog(storage, storage.join(self.home, "_txlog"))
        self._bound = False
        self._claims = PartitionClaims(storage, self.home)
        self._finished: list[CommitResult] = []  # publishes this handle finished (see take_finished)
        self.finisher: str | None = None  # who uses this handle (an Airflow task), recorded with a publish it finishes

    @classmethod
    def at(cls, url: str, *, pipeline: str, sink: str, storage_options: dict[str, Any] | None = None,
           **kwargs: Any) -> "TwoPhaseCommitSink":
        """The sink for the table at ``url`` (a local path, ``file://`` or ``s3://bucket/prefix``)."""
        storage, root = storage_for(url, **(storage_options or {}))
        return cls(storage, root, pipeline=pipeline, sink=sink, **kwargs)

    # ------------------------------------------------------------------ paths
    def ref(self, interval: Interval, epoch: int) -> TxnRef:
        return TxnRef(self.pipeline, self.sink, interval, epoch)

    def staging_dir(self, txn: TxnRef) -> str:
        """Where the writer of ``txn`` puts everything (in the table's data area for a Delta table)."""
        return self.target.staging_dir(txn) or self.storage.join(self.home, "_staging", txn.name)

    def data_dir(self, txn: TxnRef) -> str:
        """The writer's output root: one sub-directory per partition (``dt=.../``)."""
        return self.storage.join(self.staging_dir(txn), "data")

    def sealed_dir(self, txn: TxnRef) -> str:
        """Where the data is once the commit sealed it: renamed away from the writer's path (so a late
        writer cannot touch it) where storage can rename; the data dir itself on S3."""
        return self.storage.join(self.staging_dir(txn), "sealed") if self.storage.can_rename else self.data_dir(txn)

    def checkpoint_dir(self, txn: TxnRef) -> str:
        """Where the non-data staged files of ``txn`` live once it committed (its checkpoint)."""
        return self.storage.join(self.home, "_checkpoints", txn.name)

    def rejected_dir(self, txn: TxnRef) -> str:
        """Where an aborted transaction's staging is kept when ``abort(keep=True)``."""
        return self.storage.join(self.home, "_rejected", txn.name)

    # ------------------------------------------------------------------ phases
    def begin(self, interval: Interval, *, sources: Sequence[dict[str, Any]] = (),
              meta: dict[str, Any] | None = None, reads: TxnRef | None = None,
              reads_pending: bool = False) -> TxnRef:
        """Start a transaction for ``interval`` and return it.

        Contract: refuses a table bound to another pipeline (OwnershipError); recovers the interval
        (pre-committed transactions are committed, older open ones aborted); allocates an epoch strictly
        greater than every epoch the interval has had; durably records the frozen ``sources``, ``meta``
        and ``reads`` (the committed predecessor version whose state this transaction reads) with it;
        creates the staging dir. Every older attempt is fenced from then on. Safe to call concurrently.
        ``reads_pending``: ``reads`` may be undecided yet (a batch chains state); see :meth:`commit`.
        """
        self._bind()
        ordering.check_reads(self, reads, pending=reads_pending)
        self.recover(interval, abort_open=True)
        epoch = max(self.log.statuses(interval), default=0) + 1
        payload = {"pipeline": self.pipeline, "sink": self.sink, "sources": list(sources), "meta": meta or {},
                   "reads": reads.to_dict() if reads else None}
        while not self.log.append(interval, epoch, "open", payload):
            epoch += 1  # a concurrent begin took it; epochs stay unique and increasing
        txn = self.ref(interval, epoch)
        self.storage.makedirs(self.data_dir(txn))
        failpoint("begin.after")
        return txn

    def pre_commit(self, txn: TxnRef, *, extra: dict[str, Any] | None = None, gated: bool = False,
                   rows: Mapping[str, int] | None = None,
                   file_rows: Mapping[str, Mapping[str, int]] | None = None) -> Manifest:
        """Seal the staged output: list every file in a manifest and record PRE_COMMITTED.

        Contract: after it returns, the staged files are final (the writer must have closed them) and
        the manifest (path, size, rows, sha256 per file) is in the log, so a commit can always finish
        without recomputing. Every partition is claimed for the interval: a partition another interval
        owns is refused (OwnershipError), as are nested partitions, partitions of another shape than the
        table's, symlinks and unsafe names (the transaction stays OPEN; its teardown aborts it).
        ``gated``: a validator will run; nothing (recovery included) commits it without a passing verdict.
        ``rows``: the writer's rows per partition; on a gated sink a partition's only file's count (then gated).
        ``file_rows``: the writer's rows per data file of a partition, taken likewise (when they add up to ``rows``).
        Idempotent (a second call returns the recorded manifest); refused for an unknown, aborted or fenced one."""
        st = self.status_of(txn)
        if st.state is State.ABORTED:
            raise TransactionAbortedError(f"{txn.name} was aborted")
        if st.manifest is not None:
            return st.manifest
        if st.state is State.COMMITTED:
            raise TransactionStateError(f"{txn.name} was committed and superseded long ago (its manifest "
                                        "was compacted); nothing to pre-commit")
        self._refuse_if_fenced(txn)
        trusted = rows if gated or self.require_validation else None
        gated = gated or trusted is not None  # the counts are trusted: the log says gated, for any recoverer
        try:
            manifest = manifests.build(self.storage, txn, self.staging_dir(txn), ("data",), checksums=self.checksums,
                                       partition_rows=trusted, file_rows=file_rows if trusted is not None else None)
        except OSError as exc:  # FileNotFoundError & co: the staging vanished - an abort raced us?
            if self.status_of(txn).state is State.ABORTED:
                raise TransactionAbortedError(f"{txn.name} was aborted while pre-committing") from exc
            raise StorageError(f"{txn.name}: staged output changed during pre_commit: {exc}") from exc
        self._claims.claim(txn, list(manifest.partitions))
        self.storage.write_atomic(self.storage.join(self.staging_dir(txn), MANIFEST), to_json(manifest.to_dict()))
        extra = {**(extra or {}), "gated": True} if gated else extra
        self.log.append(txn.interval, txn.epoch, "pre_committed", {"manifest": manifest.to_dict(), **(extra or {})})
        failpoint("pre_commit.after")
        return self.status_of(txn).manifest or manifest

    def record_validation(self, txn: TxnRef, passed: bool, summary: dict[str, Any]) -> bool:
        """Record the gate's verdict on a pre-committed transaction; returns the recorded verdict.

        Contract: the first verdict recorded wins (a retried validation cannot flip it; recovery claims
        the verdict of an ungated transaction it commits unvalidated); a gated transaction (the sink's
        ``require_validation``, or ``pre_commit(gated=True)``) commits only after a passing verdict.
        """
        if self.status_of(txn).manifest is None:
            raise TransactionStateError(f"{txn.name}: validate needs pre_commit first")
        self.log.append(txn.interval, txn.epoch, "validated", {"passed": bool(passed), "summary": summary})
        recorded = bool((self.log.read(txn.interval, txn.epoch, "validated") or {}).get("passed"))
        if recorded != bool(passed):
            log.warning("%s: verdict %s not recorded; the log already holds %s", txn.name, passed, recorded)
        return recorded

    def commit(self, txn: TxnRef) -> CommitResult:
        """Decide COMMITTED and publish. Idempotent; a crash anywhere inside is finished by a retry.

        Contract: refused (TransactionStateError) before pre_commit or without a required passing
        validation; refused after aborting itself with FencedError if a newer epoch began, with
        StorageError if the staged files no longer match the manifest, with InputChangedError if the
        predecessor state it read was replaced or aborted; refused without deciding
        (PredecessorPendingError, retryable) while the predecessor it read is not decided yet (a chained
        batch). Once the outcome record says COMMITTED, every later call (or ``abort``/``recover``)
        completes the same publish and never publishes twice.
        """
        st = self.status_of(txn)
        self._bind()  # the target must be ours before deciding
        if st.state is State.OPEN:
            raise TransactionStateError(f"{txn.name}: commit needs pre_commit first")
        if st.state is State.ABORTED:
            raise TransactionAbortedError(f"{txn.name} was aborted ({st.reason or 'no reason recorded'}); "
                                          "it can never commit")
        stale: list[str] = []
        if st.state is State.PRE_COMMITTED:
            check_validated(txn, st, self.require_validation)
            newest = self._newest_epoch(txn.interval)
            decided = decide(self.log, txn, State.ABORTED, "fenced", f"fenced: epoch {newest} of the interval "
                             "began") if newest > txn.epoch else self._decide_commit(txn, st, stale)
            if decided is not State.COMMITTED:
                self._cleanup(txn)
                raise_aborted(self.log, txn)
        result = self._publish(txn)
        result.extra["stale"] = stale
        return result

    def abort(self, txn: TxnRef, *, keep: bool = False, reason: str = "aborted") -> State:
        """Make sure ``txn`` ends and leaves no temp files; returns its final state.

        Contract: decides ABORTED (recording ``reason``) unless the transaction is already COMMITTED -
        then it only finishes that commit's publish (roll forward) - and deletes the staging dir without
        following symlinks (or moves it to ``_rejected/`` when ``keep``). Idempotent; safe to run
        concurrently with a zombie attempt, which will find itself fenced.
        """
        self.status_of(txn)
        if decide(self.log, txn, State.ABORTED, "aborted", reason) is State.COMMITTED:
            if not self.status_of(txn).published:
                self._publish(txn)
            return State.COMMITTED
        self._cleanup(txn, keep=keep)
        return State.ABORTED

    @contextmanager
    def transaction(self, interval: Interval, *, sources: Sequence[dict[str, Any]] = (),
                    meta: dict[str, Any] | None = None, reads: TxnRef | None = None,
                    validate: Validator | None = None) -> Iterator[TxnRef]:
        """``with sink.transaction(iv) as txn: write under sink.data_dir(txn)`` - commit on success.

        On an exception in the body, in validation or in the commit, the transaction is aborted (or,
        if the commit was already decided, its publish is finished) and the exception propagates.
        """
        txn = self.begin(interval, sources=sources, meta=meta, reads=reads)
        try:
            yield txn
            manifest = self.pre_commit(txn, gated=validate is not None)
            if validate is not None:
                passed, summary = validate(txn, manifest)
                if not (self.record_validation(txn, passed, summary) and passed):
                    raise TransactionAbortedError(f"{txn.name} failed validation: {summary}")
            self.commit(txn)
        except BaseException:
            self.abort(txn, reason="the transaction's body, validation or commit failed")
            raise

    # ------------------------------------------------------------------ recovery
    def recover(self, interval: Interval | None = None, *, abort_open: bool = False,
                stale_after: float | None = None) -> list[str]:
        """Bring every transaction of ``interval`` (default: all) to a final state. Returns what it did.

        Contract (Flink's ``recoverAndCommit``/``recoverAndAbort``): a COMMITTED transaction whose
        publish did not finish is published; the newest epoch, if PRE_COMMITTED (and, if gated, with a
        passing verdict: a running validation is never overtaken), is committed without recomputing;
        older PRE_COMMITTED epochs and failed validations are aborted; OPEN epochs are aborted only with
        ``abort_open`` (``begin`` does that - it is about to fence them) or when stale (no heartbeat nor
        record for ``stale_after`` s of the storage clock: :func:`~exactly_once.protocol.liveness.is_stale`). A live
        version is never aborted. ABORTED leftovers are cleaned up. One broken interval never stops the
        others: a failure is reported as ``FAILED ...``.
        """
        actions: list[str] = []
        for iv in [interval] if interval else self.log.intervals():
            try:
                statuses = self.log.statuses(iv)
                newest = max(statuses, default=0)
                for epoch, st in statuses.items():
                    action = self._recover_one(self.ref(iv, epoch), st, newest, abort_open, stale_after)
                    if action:
                        actions.append(f"{self.ref(iv, epoch).name}: {action}")
            except (ExactlyOnceError, OSError) as exc:
                if interval is not None:
                    raise
                log.error("recover %s/%s %s failed: %s", self.pipeline, self.sink, iv, exc)
                actions.append(f"FAILED {iv.token}: {type(exc).__name__}: {exc}")
        return actions

    def _recover_one(self, txn: TxnRef, st: EpochStatus, newest: int, abort_open: bool,
                     stale_after: float | None) -> str | None:
        takeover = lambda: abort_open or liveness.is_stale(self, txn, st, stale_after)  # noqa: E731
        state = st.state
        if state is State.COMMITTED:
            if st.published:
                return None
            self._publish(txn)
            return "commit finished (rolled forward)"
        if state is State.PRE_COMMITTED:
            verdict = (st.validation or {}).get("passed")
            if self.is_live(st) or (txn.epoch == newest and validation_ok(st, self.require_validation)):
                try:
                    return "recovered and committed" if self._commit_recovered(txn, st) else "aborted (fenced)"
                except PredecessorPendingError:  # chained on a predecessor not decided yet: its batch goes on
                    if not takeover():
                        return None
                    self.abort(txn, reason="recovery: its predecessor is not committed; attempt taken over")
                    return "aborted (chained on a predecessor that is not committed)"
            if txn.epoch != newest or verdict is False or takeover():
                self.abort(txn, reason="recovery: pre-committed but superseded or not validated")
                return "aborted (pre-committed but superseded or not validated)"
            return None  # validation may still be running in a live attempt
        if state is State.OPEN:
            if takeover():
                self.abort(txn, reason="recovery: open attempt taken over")
                return "aborted (open, older attempt)"
            return None
        if self.storage.exists(self.staging_dir(txn)) or self.storage.exists(self.checkpoint_dir(txn)):
            self._cleanup(txn)
            return "cleaned up aborted leftovers"
        return None

    def _commit_recovered(self, txn: TxnRef, st: EpochStatus) -> bool:
        """Commit ``txn`` unless its outcome says otherwise, then finish; True if it is committed."""
        self._bind()  # the target must be ours before deciding (OwnershipError: nothing decided)
        if st.validation is None and not gated(st, self.require_validation):
            st = claim_verdict(self.log, txn)
            if not validation_ok(st, self.require_validation):
                self.abort(txn, reason="recovery: validation failed")
                return False
        decided = (decide(self.log, txn, State.COMMITTED, request=st.request) if self.is_live(st)
                   else self._decide_commit(txn, st, []))
        if decided is State.COMMITTED:
            self._publish(txn)
            return True
        self._cleanup(txn)
        return False

    # ------------------------------------------------------------------ queries
    @classmethod
    def open(cls, url: str, *, storage_options: dict[str, Any] | None = None, target_url: str | None = None,
             **kwargs: Any) -> "TwoPhaseCommitSink":
        """The existing table at ``url`` as its owner record binds it: pipeline, sink and target (for ``eo
        <cmd> <url>``, the UI; ``target_url``: a DB/Redis target's credentials). ConfigError if it has none."""
        storage, root = storage_for(url, **(storage_options or {}))
        home = kwargs.get("home") or default_home(root)
        owner = owner_record(storage, home)
        if owner is None:
            raise ConfigError(f"{storage.url(root)} is not an exactly-once table (no owner record in "
                              f"{storage.url(default_home(root))}); check the URL")
        kwargs.setdefault("table_format", owner["format"])  # as bound by the first writer
        if kwargs.get("target") is None:
            kwargs["target"] = target_from_binding(bound_target(storage, home, owner), target_url)
        return cls(storage, root, pipeline=owner["pipeline"], sink=owner["sink"], **kwargs)

    def intervals(self) -> list[Interval]:
        """Every interval the log knows, oldest first."""
        return self.log.intervals()

    def is_live(self, st: EpochStatus) -> bool:
        """True if the version of epoch status ``st`` is what readers see now."""
        manifest = st.manifest
        return bool(manifest) and self.target.is_live(manifest.txn, list(manifest.partitions))

    def status(self, interval: Interval) -> dict[int, EpochStatus]:
        """Every epoch of ``interval`` as the log records it."""
        return self.log.statuses(interval)

    def committed(self, interval: Interval) -> tuple[TxnRef, EpochStatus] | None:
        """The newest committed transaction of ``interval`` (the interval's current version), if any."""
        done = [(e, s) for e, s in self.log.statuses(interval).items() if s.state is State.COMMITTED]
        if not done:
            return None
        epoch, st = done[-1]
        return self.ref(interval, epoch), st

    def live_version(self, partition: str) -> str | None:
        """The transaction name whose version of ``partition`` readers see now, or None."""
        return self.target.live_version(check_partition(partition))

    def live_files(self, partition: str) -> list[str]:
        """The exact data files of the committed version of ``partition`` (for exact readers on S3)."""
        return self.target.live_files(check_partition(partition))

    # ------------------------------------------------------------------ internals
    def _bind(self) -> None:
        """Bind the table and the target's location to this owner (OwnershipError: another owner holds one)."""
        if not self._bound:
            owner = bind_table(self.storage, self.home, self.table, self.pipeline, self.sink, self.table_format,
                               self.target.binding(), self.target.claimed_by)
            self.target = self.target.claim(owner)
            self._bound = True

    def status_of(self, txn: TxnRef) -> EpochStatus:
        """``txn``'s status; TransactionStateError for another sink's or an unknown transaction."""
        return known_status(self.log, self.pipeline, self.sink, txn)

    def _newest_epoch(self, interval: Interval) -> int:
        return max(self.log.statuses(interval), default=0)

    def _refuse_if_fenced(self, txn: TxnRef) -> None:
        newest = self._newest_epoch(txn.interval)
        if newest > txn.epoch:
            self.abort(txn, reason=f"fenced: epoch {newest} of the interval began")
            raise FencedError(f"{txn.name} was fenced: epoch {newest} of {txn.interval} began after it")

    def _decide_commit(self, txn: TxnRef, st: EpochStatus, stale: list[str]) -> State:
        """Seal, verify and let the target check the staged files (:func:`.decisions.staged_refusal`),
        announce the intent, check the predecessor and fence the successors, then decide COMMITTED
        (unless someone decided first). Returns the decision."""
        manifest = st.manifest
        assert manifest is not None
        if refused := staged_refusal(self, txn, manifest):
            return decide(self.log, txn, State.ABORTED, *refused)
        self.log.append(txn.interval, txn.epoch, "intent", {})
        if st.reads is not None and (problem := ordering.read_problem(self, txn, st.reads)):
            return decide(self.log, txn, State.ABORTED, "input_changed", problem)
        stale += ordering.fence_successors(self, txn, partial(decide, self.log))
        return decide(self.log, txn, State.COMMITTED, stale=stale, request=st.request)

    def _publish(self, txn: TxnRef) -> CommitResult:
        """Roll the decided commit of ``txn`` forward to completion. Idempotent."""
        self._bind()
        statuses = self.log.statuses(txn.interval)
        if statuses[txn.epoch].published:  # finished (and maybe compacted by gc since): nothing to do
            rec = statuses[txn.epoch].records
            manifest = statuses[txn.epoch].manifest
            done = {p: "already" if r == "published" else r for p, r in rec["published"]["partitions"].items()}
            return CommitResult(txn, done, manifest.files if manifest else 0, manifest.rows if manifest else None)
        manifest = statuses[txn.epoch].manifest
        assert manifest is not None, f"{txn.name} is committed without a manifest"
        failpoint("commit.before_publish")
        try:
            results = self.target.publish(txn, published_version(self, txn, manifest, statuses))
        except (TargetSchemaError, ConfigError) as exc:  # the target changed since its check: the way out
            raise refused_after_decision(txn, self.target, self.storage.url(self.table), exc) from exc
        retire_staging(self, txn, manifest)
        failpoint("commit.after_publish")
        first = self.log.append(txn.interval, txn.epoch, "published",
                                {"partitions": results, **({"by": self.finisher} if self.finisher else {})})
        result = CommitResult(txn, results, manifest.files, manifest.rows, finished=first)
        if first:
            self._finished.append(result)
            failpoint("commit.after_record")
        return result

    def take_finished(self) -> list[CommitResult]:
        """The publishes this handle finished since the last call - by commit, abort or recover (a begin's
        included): those whose completion record it wrote. Exactly one handle finishes each publish, however
        many rolled it forward at once, so whoever announces these announces each version once."""
        out, self._finished = self._finished, []
        return out

    def _cleanup(self, txn: TxnRef, keep: bool = False) -> None:
        """Delete (or keep aside) an aborted transaction's files: data first, then the rest."""
        if keep:
            self.storage.move_tree(self.staging_dir(txn), self.rejected_dir(txn))
        self.storage.remove_tree(self.data_dir(txn))
        self.storage.remove_tree(self.sealed_dir(txn))
        failpoint("abort.mid")
        self.storage.remove_tree(self.staging_dir(txn))
        self.storage.remove_tree(self.checkpoint_dir(txn))
