"""The races of issue 12, each forced at the exact point where it broke exactly-once on 09a84e9 (see
docs/RELIABILITY.md "Races beside maintenance, stalled publishers, reprocessing and shared sinks"):
a second sink instance stands in for a second process, paused or injected right there. Every test
asserts on the data (rows, live version) and on what is left behind."""
from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

from exactly_once import (FencedError, InputChangedError, Interval, OwnershipError, State, StorageError,
                          TransactionStateError)
from exactly_once import transaction as transaction_module
from exactly_once import failpoints as failpoints_module
from exactly_once import maintenance as maintenance_module
from exactly_once import ordering as ordering_module
from exactly_once.ops.maintenance import StorageClock, garbage_judge, gc
from protocol_helpers import (assert_exact_version, commit_version, interleave, is_local, leftovers,
                              log_problems, make_rows, open_sink, split, table_url,  # noqa: F401
                              visible_rows, write_output)

IV = Interval.daily("2026-01-01")
IV2 = Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"


def staged_txn(sink, iv, files, **begin):
    txn = sink.begin(iv, **begin)
    write_output(sink, txn, files)
    sink.pre_commit(txn)
    return txn


# ------------------------------------------------------------------ 1. a stalled older publisher
def test_stalled_older_publisher_never_swaps_the_link_back(tmp_path, monkeypatch):
    """Case 1 (local). A (e2, decided) passed its last check and stalls right before its symlink swap.
    B - another process - begins (rolling A forward), commits e3 and wants to go live. Publishers of a
    partition are ordered: B waits for A, so A can never swap the link back over e3, and gc keeps e3."""
    url = str(tmp_path / "warehouse" / "t")
    sink, other = open_sink(url), open_sink(url)
    commit_version(sink, IV, {PART: [make_rows("e1", 2)]})
    a = staged_txn(sink, IV, {PART: [make_rows("A", 3, start=10)]})
    b_rows = make_rows("B", 4, start=100)
    b_result, b_waiting = {}, threading.Event()
    real_flock = fcntl.flock

    def flock(fd, op):
        try:
            return real_flock(fd, op)
        except BlockingIOError:
            if threading.current_thread().name == "B":
                b_waiting.set()  # B is blocked behind A's lock: the interleaving can go on
            raise

    def run_b():
        try:
            b_result["txn"] = commit_version(other, IV, {PART: [b_rows]})
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            b_result["error"] = exc
        finally:
            b_waiting.set()

    def stall_a():
        threading.Thread(target=run_b, name="B", daemon=True).start()
        assert b_waiting.wait(60), "B neither finished nor waited for the partition lock"

    monkeypatch.setattr(fcntl, "flock", flock)
    fired = interleave(monkeypatch, os, "symlink", lambda src, dst, *x: src.endswith(a.name), stall_a)
    sink.commit(a)
    monkeypatch.undo()
    for t in threading.enumerate():
        if t.name == "B":
            t.join(60)
    assert fired["fired"] and "error" not in b_result, b_result
    b = b_result["txn"]
    assert b.epoch == a.epoch + 1
    assert_exact_version(sink, PART, b_rows, b)
    assert sink.recover() == []
    gc(sink, min_age=0)
    assert_exact_version(sink, PART, b_rows, b)  # gc deleted the superseded versions, never the live one
    assert os.listdir(os.path.join(sink.home, "_versions", PART)) == [b.name]
    assert log_problems(sink, IV) == [] and leftovers(sink) == []


# ------------------------------------------------------------------ 2. gc sweeping a commit in flight
def test_gc_beside_a_commit_never_sweeps_the_version_being_published(tmp_path, monkeypatch):
    """Case 2 (local). The output was written long before its commit (a slow validate, a recovery), so
    its files are old; gc runs between the move into the version store and the swap. The log - not
    mtimes - says the version is being published: gc keeps it, and the commit publishes it whole."""
    url = str(tmp_path / "warehouse" / "t")
    sink, maintenance = open_sink(url), open_sink(url)
    commit_version(sink, IV, {PART: [make_rows("old", 2)]})
    rows = make_rows("new", 6, start=10)
    txn = staged_txn(sink, IV, {PART: split(rows, 3)})
    for dirpath, dirnames, filenames in os.walk(sink.staging_dir(txn)):
        for name in dirnames + filenames + ["."]:
            os.utime(os.path.join(dirpath, name), (1_000_000, 1_000_000))  # written "long ago"
    sweep = lambda: maintenance.target.sweep(garbage_judge(maintenance, 60, StorageClock(maintenance)))  # noqa: E731
    swept = interleave(monkeypatch, failpoints_module, "failpoint", lambda name: name == "commit.mid_publish",
                       sweep)
    sink.commit(txn)
    monkeypatch.undo()
    assert swept["fired"] and swept["result"] == []
    assert_exact_version(sink, PART, rows, txn)
    assert sink.recover() == [] and gc(sink, min_age=60)["failed"] == []


