"""What the ``batched`` section reads back about one backfill: its span in Airflow's metadata DB (from
``airflow backfill create`` to its last run's end) and, for a batched backfill, where the hosting run's
time went, from that ``begin`` task's own log lines. Everything here only reads.

The hosting ``begin`` (``exactly_once.airflow.batching``) logs, in order: ``hosting batch <id>: K
intervals`` (after choosing and claiming them), one ``begin <txn>`` per interval, ``batch <id> of <pipeline>:
K attempts (...)``, ``wrote batch <id> (K intervals) over Spark Connect ... in S s`` (the one Spark job),
then per interval ``pre_commit <txn>``, ``validate <txn>: passed``, ``commit <txn>``, then ``batch <id>
of <pipeline> finished``. Each phase's time is the gap from the line before to the line that ends it.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import stats

from tools.deployment import Deployment

PHASES = ("pre_commit", "validate", "commit")
_WROTE = re.compile(r"^wrote batch \S+ \((\d+) intervals\).* in ([0-9.]+) s")


def newest_backfill(deploy: Deployment, dag_id: str) -> int | None:
    """The id of the DAG's newest backfill (None before the first)."""
    rows = deploy.db.query("select id from backfill where dag_id = %s order by id desc limit 1", (dag_id,))
    return rows[0][0] if rows else None


def backfill_runs(deploy: Deployment, backfill_id: int) -> dict[str, str]:
    """``{interval start day: state}`` of one backfill's runs."""
    return {start.date().isoformat(): state for start, state in deploy.db.query(
        "select data_interval_start at time zone 'UTC', state from dag_run where backfill_id = %s",
        (backfill_id,))}


def span(deploy: Deployment, backfill_id: int) -> dict[str, Any]:
    """The backfill from its creation to its last run's end, as the metadata DB recorded it: the
    scheduler's pick-up (created -> the first task starts), the first run, and the runs after it."""
    (created,), = deploy.db.query("select created_at from backfill where id = %s", (backfill_id,))
    runs = deploy.db.query("select run_id, start_date, end_date from dag_run where backfill_id = %s "
                           "order by data_interval_start", (backfill_id,))
    first_task = deploy.db.query(
        "select min(ti.start_date) from task_instance ti join dag_run dr on ti.dag_id = dr.dag_id and "
        "ti.run_id = dr.run_id where dr.backfill_id = %s", (backfill_id,))[0][0]
    last_end = max(r[2] for r in runs)
    return {"runs": len(runs), "created_to_last_end": round((last_end - created).total_seconds(), 2),
            "created_to_first_task": round((first_task - created).total_seconds(), 2),
            "first_run": round((runs[0][2] - runs[0][1]).total_seconds(), 2),
            "after_first_run": round((last_end - runs[0][2]).total_seconds(), 2),
            "during_first_run": sum(r[2] <= runs[0][2] for r in runs[1:])}


