"""The phases of one interval of one pipeline, as plain methods - what the Airflow tasks call.

:class:`IntervalRun` adds to the protocol what a *pipeline* needs: frozen, replayable source positions;
ordered, checkpointed state (interval n reads the state committed by n-1); the Spark job's spec; the
completeness gate; and, after a commit, a report of late files and of later intervals made stale.
Nothing here imports Airflow, so the same run can be driven by a test, the ``eo`` CLI or a DAG.
"""
from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Callable

from .config import PipelineConfig
from .errors import OrderingError, TransactionStateError, ValidationFailedError
from .failpoints import failpoint
from .ids import Interval, TxnRef, parse_txn_name
from .sources import late_files, list_positions
from .storage import storage_for, to_json
from .txlog import State

COUNTS = "_counts.json"
JOB_SPEC = "_job.json"
STATE = "_state"
Log = Callable[[str], None]


class IntervalRun:
    """One interval of one pipeline. Each public method is one Airflow task and is safe to retry."""

    def __init__(self, config: PipelineConfig, interval: Interval, *, log: Log = print) -> None:
        self.config = config
        self.interval = interval
        self.sink = config.sink_handle()
        self.storage = self.sink.storage
        self.log = log

    # ------------------------------------------------------------------ begin
    def begin(self, *, refresh_sources: bool = False, run: dict[str, Any] | None = None) -> dict[str, Any]:
        """Open a transaction: check ordering, freeze (or replay) the sources, write the job spec.

        Returns ``{"txn": ..., "spec": <job spec URL>, "inputs": n}`` for the next tasks (XCom).
        Raises OrderingError when a stateful interval's predecessor is not committed yet.
        """
        prev = self._previous_checkpoint()
        sources, replayed = self._sources(refresh_sources)
        txn = self.sink.begin(self.interval, sources=sources,
                              meta={"prev": prev.name if prev else None, "run": run or {},
                                    "refresh_sources": refresh_sources, "replayed": replayed})
        spec = {
            "pipeline": self.config.pipeline, "sink": self.config.sink, "txn": txn.name,
            "day": self.interval.day, "partition": f"dt={self.interval.day}", "inputs": sources,
            "prev_state": self.storage.url(self.storage.join(self.sink.checkpoint_dir(prev), STATE))
            if prev else None,
            "staging_dir": self.storage.url(self.sink.staging_dir(txn)), "spark_remote": None,
        }
        spec_path = self.storage.join(self.sink.staging_dir(txn), JOB_SPEC)
        self.storage.write_atomic(spec_path, to_json(spec))
        self.log(f"begin {txn.name}: {len(sources)} input files "
                 f"({'replayed' if replayed else 'frozen now'}), previous checkpoint {prev.name if prev else '-'}")
        return {"txn": txn.to_dict(), "spec": self.storage.url(spec_path), "inputs": len(sources)}

    def _previous_checkpoint(self) -> TxnRef | None:
        cfg = self.config
        if not cfg.stateful or (cfg.start is not None and self.interval.start.date() <= cfg.start):
            return None
        prev = self.interval.previous()
        self.sink.recover(prev)  # a lost acknowledgement there must not look like "not committed"
        found = self.sink.committed(prev)
        if found is None:
            raise OrderingError(
                f"{cfg.pipeline}: interval {self.interval.day} needs the state of {prev.day}, which is not "
                f"committed; run {prev.day} first (make run-interval DAG={cfg.pipeline} DATE={prev.day})")
        return found[0]

    def _sources(self, refresh: bool) -> tuple[list[dict[str, Any]], bool]:
        if not refresh:
            for st in reversed(list(self.sink.status(self.interval).values())):
                if "open" in st.records:
                    return st.records["open"]["sources"], True
        landing, root = storage_for(self.config.landing_url, **self.config.storage_options())
        return list_positions(landing, root, self.interval.day), False

    # ------------------------------------------------------------------ pre_commit
    def _own(self, txn: TxnRef) -> TxnRef:
        """``txn`` if it is a transaction of this run's interval (the sink checks pipeline and sink)."""
        if txn.interval != self.interval:
            raise TransactionStateError(f"{txn.name} is a transaction of {txn.interval}, not of this run's "
                                        f"interval {self.interval}")
        return txn

    def counts(self, txn: TxnRef) -> dict[str, Any]:
        """The counts the write job recorded (written last, so their presence means the job finished)."""
        self._own(txn)
        path = self.storage.join(self.sink.staging_dir(txn), COUNTS)
        try:
            return self.storage.read_json(path)
        except FileNotFoundError:
            status = self.sink.status(self.interval).get(txn.epoch)
            if status and status.manifest is not None:  # already pre-committed; counts are in the log
                return status.records["pre_committed"].get("counts", {})
            raise TransactionStateError(
                f"{txn.name}: the write job did not finish ({COUNTS} missing); retry the write") from None

    def pre_commit(self, txn: TxnRef) -> dict[str, Any]:
        """Seal the staged output (manifest in the log, with the write job's counts)."""
        counts = self.counts(txn)  # refuses a transaction of another interval
        manifest = self.sink.pre_commit(txn, extra={"counts": counts, "state_fingerprint": self._fingerprint(txn)})
        self.log(f"pre_commit {txn.name}: {manifest.files} files, {manifest.rows} rows sealed")
        return {"files": manifest.files, "rows": manifest.rows, "counts": counts}

    # ------------------------------------------------------------------ validate
    def validate(self, txn: TxnRef) -> dict[str, Any]:
        """Run the completeness / quality gate on the staged data; record the verdict in the log.

        Raises ValidationFailedError (one line per failed expectation) when it fails; the transaction
        can then never commit, and the teardown aborts it.
        """
        self._own(txn)
        if self.config.suite is None:
            return {"passed": True, "skipped": "no suite configured"}
        from .quality import validate_staged  # GX is heavy: imported only by the validate task

        spec = self.storage.read_json(self.storage.join(self.sink.staging_dir(txn), JOB_SPEC))
        outcome = validate_staged(
            suite_path=self.config.suite, staging_dir=self.storage.url(self.sink.staging_dir(txn)),
            partition=spec["partition"], counts=self.counts(txn), prev_state_dir=spec["prev_state"],
            report_root=f"{self.config.reports_url}/data_docs", run_name=f"{self.config.pipeline}.{txn.name}",
            max_malformed_ratio=self.config.max_malformed_ratio, storage_options=self.config.storage_options())
        passed = self.sink.record_validation(txn, outcome.passed, {
            "failures": outcome.failures, "report": outcome.report_path, **outcome.summary})
        failpoint("validate.after")
        result = {"passed": passed, "failures": outcome.failures, "report": outcome.report_path}
        if not passed:
            error = ValidationFailedError(f"{txn.name} failed the completeness check: "
                                          + "; ".join(outcome.failures or ["see report"]))
            error.report = outcome.report_path  # type: ignore[attr-defined]
            raise error
        self.log(f"validate {txn.name}: passed; report {outcome.report_path}")
        return result

    # ------------------------------------------------------------------ commit / abort
    def commit(self, txn: TxnRef) -> dict[str, Any]:
        """Publish; then report late files of this interval and later intervals made stale."""
        t0 = time.perf_counter()
        result = self.sink.commit(self._own(txn))
        summary = {"version": txn.name, "partitions": result.partitions, "files": result.files,
                   "rows": result.rows, "commit_seconds": round(time.perf_counter() - t0, 4),
                   "stale_intervals": self.stale_after(), "late_files": self.late_files()}
        self.log(f"commit {txn.name}: {result.partitions}, {result.rows} rows")
        if summary["stale_intervals"]:
            days = ", ".join(summary["stale_intervals"])
            self.log(f"WARNING: reprocessing {self.interval.day} made later checkpoints stale; re-run in "
                     f"order: {days}")
        self._write_report(summary)
        return summary

    def abort(self, txn: TxnRef) -> str:
        """Teardown: end the transaction without leftovers (roll a decided commit forward instead)."""
        state = self.sink.abort(self._own(txn), keep=self.config.keep_rejected)
        self.log(f"abort {txn.name}: {state.value}"
                 + (" (nothing to undo)" if state is State.COMMITTED else ", staging removed"))
        return state.value

    # ------------------------------------------------------------------ reports
    def late_files(self) -> dict[str, list[str]]:
        """Files that landed in this interval's folder after its sources were frozen."""
        found = self.sink.committed(self.interval)
        if not found:
            return {"new": [], "changed": [], "missing": []}
        frozen = found[1].records.get("open", {}).get("sources", [])
        landing, root = storage_for(self.config.landing_url, **self.config.storage_options())
        diff = late_files(frozen, list_positions(landing, root, self.interval.day))
        if diff["new"] or diff["changed"]:
            self.log(f"WARNING: {len(diff['new'])} late and {len(diff['changed'])} changed files in "
                     f"dt={self.interval.day} are not in the committed version; reprocess with: make "
                     f"run-interval DAG={self.config.pipeline} DATE={self.interval.day} REPROCESS=1")
        return diff

    def stale_after(self) -> list[str]:
        """Later committed intervals whose input state differs from what this interval now commits.

        Interval n+1 is stale when the state it read (the checkpoint of the version of n it ran after)
        is not byte-identical to the state of n's current version; everything after a stale interval
        is stale too. A re-run that reproduces the same state makes nothing stale.
        """
        if not self.config.stateful:
            return []
        stale: list[str] = []
        current = self.sink.committed(self.interval)
        for iv in (i for i in self.sink.log.intervals() if i > self.interval):
            found = self.sink.committed(iv)
            if not found or current is None:
                break
            used = found[1].records.get("open", {}).get("meta", {}).get("prev")
            if stale or (used != current[0].name and not _same(self._state_digest(used),
                                                               _fingerprint_of(current[1]))):
                stale.append(iv.day)
            current = found
        return stale

    def _state_digest(self, txn_name: str | None) -> str | None:
        parsed = parse_txn_name(txn_name or "")
        st = self.sink.status(Interval.from_token(parsed[0])).get(parsed[1]) if parsed else None
        return _fingerprint_of(st)

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
        reports, root = storage_for(self.config.reports_url, **self.config.storage_options())
        path = reports.join(root, "runs", self.config.pipeline, f"{summary['version']}.json")
        reports.makedirs(reports.join(root, "runs", self.config.pipeline))
        reports.write_atomic(path, json.dumps(summary, indent=2, sort_keys=True).encode())



def _fingerprint_of(st: Any) -> str | None:
    return (st.records.get("pre_committed") or {}).get("state_fingerprint") if st else None


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and a == b
