"""Rollback through the protocol (issue 17): an earlier committed version becomes live again as a new,
fenced epoch - local and S3, from the library, ``eo rollback`` and the Airflow operator; a version gc
already deleted is a clear error; later intervals on the replaced state are reported stale."""
from __future__ import annotations

import os

import pytest

from exactly_once import Interval, State, TransactionStateError
from exactly_once.cli import main as eo
from exactly_once.ops.maintenance import gc
from exactly_once.ops.rollback import find_interval, parse_version, rollback
from protocol_helpers import (assert_exact_version, commit_version, leftovers, log_problems, make_rows, open_sink,
                              split, table_url, write_output)  # noqa: F401

IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"


def test_rollback_republishes_an_earlier_version_as_a_new_epoch(table_url):
    sink = open_sink(table_url)
    v1 = make_rows("v1", 5)
    e1 = commit_version(sink, IV, {PART: split(v1, 2)})
    commit_version(sink, IV, {PART: [make_rows("v2", 3, start=50)]})
    result = rollback(sink, IV, 1)
    assert result.txn.epoch == 3 and result.extra["rollback_of"] == e1.name
    assert_exact_version(sink, PART, v1, result.txn)
    assert log_problems(sink, IV) == [] and leftovers(sink) == []
    assert sink.status(IV)[3].records["open"]["meta"]["rollback_of"] == e1.name


def test_rollback_reports_later_intervals_on_the_replaced_state_stale(tmp_path):
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    commit_version(sink, IV, {PART: [make_rows("v1", 2)]})
    e2 = commit_version(sink, IV, {PART: [make_rows("v2", 2, start=10)]})
    day2 = sink.begin(IV2, reads=e2)
    write_output(sink, day2, {PART2: [make_rows("d2", 2, start=90)]})
    sink.pre_commit(day2)
    sink.commit(day2)
    assert rollback(sink, IV, 1).extra["stale"] == [day2.name]


def test_rollback_to_a_version_gc_deleted_is_a_clear_error(table_url):
    sink = open_sink(table_url)
    commit_version(sink, IV, {PART: [make_rows("v1", 2)]})
    v2 = make_rows("v2", 2, start=10)
    e2 = commit_version(sink, IV, {PART: [v2]})
    gc(sink, min_age=0)
    with pytest.raises(TransactionStateError, match="compacted|gone|deleted"):
        rollback(sink, IV, 1)
    with pytest.raises(TransactionStateError, match="not a committed version"):
        rollback(sink, IV, 7)
    assert_exact_version(sink, PART, v2, e2)
    assert {e: s.state for e, s in sink.status(IV).items()} == {1: State.COMMITTED, 2: State.COMMITTED}


def test_eo_rollback_and_the_airflow_operator(tmp_path, capsys):
    from airflow.sdk.exceptions import AirflowFailException

    from exactly_once.airflow.rollback import RollbackOperator

    url = str(tmp_path / "warehouse" / "t")
    sink = open_sink(url)
    v1 = make_rows("v1", 3)
    commit_version(sink, IV, {PART: [v1]})
    commit_version(sink, IV, {PART: [make_rows("v2", 2, start=10)]})
    assert eo(["rollback", url, "--interval", "2026-01-01T00:00:00Z", "--to", "e1"]) == 0
    assert "is live again" in capsys.readouterr().out
    assert_exact_version(sink, PART, v1, sink.ref(IV, 3))
    op = RollbackOperator(task_id="rollback", table_url=url, interval_start="2026-01-01", to_version="e2")
    with pytest.raises(AirflowFailException, match="no DAG of the DAGs folder declares the table"):
        op.execute({})  # a table no DAG declares: refused (tests/integration/table_actions/test_airflow_actions.py)
    assert_exact_version(sink, PART, v1, sink.ref(IV, 3))
    assert find_interval(sink, "2026-01-01T00:00:00+00:00") == IV
    assert [parse_version(v) for v in ("e2", "2", "e000002", sink.ref(IV, 2).name)] == [2, 2, 2, 2]
    for bad in ("e\u00b2", "\u0661", "e\uff12", "e0", "e"):      # ASCII digits only ("²".isdigit() is True)
        with pytest.raises(TransactionStateError, match="not a version"):
            parse_version(bad)


