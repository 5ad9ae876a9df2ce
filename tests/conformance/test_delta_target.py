"""The protocol publishing into a Delta Lake table (``table_format="delta"``), local and on the loopback S3
server (the crash at every failpoint and the lost acknowledgement are in tests/conformance/): two finishers of one
epoch, two intervals racing for the log entry, a zombie older epoch, readers overlapping a commit, schema
checks, gc (issue 18). Races are forced interleavings at the exact step, never sleeps. S3 data is written
by the stand-in writer (pyarrow through s3fs): Spark has no s3a here."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exactly_once import Interval, State, TwoPhaseCommitSink
from exactly_once.errors import ConfigError, FencedError, OwnershipError, TargetSchemaError
from exactly_once.ids import parse_txn_name
from exactly_once.ops.maintenance import gc
from exactly_once.targets.delta import DeltaTarget
from protocol_helpers import (commit_version, interleave, make_rows, open_sink, refresh, write_output)

pytest.importorskip("deltalake")
IV, IV2 = Interval.daily("2026-01-01"), Interval.daily("2026-01-02")
PART, PART2 = f"dt={IV.day}", f"dt={IV2.day}"
DELTA = {"table_format": "delta"}
FIRST = 1  # the table's first publish: the first commit's check created the table (version 0, no files)


def delta_sink(url: str, **kw):
    return open_sink(url, **DELTA, **kw)


def table_rows(sink, version: int | None = None) -> list[tuple]:
    """What a Delta reader (delta-rs) sees: sorted ``(k, v, dt)``."""
    refresh(sink)
    t = sink.target.snapshot(version).to_pyarrow_table()
    return sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), t.column("dt").to_pylist()))


def expect(rows, part: str = PART) -> list[tuple]:
    return sorted((k, v, part.split("=", 1)[1]) for k, v in rows)


def delta_leftovers(sink) -> list[str]:
    """Idle-state garbage: staging dirs, and ``<table>/<txn>/`` dirs of transactions that did not commit."""
    refresh(sink)
    st = sink.storage
    found = [f"_staging/{n}" for n in st.list_names(st.join(sink.home, "_staging"))]
    for name in st.list_names(sink.table):
        parsed = parse_txn_name(name)
        if parsed and sink.log.status(Interval.from_token(parsed[0]), parsed[1]).state is not State.COMMITTED:
            found.append(name)
    return found


def test_publish_replaces_the_interval_in_one_delta_commit(delta_url):
    sink = delta_sink(delta_url)
    first, again, other = make_rows("a", 6), make_rows("b", 4, start=50), make_rows("c", 3, start=90)
    commit_version(sink, IV, {PART: [first[:3], first[3:]]})
    commit_version(sink, IV2, {PART2: [other]})
    t3 = commit_version(sink, IV, {PART: [again]})
    assert table_rows(sink) == sorted(expect(again) + expect(other, PART2))
    assert sink.target.live_epoch(IV) == t3.epoch and sink.target.live_epoch(IV2) == 1
    assert sink.live_version(PART) == t3.name and len(sink.live_files(PART)) == 1
    sealed = "sealed" if sink.storage.can_rename else "data"  # staged in the table, committed in place
    assert sink.live_files(PART)[0].startswith(sink.storage.join(sink.table, t3.name, sealed, PART) + "/")
    assert sink.storage.list_names(sink.storage.join(sink.home, "_staging")) == []
    state = sink.storage.join(sink.checkpoint_dir(t3), "state", "counts.json")  # the extras moved out
    assert json.loads(sink.storage.read_bytes(state)) == {PART: 4}
    assert not sink.storage.exists(sink.storage.join(sink.staging_dir(t3), "state"))
    dt = sink.target.snapshot()
    assert dt.version() == FIRST + 2  # one Delta commit per publish
    adds = sink.target.live_actions(dt)  # each file's stats: its rows (readers skip and count by them)
    assert sorted(a["num_records"] for a in adds) == [len(other), len(again)], adds
    assert table_rows(sink, version=FIRST) == expect(first)  # time travel
    assert delta_leftovers(sink) == []


def test_a_retire_cut_short_between_extras_is_finished_by_the_retry(delta_url):
    """After the publish, the staging's extras (state, counts) move into the checkpoint one by one: a finisher
    that died after moving the first leaves the others to the retry, which moves every one still there."""
    from exactly_once.errors import FailpointError
    from protocol_helpers import failpoints

    sink = delta_sink(delta_url)
    st = sink.storage
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("a", 3)]})
    for name in ("state/a.json", "state/z.json"):
        st.write_atomic(st.join(sink.staging_dir(txn), name), name.encode())
    extras = [e.name for e in sink.pre_commit(txn).extras]
    content = {n: st.read_bytes(st.join(sink.staging_dir(txn), n)) for n in extras}
    assert len(extras) == 3
    with failpoints("commit.before_publish=error"), pytest.raises(FailpointError):
        sink.commit(txn)  # decided COMMITTED; the finisher dies, here after moving the first extra:
    src = st.join(sink.staging_dir(txn), extras[0])
    st.write_atomic(st.join(sink.checkpoint_dir(txn), extras[0]), st.read_bytes(src))
    st.remove_tree(src)
    sink.commit(txn)
    assert {n: st.read_bytes(st.join(sink.checkpoint_dir(txn), n)) for n in extras} == content
    assert st.list_names(st.join(sink.home, "_staging")) == [] and delta_leftovers(sink) == []
    assert table_rows(sink) == expect(make_rows("a", 3))


def test_two_finishers_of_one_epoch_publish_once(delta_url, monkeypatch):
    sink, other = delta_sink(delta_url), delta_sink(delta_url)
    txn = sink.begin(IV)
    rows = make_rows("a", 5)
    write_output(sink, txn, {PART: [rows]})
    sink.pre_commit(txn)
    # the other finisher (recovery in another process) commits the same epoch inside our commit step
    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda *a: True,
                       lambda: other.recover(IV))
    result = sink.commit(txn)
    assert state["fired"] and result.partitions == {PART: "already"}
    assert sink.target.snapshot().version() == FIRST and table_rows(sink) == expect(rows)
    assert delta_leftovers(sink) == []


def test_two_intervals_racing_for_the_log_entry_both_land(delta_url, monkeypatch):
    sink, other = delta_sink(delta_url), delta_sink(delta_url)
    a, b = make_rows("a", 3), make_rows("b", 2, start=10)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [a]})
    sink.pre_commit(txn)
    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *r: t == txn,
                       lambda: commit_version(other, IV2, {PART2: [b]}))
    assert sink.commit(txn).partitions == {PART: "published"}
    assert state["fired"]
    assert table_rows(sink) == sorted(expect(a) + expect(b, PART2))
    assert sink.target.snapshot().version() == FIRST + 1  # the loser re-read the table and took the next entry


def test_zombie_older_epoch_never_replaces_a_newer_one(delta_url, monkeypatch):
    """Epoch 1 decided COMMITTED and stalled before its Delta commit; epoch 2 is published meanwhile
    (forced at that exact step). Epoch 1's commit then finds a newer app version: superseded, and the
    table keeps epoch 2. Its files stay for gc (another finisher of epoch 1 might have made them live a
    moment ago: tests/integration/test_grace.py), which deletes them once the grace is over."""
    sink, other = delta_sink(delta_url), delta_sink(delta_url)
    old, new = make_rows("old", 4), make_rows("new", 3, start=20)
    t1 = sink.begin(IV)
    write_output(sink, t1, {PART: [old]})
    sink.pre_commit(t1)

    def newer_epoch_publishes():
        target = other.target
        t2 = other.ref(IV, 2)
        other.log.append(IV, 2, "open", {"pipeline": other.pipeline, "sink": other.sink, "sources": [],
                                         "meta": {}, "reads": None})  # begin without recovering epoch 1
        other.storage.makedirs(other.data_dir(t2))
        write_output(other, t2, {PART: [new]})
        other.pre_commit(t2)
        other.commit(t2)
        return target

    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *r: t == t1,
                       newer_epoch_publishes)
    assert sink.commit(t1).partitions == {PART: "superseded"}
    assert state["fired"] and table_rows(sink) == expect(new)
    assert sink.target.live_epoch(IV) == 2
    refresh(sink)
    assert t1.name in sink.storage.list_names(sink.table)
    assert [os.path.basename(p) for p in gc(sink, min_age=0)["versions"]] == [t1.name]
    assert table_rows(sink) == expect(new)


@pytest.mark.parametrize("step", ["target_check", "intent"])
def test_abort_or_gc_racing_a_commit_publishes_nothing(delta_url, monkeypatch, step):
    """On S3 the commit does not list the sealed files (targets/delta.py): another process's abort + gc
    that deletes them inside the commit - before the schema read, or after it just before the decision
    (forced at that step) - wins the decision; the commit raises, the table and its rows are unchanged."""
    sink, other = delta_sink(delta_url), delta_sink(delta_url)
    kept = make_rows("kept", 2, start=70)
    commit_version(sink, IV2, {PART2: [kept]})
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("a", 3), make_rows("b", 2, start=10)]})
    sink.pre_commit(txn)

    def abort_and_gc():
        other.abort(other.ref(IV, txn.epoch))
        gc(other, min_age=0)
        refresh(other)
        assert not other.storage.exists(other.storage.join(other.table, txn.name))

    if step == "target_check":
        state = interleave(monkeypatch, DeltaTarget, "check", lambda *a: True, abort_and_gc)
    else:
        state = interleave(monkeypatch, sink.log, "append", lambda iv, e, kind, *a: kind == "intent", abort_and_gc)
    with pytest.raises(FencedError, match="not committed"):
        sink.commit(txn)
    monkeypatch.undo()
    assert state["fired"] and sink.status(IV)[txn.epoch].state is State.ABORTED
    assert sink.target.snapshot().version() == FIRST and table_rows(sink) == expect(kept, PART2)
    assert sink.target.live_epoch(IV) is None and delta_leftovers(sink) == []


def engine_reads(sink) -> dict[str, list[tuple]]:
    """The table's newest snapshot as each reader sees it: delta-rs, pyarrow (the snapshot's dataset),
    DuckDB and Polars over that dataset, and Polars' own Delta reader - each as sorted ``(k, v, dt)``."""
    import duckdb
    import polars

    refresh(sink)
    ds = sink.target.snapshot().to_pyarrow_dataset()
    frame = polars.read_delta(sink.target.uri, storage_options=sink.target.options or None)
    return {"deltalake": table_rows(sink),
            "pyarrow": sorted(tuple(r.values()) for r in ds.to_table(columns=["k", "v", "dt"]).to_pylist()),
            "duckdb": sorted(duckdb.connect().from_arrow(ds).select("k, v, dt").fetchall()),
            "polars": sorted(polars.scan_pyarrow_dataset(ds).select("k", "v", "dt").collect().rows()),
            "polars.read_delta": sorted(frame.select("k", "v", "dt").rows())}


