"""Other writers on an open Delta table (issue 25, class 4): another engine - delta-rs here, as Spark or
Databricks would - runs OPTIMIZE, DELETE, UPDATE, MERGE, RESTORE or VACUUM between our commits, or cleans up
the log. After each, a reprocess of an interval leaves exactly its new rows and every other interval as it
was. Races are forced at the exact step (the other engine commits between our snapshot read and our commit),
never with sleeps. The table rules another engine can add (partitioning, features, constraints) are in
test_delta_other_writers_rules.py; the helpers both use in tests/other_writers.py."""
from __future__ import annotations

import pyarrow as pa
import pytest

from exactly_once import State
from exactly_once.errors import FailpointError, StorageError, TransactionStateError
from exactly_once.ops.maintenance import gc
from exactly_once.ops.rollback import rollback
from exactly_once.targets.base import StagedVersion
from exactly_once.targets.delta import DeltaTarget
from other_writers import (DELTA, FIRST, IV, IV2, LATE, PART, PART2, delta_sink, engine, expect, kv_rows,
                           outside_files, rows, staged_replacement, two_intervals)
from protocol_helpers import (CRASH_EXIT, commit_version, failpoints, interleave, make_rows, refresh, run_child, write_output)

deltalake = pytest.importorskip("deltalake")


@pytest.mark.parametrize("op", ["compact", "z_order"])
def test_reprocess_after_an_outside_compaction_replaces_only_the_interval(delta_url, op):
    """The bug: the reprocess removed only files in our ``<txn>/`` dirs, so the compacted file of the
    interval's old rows stayed live beside the new ones. The reprocess also drops LATE, which the old
    version wrote and the new one does not: its compacted file goes too."""
    sink = delta_sink(delta_url)
    _, c = two_intervals(sink)
    optimize = engine(sink).optimize
    metrics = optimize.compact() if op == "compact" else optimize.z_order(["k"])
    assert metrics["numFilesRemoved"] == 6 and len(outside_files(sink)) == 3
    assert sink.live_version(PART2) is None  # no transaction of ours holds its rows now: not a dir name
    b = make_rows("b", 3, start=100)
    t = commit_version(sink, IV, {PART: [b]})
    assert rows(sink) == sorted(expect(b) + expect(c, PART2))
    assert sink.target.live_epoch(IV) == t.epoch and all(p.startswith(PART2) for p in outside_files(sink))
    d = make_rows("d", 2, start=200)
    commit_version(sink, IV2, {PART2: [d]})
    assert rows(sink) == sorted(expect(b) + expect(d, PART2)) and outside_files(sink) == []


