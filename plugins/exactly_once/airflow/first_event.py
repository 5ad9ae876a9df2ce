"""A table's first asset event through an alias: one task at a time.

Airflow creates a table's Asset, and each alias-asset association, with the **first** event that needs it
(``register_asset_changes_in_db``, on the task's success). When two tasks' successes carry such an event at
once - a batched backfill's runs finishing at once on a fresh table, or a commit beside a rollback through
another alias - the API server's second insert fails (``UniqueViolation``): it sets that task to failed and
drops its event (``tests/repro/assets/race_alias.py``). Once the asset and the association exist, any number
of events at once are fine.

So before a task adds an event through an alias it takes its turn (:func:`take_turn`):

* **Airflow says the alias has an event of the asset** (its newest event through the alias is of this
  asset - the Task SDK's alias query with a limit, Airflow 3.2 and later): nothing is left to insert: go.
* Otherwise the task goes **one at a time** with every other task announcing the asset through any alias,
  by write-once records in the table's bookkeeping (``<home>/_announcements/<asset digest>/g<N>.json``, the
  newest naming the task instance whose turn it is). None yet: this task creates ``g1`` and goes; it names
  this task instance (a later try, a later clear): go. It names another: Airflow is asked that task
  instance's state every ``poll`` s while it is still going (running, queued, deferred, up for retry...) -
  for at most ``wait`` s after it got the turn. Then, when it ended in success and Airflow now has the
  alias's event: go; otherwise (it ended without it: failed, skipped, cleared, marked success by hand,
  unknown to this metadata DB; or the wait is over) this task claims ``g<N+1>`` and goes alone - whoever
  loses that claim waits on the winner, with a wait of its own.
* An Airflow without the alias query (3.1): a task that sees the turn's task, announcing through the same
  alias, ended in success writes ``confirmed.<alias digest>`` and goes; later tasks of that alias go at once
  on it. (It trusts the success: a task marked success by hand, or a new metadata DB over the same table, can
  race again there.)
* Airflow cannot say (its API not answering), or the table's storage fails: go with a warning - the
  publish is done, and its event at the risk of the race beats a failed task.

The wait happens in the tasks that announce while the first one is finishing: a second or two in a
backfill. The records are a few bytes per table, never removed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from typing import Any, Callable, Protocol

log = logging.getLogger(__name__)
ROOT = "_announcements"
GOING = {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
GENERATION = re.compile(r"g(\d{6})\.json")


class AirflowView(Protocol):
    """What the turn asks Airflow: a task instance's state (None: Airflow knows none), and whether the alias
    already has an event of the asset (None: this Airflow cannot say). Both raise when Airflow does not answer."""

    def state_of(self, task: dict[str, Any]) -> str | None: ...

    def announced(self) -> bool | None: ...


def take_turn(storage: Any, home: str, asset: str, me: dict[str, Any], airflow: AirflowView, *, wait: float,
              poll: float, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """Return when this task (``me``: ``dag_id``, ``run_id``, ``task_id``, ``map_index``, and the ``alias`` its
    event goes through) may add an event of ``asset`` (module docstring). Returns why it may, for the log; never
    raises."""
    try:
        return _turn(storage, storage.join(home, ROOT, hashlib.sha256(asset.encode()).hexdigest()[:20]), asset, me,
                     airflow, wait=wait, poll=poll, clock=clock, sleep=sleep)
    except Exception as exc:  # noqa: BLE001 - the storage failing: the publish is done (module docstring)
        log.warning("could not take this task's turn to announce %s (%s: %s); announcing anyway", asset,
                    type(exc).__name__, exc)
        return f"unconfirmed ({type(exc).__name__})"


def _turn(storage: Any, folder: str, asset: str, me: dict[str, Any], airflow: AirflowView, *, wait: float,
          poll: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> str:
    known = _ask(airflow.announced)
    if known is True:
        return "announced before"
    known = None if known == "unknown" else known  # not answering: the records alone, as an Airflow without it
    confirmed = storage.join(folder, "confirmed." + hashlib.sha256(str(me.get("alias")).encode()).hexdigest()[:12])
    if known is None and storage.exists(confirmed):
        return "confirmed"
    waited_on: dict[str, Any] | None = None
    deadline = 0.0
    while True:
        n, holder = newest(storage, folder)
        if holder is None or same_task(holder, me):
            if holder is not None or claim(storage, folder, 1, me):
                return "first"
            continue  # another task claimed g1 meanwhile: wait on it
        if holder != waited_on:
            waited_on, deadline = holder, clock() + wait
        state = _ask(lambda: airflow.state_of(holder))  # noqa: B023 - called at once
        if state == "unknown":
            return "unconfirmed (Airflow did not answer)"
        if state in GOING and clock() < deadline:
            sleep(poll)
            continue
        if state == "success":
            if known is None and holder.get("alias") == me.get("alias"):  # cannot say: trust its success
                storage.write_atomic(confirmed, json.dumps({"by": holder}).encode())
                return f"after {name(holder)}"
            if known is not None and _ask(airflow.announced) is True:
                return f"after {name(holder)}"
            why = f"ended success, and the alias {me.get('alias')} has no event of the asset yet"
        else:
            why = f"still {state} after {wait:g} s" if state in GOING else \
                f"ended {state or '(no state)'} without its event recorded"
        if claim(storage, folder, n + 1, me):
            log.info("%s %s: this task takes the turn to announce %s", name(holder), why, asset)
            return f"next after {name(holder)}"


def _ask(question: Callable[[], Any]) -> Any:
    """Airflow's answer, or "unknown" (logged) when it does not answer."""
    try:
        return question()
    except Exception as exc:  # noqa: BLE001 - Airflow cannot say: the caller goes
        log.warning("Airflow did not answer whether the first asset event is recorded (%s: %s)",
                    type(exc).__name__, exc)
        return "unknown"