def test_a_reader_overlapping_a_commit_sees_one_snapshot(delta_url, monkeypatch):
    """Every reader (delta-rs, pyarrow, DuckDB, Polars) inside the publish - files placed, log entry not
    written - sees the old version whole; a reader pinned to the old version keeps reading it after the
    commit; after it, every reader sees the new version whole."""
    sink = delta_sink(delta_url)
    old, new = make_rows("old", 6), make_rows("new", 4, start=40)
    commit_version(sink, IV, {PART: [old[:3], old[3:]]})
    pinned = sink.target.snapshot()
    assert set(map(tuple, engine_reads(sink).values())) == {tuple(expect(old))}
    seen: list[dict[str, list[tuple]]] = []
    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda *a: True, lambda: seen.append(engine_reads(sink)))
    commit_version(sink, IV, {PART: [new]})
    assert state["fired"] and len(seen) == 1 and all(v == expect(old) for v in seen[0].values()), seen
    t = pinned.to_pyarrow_table()
    assert sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist())) == sorted(old)
    assert all(v == expect(new) for v in engine_reads(sink).values())


def test_schema_clash_publishes_nothing_and_new_columns_widen(delta_dir):
    url = str(delta_dir / "warehouse" / "t")
    sink = delta_sink(url)
    commit_version(sink, IV, {PART: [make_rows("a", 3)]})

    def stage(txn, table):
        path = sink.storage.join(sink.data_dir(txn), PART2, "part-00000.parquet")
        sink.storage.makedirs(os.path.dirname(path))
        pq.write_table(table, path)
        sink.pre_commit(txn)

    bad = sink.begin(IV2)
    stage(bad, pa.table({"k": pa.array(["x"]), "v": pa.array(["y"])}))  # k: string, the table has int64
    with pytest.raises(TargetSchemaError, match="k: table int64, staged string"):
        sink.commit(bad)  # refused before the decision: aborted, nothing published, the interval free
    assert sink.status(IV2)[bad.epoch].state is State.ABORTED and delta_leftovers(sink) == []
    assert sink.target.live_epoch(IV2) is None and sink.target.snapshot().version() == FIRST
    wide = sink.begin(IV2)
    stage(wide, pa.table({"k": pa.array([7], pa.int64()), "v": ["w"], "extra": pa.array([1.5])}))
    sink.commit(wide)
    t = sink.target.snapshot().to_pyarrow_table()
    assert "extra" in t.column_names and sorted(t.column("extra").to_pylist(), key=str) == [1.5, None, None, None]