@pytest.mark.parametrize("op", ["delete", "update", "merge"])
def test_reprocess_after_an_outside_delete_update_or_merge(delta_dir, op):
    """DELETE, UPDATE and MERGE rewrite the files they touch under new names in the partition (MERGE
    also inserts a row into IV's); the reprocess replaces IV's rows, and IV2 keeps what the other engine
    made of it."""
    sink = delta_sink(str(delta_dir / "t"))
    _, c = two_intervals(sink)
    other = engine(sink)
    if op == "delete":
        other.delete("k = 1 OR k = 41")
        c_now = [r for r in c if r[0] != 41]
    elif op == "update":
        other.update(updates={"v": "'edited'"}, predicate="k = 1 OR k = 41")
        c_now = [(k, "edited" if k == 41 else v) for k, v in c]
    else:
        source = pa.table({"k": pa.array([1, 41, 99], pa.int64()), "v": ["edited", "edited", "inserted"],
                           "dt": [IV.day, IV2.day, IV.day]})
        (other.merge(source, "s.k = t.k AND s.dt = t.dt", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
        c_now = [(k, "edited" if k == 41 else v) for k, v in c]
        assert (99, "inserted", IV.day) in rows(sink, PART)
    assert rows(sink, PART2) == expect(c_now, PART2) and outside_files(sink)
    b = make_rows("b", 3, start=100)
    commit_version(sink, IV, {PART: [b]})
    assert rows(sink) == sorted(expect(b) + expect(c_now, PART2))


@pytest.mark.parametrize("op", ["compact", "delete"])
def test_an_outside_commit_between_our_read_and_our_commit_is_seen(delta_url, monkeypatch, op):
    """The other engine commits after our publish read the snapshot and computed nothing yet on a newer
    one: our commit (made on the snapshot it read, no silent retries) loses the log entry, re-reads
    the table and computes the removes again - the rewritten file is removed, not left beside ours."""
    sink = delta_sink(delta_url)
    c, txn, b = staged_replacement(sink)

    def outside():
        other = engine(sink)
        other.optimize.compact() if op == "compact" else other.delete("k = 0")
        return other.version()

    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *r: t == txn, outside)
    assert sink.commit(txn).partitions == {PART: "published", LATE: "published"}
    assert state["fired"] and engine(sink).version() == state["result"] + 1  # ours landed after theirs
    assert rows(sink) == sorted(expect(b) + expect(c, PART2))


def test_an_outside_optimize_that_read_before_our_commit_is_refused_by_its_conflict_check(delta_dir):
    """The other order: the other engine read the table, our reprocess committed, then it commits. Its
    own conflict check (Delta's protocol) refuses: we removed files it read. Our rows stay exact."""
    sink = delta_sink(str(delta_dir / "t"))
    _, c = two_intervals(sink)
    stale = engine(sink)
    b = make_rows("b", 3, start=100)
    commit_version(sink, IV, {PART: [b]})
    with pytest.raises(deltalake.exceptions.CommitFailedError, match="concurrent transaction deleted"):
        stale.optimize.compact()
    assert rows(sink) == sorted(expect(b) + expect(c, PART2))


def test_lost_acknowledgement_is_still_detected_after_an_optimize(delta_dir):
    """The Delta commit landed, our log did not record it, then the other engine compacted the files
    away from our dir: the txn appId's version (kept by every later commit) still says it is live."""
    url = str(delta_dir / "t")
    a = make_rows("a", 4)
    ops = [{"op": "begin"}, {"op": "write", "files": {PART: [a[:2], a[2:]]}}, {"op": "pre_commit"},
           {"op": "commit"}]
    code, _, err = run_child(url, IV, ops, failpoints_spec="commit.after_publish=crash", sink_kwargs=DELTA)
    assert code == CRASH_EXIT, err
    sink = delta_sink(url)
    engine(sink).optimize.compact()
    assert len(outside_files(sink)) == 1 and not sink.status(IV)[1].published
    assert sink.target.live_epoch(IV) == 1 and sink.target.is_live(sink.ref(IV, 1), [PART])
    assert sink.commit(sink.ref(IV, 1)).partitions == {PART: "already"}
    assert engine(sink).version() == FIRST + 1 and rows(sink) == expect(a)  # committed once, then OPTIMIZE
    b = make_rows("b", 2, start=100)
    commit_version(sink, IV, {PART: [b]})
    assert rows(sink) == expect(b)


def test_vacuum_with_the_default_retention_touches_nothing_of_ours(delta_dir):
    """Delta's 7-day retention, even a full vacuum (every unreferenced file, as Spark's VACUUM): an
    open transaction's staged files, a superseded version's files and the compacted-away ones stay, so
    the open commit publishes and rollback and time travel still work."""
    sink = delta_sink(str(delta_dir / "t"))
    old, c = two_intervals(sink)
    b = make_rows("b", 3, start=100)
    commit_version(sink, IV, {PART: [b]})
    engine(sink).optimize.compact()
    txn = sink.begin(IV2)
    d = make_rows("d", 2, start=200)
    write_output(sink, txn, {PART2: [d]})
    sink.pre_commit(txn)
    assert engine(sink).vacuum(dry_run=False) == []
    assert engine(sink).vacuum(dry_run=False, full=True) == []
    sink.commit(txn)
    assert rows(sink) == sorted(expect(b) + expect(d, PART2))
    rollback(sink, IV, 1)
    assert rows(sink) == sorted(expect(old[:6]) + expect(old[6:], LATE) + expect(d, PART2))
    refresh(sink)
    t = sink.target.snapshot(FIRST + 1).to_pyarrow_table()  # time travel to IV2's first version
    assert sorted(t.column("v").to_pylist()) == sorted(v for _, v in old + c)


def test_a_slow_publisher_clock_does_not_start_vacuums_retention_early(delta_dir):
    """The bug: the ``remove`` actions carried the publisher's clock, so a publisher 8 days slow made a
    VACUUM with Delta's default 7-day retention delete the version it superseded a moment ago: a reader
    pinned to it, time travel and ``eo rollback`` failed. Now they carry the later of the publisher's and
    the storage's clock."""
    sink = delta_sink(str(delta_dir / "t"))
    a, b = make_rows("a", 3), make_rows("b", 2, start=10)
    t1 = commit_version(sink, IV, {PART: [a]})
    pinned = engine(sink)  # a reader that resolved e1's snapshot
    published_days_ago(sink, IV, {PART: [b]}, days=8, clock_only=True)
    assert engine(sink).vacuum(dry_run=False) == []
    assert sorted(zip(*(pinned.to_pyarrow_table().column(c).to_pylist() for c in ("k", "v")))) == a
    rollback(sink, IV, t1.epoch)
    assert rows(sink) == expect(a)


def test_vacuum_with_no_retention_breaks_only_what_targets_md_says(delta_dir):
    """A vacuum with 0 h retention deletes the superseded version's files: rollback to it is refused
    (nothing changes), and a reprocess and gc still work."""
    sink = delta_sink(str(delta_dir / "t"))
    _, c = two_intervals(sink)
    b = make_rows("b", 3, start=100)
    commit_version(sink, IV, {PART: [b]})
    gone = engine(sink).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert len(gone) == 4 and all(p.startswith(sink.ref(IV, 1).name) for p in gone)
    version = engine(sink).version()
    with pytest.raises(TransactionStateError, match="are gone"):
        rollback(sink, IV, 1)
    assert engine(sink).version() == version and rows(sink) == sorted(expect(b) + expect(c, PART2))
    engine(sink).optimize.compact()
    d = make_rows("d", 2, start=200)
    commit_version(sink, IV, {PART: [d]})
    assert gc(sink, min_age=0)["versions"]  # our sweep deletes what the next vacuum would
    engine(sink).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    assert rows(sink) == sorted(expect(d) + expect(c, PART2))
    e = make_rows("e", 2, start=300)
    commit_version(sink, IV2, {PART2: [e]})
    assert rows(sink) == sorted(expect(d) + expect(e, PART2))


def test_a_full_vacuum_with_no_retention_during_an_open_transaction_publishes_nothing(delta_url):
    """The hazard TARGETS.md warns about: a full vacuum with a retention shorter than a run deletes an
    open transaction's staged files (no Delta version references them yet). The commit notices before
    deciding - the seal's check locally, the schema read on S3 - aborts, and a re-run publishes."""
    sink = delta_sink(delta_url)
    _, c = two_intervals(sink)
    txn = sink.begin(IV2)
    write_output(sink, txn, {PART2: [make_rows("d", 2, start=200)]})
    sink.pre_commit(txn)
    gone = engine(sink).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
    assert any(p.startswith(txn.name) for p in gone)
    with pytest.raises(StorageError, match="staged output changed after pre_commit"):
        sink.commit(txn)
    assert sink.status(IV2)[txn.epoch].state is State.ABORTED
    assert rows(sink, PART2) == expect(c, PART2)
    e = make_rows("e", 2, start=300)
    commit_version(sink, IV2, {PART2: [e]})
    assert rows(sink, PART2) == expect(e, PART2)


def test_an_outside_restore_is_repaired_by_a_reprocess(delta_dir):
    """RESTORE is table-wide and keeps the app transactions: the table shows IV's old rows while its
    marker still names the newer epoch (unsupported, TARGETS.md). A reprocess of IV makes it exact."""
    sink = delta_sink(str(delta_dir / "t"))
    old, c = two_intervals(sink)
    t2 = commit_version(sink, IV, {PART: [make_rows("b", 3, start=100)]})
    engine(sink).restore(FIRST + 1)
    assert rows(sink) == sorted(expect(old[:6]) + expect(old[6:], LATE) + expect(c, PART2))
    assert sink.target.live_epoch(IV) == t2.epoch  # the marker was not restored
    gc(sink, min_age=0)  # the log calls epoch 1 superseded; the table uses its files again: gc keeps them
    assert rows(sink) == sorted(expect(old[:6]) + expect(old[6:], LATE) + expect(c, PART2))
    d = make_rows("d", 2, start=200)
    commit_version(sink, IV, {PART: [d]})
    assert rows(sink) == sorted(expect(d) + expect(c, PART2))


def test_log_cleanup_keeps_the_marker_and_publishing_goes_on(delta_dir):
    """Another engine checkpoints and cleans up the log (retention 0): the ``txn`` markers live on in the
    checkpoint (``already`` / ``superseded`` still judged); only ``eo history``'s Delta versions go."""
    sink = delta_sink(str(delta_dir / "t"))
    _, c = two_intervals(sink)
    t2 = commit_version(sink, IV, {PART: [make_rows("b", 3, start=100)]})
    other = engine(sink)
    other.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 days"})
    other = engine(sink)
    other.create_checkpoint()
    other.cleanup_metadata()
    assert sink.target.live_epoch(IV) == t2.epoch and sink.target.live_epoch(IV2) == 1
    assert sink.target.commit_versions() == {}
    version = engine(sink).version()
    assert sink.target.publish(t2, StagedVersion({PART: ()}, lambda *a: None)) == {PART: "already"}
    assert engine(sink).version() == version  # judged by the marker alone: nothing committed again
    d = make_rows("d", 2, start=200)
    commit_version(sink, IV, {PART: [d]})
    assert rows(sink) == sorted(expect(d) + expect(c, PART2))


def test_our_commits_never_clean_up_the_tables_log(delta_dir):
    """Our commits checkpoint the table but never delete its log entries (the post-commit hook's log cleanup
    is off): with a retention another engine set to nothing, every version stays readable - time travel,
    ``eo history``'s Delta versions - until that engine cleans up the log itself."""
    sink = delta_sink(str(delta_dir / "t"))
    two_intervals(sink)
    engine(sink).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 days",
                                             "delta.checkpointInterval": "2"})
    entries = lambda: sorted(p.name for p in (delta_dir / "t" / "_delta_log").glob("*.json"))  # noqa: E731
    kept, start = entries(), engine(sink).version()  # (that engine's own commit may have cleaned up: its hook)
    checkpoints = set(delta_dir.glob("t/_delta_log/*.checkpoint.parquet"))
    for i in range(4):
        commit_version(sink, IV, {PART: [make_rows(f"r{i}", 2, start=100 + 10 * i)]})
    assert set(delta_dir.glob("t/_delta_log/*.checkpoint.parquet")) > checkpoints  # ours checkpointed
    assert entries() == kept + [f"{v:020d}.json" for v in range(start + 1, engine(sink).version() + 1)]
    back = deltalake.DeltaTable(sink.target.uri, version=start + 1).to_pyarrow_table()
    assert back.num_rows == 6  # our first commit after it (IV's r0 and IV2), still there to travel to