def waits(home: Path, dag_id: str) -> dict[str, int]:
    """How the runs that are not a batch's host waited for it, from their ``begin`` logs: deferrals to the
    triggerer, resumptions by the trigger, looks after a deferral timed out (no word from the triggerer)."""
    out = {"deferred": 0, "resumed_by_trigger": 0, "timed_out": 0}
    for log in (home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*begin/attempt=*.log"):
        text = log.read_text(errors="replace")
        if "hosting batch" not in text:
            out["deferred"] += text.count("deferred to the triggerer")
            out["resumed_by_trigger"] += text.count("the wait for the batch is over")
            out["timed_out"] += text.count("no word from the triggerer")
    return out


def _lines(log: Path) -> list[tuple[datetime, str, str]]:
    """``(timestamp, logger, message)`` of each JSON line of an Airflow 3 task log."""
    out = []
    for raw in log.read_text(errors="replace").splitlines():
        try:
            d = json.loads(raw)
            ts = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        out.append((ts, str(d.get("logger") or ""), str(d.get("event") or "")))
    return out


def host_logs(home: Path, dag_id: str) -> list[Path]:
    """The logs of the ``begin`` tries that hosted a batch (``hosting batch`` in them), oldest run first."""
    logs = sorted((home / "logs" / f"dag_id={dag_id}").glob("run_id=*/task_id=*begin/attempt=*.log"))
    return [p for p in logs if "hosting batch" in p.read_text(errors="replace")]


def batch_phases(log: Path) -> dict[str, Any]:
    """Where one hosting ``begin`` try's time went (seconds; the module docstring says how). ``write job``
    is from the batch's spec being written to the job's end; ``job_reported`` is the job's own figure."""
    lines = _lines(log)
    if not lines:
        return {"log": str(log), "parsed": False}
    t0, end = lines[0][0], lines[-1][0]
    mark: dict[str, datetime] = {}
    samples: dict[str, list[float]] = {p: [] for p in PHASES}
    begins, reported, prev = 0, None, None
    for ts, logger, msg in lines:
        if logger.endswith("batching") and msg.startswith("hosting batch"):
            mark["host"] = ts
        elif logger.endswith("pipeline") and msg.startswith("begin ") and "host" in mark and "attempts" not in mark:
            begins += 1
        elif logger.endswith(".batch") and " attempts (" in msg and "attempts" not in mark:
            mark["attempts"] = prev = ts
        elif (m := _WROTE.match(msg)) and "attempts" in mark:
            mark["wrote"], prev, reported = ts, ts, float(m.group(2))
        elif logger.endswith("pipeline") and prev is not None and "finished" not in mark:
            phase = next((p for p in PHASES if msg.startswith(p + " ")), None)
            if phase is not None and (phase != "validate" or ": passed" in msg):
                if "wrote" not in mark:  # no job line (spark-submit): the job's time includes the first pre_commit
                    mark["wrote"] = prev = ts
                samples[phase].append((ts - prev).total_seconds())
                prev = ts
        elif logger.endswith(".batch") and " finished: " in msg:
            mark["finished"] = ts

    def gap(a: str | datetime | None, b: str | datetime) -> float | None:
        x, y = (mark.get(a) if isinstance(a, str) else a), (mark.get(b) if isinstance(b, str) else b)
        return round((y - x).total_seconds(), 2) if x is not None and y is not None else None

    return {
        "log": str(log), "parsed": True, "task_seconds": gap(t0, end), "intervals": len(samples["commit"]),
        "start_up_and_claims": gap(t0, "host"), "begin": gap("host", "attempts"), "begins": begins,
        "write_job": gap("attempts", "wrote"), "job_reported": reported,
        **{p: round(sum(v), 2) for p, v in samples.items()},
        "per_interval": {p: stats(v) for p, v in samples.items()},
        "after_batch": gap(prev, end) if "finished" in mark else None,  # from the last commit on
    }


def where_batch_time_goes(sp: dict[str, Any], hosts: list[dict[str, Any]], tim: dict[str, Any]) -> dict[str, Any]:
    """A batched backfill's span split: the scheduler's pick-up, the hosting begin task phase by phase
    (summed over its tries), the rest of its run, and the other runs finishing at once."""
    def total(key: str) -> float | None:
        vals = [h[key] for h in hosts if h.get(key) is not None]
        return round(sum(vals), 2) if vals else None

    out: dict[str, Any] = {
        "backfill created -> first task starts": sp["created_to_first_task"],
        "host begin: task start-up, choosing and claiming the intervals": total("start_up_and_claims"),
        "host begin: begin of every interval": total("begin"),
        "host begin: the Spark job (all intervals)": total("write_job"),
        "host begin: pre_commit of every interval": total("pre_commit"),
        "host begin: validate (the gate) of every interval": total("validate"),
        "host begin: commit of every interval": total("commit"),
        "host begin: after the batch (notes, skipping the run's other tasks)": total("after_batch"),
    }
    host_task = total("task_seconds")
    if host_task is not None:
        out["host run: the rest (hand-offs, the skipped tasks, the run's end)"] = round(sp["first_run"] - host_task, 2)
    if sp.get("during_first_run"):  # runs started together (--max-active-runs > 1) finish behind its gate
        out[f"the other {sp['runs'] - 1} runs: after the host's run ({sp['during_first_run']} finished while it "
            "ran)"] = sp["after_first_run"]
    else:
        out[f"the other {sp['runs'] - 1} runs, each finishing at once"] = sp["after_first_run"]
    if tim.get("per_interval", {}).get("n"):
        out["one run finishing at once (median)"] = tim["per_interval"]["median"]
    out["total: created -> the last run's end"] = sp["created_to_last_end"]
    return out


def announcements(deploy: Deployment, table_uri: str, lineage_file: Path) -> dict[str, Any]:
    """How the publishes of ``table_uri`` were announced: its asset events in the metadata DB (per version),
    and the OpenLineage events with outputs the provider's file transport wrote (per output version). Each
    published version must be in exactly one of each (``exactly_once.airflow.endings``)."""
    rows = deploy.db.query("select e.extra from asset_event e join asset a on e.asset_id = a.id where a.uri = %s",
                           (table_uri,))
    events = [json.loads(x) if isinstance(x, str) else (x or {}) for (x,) in rows]
    outputs: list[str] = []
    if lineage_file.exists():
        for line in lineage_file.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            outputs += [v for o in event.get("outputs") or []  # ours: each output carries its version
                        if (v := ((o.get("facets") or {}).get("version") or {}).get("datasetVersion"))]
    versions = [e.get("version") for e in events]
    return {"asset_events": len(events), "asset_event_versions": len(set(versions)),
            "lineage_outputs": len(outputs), "lineage_versions": len(set(outputs))}