def newest(storage: Any, folder: str) -> tuple[int, dict[str, Any] | None]:
    """The newest generation ``g<N>.json`` and the task it names; ``(0, None)`` if none."""
    gens = sorted(int(m.group(1)) for m in map(GENERATION.fullmatch, storage.list_names(folder)) if m)
    if not gens:
        return 0, None
    return gens[-1], json.loads(storage.read_bytes(storage.join(folder, f"g{gens[-1]:06d}.json")))


def claim(storage: Any, folder: str, n: int, me: dict[str, Any]) -> bool:
    """Create generation ``n`` naming ``me``; False if another task created it first."""
    storage.makedirs(folder)
    return storage.create_exclusive(storage.join(folder, f"g{n:06d}.json"), json.dumps(me, sort_keys=True).encode())


def same_task(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One task instance (any try, any clear of its run)."""
    return all(a.get(k) == b.get(k) for k in ("dag_id", "run_id", "task_id", "map_index"))


def name(task: dict[str, Any]) -> str:
    index = task.get("map_index", -1)
    return f"{task.get('dag_id')}/{task.get('run_id')}/{task.get('task_id')}" + ("" if index in (-1, None) else f"[{index}]")


def task_of(ti: Any, alias: str) -> dict[str, Any]:
    """How the records name a task instance announcing through ``alias``."""
    index = getattr(ti, "map_index", -1)
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": -1 if index is None else int(index),
            "alias": alias}


class TaskView:
    """:class:`AirflowView` from a running task: the states through its execution API (``get_task_states``, any
    DAG run of any DAG), the alias's newest event through the Task SDK's alias query with a limit."""

    def __init__(self, ti: Any, alias: str, asset: str) -> None:
        self.ti, self.alias, self.asset = ti, alias, asset

    def state_of(self, task: dict[str, Any]) -> str | None:
        found = self.ti.get_task_states(dag_id=task["dag_id"], task_ids=[task["task_id"]], run_ids=[task["run_id"]])
        states = found.get(task["run_id"], {}) if isinstance(found, dict) else {}
        index = task.get("map_index", -1)
        value = states.get(task["task_id"] if index in (-1, None) else f"{task['task_id']}_{index}")
        return None if value is None else str(getattr(value, "value", value))

    def announced(self) -> bool | None:
        try:
            from airflow.sdk.execution_time.context import InletEventsAccessor
        except ImportError:
            return None
        if not hasattr(InletEventsAccessor, "limit"):  # Airflow 3.1: the query returns every event of the alias
            return None
        events = list(InletEventsAccessor(alias_name=self.alias).ascending(False).limit(1))
        from airflow.sdk import Asset

        return bool(events) and getattr(events[0].asset, "uri", None) == Asset(uri=self.asset).uri  # as stored
