"""A table's first asset event, one task at a time (exactly_once.airflow.first_event): the turn's decisions on
real local storage, with Airflow's answers scripted per call (the forced interleavings: what the turn's task's
state is, and whether the alias has the asset's event, at each look). tests/integration/test_first_asset_event.py
runs it on Airflow's own routes."""
from __future__ import annotations

import json
from typing import Any

import pytest

from exactly_once.airflow import first_event as fe
from exactly_once.airflow.first_event import ROOT, take_turn
from exactly_once.storage import LocalStorage

ASSET = "file:///data/t"


def task(run: str, task_id: str = "t.begin", index: int = -1, alias: str = "exactly_once:p/t") -> dict[str, Any]:
    return {"dag_id": "p", "run_id": run, "task_id": task_id, "map_index": index, "alias": alias}


class Airflow:
    """Scripted answers, one per look (an Exception is raised); records who was asked about."""

    def __init__(self, *states: Any, announced: Any = (False,)) -> None:
        self.states, self.said, self.asked = list(states), list(announced), []

    def state_of(self, who: dict[str, Any]) -> str | None:
        self.asked.append(who["run_id"])
        return self._answer(self.states.pop(0))

    def announced(self) -> bool | None:
        return self._answer(self.said.pop(0) if len(self.said) > 1 else self.said[0])

    @staticmethod
    def _answer(answer: Any) -> Any:
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


def turn(home: str, me: dict[str, Any], airflow: Airflow, clock: Clock | None = None, *, asset: str = ASSET,
         wait: float = 10.0, storage: Any = None) -> str:
    clock = clock or Clock()
    return take_turn(storage or LocalStorage(), home, asset, me, airflow, wait=wait, poll=1.0, clock=clock,
                     sleep=clock.sleep)


def generations(home: str, asset: str = ASSET) -> list[dict[str, Any]]:
    st = LocalStorage()
    folder = st.join(home, ROOT, fe.hashlib.sha256(asset.encode()).hexdigest()[:20])
    return [json.loads(st.read_bytes(st.join(folder, n))) for n in sorted(st.list_names(folder)) if n.startswith("g")]


def confirmed(home: str) -> bool:
    st = LocalStorage()
    return any(n.startswith("confirmed.") for k in st.list_names(st.join(home, ROOT))
               for n in st.list_names(st.join(home, ROOT, k)))


def test_an_alias_that_has_the_assets_event_goes_at_once_and_writes_nothing(tmp_path):
    home = str(tmp_path)
    assert turn(home, task("d1"), Airflow(announced=[True])) == "announced before"
    assert not (tmp_path / ROOT).exists()


def test_the_first_announcer_goes_at_once_and_so_do_its_later_tries_and_clears(tmp_path):
    home = str(tmp_path)
    never = Airflow()  # asking for a state here would pop from an empty script
    assert turn(home, task("d1"), never) == "first"
    assert turn(home, task("d1"), never) == "first"  # its retry, or a clear of its run: the same task instance
    assert never.asked == [] and generations(home) == [task("d1")]


def test_a_second_announcer_waits_until_the_first_ones_event_is_recorded(tmp_path):
    home, clock = str(tmp_path), Clock()
    turn(home, task("d1"), Airflow())
    airflow = Airflow("running", "deferred", "up_for_retry", "success", announced=[False, True])
    assert turn(home, task("d2"), airflow, clock) == "after p/d1/t.begin"
    assert airflow.asked == ["d1"] * 4 and clock.slept == [1.0] * 3  # it went only after "success"
    assert generations(home) == [task("d1")] and not confirmed(home)  # nothing more to write


@pytest.mark.parametrize("ended", ["failed", "skipped", "upstream_failed", "removed", None, "success"])
def test_a_turn_that_ended_without_the_event_recorded_passes_to_the_next_who_goes_alone(tmp_path, ended):
    home = str(tmp_path)  # "success" here: marked by hand, or its event went through another alias
    turn(home, task("d1"), Airflow())
    assert turn(home, task("d2"), Airflow(ended)) == "next after p/d1/t.begin"
    assert generations(home) == [task("d1"), task("d2")]
    third = Airflow("running", "success", announced=[False, True])  # the third waits on the new turn, not the old
    assert turn(home, task("d3"), third) == "after p/d2/t.begin" and third.asked == ["d2", "d2"]


