"""Rollback through the protocol (issue 17): an earlier committed version becomes live again as a new,
fenced epoch - local and S3, from the library, ``eo rollback`` and the Airflow operator; a version gc
already deleted is a clear error; later intervals on the replaced state are reported stale."""
from __future__ import annotations

import pytest

from exactly_once import Interval, State, TransactionStateError
from exactly_once.cli import main as eo
from exactly_once.maintenance import gc
from exactly_once.rollback import find_interval, parse_version, rollback
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
    assert op.execute({})["version"] == sink.ref(IV, 4).name
    assert_exact_version(sink, PART, make_rows("v2", 2, start=10), sink.ref(IV, 4))
    assert find_interval(sink, "2026-01-01T00:00:00+00:00") == IV
    assert [parse_version(v) for v in ("e2", "2", "e000002", sink.ref(IV, 2).name)] == [2, 2, 2, 2]