def _stateful(tmp_path):
    """A stateful pipeline's config and sink (days 1 and 2 of ``ui_server.commit_day``'s shape)."""
    from exactly_once.protocol.config import PipelineConfig

    (tmp_path / "landing" / "src").mkdir(parents=True)
    cfg = PipelineConfig(pipeline="p", sink="t", application="job.py", root=str(tmp_path), sources="src",
                         stateful=True, partitions="dt={start:%Y-%m-%d}")
    return cfg, cfg.sink_handle()


def test_a_rolled_back_dependent_interval_keeps_its_lineage(tmp_path):
    """brk-actions rollback_dependent_loses_lineage: day 2 rolled back to a version computed on day 1's
    replaced state used to commit with no ``reads`` - live on replaced state, never stale, for good.
    Now the rollback reads what the old version read: refused while day 1's live state differs; once
    day 1 is back on that state it goes through, and a later reprocess of day 1 makes it stale."""
    from exactly_once.errors import InputChangedError
    from exactly_once.protocol.pipeline import IntervalRun
    from ui_server import commit_day

    cfg, sink = _stateful(tmp_path)
    d1e1 = commit_day(sink, IV.day, "r1", "s1")
    commit_day(sink, IV2.day, "r2", "d2-on-s1", prev=d1e1)
    d1e2 = commit_day(sink, IV.day, "r1-reprocess", "s1-new")
    d2e2 = commit_day(sink, IV2.day, "r2-rerun", "d2-on-s1-new", prev=d1e2)
    assert IntervalRun(cfg, IV).stale_after() == []
    with pytest.raises(InputChangedError, match=f"Roll the interval .* back to e1 first.*Nothing was changed"):
        rollback(sink, IV2, 1)                                # e1 of day 2 was computed on day 1's e1
    assert sorted(sink.status(IV2)) == [1, 2] and sink.committed(IV2)[0].name == d2e2
    d1e3 = rollback(sink, IV, 1).txn                           # day 1 back on e1's state: day 2 stale
    assert IntervalRun(cfg, IV).stale_after() == [IV2.token]
    d2e3 = rollback(sink, IV2, 1).txn                          # now it fits: it reads day 1's live e3
    assert sink.status(IV2)[3].reads == d1e3 and IntervalRun(cfg, IV).stale_after() == []
    day1 = commit_day(sink, IV.day, "r1-again", "s1-newer")     # another state of day 1: day 2 stale
    assert d2e3.name in sink.status(IV)[4].records["outcome"]["stale"] and day1.endswith(".e000004")
    assert IntervalRun(cfg, IV).stale_after() == [IV2.token]
    assert log_problems(sink, IV) == [] and log_problems(sink, IV2) == [] and leftovers(sink) == []


def _rollback_task(monkeypatch, url: str, run_id: str, try_number: int, to: str = "e1") -> dict:
    """eo_rollback's task for DAG run ``run_id`` triggered by admin, as a worker runs it (the owner lookup
    patched to the table: tests/integration/table_actions/test_airflow_actions.py covers it)."""
    from types import SimpleNamespace

    from exactly_once.airflow import rollback as task
    from exactly_once.airflow.tables import TableRef

    monkeypatch.setattr(task, "owning_table", lambda table_url, user: TableRef("p", "t", url))
    op = task.RollbackOperator(task_id="rollback", table_url=url, interval_start=IV.start.isoformat(), to_version=to)
    dag_run = SimpleNamespace(run_id=run_id, dag_id="eo_rollback", triggering_user_name="admin", conf={})
    return op.execute({"dag_run": dag_run, "ti": SimpleNamespace(task_id="rollback", try_number=try_number)})