def test_timestamps_become_delta_timestamps(delta_dir):
    """Spark writes INT96 (read back as ns); the table stores a Delta ``timestamp``."""
    sink = delta_sink(str(delta_dir / "warehouse" / "t"))
    txn = sink.begin(IV)
    path = sink.storage.join(sink.data_dir(txn), PART, "part-00000.parquet")
    sink.storage.makedirs(os.path.dirname(path))
    ts = pa.array([1_700_000_000_000_000_000], pa.timestamp("ns"))
    pq.write_table(pa.table({"k": pa.array([1], pa.int64()), "at": ts}), path,
                   use_deprecated_int96_timestamps=True)
    sink.pre_commit(txn)
    sink.commit(txn)
    schema = json.loads(sink.target.snapshot().schema().to_json())
    assert {f["name"]: f["type"] for f in schema["fields"]}["at"] == "timestamp"
    assert sink.target.snapshot().to_pyarrow_table().column("at")[0].value == 1_700_000_000_000_000


def test_table_format_is_checked_and_bound(delta_dir):
    url = str(delta_dir / "warehouse" / "t")
    with pytest.raises(ConfigError, match="delta"):
        open_sink(url, table_format="iceberg")
    commit_version(delta_sink(url), IV, {PART: [make_rows("a", 1)]})
    with pytest.raises(OwnershipError, match="is a 'delta' table"):
        open_sink(url).begin(IV2)
    assert isinstance(TwoPhaseCommitSink.open(url).target, DeltaTarget)  # tools find the bound format


