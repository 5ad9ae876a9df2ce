"""The logical date of a manual run that the table page or ``eo reprocess`` starts for a data interval.

Airflow keeps one run per (DAG, logical date), and it creates a task of a manual run only if the run's date lies
within the task's ``start_date`` and ``end_date`` (``DagRun.verify_integrity``). Tasks inherit the DAG's dates;
``default_args`` and a task's own arguments narrow them. A run dated after the end of the tasks it needs gets
no task, so it ends at once, successfully, having done nothing; one that misses a task upstream of the group
does not run the group as its DAG defines it. The run's date is therefore chosen within the dates of the tasks
an exactly-once group needs: its phase tasks and every task upstream of them (:class:`RunDates`). Other tasks
of the DAG do not count: a task retired with an ``end_date`` of its own blocks nothing, and neither does another
table's group in the same DAG (where the DAG says which group is the table's: on the table page).
"""
from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable, NamedTuple

from ..errors import ConfigError
from ..ids import Interval

PHASES = frozenset({"BeginOperator", "WriteOperator", "PreCommitOperator", "ValidateOperator", "CommitOperator",
                    "AbortOperator"})
_US, _MINUTE = timedelta(microseconds=1), timedelta(minutes=1)


class TaskDates(NamedTuple):
    """One task of a DAG as far as run dates go: its id, class name, upstream task ids and dates, and the tables
    (``<pipeline>/<sink>``) it announces (its ``exactly_once:`` AssetAlias outlets: a group's commit and abort)."""

    task_id: str
    kind: str
    upstream: frozenset[str]
    start: datetime | None
    end: datetime | None
    tables: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RunDates:
    """The dates a manual run must lie between to get every task an exactly-once group needs, and which task
    set each bound (for the error: "task x", "tasks x, y"). None: no bound."""

    earliest: datetime | None = None
    latest: datetime | None = None
    start_by: str = ""
    end_by: str = ""

    @classmethod
    def of(cls, tasks: Iterable[TaskDates], table: str | None = None) -> "RunDates":
        """From the DAG's tasks: the phase tasks of ``table``'s group (``<pipeline>/<sink>``: the group of the
        task that announces it) and everything upstream of them. Where no task says (the REST API shows no
        outlets), the phase tasks of every group count: a bound too many, never a group's task missed. A DAG
        without a begin task of ours (a subclassed one, an unknown layout) counts every task."""
        every = {t.task_id: t for t in tasks}
        need = [t for t in every.values() if t.kind in PHASES]
        group = next((t.task_id[:t.task_id.rfind(".") + 1] for t in need if table and table in t.tables), None)
        if group is not None:
            need = [t for t in need if t.task_id.startswith(group) and "." not in t.task_id[len(group):]]
        if not any(t.kind == "BeginOperator" for t in need):
            need = list(every.values())
        seen: dict[str, TaskDates] = {}
        while need:
            task = need.pop()
            if task.task_id not in seen:
                seen[task.task_id] = task
                need.extend(every[u] for u in task.upstream if u in every)
        starts = [utc(t.start) for t in seen.values() if t.start is not None]
        ends = [utc(t.end) for t in seen.values() if t.end is not None]
        first, last = max(starts, default=None), min(ends, default=None)

        def who(date: datetime | None, attr: str) -> str:  # the tasks whose own date is the bound
            ids = sorted(i for i, t in seen.items() if getattr(t, attr) is not None and utc(getattr(t, attr)) == date)
            if len(ids) == len(seen) > 1:
                return "every task the group needs (the DAG's date, or default_args')"
            return f"task{'s' if len(ids) > 1 else ''} {', '.join(ids)}"

        return cls(first, last, who(first, "start") if first else "", who(last, "end") if last else "")

    def admits(self, when: datetime) -> bool:
        """Does a run dated ``when`` get every task the group needs?"""
        return (self.earliest is None or self.earliest <= when) and (self.latest is None or when <= self.latest)

    def bound(self, when: datetime) -> str:
        """The bound a run dated ``when`` meets first, and which tasks set it: "the end_date ... of task x"."""
        if self.earliest is not None and self.earliest > when:
            return f"the start_date {self.earliest} of {self.start_by}"
        return f"the end_date {self.latest} of {self.end_by}"

    @classmethod
    def of_dag(cls, dag: object, table: str | None = None) -> "RunDates":
        """From a serialized DAG (what the api-server holds), for ``table`` (``<pipeline>/<sink>``)."""
        def tables(task: object) -> frozenset[str]:
            names = (getattr(o, "name", "") or "" for o in getattr(task, "outlets", None) or ())
            return frozenset(n.split(":", 1)[1] for n in names if n.startswith("exactly_once:"))

        return cls.of((TaskDates(t.task_id, t.task_type, frozenset(t.upstream_task_ids), t.start_date, t.end_date,
                                 tables(t)) for t in dag.task_dict.values()), table)  # type: ignore[attr-defined]

    @classmethod
    def of_api(cls, tasks: list[dict]) -> "RunDates":
        """From ``GET /api/v2/dags/<dag>/tasks``'s tasks (dates as ISO text; downstream ids, inverted here; no
        outlets: every group's phase tasks count)."""
        def when(text: str | None) -> datetime | None:
            return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None

        upstream: dict[str, set[str]] = {t["task_id"]: set() for t in tasks}
        for t in tasks:
            for down in t.get("downstream_task_ids") or ():
                upstream.setdefault(down, set()).add(t["task_id"])
        return cls.of((TaskDates(t["task_id"], (t.get("class_ref") or {}).get("class_name", ""),
                                 frozenset(upstream[t["task_id"]]), when(t.get("start_date")), when(t.get("end_date")))
                       for t in tasks))