# ------------------------------------------------------------------ 3. the grace period
def test_gc_grace_starts_when_a_version_stops_being_live(table_url):
    """Case 3. An exact reader resolved e1 (published long ago) just before e2 replaced it. gc right
    after the switch must keep e1 for the grace period; only once e2 has been live for min_age does e1
    go. On S3 the same holds for the files a reader got from the old manifest."""
    sink = open_sink(table_url)
    old_rows = make_rows("e1", 4)
    commit_version(sink, IV, {PART: split(old_rows, 2)})
    old_files = sink.live_files(PART)
    if is_local(sink):
        old_files = [os.path.realpath(p) for p in old_files]  # the reader resolved the link
    new_rows = make_rows("e2", 3, start=50)
    e2 = commit_version(sink, IV, {PART: [new_rows]})
    gc(sink, min_age=3600)
    for path in old_files:  # the reader that resolved e1 can finish
        with sink.storage.open(path, "rb") as f:
            assert f.read(4) == b"PAR1"
    assert_exact_version(sink, PART, new_rows, e2)
    report = gc(sink, min_age=0)
    assert report["versions"] and not any(sink.storage.exists(p) for p in old_files)
    assert_exact_version(sink, PART, new_rows, e2)
    assert leftovers(sink) == []


# ------------------------------------------------------------------ 4. plain readers overlapping a swap
def test_plain_reader_overlapping_a_swap_fails_or_reads_one_version_never_a_mix(tmp_path):
    """Case 4 (local). pyarrow plans its paths through the partition link, the link is swapped to a
    version that uses the same writer file names, then the reader reads. Names are unique per version,
    so the reader may fail (and retry) but never returns old and new rows together."""
    import pyarrow.dataset as ds

    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    commit_version(sink, IV, {PART: split(make_rows("old", 4), 2)})
    planned = ds.dataset(sink.table, format="parquet", partitioning="hive")
    new_rows = make_rows("new", 4, start=100)
    commit_version(sink, IV, {PART: split(new_rows, 2)})  # same file names: part-00000, part-00001
    try:
        got = sorted(planned.to_table(columns=["k"]).column("k").to_pylist())
    except (FileNotFoundError, OSError):
        got = None  # failed: the reader retries and plans again
    assert got in (None, [0, 1, 2, 3]), f"a mix of two versions: {got}"
    again = ds.dataset(sink.table, format="parquet", partitioning="hive")
    assert sorted(again.to_table(columns=["k"]).column("k").to_pylist()) == [k for k, _ in new_rows]


@pytest.mark.parametrize("reader", ["duckdb", "polars", "glob"])
def test_recursive_glob_readers_see_exactly_the_live_data(tmp_path, reader):
    """A recursive glob of the table dir (DuckDB, Polars, Python's glob) sees only live files: staging,
    superseded versions, checkpoints and the log are outside the table directory."""
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    commit_version(sink, IV, {PART: [make_rows("old", 3)]})
    live = make_rows("new", 4, start=10)
    commit_version(sink, IV, {PART: split(live, 2)})
    commit_version(sink, IV2, {PART2: [make_rows("d2", 2, start=50)]})
    pending = sink.begin(IV2)  # a run in flight: staged, not committed
    write_output(sink, pending, {PART2: [make_rows("staged", 5, start=900)]})
    pattern = f"{sink.table}/**/*.parquet"
    if reader == "duckdb":
        import duckdb

        # DuckDB's ** does not descend into symlinked dirs (the live partitions): it finds no file at
        # all - never a staged or superseded one. Spelled with one * per partition level, it reads them.
        with pytest.raises(duckdb.IOException, match="No files found"):
            duckdb.sql(f"SELECT k FROM read_parquet('{pattern}', hive_partitioning=true)").fetchall()
        got = duckdb.sql(f"SELECT k FROM read_parquet('{sink.table}/*/*.parquet', hive_partitioning=true)")
        keys = sorted(r[0] for r in got.fetchall())
    elif reader == "polars":
        import polars as pl

        keys = sorted(pl.read_parquet(pattern, hive_partitioning=True)["k"].to_list())
    else:
        import glob

        import pyarrow.parquet as pq

        keys = sorted(k for p in glob.glob(pattern, recursive=True)
                      for k in pq.read_table(p, columns=["k"]).column("k").to_pylist())
    assert keys == [k for k, _ in live] + [50, 51]
    sink.abort(pending)


