"""The two-phase-commit sink: Flink's TwoPhaseCommitSinkFunction, for one batch output per interval.

One *transaction* publishes one sink's output for one data interval. Its states, each entered by an
exclusive-create record in the :mod:`transaction log <exactly_once.txlog>` before anything relies on it::

    OPEN --pre_commit--> PRE_COMMITTED --[validated]--> COMMITTED --(publish)--> published
      \\______________________\\______________________--> ABORTED

* ``begin``      recover the interval, allocate the next epoch, freeze the sources, make the staging dir.
* ``pre_commit`` list every staged file (size, rows, checksum) in a manifest; from here a commit never
                 needs to recompute anything.
* ``validate``   (the gate, optional per sink) record the data-quality verdict; a sink that requires it
                 never commits a transaction without a passing verdict - not even during recovery.
* ``commit``     the *decision* is the exclusive create of the ``outcome`` record; the *publish* that
                 follows is idempotent and is rolled forward by whoever comes next (a retry, ``abort``,
                 ``recover``) - Flink's ``recoverAndCommit``.
* ``abort``      decide ABORTED and delete the staging dir; a no-op on a committed transaction (it
                 finishes its publish instead); idempotent; never follows symlinks.

Fencing: an epoch older than the newest begun epoch of its interval is refused before it decides, and
only one outcome record can exist per epoch, so of any number of concurrent attempts exactly one
publishes. Garbage collection lives in :mod:`exactly_once.maintenance`.
"""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .errors import FencedError, StorageError, TransactionAbortedError, TransactionStateError
from .failpoints import failpoint
from .ids import Interval, TxnRef, check_name, check_partition
from .storage import MANIFEST, Storage, is_hidden, storage_for, to_json
from .txlog import EpochStatus, State, TxLog

MANIFEST_THREADS = 8  # concurrent file reads while building a manifest (checksums, parquet footers)
Validator = Callable[[TxnRef, dict[str, Any]], tuple[bool, dict[str, Any]]]


@dataclass
class CommitResult:
    """What a commit did: per partition ``published`` / ``already`` / ``superseded``, and totals."""

    txn: TxnRef
    partitions: dict[str, str]
    files: int
    rows: int | None
    extra: dict[str, Any] = field(default_factory=dict)


