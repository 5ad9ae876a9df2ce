"""A table's first asset event through an alias, one task at a time (exactly_once.airflow.first_event): the
turn's decisions on real local storage, with Airflow's answers scripted per call (the forced interleavings:
what the first announcer's state is at each look). tests/integration/test_first_asset_event.py runs it on
Airflow's own route."""
from __future__ import annotations

import json
from typing import Any

import pytest

from exactly_once.airflow.first_event import ROOT, take_turn
from exactly_once.storage import LocalStorage

ALIAS, ASSET = "exactly_once:p/t", "file:///data/t"


def task(run: str, task_id: str = "t.begin", index: int = -1) -> dict[str, Any]:
    return {"dag_id": "p", "run_id": run, "task_id": task_id, "map_index": index}


class Airflow:
    """Scripted answers of Airflow, one per look; records who was asked about."""

    def __init__(self, *answers: Any) -> None:
        self.answers, self.asked = list(answers), []

    def __call__(self, who: dict[str, Any]) -> str | None:
        self.asked.append(who["run_id"])
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer() if callable(answer) else answer


class Clock:
    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def turn(home: str, me: dict[str, Any], airflow: Airflow, clock: Clock | None = None, *, alias: str = ALIAS,
         asset: str = ASSET, wait: float = 10.0) -> str:
    clock = clock or Clock()
    return take_turn(LocalStorage(), home, alias, asset, me, airflow, wait=wait, poll=1.0, clock=clock,
                     sleep=clock.sleep)


def generations(home: str) -> list[dict[str, Any]]:
    st = LocalStorage()
    [key] = st.list_names(st.join(home, ROOT))
    folder = st.join(home, ROOT, key)
    return [json.loads(st.read_bytes(st.join(folder, n))) for n in sorted(st.list_names(folder)) if n.startswith("g")]


def confirmed(home: str) -> bool:
    st = LocalStorage()
    return any(st.exists(st.join(home, ROOT, k, "confirmed")) for k in st.list_names(st.join(home, ROOT)))


def test_the_first_announcer_goes_at_once_and_so_do_its_later_tries_and_clears(tmp_path):
    home = str(tmp_path)
    never = Airflow()  # asking Airflow here would pop from an empty script
    assert turn(home, task("d1"), never) == "first"
    assert turn(home, task("d1"), never) == "first"  # its retry, or a clear of its run: the same task instance
    assert never.asked == [] and generations(home) == [task("d1")] and not confirmed(home)


def test_a_second_announcer_waits_until_the_first_ones_success_is_recorded_then_no_one_asks_again(tmp_path):
    home, clock = str(tmp_path), Clock()
    turn(home, task("d1"), Airflow())
    airflow = Airflow("running", "deferred", "up_for_retry", "success")
    assert turn(home, task("d2"), airflow, clock) == "after p/d1/t.begin"
    assert airflow.asked == ["d1"] * 4 and clock.slept == [1.0] * 3  # it went only after "success"
    assert confirmed(home)
    later = Airflow()
    assert turn(home, task("d3"), later) == "confirmed" and later.asked == []


@pytest.mark.parametrize("ended", ["failed", "skipped", "upstream_failed", "removed", None])
def test_a_first_announcer_that_ended_without_success_hands_the_turn_to_the_next(tmp_path, ended):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    assert turn(home, task("d2"), Airflow(ended)) == "first"
    assert generations(home) == [task("d1"), task("d2")] and not confirmed(home)
    third = Airflow("running", "success")  # the third waits on the new first one, not the old
    assert turn(home, task("d3"), third) == "after p/d2/t.begin" and third.asked == ["d2", "d2"]


def test_two_tasks_taking_over_at_once_one_wins_and_the_other_waits_on_it(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    # d3 finds d1 failed; before it claims the next turn, d2 (which found the same) claims it
    rival = lambda: (turn(home, task("d2"), Airflow("failed")), "failed")[1]  # noqa: E731
    airflow = Airflow(rival, "running", "success")
    assert turn(home, task("d3"), airflow) == "after p/d2/t.begin"
    assert airflow.asked == ["d1", "d2", "d2"] and generations(home) == [task("d1"), task("d2")]


def test_two_first_claims_at_once_one_wins(tmp_path):
    home, st = str(tmp_path), LocalStorage()
    import exactly_once.airflow.first_event as fe
    real = fe.claim

    def late(storage, folder, n, me):  # d1 claims the first turn between d2's look and d2's claim
        if me["run_id"] == "d2" and n == 1:
            assert real(storage, folder, 1, task("d1"))
        return real(storage, folder, n, me)

    fe.claim = late
    try:
        assert turn(home, task("d2"), Airflow("success")) == "after p/d1/t.begin"
    finally:
        fe.claim = real
    assert generations(home) == [task("d1")] and st.exists(home)


def test_when_airflow_cannot_say_or_the_first_one_takes_too_long_it_goes_anyway_unconfirmed(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    assert turn(home, task("d2"), Airflow(ConnectionError("API down"))) == "unconfirmed (ConnectionError)"
    clock = Clock()
    assert turn(home, task("d3"), Airflow(*["running"] * 11), clock, wait=10) == "unconfirmed (wait over)"
    assert clock.now == 10 and not confirmed(home)


def test_each_alias_and_asset_has_its_own_first_event_and_a_mapped_task_is_its_own_instance(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    assert turn(home, task("d1", "rb.rollback"), Airflow(), alias="exactly_once:rollback") == "first"
    assert turn(home, task("d1"), Airflow(), asset="file:///moved/t") == "first"
    turn(home, task("d5", "m", 0), Airflow(), asset="s3://b/t")
    assert turn(home, task("d5", "m", 1), Airflow("success"), asset="s3://b/t") == "after p/d5/m[0]"
