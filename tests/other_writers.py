"""Shared by the tests of other writers on an open Delta table (tests/conformance/test_delta_other_writers.py
and test_delta_other_writers_rules.py): the intervals and partitions they publish, the other engine's handle
on the table (delta-rs), what a Delta reader sees, and the two intervals most of them start from."""
from __future__ import annotations

from exactly_once import Interval
from protocol_helpers import commit_version, make_rows, open_sink, refresh, write_output

IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2, LATE = f"dt={IV.day}", f"dt={IV2.day}", "dt=2025-12-31"  # LATE: late rows IV also owns
DELTA = {"table_format": "delta"}
FIRST = 1  # the first publish's Delta version: the check created the table (version 0, no files)


def delta_sink(url: str):
    return open_sink(url, **DELTA)


def engine(sink):
    """The other engine's handle on the table (delta-rs, newest snapshot)."""
    import deltalake  # the test modules skip without it (pytest.importorskip)

    refresh(sink)
    return deltalake.DeltaTable(sink.target.uri, storage_options=sink.target.options)


def rows(sink, part: str | None = None) -> list[tuple]:
    """What a Delta reader sees: sorted ``(k, v, dt)``, of one partition if given."""
    t = engine(sink).to_pyarrow_table()
    found = zip(t.column("k").to_pylist(), t.column("v").to_pylist(), t.column("dt").to_pylist())
    return sorted(r for r in found if part is None or r[2] == part.split("=", 1)[1])


def expect(data, part: str = PART) -> list[tuple]:
    return sorted((k, v, part.split("=", 1)[1]) for k, v in data)


def outside_files(sink) -> list[str]:
    """Live files that none of our transactions wrote (the other engine's rewrites)."""
    return [a["path"] for a in sink.target.live_actions(engine(sink)) if not a["path"].startswith("2026")]


def staged_replacement(sink) -> tuple[list, object, list]:
    """:func:`two_intervals`, then IV's next version (rows ``b``) staged and pre-committed, not committed:
    ``(IV2's rows, the transaction, b)``."""
    _, c = two_intervals(sink)
    txn = sink.begin(IV)
    b = make_rows("b", 3, start=100)
    write_output(sink, txn, {PART: [b]})
    sink.pre_commit(txn)
    return c, txn, b


def two_intervals(sink) -> tuple[list, list]:
    """IV: two files in PART and two late ones in LATE; IV2: two files in PART2 (something to compact)."""
    a, late, c = make_rows("a", 6), make_rows("late", 4, start=20), make_rows("c", 4, start=40)
    commit_version(sink, IV, {PART: [a[:3], a[3:]], LATE: [late[:2], late[2:]]})
    commit_version(sink, IV2, {PART2: [c[:2], c[2:]]})
    assert rows(sink) == sorted(expect(a) + expect(late, LATE) + expect(c, PART2))
    return a + late, c


def kv_rows(sink) -> list[tuple]:
    """What a Delta reader sees: sorted ``(k, v)``, without the partition column."""
    t = engine(sink).to_pyarrow_table()
    return sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist()))
