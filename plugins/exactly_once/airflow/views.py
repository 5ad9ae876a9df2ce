"""What the plugin's pages show, assembled from the transaction logs (no HTML here; see ``pages``).

* :func:`table_page`   every interval of one table (filtered by state and date), its epochs, the
                       live version, stale intervals, late files and the ``recover`` dry run;
* :func:`run_page`     the transactions one Airflow DAG run began, with measured values and limits;
* :func:`version_page` one transaction (a version) of one table.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any

from .connections import storage_options
from ..errors import ExactlyOnceError
from ..ids import Interval, parse_txn_name
from ..ops.inspection import EpochView, IntervalView, interval_view, intervals
from ..ops.rollback import rollback_refusal
from ..ops.run_report import Measure, measures
from ..protocol.transaction import TwoPhaseCommitSink
from ..records.txlog import State
from ..quality.reports import version_page_url
from .chart import Point, point
from .runs import RunState
from .tables import TableRef

log = logging.getLogger(__name__)
CHART_MAX = 1000  # intervals the quality chart shows (the newest)
STATES = ("COMMITTED", "ABORTED", "PRE_COMMITTED", "OPEN")
ATTENTION = "attention"
MAX_ROWS = 500


@dataclass(frozen=True)
class Filters:
    """``state``: one of STATES, ``attention`` (anything an on-call engineer must look at) or "" (all);
    ``since``/``until``: interval start dates, inclusive."""

    state: str = ""
    since: date | None = None
    until: date | None = None
    limit: int = 100

    @classmethod
    def parse(cls, state: str | None, since: str | None, until: str | None, limit: int | None) -> "Filters":
        state = (state or "").strip()
        if state and state not in (*STATES, ATTENTION):
            raise ValueError(f"unknown state filter {state!r}: use one of {', '.join((*STATES, ATTENTION))}")
        return cls(state, _date(since, "since"), _date(until, "until"), max(1, min(int(limit or 100), MAX_ROWS)))

    def keeps(self, iv: Interval) -> bool:
        day = iv.start.date()
        return (self.since is None or day >= self.since) and (self.until is None or day <= self.until)


def _date(text: str | None, what: str) -> date | None:
    if not text:
        return None
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be a date YYYY-MM-DD, not {text!r}") from None


@dataclass(frozen=True)
class IntervalRow:
    view: IntervalView
    stale: bool = False
    late: dict[str, list[str]] | None = None   # None: not known (no landing declared)
    late_error: str = ""
    refusals: dict[int, str] = field(default_factory=dict)  # committed, not live: why a rollback to it is refused

    @property
    def needs_attention(self) -> bool:
        v = self.view
        late = self.late or {}
        return (self.stale or bool(v.recover) or v.live is None or bool(late.get("new") or late.get("changed")
                or late.get("missing")) or any(e.state.value in ("OPEN", "PRE_COMMITTED") for e in v.epochs))

    def matches(self, state: str) -> bool:
        if not state:
            return True
        if state == ATTENTION:
            return self.needs_attention
        return self.view.state == state or any(e.state.value == state for e in self.view.epochs)


@dataclass(frozen=True)
class TablePage:
    table: TableRef
    filters: Filters
    rows: list[IntervalRow]
    total: int
    stale: list[str] = field(default_factory=list)
    error: str = ""
    chart: list[Point] = field(default_factory=list)      # every interval (at most CHART_MAX), oldest first
    runs: list[RunState] = field(default_factory=list)    # Airflow's runs on the table (:func:`with_airflow`)
    paused: list[str] = field(default_factory=list)       # the DAGs its actions run in that are paused
    airflow_runs: frozenset[str] | None = None            # the epochs' run ids this Airflow knows (None: all)

    def runs_of(self, iv: Interval | None) -> list[RunState]:
        """The runs on interval ``iv`` (None: on the whole table), newest first."""
        at = iv.start if iv is not None else None
        return [r for r in self.runs if r.start == at]


def table_page(table: TableRef, filters: Filters) -> TablePage:
    """Every interval of ``table`` that passes ``filters``, newest first (at most ``filters.limit``)."""
    try:
        sink = table.handle()
        every = intervals(sink)
    except (ExactlyOnceError, OSError) as exc:
        return TablePage(table, filters, [], 0, error=f"cannot read the transaction log: {exc}")
    stale = _stale(table, sink, every)
    rows = []
    for iv in reversed([iv for iv in every if filters.keeps(iv)]):
        view = interval_view(sink, iv)
        row = _with_late(table, IntervalRow(view, stale=_is_stale(iv, stale), refusals=_refusals(sink, view)))
        if row.matches(filters.state):
            rows.append(row)
        if len(rows) >= filters.limit:
            break
    return TablePage(table, filters, rows, len(every), stale, chart=_chart(table, sink, every))


def _chart(table: TableRef, sink: TwoPhaseCommitSink, every: list[Interval]) -> list[Point]:
    """The quality chart's points: each interval's live version, else its newest attempt (oldest first)."""
    out = []
    for iv in every[-CHART_MAX:]:
        view = interval_view(sink, iv, with_recover=False)
        shown = view.live or (view.epochs[-1] if view.epochs else None)
        if shown is not None:
            out.append(point(iv, shown, version_page_url(table.pipeline, table.sink, shown.version)))
    return out


def with_airflow(page: TablePage) -> TablePage:
    """``page`` with what Airflow's metadata DB says: the runs acting on the table (a failed one that began
    no transaction is *refused*), the paused DAGs its actions run in, the epochs' runs it knows."""
    from dataclasses import replace

    from . import runs as airflow_runs
    from .actions import ROLLBACK_DAG

    if page.error:
        return page
    t = page.table
    epochs = [e for r in page.rows for e in r.view.epochs if e.run_id]
    began = {e.run_id for e in epochs}
    found = airflow_runs.with_outcome(airflow_runs.table_runs(t, ROLLBACK_DAG, intervals(t.handle())), began)
    shown = {r.view.interval.start for r in page.rows}
    found = [r for r in found if r.start is None or r.start in shown]
    known = {r.run_id for r in found}
    for dag_id in {e.run_dag or t.pipeline for e in epochs}:
        known |= airflow_runs.known_runs(dag_id, {e.run_id for e in epochs if (e.run_dag or t.pipeline) == dag_id})
    return replace(page, runs=found, paused=airflow_runs.paused((t.pipeline,)),
                   airflow_runs=frozenset(known))