def test_gc_removes_superseded_versions_only_after_min_age_never_live_or_open(delta_url):
    sink = delta_sink(delta_url)
    t1 = commit_version(sink, IV, {PART: [make_rows("a", 2)]})
    t2 = commit_version(sink, IV, {PART: [make_rows("b", 2, start=10)]})
    zombie = sink.begin(IV2)
    sink.abort(zombie)
    write_output(sink, zombie, {PART2: [make_rows("z", 1)]})  # a fenced writer's late files, in the table
    opened = sink.begin(IV2)
    write_output(sink, opened, {PART2: [make_rows("c", 1)]})
    assert gc(sink, min_age=3600)["versions"] == []
    report = gc(sink, min_age=0)
    refresh(sink)
    names = sink.storage.list_names(sink.table)
    assert [os.path.basename(g) for g in report["versions"]] == [t1.name]
    assert zombie.name not in names  # aborted: gc deletes by our log, late files included
    assert t2.name in names and sink.storage.exists(sink.data_dir(opened))
    assert table_rows(sink) == expect(make_rows("b", 2, start=10))


def test_history_names_the_delta_version_and_rollback_is_a_new_delta_commit(delta_url, capsys):
    from exactly_once.cli import main
    from exactly_once.ops.history import history, render
    from exactly_once.ops.rollback import rollback

    sink = delta_sink(delta_url)
    first, second = make_rows("a", 3), make_rows("b", 2, start=10)
    t1 = commit_version(sink, IV, {PART: [first]})
    commit_version(sink, IV, {PART: [second]})
    result = rollback(sink, IV, t1.epoch)
    assert result.partitions == {PART: "published"} and result.txn.epoch == 3
    assert table_rows(sink) == expect(first)  # the old version, live again through the protocol
    rows = history(sink)
    assert [(r.epoch, r.table_version, r.live) for r in rows] == [(1, FIRST, False), (2, FIRST + 1, False),
                                                                         (3, FIRST + 2, True)]
    assert f"e3 (table v{FIRST + 2})" in render(sink, delta_url, rows)
    capsys.readouterr()
    assert main(["history", delta_url]) == 0  # `eo history <url>`: each epoch with its Delta version
    printed = capsys.readouterr().out
    assert all(f"e{e} (table v{FIRST + e - 1})" in printed for e in (1, 2, 3)), printed
    assert main(["history", delta_url, "--json"]) == 0
    assert [json.loads(line)["table_version"] for line in capsys.readouterr().out.splitlines()] == \
        [FIRST, FIRST + 1, FIRST + 2]
    assert table_rows(sink, version=FIRST + 1) == expect(second)  # time travel to the version history names
    assert delta_leftovers(sink) == []


