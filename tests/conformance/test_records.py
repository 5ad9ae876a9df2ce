"""What the log records of a transaction, and what its calls return, when two handles meet it: the manifest a
pre_commit that lost the race returns, the one finisher of a publish, and the state a transaction may begin on
(each found by the protocol row of ``make mutants``)."""
from __future__ import annotations

import pytest

from exactly_once import State
from protocol_helpers import interleave, make_rows

from .conftest import IV, IV2, OUTSIDE, PART, PART2


def test_two_pre_commits_of_one_attempt_return_the_manifest_the_log_holds(world, monkeypatch):
    """A pre_commit retried while the first still runs (a task and its zombie): the first to record its
    manifest wins, and the other returns *that* one - what the gate validates and the commit publishes -
    never the manifest it built itself from a staging that changed in between."""
    from protocol_helpers import write_parquet

    sink, other = world.sink(), world.sink()
    rows = make_rows("a", 3)
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows]})

    def the_other_records_first():
        write_parquet(sink, sink.storage.join(sink.data_dir(txn), PART, "part-late.parquet"), [(77, "late")])
        return other.pre_commit(txn)

    state = interleave(monkeypatch, sink.log, "append", lambda iv, e, kind, *a: kind == "pre_committed",
                       the_other_records_first)
    mine = sink.pre_commit(txn)
    monkeypatch.undo()
    recorded = sink.status(IV)[txn.epoch].manifest
    assert state["fired"] and recorded.files == state["result"].files == mine.files  # the late file's, too
    assert mine.to_dict() == recorded.to_dict()
    sink.commit(txn)
    assert world.read_rows() == world.rows({PART: [rows + [(77, "late")]]})


def test_each_publish_has_one_finisher_that_is_recorded_and_told(world):
    """Whoever writes a publish's completion record finishes it: its handle's ``take_finished()`` returns it
    once (its asset events and lineage are announced by it alone) and the record names it (``finisher``: an
    Airflow task's identity); another handle that commits or recovers the same version afterwards finishes
    nothing, and a handle that names no finisher records none."""
    sink, other = world.sink(), world.sink()
    sink.finisher = "pv/run-1/commit"
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [make_rows("a", 3)]})
    sink.pre_commit(txn)
    result = sink.commit(txn)
    assert result.finished and sink.take_finished() == [result] and sink.take_finished() == []
    assert sink.status(IV)[txn.epoch].records["published"]["by"] == "pv/run-1/commit"
    again = other.commit(txn)
    assert again.partitions == {PART: "already"}
    assert not again.finished and other.recover(IV) == [] and other.take_finished() == []
    t2 = world.commit(other, IV, {PART: [make_rows("b", 2, start=10)]})
    assert "by" not in other.status(IV)[t2.epoch].records["published"]


def test_a_transaction_reads_only_committed_state_unless_chained_in_a_batch(world):
    """A stateful interval begins on its predecessor's state only once that version is committed: an open
    (or pre-committed) predecessor is refused at ``begin``, nothing begun; a batch chaining its intervals'
    state says so (``reads_pending``) and may begin on a live attempt, committing only after it."""
    from exactly_once.errors import TransactionStateError

    sink = world.sink()
    first = sink.begin(IV)
    with pytest.raises(TransactionStateError, match="not committed"):
        sink.begin(IV2, reads=first)
    assert sink.status(IV2) == {}
    chained = sink.begin(IV2, reads=first, reads_pending=True)
    assert sink.status(IV2)[chained.epoch].state is State.OPEN
    sink.abort(chained)
    sink.abort(first)
    assert world.leftovers() == []  # an abort keeps nothing aside unless asked (keep: `_rejected/`)
    assert not any(sink.storage.exists(sink.rejected_dir(t)) for t in (first, chained))


def test_a_gated_pre_commit_takes_the_writers_counts_and_an_ungated_one_reads_the_footers(world, monkeypatch):
    """The writer's rows per partition (``rows``) and per file (``file_rows``) stand in for the Parquet footers
    only where a gate will compare them with the staged data (``gated``): then pre_commit reads no footer. An
    ungated pre_commit vouches for nothing: it reads every footer, whatever the writer claims."""
    import pyarrow.parquet as pq

    sink = world.sink()
    a, b = make_rows("a", 3), make_rows("b", 2, start=10)
    names = ["part-00000.parquet", "part-00001.parquet"]
    real, footers = pq.ParquetFile, []
    for interval, part, gated in ((IV, PART, True), (IV2, PART2, False)):
        txn = sink.begin(interval)
        world.stage(sink, txn, {part: [a, b]})
        claimed = dict(zip(names, (3, 2) if gated else (1, 4)))  # ungated: a wrong split of the right sum
        with monkeypatch.context() as m:
            m.setattr(pq, "ParquetFile", lambda f, *args, **kw: footers.append(interval) or real(f, *args, **kw))
            manifest = sink.pre_commit(txn, gated=gated, rows={part: 5}, file_rows={part: claimed})
        assert {f.name: f.rows for f in manifest.partitions[part]} == dict(zip(names, (3, 2)))
        if gated:
            assert sink.record_validation(txn, True, {})
        sink.commit(txn)
    assert footers == [IV2, IV2]
    assert world.read_rows() == world.rows({PART: [a + b], PART2: [a + b]})


def test_partitions_only_an_aborted_attempt_wrote_are_not_published(world):
    """A version publishes its own partitions, and an empty version of each partition an older *committed*
    version published that it no longer produces; an aborted attempt's partitions were never published, so
    the next version neither publishes nor records them."""
    sink = world.sink()
    aborted = sink.begin(IV)
    world.stage(sink, aborted, {PART: [make_rows("a", 2)], OUTSIDE: [make_rows("x", 2, start=50)]})
    sink.pre_commit(aborted)
    sink.abort(aborted)
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [make_rows("b", 3)]})
    sink.pre_commit(txn)
    assert set(sink.commit(txn).partitions) == {PART}
    assert set(sink.status(IV)[txn.epoch].records["published"]["partitions"]) == {PART}
    assert world.read_rows() == world.rows({PART: [make_rows("b", 3)]}) and world.leftovers() == []


def test_recovery_finishes_an_abort_cut_short(world):
    """An abort that died after deleting the data and before the rest (its decision recorded): recovery
    deletes what is left, and says so."""
    from exactly_once.errors import FailpointError
    from protocol_helpers import failpoints

    sink = world.sink()
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [make_rows("a", 2)]})
    with failpoints("abort.mid=error"), pytest.raises(FailpointError):
        sink.abort(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED and sink.storage.exists(sink.staging_dir(txn))
    assert any("cleaned up aborted leftovers" in line for line in world.sink().recover(IV))
    assert world.leftovers() == [] and world.read_rows() == []


def test_a_newer_begin_aborts_the_older_open_attempt_at_once(world):
    """Begin recovers its interval with the older open attempts aborted (and their staging deleted) before it
    takes its epoch: a zombie writer's attempt is over when the retry begins, not only at its own commit."""
    sink, other = world.sink(), world.sink()
    first = sink.begin(IV)
    world.stage(sink, first, {PART: [make_rows("a", 2)]})
    second = other.begin(IV)
    assert second.epoch > first.epoch and sink.status(IV)[first.epoch].state is State.ABORTED
    assert not sink.storage.exists(sink.staging_dir(first))
    other.abort(second)
    assert world.leftovers() == []
