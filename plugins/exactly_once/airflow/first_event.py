"""A table's first asset event through an alias: one task at a time.

Airflow creates a table's Asset and the alias-asset association with the **first** event through the alias
(``register_asset_changes_in_db``, on the task's success). When two tasks carry that first event at once -
a batched backfill's runs finishing at once on a fresh table - the API server's second insert fails
(``UniqueViolation``); it sets that task to failed and drops its event (``tests/repro/assets/race_alias.py``).
Once one such event is recorded, any number of events at once are fine.

So before a task adds an event through an alias it takes its turn (:func:`take_turn`), with write-once records
in the table's bookkeeping (``<home>/_announcements/<alias and asset digest>/``):

* ``confirmed`` exists (a task saw a first event recorded): go.
* The newest ``g<N>.json`` names the **first announcer**, a task instance. None yet: this task creates ``g1``
  naming itself and goes. It names this task instance (a later try, a later clear): go.
* Else Airflow is asked that task instance's state: ``success`` - its event is recorded: write ``confirmed``,
  go; still going (running, queued, deferred, up for retry...) - ask again every ``poll`` s, for up to
  ``wait`` s, then go with a warning (the race is possible again, nothing else); ended otherwise (failed,
  skipped, cleared, unknown to Airflow) - its event was never recorded: claim ``g<N+1>`` and go (whoever loses
  that claim waits on the winner).
* Airflow cannot say (its API not answering): go with a warning.

The wait happens once per table and alias, in the tasks that announce while the first one is finishing: a
few seconds at most in a backfill. The records are never removed (a few bytes per table).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Callable

log = logging.getLogger(__name__)
ROOT = "_announcements"
GOING = {"running", "queued", "scheduled", "deferred", "up_for_retry", "up_for_reschedule", "restarting"}
StateOf = Callable[[dict[str, Any]], "str | None"]


def take_turn(storage: Any, home: str, alias: str, asset: str, me: dict[str, Any], state_of: StateOf, *,
              wait: float, poll: float, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """Return when this task (``me``: ``dag_id``, ``run_id``, ``task_id``, ``map_index``) may add an event for
    ``asset`` through ``alias`` (module docstring); ``state_of(task)`` is Airflow's state of a task instance
    given like ``me`` (None: Airflow knows none), raising when Airflow cannot say. Returns why it may, for the
    log: "confirmed", "first", "after <task>", "unconfirmed ...". Never raises for Airflow's answers."""
    key = hashlib.sha256(f"{alias}\0{asset}".encode()).hexdigest()[:20]
    home = storage.join(home, ROOT, key)
    confirmed = storage.join(home, "confirmed")
    deadline = clock() + wait
    while True:
        if storage.exists(confirmed):
            return "confirmed"
        n, first = newest(storage, home)
        if first is None or same_task(first, me):
            if first is not None or claim(storage, home, 1, me):
                return "first"
            continue  # another task claimed g1 meanwhile: wait on it
        try:
            state = state_of(first)
        except Exception as exc:  # noqa: BLE001 - Airflow cannot say: go, as without this turn
            log.warning("could not ask Airflow whether %s recorded the first event of %s (%s: %s); announcing "
                        "anyway", name(first), asset, type(exc).__name__, exc)
            return f"unconfirmed ({type(exc).__name__})"
        if state == "success":
            storage.write_atomic(confirmed, json.dumps({"by": first}).encode())
            return f"after {name(first)}"
        if state not in GOING:  # its event was never recorded: this task is the first now (or waits on who is)
            log.info("%s ended %s without recording the first event of %s: taking its turn", name(first),
                     state or "(no state)", asset)
            if claim(storage, home, n + 1, me):
                return "first"
            continue
        if clock() >= deadline:
            log.warning("%s has not finished in %.0f s (%s): announcing %s without waiting for its first event "
                        "(if both are first, Airflow may fail this task and drop its event)", name(first), wait,
                        state, asset)
            return "unconfirmed (wait over)"
        sleep(poll)


def newest(storage: Any, home: str) -> tuple[int, dict[str, Any] | None]:
    """The newest generation ``g<N>.json`` and the task it names; ``(0, None)`` if none."""
    gens = sorted(int(n[1:-5]) for n in storage.list_names(home)
                  if n.startswith("g") and n.endswith(".json") and n[1:-5].isdigit())
    if not gens:
        return 0, None
    return gens[-1], json.loads(storage.read_bytes(storage.join(home, f"g{gens[-1]:06d}.json")))


def claim(storage: Any, home: str, n: int, me: dict[str, Any]) -> bool:
    """Create generation ``n`` naming ``me``; False if another task created it first."""
    storage.makedirs(home)
    return storage.create_exclusive(storage.join(home, f"g{n:06d}.json"), json.dumps(me, sort_keys=True).encode())


def same_task(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One task instance (any try, any clear of its run)."""
    return all(a.get(k) == b.get(k) for k in ("dag_id", "run_id", "task_id", "map_index"))


def name(task: dict[str, Any]) -> str:
    index = task.get("map_index", -1)
    return f"{task.get('dag_id')}/{task.get('run_id')}/{task.get('task_id')}" + ("" if index in (-1, None) else f"[{index}]")


def task_of(ti: Any) -> dict[str, Any]:
    """How the records name a task instance."""
    return {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "map_index": int(getattr(ti, "map_index", -1) if getattr(ti, "map_index", -1) is not None else -1)}


def airflow_state(ti: Any) -> StateOf:
    """``state_of`` through the running task's execution API (``get_task_states``: any DAG run of any DAG)."""
    def state_of(task: dict[str, Any]) -> str | None:
        found = ti.get_task_states(dag_id=task["dag_id"], task_ids=[task["task_id"]], run_ids=[task["run_id"]])
        states = found.get(task["run_id"], {}) if isinstance(found, dict) else {}
        index = task.get("map_index", -1)
        value = states.get(task["task_id"] if index in (-1, None) else f"{task['task_id']}_{index}")
        return None if value is None else str(getattr(value, "value", value))
    return state_of
