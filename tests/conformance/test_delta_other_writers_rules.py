"""Other writers on an open Delta table (issue 25, class 4), the table's rules: another engine re-partitions
the table, turns on a feature or a property, or declares a constraint or a NOT NULL column. What our commit
cannot honour is refused before the decision (nothing published, nothing changed); what changes after the
decision is refused by the publish, loses nothing, and ``eo recover`` publishes once the table is fixed.
The other writers' rewrites of data are in test_delta_other_writers.py; the helpers both use in
tests/other_writers.py."""
from __future__ import annotations

import pyarrow as pa
import pytest

from exactly_once import State
from exactly_once.errors import TargetSchemaError
from exactly_once.targets.delta import DeltaTarget
from other_writers import IV, PART, PART2, delta_sink, engine, expect, kv_rows, rows, staged_replacement, two_intervals
from protocol_helpers import commit_version, interleave, make_rows, write_output

deltalake = pytest.importorskip("deltalake")


def test_a_repartitioned_table_is_refused_before_the_decision(delta_dir):
    """Another writer rewrote the table partitioned by another column: its files mix every interval's
    rows and cannot be removed whole. The commit refuses before deciding; nothing changes."""
    sink = delta_sink(str(delta_dir / "t"))
    two_intervals(sink)
    t = engine(sink).to_pyarrow_table()
    deltalake.write_deltalake(sink.target.uri, t, mode="overwrite", partition_by=["k"], schema_mode="overwrite")
    before, version = rows(sink), engine(sink).version()
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("b", 3, start=100)]})
    sink.pre_commit(txn)
    with pytest.raises(TargetSchemaError, match="partitioned by .'k'."):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    assert engine(sink).version() == version and rows(sink) == before


CHANGES = {  # another engine's table change -> what the refusal names
    "deletion_vectors": (lambda dt: dt.alter.add_feature(deltalake.TableFeatures.DeletionVectors,
                                                         allow_protocol_versions_increase=True), "deletionVectors"),
    "append_only": (lambda dt: dt.alter.set_table_properties({"delta.appendOnly": "true"}), "appendOnly"),
    "check_constraint": (lambda dt: dt.alter.add_constraint({"k_small": "k < 50"}), "k_small"),
    "txn_retention": (lambda dt: dt.alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": "interval 1 days"}), "setTransactionRetentionDuration"),
    # writer features delta-rs cannot commit to (Databricks turns rowTracking on for new tables): the commit
    # was refused only after the decision, and the interval was stuck (adversarial review)
    "row_tracking": (lambda dt: dt.alter.add_feature(deltalake.TableFeatures.RowTracking,
                                                     allow_protocol_versions_increase=True), "rowTracking"),
    "domain_metadata": (lambda dt: dt.alter.add_feature(deltalake.TableFeatures.DomainMetadata,
                                                        allow_protocol_versions_increase=True), "domainMetadata"),
    # a legacy writer protocol 5 or 6 (column mapping's) without a features list: readers may resolve physical
    # names, whatever the mode says - not judged, refused
    "legacy_writer_5": (lambda dt: dt.alter.set_table_properties({"delta.minWriterVersion": "5",
                                                                  "delta.minReaderVersion": "2"}), "writer protocol 5"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_table_rules_another_engine_added_are_refused_before_the_decision(delta_dir, change):
    """Deletion vectors (a remove by path would not name a file's vector), ``delta.appendOnly`` (the
    commit would be refused after the decision), a CHECK constraint (a commit of add actions is not
    checked: rows breaking it were published) and an expiring txn marker: refused before deciding,
    nothing changes."""
    sink = delta_sink(str(delta_dir / "t"))
    two_intervals(sink)
    alter, named = CHANGES[change]
    alter(engine(sink))
    live = sorted(pa.table(engine(sink).get_add_actions(flatten=True)).column("path").to_pylist())
    version = engine(sink).version()
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("b", 3, start=100)]})  # k >= 50: breaks the constraint
    sink.pre_commit(txn)
    with pytest.raises(TargetSchemaError, match=named):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED and engine(sink).version() == version
    assert sorted(pa.table(engine(sink).get_add_actions(flatten=True)).column("path").to_pylist()) == live


@pytest.mark.parametrize("known", [True, False], ids=["checked", "unchecked"])
def test_a_table_refusing_our_commit_after_the_decision_says_so_at_once(delta_dir, monkeypatch, known):
    """``delta.appendOnly`` set after the check, before the Delta commit: the publish re-reads the table
    and refuses (``checked``); for a rule the check does not know (``unchecked``: the check switched
    off) delta-rs refuses the commit without taking the log entry - before, that counted as a lost race,
    20 times, then StorageError. Either way one TargetSchemaError after the decision, nothing changed,
    and ``eo recover`` publishes once the table is fixed."""
    sink = delta_sink(str(delta_dir / "t"))
    c, txn, b = staged_replacement(sink)
    if not known:
        monkeypatch.setattr(DeltaTarget, "check_layout", lambda *a: None, raising=False)
    calls = interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *r: t == txn,
                       lambda: engine(sink).alter.set_table_properties({"delta.appendOnly": "true"}))
    wrapped, seen = DeltaTarget._commit, []
    monkeypatch.setattr(DeltaTarget, "_commit", lambda self, *a: seen.append(1) or wrapped(self, *a))
    before = rows(sink)
    with pytest.raises(TargetSchemaError, match="appendOnly" if known else "append-only"):
        sink.commit(txn)
    assert calls["fired"] and len(seen) == 2 and rows(sink) == before  # the lost race, then the refusal
    engine(sink).alter.set_table_properties({"delta.appendOnly": "false"})
    sink.recover(IV)
    assert sink.status(IV)[txn.epoch].published and rows(sink) == sorted(expect(b) + expect(c, PART2))