def _killed_try(monkeypatch, url: str, run_id: str, point: str) -> int:
    """Try 1 of the task in a forked child that the failpoint ``point`` kills (os._exit, as kill -9)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.environ["EO_FAILPOINTS"] = f"{point}=crash"
            _rollback_task(monkeypatch, url, run_id, 1)
        finally:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("point, meanwhile, retries, run_epochs", [
    ("begin.after", False, ["rolled back", "already"], {3: State.ABORTED, 4: State.COMMITTED}),
    ("pre_commit.after", True, ["refused", "refused"], {3: State.ABORTED}),
    ("commit.after_publish", True, ["already", "already"], {3: State.COMMITTED})])
def test_one_eo_rollback_run_rolls_back_at_most_once(tmp_path, monkeypatch, point, meanwhile, retries, run_epochs):
    """brk-actions rollback_task_not_idempotent: try 1 of a run is killed (before its decision, or after its
    commit published); maybe a reprocess commits meanwhile; then Airflow's retry and, later, a clear run
    the same task again. The run rolls back at most once: a committed rollback is returned as it is
    ("already": whatever committed since stays live); an uncommitted one is done afresh, unless a version
    committed since - then it is refused, never rolled back over unseen."""
    from airflow.sdk.exceptions import AirflowFailException

    from ui_server import commit_day

    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    url = str(tmp_path / "warehouse" / "t")
    sink = open_sink(url, require_validation=True)  # as the task and the pipeline open it: gated
    run = "manual__eo_rollback_0011223344556677_0"
    commit_day(sink, IV.day, "r1", "v1")
    commit_day(sink, IV.day, "r2", "v2")
    assert _killed_try(monkeypatch, url, run, point) == 137
    other = commit_day(sink, IV.day, "reprocess", "v-other") if meanwhile else None
    for try_number, expected in zip((2, 3), retries):              # Airflow's retry, then a clear of the run
        if expected == "refused":
            with pytest.raises(AirflowFailException, match=r"tried this rollback before .* committed since"):
                _rollback_task(monkeypatch, url, run, try_number)
            continue
        result = _rollback_task(monkeypatch, url, run, try_number)
        assert result["rollback_of"] == sink.ref(IV, 1).name
        assert result.get("already", False) is (expected == "already") and ("note" in result) is result.get(
            "already", False)
    statuses = sink.status(IV)
    by_run = {e: s.state for e, s in statuses.items()
              if ((s.records.get("open") or {}).get("meta") or {}).get("run", {}).get("run_id") == run}
    assert by_run == run_epochs == {e: s.state for e, s in statuses.items() if s.request == f"eo_rollback/{run}"}
    assert sink.committed(IV)[0].name == (other or sink.ref(IV, 4).name)
    assert log_problems(sink, IV) == [] and leftovers(sink) == []


def test_the_table_page_offers_only_rollbacks_that_would_go_ahead(table_url):
    """Issue 28: a version gc removed is not offered as a rollback target; the page says why instead."""
    from exactly_once.airflow.page_table import table_html
    from exactly_once.airflow.tables import TableRef
    from exactly_once.airflow.views import Filters, table_page
    from exactly_once.ops.rollback import rollback_refusal

    sink = open_sink(table_url)
    for tag in ("v1", "v2", "v3"):
        commit_version(sink, IV, {PART: [make_rows(tag, 2, start=10 * len(tag))]})
    assert rollback_refusal(sink, IV, 1) is None and rollback_refusal(sink, IV, 2) is None
    gc(sink, min_age=0)  # removes e1 and e2 (superseded, no grace)
    why = rollback_refusal(sink, IV, 1)
    assert why is not None and "gc" in why
    with pytest.raises(TransactionStateError) as refused:
        rollback(sink, IV, 1)
    assert str(refused.value) == why  # the page's reason is the rollback's own refusal
    page = table_page(TableRef(sink.pipeline, sink.sink, table_url), Filters())
    assert set(page.rows[0].refusals) == {1, 2}
    html = table_html(page, can_act=True)
    assert "roll back to e1</a>" not in html and "cannot roll back to e1" in html
    assert {e: s.state for e, s in sink.status(IV).items()} == {e: State.COMMITTED for e in (1, 2, 3)}  # read-only