def logical_date_inside(interval: Interval, dates: RunDates = RunDates()) -> datetime:
    """A logical date for a run of ``interval`` that no other run of the DAG has, within ``dates``.

    Inside the interval where the dates allow: the start plus 1 microsecond and a time-derived offset, never
    the start itself (the scheduled run's). A DAG whose end is its last interval's start (the date of its last
    scheduled run) leaves no such date for that interval; its run is dated in the minute before the start,
    never on a whole second (a scheduled run's date). :class:`ConfigError` saying which task's date leaves no
    room when neither fits (an interval after the end)."""
    for lo, hi in ((interval.start + _US, interval.end - _US), (interval.start - _MINUTE + _US, interval.start - _US)):
        lo, hi = max(lo, dates.earliest or lo), min(hi, dates.latest or hi)
        if lo <= hi:
            at = lo + _US * (time.time_ns() // 1000 % ((hi - lo) // _US + 1))
            if hi < interval.start and at.microsecond == 0 and at < hi:
                at += _US  # before the start: never on a whole second, a scheduled run's date
            return at
    raise ConfigError(f"Airflow creates a task of a manual run only if the run's date lies within the task's "
                      f"start_date and end_date: {dates.bound(interval.start)} leaves no date for a run of "
                      f"{interval.label}, which would do nothing")


def first_refusal(dates: RunDates, intervals: list[Interval], dag_id: str, advise: Callable[[], str]) -> str:
    """Why a run of one of ``intervals`` cannot be dated (with ``advise()``'s way out), or ""."""
    for interval in intervals:
        try:
            logical_date_inside(interval, dates)
        except ConfigError as exc:
            return f"{dag_id}: {exc}. To run {'them' if len(intervals) > 1 else 'it'}, {advise()}"
    return ""


def no_date_advice(action: str, dag_id: str, sink: str, table_url: str, intervals: list[Interval],
                   to_version: str = "", allow_shrinking: bool = False,
                   logical_of: Callable[[Interval], datetime | None] = lambda iv: None) -> str:
    """What to do instead of runs of ``intervals`` that cannot be dated: the command that needs no run
    (recover, rollback), or a backfill of the intervals in order for this table's group only (Airflow creates
    every task of a backfill's run, whatever the dates). ``logical_of``: the date a backfill selects an
    interval's run by (:func:`backfill_date`), None where it is not known here."""
    table = shlex.quote(table_url)
    if action == "recover":
        return f"run `eo recover {table}` (it needs no DAG run)"
    if action == "rollback":
        start = intervals[0].start.isoformat()
        return f"run `eo rollback {table} --interval {start} --to {to_version}` (it needs no DAG run)"
    conf = json.dumps({"reprocess": True, "sinks": [sink], **({"allow_shrinking": True} if allow_shrinking else {})})
    spans: list[list[Interval]] = []  # the intervals in unbroken stretches: a backfill runs every one between
    for iv in intervals:
        if spans and spans[-1][-1].end == iv.start:
            spans[-1].append(iv)
        else:
            spans.append([iv])
    commands = []
    for span in spans:
        first, last = logical_of(span[0]), logical_of(span[-1])
        if first is not None and last is not None:
            dates = f"--from-date {first.isoformat()} --to-date {last.isoformat()}"
        else:  # the date a backfill selects an interval's run by depends on the timetable
            dates = (f"--from-date A --to-date B (A, B: the dates a backfill selects the runs of {span[0].label} "
                     f"and {span[-1].label} by - their starts under a data-interval timetable, their ends under a "
                     "trigger timetable)")
        commands.append(f"`airflow backfill create --dag-id {dag_id} {dates} --reprocess-behavior completed "
                        f"--dag-run-conf '{conf}'`")
    how = "backfills, in this order" if len(commands) > 1 else "a backfill"
    return (f"reprocess {'them' if len(intervals) > 1 else 'it'} as {how}, whose runs get every task whatever the "
            f"dates (Airflow 3.2+): {'; then '.join(commands)}; or move that "
            "date past the interval's start (the scheduler then also runs the intervals the new dates open)")


def backfill_date(dag: object, interval: Interval) -> datetime | None:
    """The date that makes a backfill of the (serialized) DAG run ``interval`` alone (``--from-date`` and
    ``--to-date`` both): the one for which Airflow's own ``iter_dagrun_infos_between`` - what ``airflow backfill
    create`` selects by - yields exactly that interval (the start under a data-interval timetable; under a
    trigger timetable, whose runs are selected by when they run, the end). None if no such date is found."""
    def only(date: datetime) -> bool:
        got = [i.data_interval for i in dag.iter_dagrun_infos_between(date, date)]  # type: ignore[attr-defined]
        return len(got) == 1 and got[0] is not None and (utc(got[0].start), utc(got[0].end)) == (
            interval.start, interval.end)

    try:
        return next((d for d in (interval.start, interval.end) if only(d)), None)
    except Exception:  # noqa: BLE001 - a timetable that cannot say: the advice says how to find the dates
        return None


def utc(d: datetime) -> datetime:
    """``d`` as a plain UTC datetime (a serialized DAG's dates are pendulum's, whose arithmetic differs)."""
    u = d.astimezone(timezone.utc)
    return datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, tzinfo=timezone.utc)