# ------------------------------------------------------------------ 5. reprocessing while the next runs
def _stateful_day2(sink, reads):
    return staged_txn(sink, IV2, {PART2: [make_rows("day2", 2, start=500)]}, reads=reads)


def test_reprocess_of_the_predecessor_aborts_a_dependent_that_read_the_old_state(table_url):
    """Case 5. Day 2 began reading day 1's e1; day 1 is reprocessed and commits e2; day 2's commit must
    refuse (InputChangedError: a retry of the interval recomputes on e2), publishing nothing."""
    sink = open_sink(table_url)
    d1 = commit_version(sink, IV, {PART: [make_rows("d1", 2)]})
    d2 = _stateful_day2(sink, reads=d1)
    d1b = commit_version(sink, IV, {PART: [make_rows("d1b", 3, start=10)]})
    with pytest.raises(InputChangedError, match="re-run the interval"):
        sink.commit(d2)
    assert sink.status(IV2)[d2.epoch].state is State.ABORTED and visible_rows(sink, PART2) == []
    d2b = _stateful_day2(sink, reads=d1b)  # the retry of day 2 reads the new state and commits
    assert sink.commit(d2b).partitions == {PART2: "published"}


def test_dependent_that_committed_first_is_reported_stale_by_the_reprocess(table_url):
    """Case 5, the other order: day 2 committed on e1 before day 1's reprocess decided. That is a
    sequential reprocess: day 1's commit reports day 2 stale (it must be re-run)."""
    sink = open_sink(table_url)
    d1 = commit_version(sink, IV, {PART: [make_rows("d1", 2)]})
    d2 = _stateful_day2(sink, reads=d1)
    sink.commit(d2)
    again = staged_txn(sink, IV, {PART: [make_rows("d1b", 3, start=10)]})
    assert sink.commit(again).extra["stale"] == [d2.name]


def test_reprocess_deciding_between_the_dependents_intent_and_its_check(table_url, monkeypatch):
    """Case 5 at the exact point: day 2 announced its intent to commit; before it reads day 1's log,
    day 1's reprocess commits whole. Either day 1 fences day 2 or day 2 sees day 1's new version: day 2
    never commits on the replaced state."""
    sink, other = open_sink(table_url), open_sink(table_url)
    d1 = commit_version(sink, IV, {PART: [make_rows("d1", 2)]})
    d2 = _stateful_day2(sink, reads=d1)
    fired = interleave(monkeypatch, ordering_module, "newer_than", lambda *a: True,
                       lambda: commit_version(other, IV, {PART: [make_rows("d1b", 3, start=10)]}))
    with pytest.raises(InputChangedError):
        sink.commit(d2)
    monkeypatch.undo()
    assert fired["fired"] and sink.status(IV2)[d2.epoch].state is State.ABORTED
    assert visible_rows(sink, PART2) == [] and log_problems(sink, IV2) == []


# ------------------------------------------------------------------ 6. log compaction vs a publish
def _commit_failing_before_publish(sink, txn):
    """Decide ``txn`` COMMITTED, then fail right before its publish (the publish is left to recovery)."""
    os.environ["EO_FAILPOINTS"] = "commit.before_publish=error"
    try:
        with pytest.raises(Exception, match="commit.before_publish"):
            sink.commit(txn)
    finally:
        del os.environ["EO_FAILPOINTS"]
    assert sink.status(txn.interval)[txn.epoch].state is State.COMMITTED


