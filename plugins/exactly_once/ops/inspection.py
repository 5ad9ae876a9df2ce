"""What a table's transaction log says, for people: every interval, its epochs, the live version, and
what ``recover`` would do - computed from the log (and the live pointers) without changing anything.

Everything here reads; nothing writes. The views are plain frozen dataclasses, so the Airflow table
page, the per-run report, ``eo history`` and the run notes all show the same facts the same way.

* :func:`epoch_view`    one epoch: state, why it ended that way (which check failed, fenced by which
                        epoch, superseded by which version), rows, files, the write job's counts, the verdict;
* :func:`recover_plan`  the dry run of :meth:`TwoPhaseCommitSink.recover`: the same decisions, as text;
* :func:`interval_view` one interval: its epochs, the live (newest committed) version, the dry run;
* :func:`open_table`    a read-only handle on the table at a URL, pipeline and sink names taken from its log.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..protocol import liveness
from ..errors import ConfigError
from ..ids import Interval, parse_txn_name
from ..records.ownership import owner_record
from ..storage import redact
from ..protocol.transaction import TwoPhaseCommitSink
from ..records.txlog import EpochStatus, State

RECOVER_STALE_AFTER = 6 * 3600.0  # the default of ``eo recover --stale-after``


@dataclass(frozen=True)
class Quality:
    """The measured figures of one validation (``validated.summary``) and the write job's counts."""

    passed: bool | None
    counts: Mapping[str, Any] = field(default_factory=dict)
    malformed_ratio: float | None = None
    max_malformed_ratio: float | None = None
    gaps: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)  # the counts row the gate checked
    failures: tuple[str, ...] = ()
    reports: Mapping[str, str] = field(default_factory=dict)  # suite name -> local Data Docs page

    @property
    def headline(self) -> str:
        """``rejected_ratio 0.081 > 0.05`` when that is what failed, else the first failed check."""
        ratio, limit = self.malformed_ratio, self.max_malformed_ratio
        if ratio is not None and limit is not None and ratio > limit:
            return f"rejected_ratio {ratio:.3g} > {limit:.3g}"
        return self.failures[0] if self.failures else ("validation failed" if self.passed is False else "")


@dataclass(frozen=True)
class EpochView:
    """One epoch (attempt) of one interval, as the log records it."""

    epoch: int
    version: str                    # the transaction name: ``<interval token>.e000007``
    state: State
    published: bool
    started_at: float
    ended_at: float | None          # when the outcome was decided
    run_id: str | None              # the Airflow run that began it (``open.meta.run.run_id``)
    rows: int | None
    files: int | None
    quality: Quality
    reason: str                     # why it is in that state ("" for a plain live commit)
    run_dag: str | None = None      # the DAG of that run (``eo_rollback`` for a rollback)
    by: str | None = None           # who triggered that run (Airflow's triggering user)
    action: str = ""                # what was asked: "rollback to e2", "reprocess", "" for a scheduled run
    asked_reason: str = ""          # why, as the person who asked typed it at the table page's confirm step

    @property
    def label(self) -> str:
        return f"e{self.epoch}"


@dataclass(frozen=True)
class IntervalView:
    """One interval of one table: every epoch, the live version, and the dry run of ``recover``."""

    interval: Interval
    epochs: tuple[EpochView, ...]
    live: EpochView | None
    recover: tuple[str, ...]

    @property
    def state(self) -> str:
        """COMMITTED when a version is live, else the newest epoch's state."""
        if self.live is not None:
            return State.COMMITTED.value
        return self.epochs[-1].state.value if self.epochs else "EMPTY"


def quality_of(st: EpochStatus) -> Quality:
    """The counts (from ``pre_committed``) and verdict (from ``validated``) of one epoch."""
    counts = dict((st.records.get("pre_committed") or {}).get("counts") or {})
    rec = st.validation
    if rec is None:
        return Quality(passed=None, counts=counts)
    summary = rec.get("summary") or {}
    suites = summary.get("suites") or {}
    measured = dict(summary.get("measured") or {})
    return Quality(
        passed=bool(rec.get("passed")), counts=counts,
        malformed_ratio=_number(summary.get("rejected_ratio", summary.get("malformed_ratio"))),
        max_malformed_ratio=_number(summary.get("max_malformed_ratio")),
        gaps={k: v for k, v in sorted({**summary, **measured}.items()) if k.endswith("_gap")}, measured=measured,
        failures=tuple(str(f) for f in summary.get("failures") or ()),
        reports={name: s.get("report") for name, s in sorted(suites.items()) if s.get("report")})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _at(st: EpochStatus, kind: str) -> float | None:
    rec = st.records.get(kind)
    return float(rec["owner"]["at"]) if rec and "at" in (rec.get("owner") or {}) else None