def test_a_new_metadata_db_over_an_announced_table_asks_again_and_does_not_trust_the_old_records(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    turn(home, task("d2"), Airflow("success", announced=[False, True]))
    # Airflow reset: the alias has no event; d1 is unknown to the new DB
    assert turn(home, task("d1", "t.commit"), Airflow(None)) == "next after p/d1/t.begin"


def test_two_tasks_taking_the_turn_at_once_one_wins_and_the_other_waits_on_it(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())

    def rival() -> str:  # d3 found d1 failed; before it claims the next turn, d2 (which found the same) claims it
        assert turn(home, task("d2"), Airflow("failed")) == "next after p/d1/t.begin"
        return "failed"

    airflow = Airflow(rival, "running", "success", announced=[False, True])
    assert turn(home, task("d3"), airflow) == "after p/d2/t.begin"
    assert airflow.asked == ["d1", "d2", "d2"] and generations(home) == [task("d1"), task("d2")]


def test_two_first_claims_at_once_one_wins(tmp_path, monkeypatch):
    home, real = str(tmp_path), fe.claim

    def late(storage, folder, n, me):  # d1 claims the first turn between d2's look and d2's claim
        if me["run_id"] == "d2" and n == 1:
            assert real(storage, folder, 1, task("d1"))
        return real(storage, folder, n, me)

    monkeypatch.setattr(fe, "claim", late)
    assert turn(home, task("d2"), Airflow("success", announced=[False, True])) == "after p/d1/t.begin"
    assert generations(home) == [task("d1")]


def test_when_the_wait_is_over_one_waiter_takes_the_turn_and_the_others_wait_on_it_afresh(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    clock = Clock()
    assert turn(home, task("d2"), Airflow(*["up_for_retry"] * 11), clock, wait=10) == "next after p/d1/t.begin"
    assert clock.now == 10
    # d3 timed out on d1 too, a moment later: d2 has the turn now, and d3's wait starts again on it
    late = Clock()
    airflow = Airflow("up_for_retry", *["running"] * 4, "success", announced=[False, True])
    assert turn(home, task("d3"), airflow, late, wait=10) == "after p/d2/t.begin"
    assert airflow.asked == ["d2"] * 6 and generations(home) == [task("d1"), task("d2")]


def test_an_airflow_that_cannot_list_the_aliass_events_trusts_a_success_once_and_then_the_record(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow(announced=[None]))
    assert turn(home, task("d2"), Airflow("running", "success", announced=[None])) == "after p/d1/t.begin"
    assert confirmed(home)
    later = Airflow(announced=[None])
    assert turn(home, task("d3"), later) == "confirmed" and later.asked == []
    # an Airflow that can say does not read the record
    assert turn(home, task("d4"), Airflow("success", announced=[False, False])) == "next after p/d1/t.begin"


def test_an_airflow_that_cannot_list_the_aliass_events_trusts_a_success_only_through_the_same_alias(tmp_path):
    home = str(tmp_path)  # a recover through the rollback alias announced the fresh table first, alone
    turn(home, task("d0", "ops.recover", alias="exactly_once:rollback"), Airflow(announced=[None]))
    commit = Airflow("success", announced=[None])  # its success says nothing of the group alias's association
    assert turn(home, task("d1"), commit) == "next after p/d0/ops.recover" and not confirmed(home)
    assert turn(home, task("d2"), Airflow("running", "success", announced=[None])) == "after p/d1/t.begin"
    assert confirmed(home)
    assert turn(home, task("d3"), Airflow(announced=[None])) == "confirmed"
    # the rollback alias has its own record: a later recover does not go on the commits' confirmation
    assert turn(home, task("d4", "ops.recover", alias="exactly_once:rollback"), Airflow("success", announced=[None])) \
        == "next after p/d1/t.begin"


def test_airflow_not_answering_or_the_storage_failing_lets_the_task_announce_with_a_warning(tmp_path, caplog):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())
    assert turn(home, task("d2"), Airflow(ConnectionError("API down"))) == "unconfirmed (Airflow did not answer)"
    # the alias query not answering: the turn goes on by the records alone
    assert turn(home, task("d9"), Airflow("running", "success", announced=[ConnectionError("API down")])) == \
        "after p/d1/t.begin"

    class Failing(LocalStorage):
        def list_names(self, path):
            raise OSError("503 Slow Down")

    assert turn(home, task("d3"), Airflow(), storage=Failing()) == "unconfirmed (OSError)"
    assert "503 Slow Down" in caplog.text
    (tmp_path / ROOT / next(p.name for p in (tmp_path / ROOT).iterdir()) / "g1.json").write_text("{}")
    assert turn(home, task("d4"), Airflow("running", "success", announced=[False, True])) == "after p/d1/t.begin"


def test_every_alias_of_one_asset_shares_its_turn_and_each_asset_has_its_own(tmp_path):
    home = str(tmp_path)
    turn(home, task("d1"), Airflow())  # a commit through the group's alias
    rollback = Airflow("running", "success", announced=[False, False])  # the rollback's alias has no event yet
    assert turn(home, task("d1", "ops.rollback", alias="exactly_once:rollback"), rollback) == "next after p/d1/t.begin"
    assert turn(home, task("d1"), Airflow(), asset="file:///moved/t") == "first"
    turn(home, task("d5", "m", 0), Airflow(), asset="s3://b/t")
    assert turn(home, task("d5", "m", 1), Airflow("success", announced=[False, True]), asset="s3://b/t") == \
        "after p/d5/m[0]"