def _refusals(sink: TwoPhaseCommitSink, view: IntervalView) -> dict[int, str]:
    """Why each earlier committed version of the interval cannot be rolled back to (the page offers
    only the rollbacks that would go ahead)."""
    if view.live is None:
        return {}
    out = {}
    for e in view.epochs:
        if e.state is State.COMMITTED and e.epoch != view.live.epoch:
            why = rollback_refusal(sink, view.interval, e.epoch)
            if why:
                out[e.epoch] = why
    return out


@dataclass(frozen=True)
class TableStatus:
    """One line of the tables index: what the log alone says (no recover dry run, no landing listing)."""

    table: TableRef
    intervals: int = 0
    stale: int = 0
    uncommitted: int = 0                 # no live version, or an attempt still open or pre-committed
    last_commit: EpochView | None = None
    error: str = ""

    @property
    def attention(self) -> int:
        """Intervals an on-call engineer must look at (stale or not committed; late files: see the table page)."""
        return self.stale + self.uncommitted


def table_status(table: TableRef) -> TableStatus:
    """The index line of ``table``: one status read per interval plus the stale check of the table page."""
    try:
        sink = table.handle()
        every = intervals(sink)
        stale = _stale(table, sink, every)
        uncommitted, last = 0, None
        for iv in every:
            view = interval_view(sink, iv, with_recover=False)
            if not _is_stale(iv, stale) and (view.live is None or any(e.state.value in ("OPEN", "PRE_COMMITTED")
                                                                      for e in view.epochs)):
                uncommitted += 1
            for e in view.epochs:
                if e.state.value == "COMMITTED" and (last is None or (e.ended_at or 0) > (last.ended_at or 0)):
                    last = e
        return TableStatus(table, len(every), len(stale), uncommitted, last)
    except (ExactlyOnceError, OSError) as exc:
        return TableStatus(table, error=f"cannot read the transaction log: {exc}")


def _is_stale(iv: Interval, stale: list[str]) -> bool:
    return iv.token in stale or iv.day in stale


def logged_intervals(table: TableRef) -> list[Interval]:
    """The intervals the table's log knows: the only ones an action may roll back or reprocess."""
    return intervals(table.handle())


def stale_of(table: TableRef) -> list[str]:
    """The stale intervals of ``table`` (tokens, oldest first): what the re-run action re-runs."""
    sink = table.handle()
    return _stale(table, sink, intervals(sink))


def _stale(table: TableRef, sink: Any, every: list[Interval]) -> list[str]:
    """Later intervals whose input state is no longer the committed state of their predecessor (from the
    log: what ``eo rollback`` and the rollback task print too)."""
    from ..ops.inspection import stale_intervals

    try:
        return stale_intervals(sink)
    except (ExactlyOnceError, OSError) as exc:
        log.warning("%s/%s: stale check failed: %s", table.pipeline, table.sink, exc)
        return []