def epoch_view(st: EpochStatus, statuses: Mapping[int, EpochStatus], version: str) -> EpochView:
    """Describe epoch ``st`` among all ``statuses`` of its interval (``version`` = its transaction name)."""
    manifest = st.manifest
    quality = quality_of(st)
    ended = _at(st, "outcome")
    meta = (st.records.get("open") or {}).get("meta") or {}
    run = meta.get("run") or {}
    action = str(run.get("action") or "")
    if meta.get("rollback_of"):
        parsed = parse_txn_name(str(meta["rollback_of"]))
        action = f"rollback to e{parsed[1]}" if parsed else f"rollback to {meta['rollback_of']}"
    return EpochView(epoch=st.epoch, version=version, state=st.state, published=st.published,
                     started_at=st.started_at, ended_at=ended, run_id=run.get("run_id"),
                     rows=manifest.rows if manifest else None, files=manifest.files if manifest else None,
                     quality=quality,
                     reason=_reason(st, statuses, quality, ended), run_dag=run.get("dag_id"), by=run.get("by"),
                     action=action, asked_reason=str(run.get("reason") or "") if action else "")


def _reason(st: EpochStatus, statuses: Mapping[int, EpochStatus], quality: Quality, ended: float | None) -> str:
    newer = [s for e, s in statuses.items() if e > st.epoch]
    if st.state is State.COMMITTED:
        later = sorted(s.epoch for s in newer if s.state is State.COMMITTED)
        if later:
            return f"superseded by e{later[0]}"  # the version that replaced it, not the newest
        return "" if st.published else "decided COMMITTED, publish not finished (recover rolls it forward)"
    if st.state is State.ABORTED:
        if quality.passed is False:
            return f"failed check: {quality.headline}"
        fencer = next((s for s in newer if _fenced_by(st, s, ended)), None)
        if fencer is not None:
            return f"fenced by e{fencer.epoch}"
        if st.reason and st.reason != "aborted":
            return st.reason
        if st.manifest is None:
            return "aborted before pre_commit (the write did not finish)"
        if quality.passed is None:
            return "aborted after pre_commit, before a verdict"
        return "aborted after passing validation, before commit"
    if newer:
        return f"fenced by e{newer[0].epoch} (can never commit)"
    if st.state is State.PRE_COMMITTED:
        return {None: "sealed, waiting for validation", True: "validated, waiting for commit",
                False: f"failed check: {quality.headline}"}[quality.passed]
    return "open: writing (or abandoned)"


def _fenced_by(st: EpochStatus, newer: EpochStatus, ended: float | None) -> bool:
    """Whether ``newer`` ended ``st``: it had begun before ``st``'s abort was decided (the zombie refused
    itself), or the abort was written by the very process that then began ``newer`` (begin recovers
    the interval and aborts older open attempts before it allocates its epoch)."""
    if ended is None or newer.started_at <= ended:
        return True
    decider = (st.records.get("outcome") or {}).get("owner") or {}
    beginner = (newer.records.get("open") or {}).get("owner") or {}
    return bool(decider) and all(decider.get(k) == beginner.get(k) for k in ("host", "pid"))


def recover_plan(statuses: Mapping[int, EpochStatus], *, require_validation: bool,
                 is_live: Callable[[EpochStatus], bool], has_leftovers: Callable[[EpochStatus], bool],
                 is_stale: Callable[[EpochStatus], bool] = lambda st: False) -> list[str]:
    """What ``recover(interval, stale_after=...)`` would do to these epochs, one line per action.

    The same decisions as :meth:`TwoPhaseCommitSink.recover` (without ``abort_open``): a decided
    commit whose publish did not finish is rolled forward; the newest pre-committed epoch (validated
    when required, never after a failing verdict) or any live one is committed; older pre-committed
    epochs and failed verdicts are aborted; open epochs are aborted only once stale; aborted epochs with
    files left are cleaned up. Pure: the callables answer the only storage questions (is this version
    live? are files left? is this attempt stale - :func:`exactly_once.protocol.liveness.is_stale`, the rule
    ``recover`` itself applies).
    """
    newest = max(statuses, default=0)
    plan = []
    for epoch, st in statuses.items():
        action = _recover_action(st, newest, require_validation, is_live, has_leftovers, is_stale)
        if action:
            plan.append(f"e{epoch}: {action}")
    return plan