class TwoPhaseCommitSink:
    """Exactly-once publication of one table (sink) of one pipeline.

    Layout under the table directory ``table`` (all ``_``-prefixed, so invisible to plain readers)::

        <partition>/                 the live data (locally a symlink into _versions/)
        _staging/<txn>/data/<partition>/...   what the writer produces
        _staging/<txn>/...           anything else the writer keeps (state, counts, quarantine)
        _checkpoints/<txn>/          that "anything else" once the transaction committed
        _versions/<partition>/<txn>/ published versions (local filesystem only)
        _txlog/<interval>/...        the transaction log
    """

    def __init__(self, storage: Storage, table: str, *, pipeline: str, sink: str,
                 require_validation: bool = False, checksums: bool = True) -> None:
        self.storage = storage
        self.table = table
        self.pipeline = check_name(pipeline, "pipeline id")
        self.sink = check_name(sink, "sink name")
        self.require_validation = require_validation
        self.checksums = checksums
        self.log = TxLog(storage, storage.join(table, "_txlog"))

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
        """Where the writer of ``txn`` puts everything; hidden from readers by the ``_`` prefix."""
        return self.storage.join(self.table, "_staging", txn.name)

    def data_dir(self, txn: TxnRef) -> str:
        """The writer's output root: one sub-directory per partition (``dt=.../``)."""
        return self.storage.join(self.staging_dir(txn), "data")

    def checkpoint_dir(self, txn: TxnRef) -> str:
        """Where the non-data staged files of ``txn`` live once it committed (its checkpoint)."""
        return self.storage.join(self.table, "_checkpoints", txn.name)

    def rejected_dir(self, txn: TxnRef) -> str:
        """Where an aborted transaction's staging is kept when ``abort(keep=True)``."""
        return self.storage.join(self.table, "_rejected", txn.name)

    # ------------------------------------------------------------------ phases
    def begin(self, interval: Interval, *, sources: Sequence[dict[str, Any]] = (),
              meta: dict[str, Any] | None = None) -> TxnRef:
        """Start a transaction for ``interval`` and return it.

        Contract: first recovers the interval (pre-committed transactions are committed, older open
        ones aborted), then allocates an epoch strictly greater than every epoch the interval has had,
        durably records the frozen ``sources`` and ``meta`` with it, and creates the staging dir. Every
        older attempt is fenced from then on. Safe to call concurrently: each caller gets its own epoch.
        """
        self.recover(interval, abort_open=True)
        epoch = max(self.log.statuses(interval), default=0) + 1
        payload = {"pipeline": self.pipeline, "sink": self.sink, "sources": list(sources), "meta": meta or {}}
        while not self.log.append(interval, epoch, "open", payload):
            epoch += 1  # a concurrent begin took it; epochs stay unique and increasing
        txn = self.ref(interval, epoch)
        self.storage.makedirs(self.data_dir(txn))
        failpoint("begin.after")
        return txn

    def pre_commit(self, txn: TxnRef, *, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Seal the staged output: list every file in a manifest and record PRE_COMMITTED.

        Contract: after it returns, the staged files are final (the writer must have closed them) and
        the manifest (path, size, rows, sha256 per file) is in the log, so a commit can always finish
        without recomputing. Idempotent: a second call returns the recorded manifest. Refused for an
        aborted or fenced transaction, and for staged output containing symlinks or unsafe partitions.
        """
        st = self._status(txn)
        if st.state is State.ABORTED:
            raise TransactionAbortedError(f"{txn.name} was aborted")
        if st.manifest is not None:
            return st.manifest
        self._refuse_if_fenced(txn)
        try:
            manifest = self._build_manifest(txn)
        except OSError as exc:  # FileNotFoundError & co: the staging vanished - an abort raced us?
            if self._status(txn).state is State.ABORTED:
                raise TransactionAbortedError(f"{txn.name} was aborted while pre-committing") from exc
            raise StorageError(f"{txn.name}: staged output changed during pre_commit: {exc}") from exc
        self.storage.write_atomic(self.storage.join(self.staging_dir(txn), MANIFEST), to_json(manifest))
        self.log.append(txn.interval, txn.epoch, "pre_committed", {"manifest": manifest, **(extra or {})})
        failpoint("pre_commit.after")
        return self._status(txn).manifest or manifest

    def record_validation(self, txn: TxnRef, passed: bool, summary: dict[str, Any]) -> bool:
        """Record the gate's verdict on a pre-committed transaction; returns the recorded verdict.

        Contract: the first verdict recorded wins (a retried validation cannot flip it); a transaction
        of a sink with ``require_validation`` commits only after a passing verdict.
        """
        if self._status(txn).manifest is None:
            raise TransactionStateError(f"{txn.name}: validate needs pre_commit first")
        self.log.append(txn.interval, txn.epoch, "validated", {"passed": bool(passed), "summary": summary})
        rec = self.log.read(txn.interval, txn.epoch, "validated") or {}
        return bool(rec.get("passed"))

    def commit(self, txn: TxnRef) -> CommitResult:
        """Decide COMMITTED and publish. Idempotent; a crash anywhere inside is finished by a retry.

        Contract: refused (TransactionStateError) before pre_commit or without a required passing
        validation; refused (FencedError, after aborting itself) if a newer epoch began; once the outcome
        record says COMMITTED, every later call (or ``abort``/``recover``) completes the same publish
        and never publishes twice. Returns what was published.
        """
        st = self._status(txn)
        if st.state is State.OPEN:
            raise TransactionStateError(f"{txn.name}: commit needs pre_commit first")
        if st.state is State.PRE_COMMITTED:
            self._check_validated(txn, st)
            if self._newest_epoch(txn.interval) > txn.epoch:
                self._decide(txn, State.ABORTED)  # fenced - unless someone already committed it for us
            if self._decide(txn, State.COMMITTED) is not State.COMMITTED:
                self._cleanup(txn)
                raise FencedError(f"{txn.name} was fenced: a newer attempt of {txn.interval} began")
        elif st.state is State.ABORTED:
            raise TransactionAbortedError(f"{txn.name} was aborted; it can never commit")
        return self._publish(txn)

    def abort(self, txn: TxnRef, *, keep: bool = False) -> State:
        """Make sure ``txn`` ends and leaves no temp files; returns its final state.

        Contract: decides ABORTED unless the transaction is already COMMITTED - then it only finishes
        that commit's publish (roll forward) - and deletes the staging dir without following symlinks
        (or moves it to ``_rejected/`` when ``keep``). Idempotent; safe to run concurrently with a
        zombie attempt, which will find itself fenced.
        """
        if not self._status(txn).records:
            raise TransactionStateError(f"{txn.name}: no such transaction in the log")
        if self._decide(txn, State.ABORTED) is State.COMMITTED:
            if not self._status(txn).published:
                self._publish(txn)
            return State.COMMITTED
        self._cleanup(txn, keep=keep)
        return State.ABORTED

    @contextmanager
    def transaction(self, interval: Interval, *, sources: Sequence[dict[str, Any]] = (),
                    meta: dict[str, Any] | None = None,
                    validate: Validator | None = None) -> Iterator[TxnRef]:
        """``with sink.transaction(iv) as txn: write under sink.data_dir(txn)`` - commit on success.

        On an exception in the body, in validation or in the commit, the transaction is aborted (or,
        if the commit was already decided, its publish is finished) and the exception propagates.
        """
        txn = self.begin(interval, sources=sources, meta=meta)
        try:
            yield txn
            manifest = self.pre_commit(txn)
            if validate is not None:
                passed, summary = validate(txn, manifest)
                if not self.record_validation(txn, passed, summary):
                    raise TransactionAbortedError(f"{txn.name} failed validation: {summary}")
            self.commit(txn)
        except BaseException:
            self.abort(txn)
            raise

    # ------------------------------------------------------------------ recovery
    def recover(self, interval: Interval | None = None, *, abort_open: bool = False,
                stale_after: float | None = None) -> list[str]:
        """Bring every transaction of ``interval`` (default: all) to a final state. Returns what it did.

        Contract (Flink's ``recoverAndCommit``/``recoverAndAbort``): a COMMITTED transaction whose
        publish did not finish is published; the newest epoch, if PRE_COMMITTED (and validated when
        required), is committed without recomputing; older PRE_COMMITTED epochs and failed validations
        are aborted; OPEN epochs are aborted only with ``abort_open`` (``begin`` does that - it is about
        to fence them) or when older than ``stale_after`` seconds. Before aborting anything it checks the
        target: a version that is live is never aborted. ABORTED leftovers are cleaned up.
        """
        actions: list[str] = []
        for iv in [interval] if interval else self.log.intervals():
            statuses = self.log.statuses(iv)
            newest = max(statuses, default=0)
            for epoch, st in statuses.items():
                txn = self.ref(iv, epoch)
                action = self._recover_one(txn, st, newest, abort_open, stale_after)
                if action:
                    actions.append(f"{txn.name}: {action}")
        return actions

    def _recover_one(self, txn: TxnRef, st: EpochStatus, newest: int, abort_open: bool,
                     stale_after: float | None) -> str | None:
        takeover = abort_open or (stale_after is not None and time.time() - st.started_at > stale_after)
        state = st.state
        if state is State.COMMITTED:
            if st.published:
                return None
            self._publish(txn)
            return "commit finished (rolled forward)"
        if state is State.PRE_COMMITTED:
            verdict = (st.validation or {}).get("passed")
            if self._is_live(txn, st) or (txn.epoch == newest and self._validation_ok(st)):
                # recoverAndCommit; a live version with no outcome record can only be a commit
                return "recovered and committed" if self._commit_recovered(txn) else "aborted (fenced)"
            if txn.epoch != newest or verdict is False or takeover:
                self.abort(txn)
                return "aborted (pre-committed but superseded or not validated)"
            return None  # validation may still be running in a live attempt
        if state is State.OPEN:
            if takeover:
                self.abort(txn)
                return "aborted (open, older attempt)"
            return None
        if self.storage.exists(self.staging_dir(txn)) or self.storage.exists(self.checkpoint_dir(txn)):
            self._cleanup(txn)
            return "cleaned up aborted leftovers"
        return None

    def _commit_recovered(self, txn: TxnRef) -> bool:
        """Commit ``txn`` unless its outcome says otherwise, then finish; True if it is committed."""
        if self._decide(txn, State.COMMITTED) is State.COMMITTED:
            self._publish(txn)
            return True
        self._cleanup(txn)
        return False

    # ------------------------------------------------------------------ queries
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

    def live_files(self, partition: str) -> list[str]:
        """The exact data files of the committed version of ``partition`` (for exact readers on S3)."""
        return self.storage.live_files(self.table, check_partition(partition))

    # ------------------------------------------------------------------ internals
    def _status(self, txn: TxnRef) -> EpochStatus:
        self._check_mine(txn)
        return self.log.status(txn.interval, txn.epoch)

    def _check_mine(self, txn: TxnRef) -> None:
        if (txn.pipeline, txn.sink) != (self.pipeline, self.sink):
            raise TransactionStateError(f"{txn.name} belongs to {txn.pipeline}/{txn.sink}, not this sink")

    def _newest_epoch(self, interval: Interval) -> int:
        return max(self.log.statuses(interval), default=0)

    def _refuse_if_fenced(self, txn: TxnRef) -> None:
        newest = self._newest_epoch(txn.interval)
        if newest > txn.epoch:
            self.abort(txn)
            raise FencedError(f"{txn.name} was fenced: epoch {newest} of {txn.interval} began after it")

    def _decide(self, txn: TxnRef, state: State) -> State:
        """Create the outcome record (the linearization point) unless it exists; return the decision."""
        self.log.append(txn.interval, txn.epoch, "outcome", {"state": state.value})
        rec = self.log.read(txn.interval, txn.epoch, "outcome")
        return State(rec["state"]) if rec else state

    def _validation_ok(self, st: EpochStatus) -> bool:
        passed = (st.validation or {}).get("passed")
        if passed is False:  # a recorded failing verdict blocks the commit, required gate or not
            return False
        return not self.require_validation or passed is True

    def _check_validated(self, txn: TxnRef, st: EpochStatus) -> None:
        if not self._validation_ok(st):
            verdict = "failed" if st.validation else "has not run"
            raise TransactionStateError(f"{txn.name}: commit refused, validation {verdict}")

    def _is_live(self, txn: TxnRef, st: EpochStatus) -> bool:
        parts = (st.manifest or {}).get("partitions", {})
        return any(self.storage.live_version(self.table, p) == txn.name for p in parts)

    def _build_manifest(self, txn: TxnRef) -> dict[str, Any]:
        staging = self.staging_dir(txn)
        todo: list[tuple[str | None, str, str, int]] = []  # (partition or None for extras, path, name, size)
        for entry in self.storage.walk_files(staging):  # refuses symlinks
            top, _, rest = entry.rel.partition("/")
            if top == "data":
                part, _, name = rest.rpartition("/")
                if any(is_hidden(seg) for seg in rest.split("/")):
                    continue  # _SUCCESS, .crc and committer temp files are never published
                if not part:
                    raise StorageError(f"{txn.name}: data file {rest!r} is not inside a partition dir")
                todo.append((check_partition(part), self.storage.join(staging, entry.rel), name, entry.size))
            elif entry.rel != MANIFEST:
                todo.append((None, self.storage.join(staging, entry.rel), entry.rel, entry.size))
        # Reading every byte (sha256) and every parquet footer is I/O plus hashing that releases the GIL:
        # a few threads make it ~N times faster on a multi-core machine and on S3 (one request per read).
        if any(t[2].endswith(".parquet") for t in todo):
            import pyarrow.parquet  # noqa: F401 - imported once here, not concurrently by the workers

        with ThreadPoolExecutor(max_workers=max(1, min(MANIFEST_THREADS, len(todo)))) as pool:
            described = list(pool.map(lambda t: self._describe(t[1], t[2], t[3]), todo))
        partitions: dict[str, list[dict[str, Any]]] = {}
        extras = []
        for (part, *_), desc in zip(todo, described):
            if part is None:
                extras.append(desc)
            else:
                partitions.setdefault(part, []).append(desc)
        rows = [f["rows"] for fs in partitions.values() for f in fs]
        return {"txn": txn.to_dict(), "version": txn.name, "partitions": partitions, "extras": extras,
                "files": len(rows), "rows": None if None in rows else sum(rows)}

    def _describe(self, path: str, name: str, size: int) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name, "size": size, "rows": None, "sha256": None}
        if self.checksums:
            digest = hashlib.sha256()
            with self.storage.open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            out["sha256"] = digest.hexdigest()
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            with self.storage.open(path, "rb") as f:
                out["rows"] = pq.ParquetFile(f).metadata.num_rows
        return out

    def _publish(self, txn: TxnRef) -> CommitResult:
        """Roll the decided commit of ``txn`` forward to completion. Idempotent."""
        st = self._status(txn)
        manifest = st.manifest or {}
        failpoint("commit.before_publish")
        results = {}
        parts = dict(manifest.get("partitions", {}))
        for epoch, other in self.log.statuses(txn.interval).items():
            if epoch < txn.epoch and other.state is State.COMMITTED:
                for part in (other.manifest or {}).get("partitions", {}):
                    parts.setdefault(part, [])  # no longer produced: publish an empty version of it
        for part, files in parts.items():
            staged = self.storage.join(self.data_dir(txn), part)
            results[part] = self.storage.publish_partition(staged, self.table, part, txn.name, files,
                                                           failpoint)
        self.storage.remove_tree(self.data_dir(txn))
        self.storage.move_tree(self.staging_dir(txn), self.checkpoint_dir(txn))
        failpoint("commit.after_publish")
        self.log.append(txn.interval, txn.epoch, "published", {"partitions": results})
        return CommitResult(txn, results, manifest.get("files", 0), manifest.get("rows"))

    def _cleanup(self, txn: TxnRef, keep: bool = False) -> None:
        """Delete (or keep aside) an aborted transaction's files: data first, then the rest."""
        if keep:
            self.storage.move_tree(self.staging_dir(txn), self.rejected_dir(txn))
        self.storage.remove_tree(self.data_dir(txn))
        failpoint("abort.mid")
        self.storage.remove_tree(self.staging_dir(txn))
        self.storage.remove_tree(self.checkpoint_dir(txn))