def test_log_compaction_never_loses_the_partitions_a_pending_publish_must_replace(table_url, monkeypatch):
    """Case 6. e1 published a=1 and a=2; e2 (only a=1) is decided but not yet published when gc
    compacts. e2's publish must still replace a=2 with an empty version, and recovery must finish it."""
    sink, maintenance = open_sink(table_url, require_validation=True), open_sink(table_url, require_validation=True)
    a1, a2 = "a=2026-01-01", "a=2026-01-01x"
    e1 = staged_txn(sink, IV, {a1: [make_rows("e1", 2)], a2: [make_rows("e1b", 2, start=10)]})
    sink.record_validation(e1, True, {})
    sink.commit(e1)
    e2 = staged_txn(sink, IV, {a1: [make_rows("e2", 3, start=20)]})  # validating: gc's recovery leaves it

    def decide_e2():  # gc has recovered; e2 is decided now, and its publish has not run yet
        sink.record_validation(e2, True, {})
        _commit_failing_before_publish(sink, e2)

    fired = interleave(monkeypatch, maintenance_module, "_collect_interval", lambda *a: True, decide_e2)
    gc(maintenance, min_age=0, stale_after=3600)
    monkeypatch.undo()
    assert fired["fired"] and not sink.status(IV)[e2.epoch].published
    assert "pre_committed" in sink.status(IV)[e1.epoch].records  # not compacted under a pending publish
    assert sink.recover() == [f"{e2.name}: commit finished (rolled forward)"]
    assert_exact_version(sink, a1, make_rows("e2", 3, start=20), e2)
    assert visible_rows(sink, a2) == [] and sink.live_version(a2) == e2.name
    assert log_problems(sink, IV) == []


# ------------------------------------------------------------------ 7. staged files vs the decision
def test_staged_file_replaced_after_pre_commit_aborts_before_the_decision(table_url):
    """Case 7. An orphaned writer rewrites a staged file after pre_commit: the commit checks the files
    against the manifest before deciding, aborts, and nothing blocks recover/gc of any interval."""
    sink = open_sink(table_url)
    commit_version(sink, IV2, {PART2: [make_rows("other", 2, start=70)]})
    txn = staged_txn(sink, IV, {PART: split(make_rows("a", 4), 2)})
    write_output(sink, txn, {PART: [make_rows("orphan", 9, start=300)]})  # part-00000 rewritten
    with pytest.raises(StorageError, match="changed after pre_commit"):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    assert sink.recover() == [] and gc(sink, min_age=0)["failed"] == []
    assert visible_rows(sink, PART) == [] and leftovers(sink) == []


def test_late_writer_after_the_seal_never_reaches_the_published_version(tmp_path, monkeypatch):
    """Case 7 (local): once the commit sealed the data (renamed it away from the writer's path), a late
    writer's files land in a new data dir that is never published and is removed."""
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    rows = make_rows("a", 4)
    txn = staged_txn(sink, IV, {PART: [rows]})
    late = lambda: write_output(sink, txn, {PART: [make_rows("late", 5, start=600)]})  # noqa: E731
    fired = interleave(monkeypatch, transaction_module, "failpoint", lambda n: n == "commit.before_publish", late)
    sink.commit(txn)
    monkeypatch.undo()
    assert fired["fired"]
    assert_exact_version(sink, PART, rows, txn)
    gc(sink, min_age=0)
    assert leftovers(sink) == []


def test_nested_partitions_are_refused_at_pre_commit(table_url):
    """Case 7: ``a=1`` beside ``a=1/b=2`` - publishing one would move the other."""
    sink = open_sink(table_url)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("a", 2)], f"{PART}/h=01": [make_rows("b", 2, start=9)]})
    with pytest.raises(StorageError, match="nested|shapes"):
        sink.pre_commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    assert sink.abort(txn) is State.ABORTED and leftovers(sink) == []


# ------------------------------------------------------------------ 8. ownership
def test_a_table_belongs_to_one_pipeline(table_url):
    """Case 8. A second DAG writing the same table is refused before anything is written, naming both."""
    commit_version(open_sink(table_url, pipeline="dag_a"), IV, {PART: [make_rows("a", 2)]})
    intruder = open_sink(table_url, pipeline="dag_b")
    with pytest.raises(OwnershipError, match="'dag_a'.*'dag_b'"):
        intruder.begin(IV2)
    assert visible_rows(open_sink(table_url, pipeline="dag_a"), PART) == make_rows("a", 2)


def test_two_intervals_can_never_publish_one_partition(table_url):
    """Two intervals whose output lands in the same partition (an hourly job writing dt=<day>): the
    second is refused at pre_commit; the first interval's rows stay."""
    sink = open_sink(table_url)
    hour10 = Interval("2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z")
    hour11 = Interval("2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z")
    commit_version(sink, hour10, {PART: [make_rows("h10", 3)]})
    txn = sink.begin(hour11)
    write_output(sink, txn, {PART: [make_rows("h11", 2, start=50)]})
    with pytest.raises(OwnershipError, match="belongs to interval"):
        sink.pre_commit(txn)
    sink.abort(txn)
    assert visible_rows(sink, PART) == make_rows("h10", 3)