def published_days_ago(sink, interval, data, days: float = 3, fp: str | None = None, *,
                       clock_only: bool = False):
    """Publish ``data`` as a new epoch of ``interval`` stamped ``days`` ago (its ``txn`` marker last updated
    then, its ``remove`` actions dated then: as if that long had passed); ``clock_only``: only the
    publisher's clock is set back (the storage's is right). ``fp``: the commit fails there."""
    import time as clock

    txn = sink.begin(interval)
    write_output(sink, txn, data)
    sink.pre_commit(txn)
    real = clock.time
    with pytest.MonkeyPatch.context() as mp, failpoints(fp):
        if clock_only:
            mp.setattr(clock, "time", lambda: real() - days * 86400)
        else:
            mp.setattr(DeltaTarget, "_now_ms", lambda self: int((real() - days * 86400) * 1000))
        try:
            sink.commit(txn)
        except FailpointError:
            assert fp is not None
    return txn


def expire_markers(sink) -> None:
    """Another engine sets ``delta.setTransactionRetentionDuration`` (1 day) and checkpoints: delta-rs drops
    every ``txn`` marker last updated more than a day ago."""
    engine(sink).alter.set_table_properties({"delta.setTransactionRetentionDuration": "interval 1 days"})
    engine(sink).create_checkpoint()