def _recover_action(st: EpochStatus, newest: int, require_validation: bool,
                    is_live: Callable[[EpochStatus], bool], has_leftovers: Callable[[EpochStatus], bool],
                    is_stale: Callable[[EpochStatus], bool]) -> str | None:
    if st.state is State.COMMITTED:
        return None if st.published else "would finish the publish (roll forward, no recompute)"
    if st.state is State.PRE_COMMITTED:
        passed = (st.validation or {}).get("passed")
        verdict_ok = passed is not False and (not require_validation or passed is True)
        if is_live(st) or (st.epoch == newest and verdict_ok):
            return "would commit it (pre-committed" + (", validated)" if passed else ")")
        if st.epoch != newest or passed is False or is_stale(st):
            return "would abort it (pre-committed but superseded or not validated)"
        return None
    if st.state is State.OPEN:
        return "would abort it (open, no sign of life for longer than the stale limit)" if is_stale(st) else None
    return "would delete its leftover files" if has_leftovers(st) else None


def interval_view(sink: TwoPhaseCommitSink, interval: Interval, *, with_recover: bool = True,
                  stale_after: float | None = RECOVER_STALE_AFTER) -> IntervalView:
    """Every epoch of ``interval`` in ``sink``'s log, its live version and (optionally) the recover dry run."""
    statuses = sink.status(interval)
    epochs = tuple(epoch_view(st, statuses, sink.ref(interval, e).name) for e, st in statuses.items())
    live = next((v for v in reversed(epochs) if v.state is State.COMMITTED), None)
    plan: tuple[str, ...] = ()
    if with_recover:
        plan = tuple(recover_plan(statuses, require_validation=sink.require_validation,
                                  is_live=lambda st: _is_live(sink, interval, st),
                                  has_leftovers=lambda st: _has_leftovers(sink, interval, st),
                                  is_stale=lambda st: liveness.is_stale(sink, sink.ref(interval, st.epoch),
                                                                        st, stale_after)))
    return IntervalView(interval=interval, epochs=epochs, live=live, recover=plan)


def _is_live(sink: TwoPhaseCommitSink, interval: Interval, st: EpochStatus) -> bool:
    return sink.is_live(st)


def _has_leftovers(sink: TwoPhaseCommitSink, interval: Interval, st: EpochStatus) -> bool:
    txn = sink.ref(interval, st.epoch)
    return sink.storage.exists(sink.staging_dir(txn)) or sink.storage.exists(sink.checkpoint_dir(txn))


def intervals(sink: TwoPhaseCommitSink) -> list[Interval]:
    """Every interval the table's log knows, oldest first."""
    return sink.log.intervals()


def open_table(url: str, *, storage_options: dict[str, Any] | None = None) -> TwoPhaseCommitSink:
    """A handle on the table at ``url`` for reading its log; pipeline and sink names come from the log.

    Validation counts as required when any epoch of the log has a verdict (the log does not record the
    setting itself). Raises ConfigError when ``url`` holds no transaction log.
    """
    probe = TwoPhaseCommitSink.at(url, pipeline="eo-inspect", sink="eo-inspect",
                                  storage_options=dict(storage_options or {}))
    names, validated = None, False
    for iv in probe.log.intervals():
        for st in probe.status(iv).values():
            rec = st.records.get("open") or {}
            names = names or ((rec["pipeline"], rec["sink"]) if rec.get("pipeline") and rec.get("sink") else None)
            validated = validated or st.validation is not None
    if names is None:
        raise ConfigError(f"no transaction log at {redact(url)}: is this the URL of a table published by "
                          "exactly-once? (the table directory itself, e.g. <root>/warehouse/<sink>)")
    owner = owner_record(probe.storage, probe.home)  # the format the first writer bound (Delta: its versions)
    fmt = owner["format"] if owner else "files"
    return TwoPhaseCommitSink(probe.storage, probe.table, pipeline=names[0], sink=names[1],
                              require_validation=validated, table_format=fmt)


def stale_intervals(sink: TwoPhaseCommitSink) -> list[str]:
    """The table's stale intervals (tokens, oldest first), from its log alone: those after its first
    committed interval whose input state is no longer their predecessor's live state
    (:func:`~exactly_once.protocol.ordering.stale_from`) - what the table page lists and re-runs."""
    from ..protocol.ordering import stale_from

    first = next((iv for iv in sorted(sink.log.intervals()) if sink.committed(iv) is not None), None)
    return stale_from(sink, first) if first is not None else []