# ------------------------------------------------------------------ 9. smaller ones
def test_unknown_epochs_are_refused(table_url):
    """Case 9: pre_commit of a never-begun epoch used to create it, and recovery then published an
    empty version over the live data."""
    sink = open_sink(table_url)
    rows = make_rows("live", 3)
    commit_version(sink, IV, {PART: [rows]})
    for phase in (sink.pre_commit, sink.commit, sink.abort):
        with pytest.raises(TransactionStateError, match="no such transaction"):
            phase(sink.ref(IV, 7))
    assert sink.recover() == [] and visible_rows(sink, PART) == rows


def test_recovery_during_a_running_validation_never_commits_a_failing_verdict(table_url):
    """Case 9 (a sink without required validation): recovery commits a pre-committed transaction while
    its validation still runs; the late failing verdict cannot be recorded on the committed one - and a
    failing verdict recorded first stops recovery from committing."""
    sink = open_sink(table_url)
    txn = staged_txn(sink, IV, {PART: [make_rows("a", 2)]})
    assert sink.recover(IV) == [f"{txn.name}: recovered and committed"]
    assert sink.record_validation(txn, False, {"failures": ["late"]}) is True
    for st in sink.status(IV).values():
        assert not (st.state is State.COMMITTED and (st.validation or {}).get("passed") is False)
    failing = staged_txn(sink, IV, {PART: [make_rows("b", 2, start=40)]})
    assert sink.record_validation(failing, False, {}) is False
    assert sink.recover(IV) == [f"{failing.name}: aborted (pre-committed but superseded or not validated)"]
    assert visible_rows(sink, PART) == make_rows("a", 2)


@pytest.mark.parametrize("table_url", ["s3"], indirect=True)
def test_s3_finisher_overtaken_while_listing_returns_already(table_url, monkeypatch):
    """Case 9 (S3): A lists the partition, then a second finisher completes the same publish (copies,
    switches, moves the staging away) before A lists the staged files. A returns "already"."""
    sink, other = open_sink(table_url), open_sink(table_url)
    rows = make_rows("a", 6)
    txn = staged_txn(sink, IV, {PART: split(rows, 3)})
    staged = sink.storage.join(sink.data_dir(txn), PART)
    fired = interleave(monkeypatch, sink.storage, "walk_files", lambda path: path == staged,
                       lambda: other.recover(IV))
    result = sink.commit(txn)
    monkeypatch.undo()
    assert fired["fired"] and result.partitions == {PART: "already"}
    assert_exact_version(sink, PART, rows, txn)


@pytest.mark.parametrize("table_url", ["s3"], indirect=True)
def test_s3_publish_and_gc_never_delete_files_the_protocol_did_not_write(table_url):
    """To-check item: the first S3 publish used to delete every file in the partition prefix."""
    sink = open_sink(table_url)
    foreign = sink.storage.join(sink.table, PART, "notes.txt")
    sink.storage.write_atomic(foreign, b"kept by someone else")
    commit_version(sink, IV, {PART: [make_rows("a", 2)]})
    commit_version(sink, IV, {PART: [make_rows("b", 2, start=10)]})
    gc(sink, min_age=0)
    assert sink.storage.read_bytes(foreign) == b"kept by someone else"


def test_one_broken_interval_never_stops_recover_and_gc_of_the_others(table_url):
    """A committed interval whose publish can never finish (its sealed files were deleted by hand) is
    reported; every other interval is still recovered and collected."""
    sink = open_sink(table_url)
    broken = staged_txn(sink, IV, {PART: [make_rows("a", 2)]})
    _commit_failing_before_publish(sink, broken)
    sink.storage.remove_tree(sink.sealed_dir(broken))
    healthy = staged_txn(sink, IV2, {PART2: [make_rows("b", 2, start=20)]})
    actions = sink.recover()
    assert any(a.startswith(f"FAILED {IV.token}") for a in actions), actions
    assert f"{healthy.name}: recovered and committed" in actions
    assert any(a.startswith(f"FAILED {IV.token}") for a in gc(sink, min_age=0)["recovered"])
    assert visible_rows(sink, PART2) == make_rows("b", 2, start=20)
    with pytest.raises((StorageError, FencedError)):
        sink.recover(IV)  # asked for that interval alone, the failure is raised