@pytest.mark.parametrize("case", ["lost_acknowledgement", "late_finisher"])
def test_an_expired_txn_marker_is_judged_by_the_live_files(delta_dir, case):
    """The bug: with our marker expired, a lost acknowledgement was committed again and delta-rs refused it
    (ValueError "Cannot add and remove the same file path", out of every recover and gc: the interval stuck),
    and a late finisher of an older epoch would replace the newer version. The live files' ``<txn>/`` dirs
    are the second marker: the epoch is ``already`` / ``superseded``, nothing is committed again."""
    sink = delta_sink(str(delta_dir / "t"))
    a, b = make_rows("a", 3), make_rows("b", 2, start=10)
    t1 = commit_version(sink, IV, {PART: [a]})
    fp = "commit.after_publish=error" if case == "lost_acknowledgement" else None
    t2 = published_days_ago(sink, IV, {PART: [b]}, fp=fp)
    expire_markers(sink)
    assert engine(sink).transaction_version(sink.target.txn_application(IV)) is None  # expired
    version = engine(sink).version()
    if case == "lost_acknowledgement":
        assert not sink.status(IV)[t2.epoch].published
        assert delta_sink(sink.table).recover(IV) == [f"{t2.name}: commit finished (rolled forward)"]
        assert sink.status(IV)[t2.epoch].records["published"]["partitions"] == {PART: "already"}
    else:  # e1's publisher stalled until now: it must not bring e1 back over e2
        assert sink.target.publish(t1, StagedVersion({PART: ()}, lambda *x: None)) == {PART: "superseded"}
    assert engine(sink).version() == version and rows(sink) == expect(b)
    assert sink.target.live_epoch(IV) == t2.epoch


