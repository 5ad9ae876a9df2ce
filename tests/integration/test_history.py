"""``eo history <table-url>`` on a local table and on the loopback S3 server: every version of every
interval with its time, rows and verdict, the live one marked; a URL without a log is a clear error."""
from __future__ import annotations

import json

from protocol_helpers import open_sink, table_url, write_output  # noqa: F401 - table_url is a fixture

from exactly_once.cli import main
from exactly_once.ids import Interval

DAY1, DAY2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")


def _version(sink, interval, rows, *, passed=True, ratio=0.01, commit=True):
    txn = sink.begin(interval, meta={"run": {"run_id": f"run-{interval.day}"}})
    write_output(sink, txn, {f"dt={interval.day}": [rows]})
    sink.pre_commit(txn, extra={"counts": {"lines_read": 100, "malformed": int(ratio * 100)}})
    sink.record_validation(txn, passed, {"rejected_ratio": ratio, "max_malformed_ratio": 0.05, "failures": []})
    if passed and commit:
        sink.commit(txn)
    elif not passed:
        sink.abort(txn)
    return txn


def test_history_lists_every_version_with_time_rows_and_verdict(table_url, capsys):
    sink = open_sink(table_url, pipeline="pv_pipeline", sink="app_pv", require_validation=True)
    _version(sink, DAY1, [(1, "a"), (2, "b")])
    _version(sink, DAY2, [(1, "a")], passed=False, ratio=0.081)
    _version(sink, DAY2, [(1, "a"), (2, "b"), (3, "c")])
    _version(sink, DAY1, [(9, "z")])                              # reprocessed: e2 replaces e1

    assert main(["history", table_url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    got = [(r["interval_start"][:10], r["epoch"], r["state"], r["live"], r["rows"], r["verdict"]) for r in rows]
    assert got == [("2026-01-01", 1, "COMMITTED", False, 2, "passed"),
                   ("2026-01-01", 2, "COMMITTED", True, 1, "passed"),
                   ("2026-01-02", 1, "ABORTED", False, 1, "FAILED: rejected_ratio 0.081 > 0.05"),
                   ("2026-01-02", 2, "COMMITTED", True, 3, "passed")]
    assert rows[0]["reason"] == "superseded by e2" and all(r["decided_at"].endswith("Z") for r in rows)

    assert main(["history", table_url]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("app_pv (pipeline pv_pipeline) at ") and "2 interval(s), 4 version(s)" in text
    day2_failed = next(line for line in text.splitlines() if "ABORTED" in line)
    assert "2026-01-02 00:00:00" in day2_failed and "FAILED: rejected_ratio 0.081 > 0.05" in day2_failed


def test_history_of_a_location_without_a_log_is_a_clear_error(table_url, capsys):
    assert main(["history", table_url + "-typo"]) == 2
    err = capsys.readouterr().err
    assert "no transaction log at" in err and "table directory itself" in err


def test_history_names_the_version_that_replaced_each_one(table_url, capsys):
    """e1 was replaced by e2 and e2 by e3: each says its own successor, not the newest version."""
    sink = open_sink(table_url, pipeline="pv_pipeline", sink="app_pv", require_validation=True)
    for rows in ([(1, "a")], [(2, "b")], [(3, "c")]):
        _version(sink, DAY1, rows)

    assert main(["history", table_url, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["epoch"], r["live"], r["reason"]) for r in rows] == [
        (1, False, "superseded by e2"), (2, False, "superseded by e3"), (3, True, "")]