def test_a_repartitioning_between_the_decision_and_the_publish_loses_nothing(delta_dir, monkeypatch):
    """Re-partitioned after the check, before the Delta commit: the publish refuses with the same
    message and changes nothing; the decision stands. The way out TARGETS.md names - restore the
    partitioning, then ``eo recover`` - publishes exactly the decided version."""
    sink = delta_sink(str(delta_dir / "t"))
    c, txn, b = staged_replacement(sink)

    def repartition():
        t = engine(sink).to_pyarrow_table()
        deltalake.write_deltalake(sink.target.uri, t, mode="overwrite", partition_by=["k"], schema_mode="overwrite")

    interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *r: t == txn, repartition)
    before = rows(sink)
    with pytest.raises(TargetSchemaError, match="partitioned by .'k'."):
        sink.commit(txn)
    st = sink.status(IV)[txn.epoch]
    assert st.state is State.COMMITTED and not st.published and rows(sink) == before
    t = engine(sink).to_pyarrow_table()
    deltalake.write_deltalake(sink.target.uri, t, mode="overwrite", partition_by=["dt"], schema_mode="overwrite")
    sink.recover(IV)
    assert sink.status(IV)[txn.epoch].published and sink.target.live_epoch(IV) == txn.epoch
    assert rows(sink) == sorted(expect(b) + expect(c, PART2))


def test_nulls_into_a_not_null_column_another_engine_declared_are_refused_before_the_decision(delta_dir):
    """A NOT NULL column (nullable=false, made by another engine) is a rule a commit of add actions is not
    checked against: staged nulls there are refused before deciding; rows without nulls publish."""
    import pyarrow.parquet as pq

    sink = delta_sink(str(delta_dir / "t"))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string(), nullable=False),
                        pa.field("dt", pa.string())])
    deltalake.write_deltalake(sink.target.uri, pa.table({"k": [1], "v": ["x"], "dt": ["2025-01-01"]}, schema=schema),
                              partition_by=["dt"])

    def attempt(values: list, statistics: bool = True):
        txn = sink.begin(IV)
        base = sink.storage.join(sink.data_dir(txn), PART)
        sink.storage.makedirs(base)
        with sink.storage.open(sink.storage.join(base, "part-0.parquet"), "wb") as f:
            pq.write_table(pa.table({"k": pa.array([10, 11], pa.int64()), "v": pa.array(values, pa.string())}), f,
                           write_statistics=statistics)
        sink.pre_commit(txn)
        return txn

    for values, statistics in ((["b", None], True), (["b", "c"], False)):  # nulls; no statistics to tell
        txn = attempt(values, statistics)
        with pytest.raises(TargetSchemaError, match="NOT NULL"):
            sink.commit(txn)
        assert sink.status(IV)[txn.epoch].state is State.ABORTED and kv_rows(sink) == [(1, "x")]
    sink.commit(attempt(["b", "c"]))
    assert kv_rows(sink) == [(1, "x"), (10, "b"), (11, "c")]


def test_a_change_data_feed_table_legacy_writer_protocol_4_is_published_into(delta_dir):
    """Another engine turns on the change data feed: legacy writer protocol 4, no features list - not column
    mapping (5 and up), and nothing our whole-file commits cannot honour (the feed reads them as inserts
    and deletes): published, and the feed shows the reprocess."""
    sink = delta_sink(str(delta_dir / "t"))
    _, c = two_intervals(sink)
    engine(sink).alter.set_table_properties({"delta.enableChangeDataFeed": "true"})
    protocol = engine(sink).protocol()
    assert (protocol.min_writer_version, protocol.writer_features) == (4, None)
    start = engine(sink).version()
    b = make_rows("b", 3, start=100)
    commit_version(sink, IV, {PART: [b]})
    assert rows(sink) == sorted(expect(b) + expect(c, PART2))
    feed = pa.table(engine(sink).load_cdf(starting_version=start + 1).read_all())
    assert sorted(k for k, kind in zip(feed.column("k").to_pylist(), feed.column("_change_type").to_pylist())
                  if kind == "insert") == [k for k, _ in b]


@pytest.mark.parametrize("rule", ["generated column", "invariant", "column mapping by name"])
def test_a_table_another_engine_created_with_rules_a_commit_skips_is_refused_before_the_decision(delta_dir, rule):
    """The table was created by another engine with a generated column or an invariant (rules a commit of
    add actions is not checked against), or with column mapping by name on a features protocol (readers
    resolve physical names the staged files lack): our first commit refuses before deciding."""
    from deltalake import Field, Schema

    sink = delta_sink(str(delta_dir / "t"))
    meta = {"generated column": {"delta.generationExpression": "k + 0"},
            "invariant": {"delta.invariants": '{"expression": {"expression": "k < 100"}}'}}.get(rule, {})
    schema = Schema([Field("k", "long", nullable=True, metadata=meta), Field("v", "string"), Field("dt", "string")])
    config = {"delta.columnMapping.mode": "name", "delta.minWriterVersion": "7", "delta.minReaderVersion": "3"} \
        if rule == "column mapping by name" else None
    deltalake.DeltaTable.create(sink.target.uri, schema, partition_by=["dt"], configuration=config)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("a", 2)]})
    sink.pre_commit(txn)
    with pytest.raises(TargetSchemaError, match="column mapping" if config else "'k'|k"):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED and engine(sink).version() == 0