def test_an_expired_marker_and_no_live_files_never_let_an_older_version_back(delta_dir):
    """Review 44, second round: the marker expired (as above) and another engine deleted the interval's rows,
    so nothing in the table names e2 any more: a late finisher of e1 asks the log's newest committed epoch
    and is superseded (it committed e1 again)."""
    sink = delta_sink(str(delta_dir / "t"))
    t1 = commit_version(sink, IV, {PART: [make_rows("a", 3)]})
    published_days_ago(sink, IV, {PART: [make_rows("b", 2, start=10)]})
    expire_markers(sink)
    engine(sink).delete(f"dt = '{PART.split('=', 1)[1]}'")
    version = engine(sink).version()
    late = StagedVersion({PART: ()}, lambda *x: None, newest_committed=lambda: sink.log.newest_committed(IV))
    assert sink.target.publish(t1, late) == {PART: "superseded"}
    assert engine(sink).version() == version and rows(sink) == []


def test_a_reprocess_after_an_optimize_of_a_partition_value_with_reserved_characters_replaces_it(delta_dir):
    """The log holds paths URI-encoded (the other engine's compacted file of ``ts=...T00:00+00:00`` lands
    under ``%253A``...); a remove must name the decoded path, or delta-rs encodes it again and the remove
    names no file: the old rows stayed live beside the new ones (found by the adversarial review)."""
    part = "ts=2026-01-01T00:00+00:00"
    sink = delta_sink(str(delta_dir / "t"))
    commit_version(sink, IV, {part: [make_rows("a", 2), make_rows("a", 2, start=2)]})
    engine(sink).optimize.compact()
    assert len(outside_files(sink)) == 1
    commit_version(sink, IV, {part: [make_rows("b", 2, start=10)]})
    assert kv_rows(sink) == [(10, "b-10"), (11, "b-11")]


def test_a_reprocess_replaces_staged_files_whose_names_are_encoded_in_the_log(delta_dir):
    """A staged file named ``part 1.parquet`` is ``part%201.parquet`` in the log: its reprocess removes it."""
    import pyarrow.parquet as pq

    sink = delta_sink(str(delta_dir / "t"))
    for tag, start in (("a", 0), ("b", 10)):
        txn = sink.begin(IV)
        base = sink.storage.join(sink.data_dir(txn), PART)
        sink.storage.makedirs(base)
        with sink.storage.open(sink.storage.join(base, "part 1.parquet"), "wb") as f:
            pq.write_table(pa.table({"k": pa.array([start, start + 1], pa.int64()), "v": [tag, tag]}), f)
        sink.pre_commit(txn)
        sink.commit(txn)
    assert kv_rows(sink) == [(10, "b"), (11, "b")]
    assert sink.live_files(PART) == [sink.storage.join(sink.table, sink.ref(IV, 2).name, "sealed", PART,
                                                      "part 1.parquet")]
