"""The confirm step of a table page action: whether it may go ahead, and what it will do.

:func:`plan` applies, before anything is triggered, the rules the table page uses to offer actions - and
the confirm page (GET) and the trigger (POST) both call it, so an edited URL gets the same answer:

* a rollback names an interval of the log and a version of it that is committed, not live, and whose
  files and checkpoint are still there (``ops.rollback.rollback_refusal``);
* a plain reprocess is refused when input files the live version read are gone (it would be refused
  in its task): reprocess with allow shrinking instead, which drops them (the plan lists them);
* no action while a run on the same interval (or, for a recover, a recover of the table) is queued or
  running: it would do the work twice, and the later one would fence or replace the earlier's result.

It also says what will happen: the live and the target version, the later intervals that become (or may
become) stale, the files an allow-shrinking reprocess drops or a reprocess takes in, the attempts in
flight (open or pre-committed epochs, pending runs).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import ExactlyOnceError
from ..ids import Interval
from ..ops.inspection import EpochView, interval_view, intervals
from ..ops.rollback import rollback_refusal
from ..protocol.ordering import same_state, state_fingerprint
from ..records.txlog import State
from . import runs as airflow_runs
from .actions import Request
from .connections import storage_options

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What an action will do (see the module); ``refusal`` is why it may not, "" when it may."""

    refusal: str = ""
    live: str = ""                                   # "e2 (5 rows, 1 file)" or "" (nothing live)
    target: str = ""                                 # a rollback's version, or what a reprocess computes
    stale: list[str] = field(default_factory=list)   # interval labels that go stale
    stale_certain: bool = True                       # False: they go stale only if the new state differs
    dropped: list[str] = field(default_factory=list)   # input files the reprocess drops (allow shrinking)
    taken_in: list[str] = field(default_factory=list)  # new or changed input files it reads
    in_flight: list[str] = field(default_factory=list)  # open / pre-committed epochs, pending runs
    alternative: dict[str, str] = field(default_factory=dict)  # query of the action to offer instead


def _version(e: EpochView | None) -> str:
    if e is None:
        return ""
    rows = "?" if e.rows is None else e.rows
    files = "?" if e.files is None else e.files
    return f"{e.label} ({rows} rows, {files} file{'' if files == 1 else 's'})"


def _pending_refusal(pending: list[airflow_runs.RunState], what: str) -> str:
    r = pending[0]
    by = f" by {r.by}" if r.by else ""
    return (f"a {r.what}{by} of {what} is {r.state} (run {r.run_id} of {r.dag_id}): wait until it ends - its state "
            "is on the table page - then open the action again")


def plan(req: Request, runs: list[airflow_runs.RunState]) -> Plan:
    """The plan of ``req`` given the runs that act on its table (:func:`runs.table_runs`)."""
    t = req.table
    if req.action == "recover":
        busy = airflow_runs.pending(runs, None)
        return Plan(refusal=_pending_refusal(busy, f"{t.sink}") if busy else "",
                    in_flight=[f"run {r.run_id}: {r.what} ({r.state})" for r in airflow_runs.pending(runs, None)])
    if req.action == "unpause":
        return Plan()
    sink = t.handle()
    if req.action == "rerun-stale":
        for token in req.stale:
            busy = airflow_runs.pending(runs, Interval.from_token(token))
            if busy:
                return Plan(refusal=_pending_refusal(busy, f"the stale interval {Interval.from_token(token).label}"))
        return Plan(stale=[Interval.from_token(s).label for s in req.stale])
    iv = req.interval
    view = interval_view(sink, iv, with_recover=False)
    in_flight = [f"{e.label} {e.state.value} (run {e.run_id or '-'})" for e in view.epochs
                 if e.state in (State.OPEN, State.PRE_COMMITTED)]
    busy = airflow_runs.pending(runs, iv)
    in_flight += [f"run {r.run_id}: {r.what} ({r.state})" for r in busy]
    base = Plan(live=_version(view.live), in_flight=in_flight)
    # what can never go ahead first; then what must wait (a run on the interval is pending)
    planned = _rollback(req, sink, view, base) if req.action == "rollback" else _reprocess(req, sink, view, base)
    if busy and not planned.refusal:
        return _with(planned, refusal=_pending_refusal(busy, f"interval {iv.label}"))
    return planned


def _with(p: Plan, **changes: object) -> Plan:
    from dataclasses import replace

    return replace(p, **changes)


def _rollback(req: Request, sink, view, base: Plan) -> Plan:
    iv, epoch = req.interval, int(req.to_version[1:])
    target = next((e for e in view.epochs if e.epoch == epoch), None)
    if target is None:
        have = ", ".join(e.label for e in view.epochs) or "none"
        return _with(base, refusal=f"interval {iv.label} has no version {req.to_version} (its versions: {have}): "
                                   "pick one on the table page")
    if target.state is not State.COMMITTED:
        return _with(base, refusal=f"{req.to_version} of {iv.label} is {target.state.value}, not committed ("
                                   f"{target.reason or 'never published'}): only a committed version can be made "
                                   "live again")
    if view.live is not None and view.live.epoch == epoch:
        return _with(base, refusal=f"{req.to_version} is the live version of {iv.label} already: nothing to roll "
                                   "back")
    why = rollback_refusal(sink, iv, epoch)
    if why:
        return _with(base, refusal=why)
    statuses = sink.status(iv)
    now = state_fingerprint(statuses.get(view.live.epoch)) if view.live else None
    unchanged = same_state(state_fingerprint(statuses.get(epoch)), now)
    stale = [] if unchanged else _later(req, sink, iv)
    return _with(base, target=_version(target), stale=stale)


def _reprocess(req: Request, sink, view, base: Plan) -> Plan:
    t, iv = req.table, req.interval
    late: dict[str, list[str]] = {}
    if t.config is not None and view.live is not None:
        from ..protocol.pipeline import IntervalRun

        try:
            late = IntervalRun(t.config, iv, storage_options=storage_options(t.config.storage_conn_id)).late_files()
        except (ExactlyOnceError, OSError) as exc:
            log.warning("%s/%s %s: landing not readable: %s", t.pipeline, t.sink, iv, exc)
    missing = list(late.get("missing") or [])
    target = "a new version computed from the input files as they are now"
    plan_ = _with(base, target=target, stale=_later(req, sink, iv), stale_certain=False,
                  dropped=missing if req.allow_shrinking else [],
                  taken_in=list(late.get("new") or []) + list(late.get("changed") or []))
    if missing and not req.allow_shrinking:
        return _with(plan_, refusal=f"{len(missing)} input file(s) the live version read are gone from the landing "
                                    f"zone ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): a plain "
                                    "reprocess is refused so that their data is not dropped by mistake. Put them "
                                    "back, or reprocess with allow shrinking to drop them",
                     alternative={"interval": iv.token, "allow_shrinking": "1"})
    return plan_


def _later(req: Request, sink, iv: Interval) -> list[str]:
    """The committed intervals after ``iv`` in a row (a stateful table): each read its predecessor's state."""
    t = req.table
    if t.config is None or not t.config.stateful:
        return []
    every = {i.start: i for i in intervals(sink)}
    out, cur = [], iv
    while cur.end in every and sink.committed(every[cur.end]) is not None:
        cur = every[cur.end]
        out.append(cur.label)
    return out