def _with_late(table: TableRef, row: IntervalRow) -> IntervalRow:
    """Files that landed in the interval's source folder after its committed version froze them."""
    if table.config is None or row.view.live is None:
        return row
    from ..protocol.pipeline import IntervalRun

    try:
        late = IntervalRun(table.config, row.view.interval,
                           storage_options=storage_options(table.config.storage_conn_id)).late_files()
    except (ExactlyOnceError, OSError) as exc:
        return IntervalRow(row.view, row.stale, None, f"landing not readable: {exc}")
    return IntervalRow(row.view, row.stale, late)


@dataclass(frozen=True)
class VersionReport:
    """One transaction with its measures, in the table it belongs to."""

    table: TableRef
    interval: Interval
    epoch: EpochView
    live: EpochView | None
    measures: list[Measure]


def _report(table: TableRef, view: IntervalView, epoch: EpochView) -> VersionReport:
    suite = table.config.suite if table.config is not None else None
    return VersionReport(table, view.interval, epoch, view.live, measures(epoch, suite))


def version_page(table: TableRef, version: str) -> VersionReport | None:
    """The transaction named ``version`` (``<interval token>.e<epoch>``) of ``table``; None if unknown."""
    parsed = parse_txn_name(version)
    try:
        interval = Interval.from_token(parsed[0]) if parsed else None
    except ExactlyOnceError:   # well-formed but not an interval (reversed, empty)
        interval = None
    if interval is None:
        return None
    view = interval_view(table.handle(), interval, with_recover=False)
    epoch = next((e for e in view.epochs if e.epoch == parsed[1]), None)
    return _report(table, view, epoch) if epoch else None


@dataclass(frozen=True)
class RunPage:
    """What one Airflow DAG run did to each table of its pipeline."""

    dag_id: str
    run_id: str
    interval: Interval | None
    reports: list[VersionReport]
    untouched: list[TableRef]      # tables of the pipeline this run began no transaction in
    error: str = ""


def run_page(dag_id: str, run_id: str, tables: list[TableRef]) -> RunPage:
    """The transactions DAG run ``run_id`` began (found by the run id the begin task recorded)."""
    interval = _run_interval(dag_id, run_id)
    if interval is None:
        # unknown to Airflow (deleted, or never made): claim nothing about what it began
        return RunPage(dag_id, run_id, None, [], [], error="Airflow has no DAG run with this id and a data interval "
                       "(a deleted run, or a wrong link); the table pages list every version and the run that made it")
    reports, untouched = [], []
    for table in tables:
        try:
            view = interval_view(table.handle(), interval, with_recover=False)
        except (ExactlyOnceError, OSError) as exc:
            return RunPage(dag_id, run_id, interval, reports, untouched, error=f"{table.sink}: {exc}")
        mine = [e for e in view.epochs if e.run_id == run_id]
        reports += [_report(table, view, e) for e in mine]
        if not mine:
            untouched.append(table)
    return RunPage(dag_id, run_id, interval, reports, untouched)


def _run_interval(dag_id: str, run_id: str) -> Interval | None:
    """The data interval of a DAG run, from Airflow's metadata database."""
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.execute(select(DagRun.data_interval_start, DagRun.data_interval_end)
                              .where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).first()
    if row is None or row[0] is None or row[1] is None or not row[0] < row[1]:
        return None
    return Interval(_aware(row[0]), _aware(row[1]))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def page_json(page: TablePage) -> dict[str, Any]:
    """The table page as JSON (for scripts and tests): the same facts the HTML shows."""
    return {"pipeline": page.table.pipeline, "sink": page.table.sink, "location": page.table.describe(),
            "intervals_total": page.total, "stale": page.stale, "error": page.error or None,
            "intervals": [_row_json(r) for r in page.rows]}


def _row_json(row: IntervalRow) -> dict[str, Any]:
    v = row.view
    return {"interval": v.interval.token, "start": v.interval.start.isoformat(), "end": v.interval.end.isoformat(),
            "state": v.state, "live": v.live.version if v.live else None,
            "rows": v.live.rows if v.live else None, "files": v.live.files if v.live else None,
            "stale": row.stale, "late": row.late, "recover": list(v.recover),
            "epochs": [epoch_json(e) for e in v.epochs]}


def epoch_json(e: EpochView) -> dict[str, Any]:
    q = e.quality
    return {"epoch": e.epoch, "version": e.version, "state": e.state.value, "published": e.published,
            "reason": e.reason, "run_id": e.run_id, "rows": e.rows, "files": e.files, "passed": q.passed,
            "malformed_ratio": q.malformed_ratio, "max_malformed_ratio": q.max_malformed_ratio,
            "failures": list(q.failures), "counts": dict(q.counts)}