def test_a_checkpoint_every_n_versions(delta_dir):
    """Tables are created with a checkpoint every 100 versions; with 10, ten publishes (the target alone,
    one interval each) leave the checkpoint of version 9, and a reader starting from it sees every
    interval's row once."""
    from datetime import date, timedelta

    from exactly_once.ids import TxnRef
    from exactly_once.storage import storage_for
    from target_helpers import stage

    sink = delta_sink(str(delta_dir / "warehouse" / "default"))
    commit_version(sink, IV, {PART: [make_rows("a", 1)]})
    assert sink.target.snapshot().metadata().configuration["delta.checkpointInterval"] == "100"
    storage, root = storage_for(str(delta_dir / "t"))
    target = DeltaTarget(storage, root, pipeline="p", sink="t", checkpoint_every=10)
    days = [(date(2026, 1, 1) + timedelta(days=i)).isoformat() for i in range(10)]
    for i, day in enumerate(days):
        staged = stage(delta_dir / "staging", {f"dt={day}": [[{"k": i, "v": day}]]})
        assert target.publish(TxnRef("p", "t", Interval.daily(day), 1), staged) == {f"dt={day}": "published"}
    checkpoints = sorted(p.name for p in (delta_dir / "t" / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints == ["00000000000000000009.checkpoint.parquet"]
    t = target.snapshot().to_pyarrow_table()
    assert sorted(t.column("k").to_pylist()) == list(range(10))
    assert t.schema.field("k").type == pa.int64()  # the table it created has the staged types, not strings


def test_the_target_on_its_own_places_every_partition_and_a_racing_creator_is_not_an_error(delta_dir, monkeypatch):
    """The target used without a sink (its version staged elsewhere) moves each partition's files into the
    table - every one, not only the first; two such first publishers racing to create the table (forced:
    the other creates it inside our commit step) both land, the loser re-reading the table it lost to."""
    from exactly_once.ids import TxnRef
    from exactly_once.storage import storage_for
    from target_helpers import stage

    storage, root = storage_for(str(delta_dir / "t"))
    mine, theirs = (DeltaTarget(storage, root, pipeline="p", sink="t") for _ in range(2))
    a, b, c = make_rows("a", 2), make_rows("b", 3, start=10), make_rows("c", 1, start=20)
    dicts = lambda data: [{"k": k, "v": v} for k, v in data]  # noqa: E731
    staged = stage(delta_dir / "staging", {"dt=2025-12-31": [], PART: [dicts(a)], "dt=2026-02-01": [dicts(b)]})
    state = interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, *rest: self is mine and dt is None,
                       lambda: theirs.publish(TxnRef("p", "t", IV2, 1), stage(delta_dir / "s2", {PART2: [dicts(c)]})))
    assert mine.publish(TxnRef("p", "t", IV, 1), staged) == {"dt=2025-12-31": "published", PART: "published",
                                                             "dt=2026-02-01": "published"}  # (the first one empty)
    assert state["fired"] and mine.snapshot().version() == 1  # theirs created it (0), ours the next entry
    t = mine.snapshot().to_pyarrow_table()
    got = sorted(zip(t.column("k").to_pylist(), t.column("dt").to_pylist()))
    assert got == sorted([(k, IV.day) for k, _ in a] + [(k, "2026-02-01") for k, _ in b] + [(k, IV2.day) for k, _ in c])


def test_an_empty_first_interval_commits_and_a_later_one_creates_the_table(delta_url):
    """The first interval ever published has no output (no rows, no partition): there is no table to
    create (a Delta table needs a column), so the empty version commits without one - it used to raise a
    raw DeltaError in the check, every recover and re-run the same (adversarial review)."""
    sink = delta_sink(delta_url)
    txn = sink.begin(IV)
    sink.storage.makedirs(sink.data_dir(txn))  # the job wrote nothing
    sink.pre_commit(txn)
    sink.commit(txn)
    st = sink.status(IV)[txn.epoch]
    assert st.state is State.COMMITTED and st.published and sink.target.snapshot() is None
    assert sink.recover(IV) == []
    rows = make_rows("a", 2)
    commit_version(sink, IV, {PART: [rows]})  # a reprocess that finds rows
    assert table_rows(sink) == expect(rows)
    empty = sink.begin(IV2)  # an empty version of an interval of a table that exists: committed with its marker
    sink.storage.makedirs(sink.data_dir(empty))
    sink.pre_commit(empty)
    sink.commit(empty)
    assert sink.target.live_epoch(IV2) == empty.epoch and table_rows(sink) == expect(rows)


def test_a_version_replaces_its_intervals_files_in_partitions_it_does_not_list(delta_dir):
    """The removes of a publish are every live file of the interval: those in its partitions, and every file in
    one of its earlier versions' ``<txn>/`` dirs even in a partition the new version does not list (the
    target on its own, as after a lost record of what an older version published)."""
    from exactly_once.ids import TxnRef
    from exactly_once.storage import storage_for
    from target_helpers import stage

    storage, root = storage_for(str(delta_dir / "t"))
    target = DeltaTarget(storage, root, pipeline="p", sink="t")
    dicts = lambda data: [{"k": k, "v": v} for k, v in data]  # noqa: E731
    a, b, c, d = make_rows("a", 2), make_rows("b", 2, start=10), make_rows("c", 1, start=20), make_rows("d", 1, start=30)
    target.publish(TxnRef("p", "t", IV2, 1), stage(delta_dir / "s0", {"dt=2025-06-01": [], PART2: [dicts(d)]}))
    target.publish(TxnRef("p", "t", IV, 1), stage(delta_dir / "s1", {PART: [dicts(a)], "dt=2026-02-01": [dicts(b)]}))
    assert target.publish(TxnRef("p", "t", IV, 2), stage(delta_dir / "s2", {PART: [dicts(c)]})) == {PART: "published"}
    t = target.snapshot().to_pyarrow_table()
    assert sorted(zip(t.column("k").to_pylist(), t.column("dt").to_pylist())) == [(20, IV.day), (30, IV2.day)]
    assert t.schema.field("k").type == pa.int64()  # created from the staged files, an empty partition first


def test_a_reprocess_that_drops_an_earlier_partition_is_still_checked_against_the_tables_types(delta_dir):
    """The version no longer produces a partition that sorts before the one it writes (an empty one, listed
    to be emptied): the staged files are still checked, so a column of another type is refused before the
    decision - never committed into the table beside its other files."""
    sink = delta_sink(str(delta_dir / "t"))
    early = "dt=2025-12-31"  # IV's late rows: sorts before PART
    commit_version(sink, IV, {early: [make_rows("late", 2)], PART: [make_rows("a", 3, start=10)]})
    bad = sink.begin(IV)
    path = sink.storage.join(sink.data_dir(bad), PART, "part-00000.parquet")
    sink.storage.makedirs(os.path.dirname(path))
    pq.write_table(pa.table({"k": pa.array(["x"]), "v": pa.array(["y"])}), path)  # k: string, the table's int64
    sink.pre_commit(bad)
    with pytest.raises(TargetSchemaError, match="k: table int64, staged string"):
        sink.commit(bad)
    assert sink.status(IV)[bad.epoch].state is State.ABORTED and sink.target.snapshot().version() == FIRST


def test_an_empty_version_is_checked_like_any_other(delta_dir):
    """A version with no output, of an interval of a table another engine made append-only (a publish
    removes files): refused before the decision like a version with rows - never decided, then stuck."""
    from other_writers import engine

    sink = delta_sink(str(delta_dir / "t"))
    commit_version(sink, IV, {PART: [make_rows("a", 2)]})
    engine(sink).alter.set_table_properties({"delta.appendOnly": "true"})
    empty = sink.begin(IV2)
    sink.storage.makedirs(sink.data_dir(empty))
    sink.pre_commit(empty)
    with pytest.raises(TargetSchemaError, match="appendOnly"):
        sink.commit(empty)
    assert sink.status(IV2)[empty.epoch].state is State.ABORTED


def test_the_target_on_its_own_refuses_a_staged_partition_that_is_gone(delta_dir):
    from exactly_once.errors import StorageError
    from exactly_once.ids import TxnRef
    from exactly_once.storage import storage_for
    from target_helpers import stage
    import shutil

    storage, root = storage_for(str(delta_dir / "t"))
    target = DeltaTarget(storage, root, pipeline="p", sink="t")
    staged = stage(delta_dir / "staging", {PART: [[{"k": 1, "v": "a"}]]})
    shutil.rmtree(staged.path(PART))
    with pytest.raises(StorageError, match="gone"):
        target.publish(TxnRef("p", "t", IV, 1), staged)
    assert target.snapshot() is None


@pytest.mark.s3
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1", None])
@pytest.mark.parametrize("kind", ["delta-s3"])
def test_credentials_only_in_the_storage_options_reach_delta_on_s3(kind, region, signing_s3, monkeypatch, tmp_path):
    """A user's S3 credentials come from the Airflow connection (the storage options), not the environment:
    the Delta log and data, written by delta-rs, must be signed with them too (a server that checks every
    signature; no AWS_* variable, no credentials file, no instance metadata). delta-rs signs for the
    connection's region (a bucket outside us-east-1 refuses requests signed for another), and for us-east-1
    when the connection names none."""
    from exactly_once.targets.delta import delta_storage_options
    from conftest import make_bucket

    for key in [k for k in os.environ if k.startswith("AWS_")] + ["EO_S3_ENDPOINT_URL"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "absent-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent-config"))
    options = {"key": signing_s3["key"], "secret": signing_s3["secret"],
               "client_kwargs": {"endpoint_url": signing_s3["endpoint_url"]}}
    if region:
        options["client_kwargs"]["region_name"] = region
    sink = delta_sink(f"s3://{make_bucket(signing_s3)}/warehouse/t", storage_options=options)
    assert delta_storage_options(sink.storage)[1]["AWS_REGION"] == (region or "us-east-1")
    a = make_rows("a", 3)
    commit_version(sink, IV, {PART: [a]})
    assert table_rows(sink) == expect(a)
