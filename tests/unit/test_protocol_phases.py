"""Every phase and transition of the two-phase-commit sink, on the local filesystem and on S3.

Each test asserts on data: the rows a reader sees (plain pyarrow reader and exact manifest reader), the
bytes of the published files against the manifest, the log, and that nothing is left behind.
"""
from __future__ import annotations

import hashlib
import os

import pytest

from exactly_once import (Interval, Manifest, State, StorageError, TransactionAbortedError, TransactionStateError,
                          TwoPhaseCommitSink)
from protocol_helpers import (assert_exact_version, commit_version, is_local, leftovers, log_problems, make_rows,
                              open_sink, refresh, split, table_url, visible_rows, write_output,  # noqa: F401
                              write_parquet)

DAY = "2026-01-01"
IV = Interval.daily(DAY)
PART = f"dt={DAY}"


@pytest.fixture
def sink(table_url) -> TwoPhaseCommitSink:
    return open_sink(table_url)


@pytest.fixture
def vsink(table_url) -> TwoPhaseCommitSink:
    """A sink whose transactions commit only after a passing validation."""
    return open_sink(table_url, require_validation=True)


def staged(sink, txn, rows, parts=2, partition=PART):
    write_output(sink, txn, {partition: split(rows, parts)})
    return rows


def assert_idle(sink, interval=IV):
    assert leftovers(sink) == []
    assert log_problems(sink, interval) == []


def assert_staging_gone(sink, txn):
    refresh(sink)
    assert not sink.storage.exists(sink.staging_dir(txn))
    assert sink.storage.walk_files(sink.staging_dir(txn)) == []


# ------------------------------------------------------------------------------------------ begin
def test_begin_allocates_increasing_epochs_and_creates_staging(sink):
    sources = [{"path": "landing/x.jsonl", "size": 10, "mtime": 1.5}]
    txns = [sink.begin(IV, sources=sources, meta={"try": i}) for i in range(3)]
    assert [t.epoch for t in txns] == [1, 2, 3]
    other = sink.begin(Interval.daily("2026-01-02"))
    assert other.epoch == 1  # epochs are per interval
    sink.abort(other)
    newest = txns[-1]
    assert sink.staging_dir(newest).endswith(f"/_staging/{newest.name}")
    assert sink.data_dir(newest).startswith(sink.staging_dir(newest) + "/")
    if sink.storage.display_root == "file://":
        assert os.path.isdir(sink.data_dir(newest))  # S3 has no directories until the writer writes
    rec = sink.log.read(IV, newest.epoch, "open")
    assert rec["sources"] == sources and rec["meta"] == {"try": 2}
    # every begin fenced the older open attempts: aborted, their staging removed
    states = {e: s.state for e, s in sink.status(IV).items()}
    assert states == {1: State.ABORTED, 2: State.ABORTED, 3: State.OPEN}
    for old in txns[:-1]:
        assert_staging_gone(sink, old)
    assert sink.abort(newest) is State.ABORTED
    assert_idle(sink)


# ------------------------------------------------------------------------------------- pre_commit
def test_pre_commit_manifest_lists_sizes_rows_checksums_and_is_idempotent(sink):
    txn = sink.begin(IV)
    rows = staged(sink, txn, make_rows("a", 7), parts=3)
    manifest = sink.pre_commit(txn)
    files = manifest.partitions[PART]
    assert [f.name for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert [f.rows for f in files] == [3, 2, 2]
    for f in files:
        path = sink.storage.join(sink.data_dir(txn), PART, f.name)
        with sink.storage.open(path, "rb") as fh:
            data = fh.read()
        assert f.size == len(data) and f.sha256 == hashlib.sha256(data).hexdigest()
    assert manifest.files == 3 and manifest.rows == len(rows) and manifest.version == txn.name
    assert [e.name for e in manifest.extras] == ["state/counts.json"]  # hidden _SUCCESS not listed
    assert Manifest.from_dict(manifest.to_dict()) == manifest  # the log's JSON round-trips
    assert sink.status(IV)[txn.epoch].state is State.PRE_COMMITTED
    assert sink.pre_commit(txn) == manifest  # idempotent: the recorded manifest
    assert visible_rows(sink, PART) == []  # nothing visible before commit
    sink.commit(txn)
    assert_exact_version(sink, PART, rows, txn)
    assert_idle(sink)


def test_pre_commit_describes_many_files_concurrently_with_the_serial_result(sink, monkeypatch):
    """The manifest is built by a thread pool; it must equal the one-thread manifest, in the same order."""
    from exactly_once import manifest as manifests

    txn = sink.begin(IV)
    rows = make_rows("m", 300)
    write_output(sink, txn, {PART: split(rows, 20), "dt=2026-01-01-extra": split(make_rows("x", 40), 7)})
    manifest = sink.pre_commit(txn)
    assert manifest.files == 27 and manifest.rows == 340
    names = [f.name for f in manifest.partitions[PART]]
    assert names == sorted(names) and len(names) == 20
    monkeypatch.setattr(manifests, "MANIFEST_THREADS", 1)
    serial = manifests.build(sink.storage, txn, sink.staging_dir(txn), ("data",))
    assert serial == manifest  # same sizes, rows, sha256 per file, same order
    for f in manifest.partitions[PART]:
        with sink.storage.open(sink.storage.join(sink.data_dir(txn), PART, f.name), "rb") as fh:
            assert f.sha256 == hashlib.sha256(fh.read()).hexdigest()
    sink.commit(txn)
    assert_exact_version(sink, PART, rows, txn)
    assert_idle(sink)


def test_data_file_directly_under_data_dir_is_refused(sink):
    txn = sink.begin(IV)
    write_parquet(sink, sink.storage.join(sink.data_dir(txn), "loose.parquet"), make_rows("a", 2))
    with pytest.raises(StorageError, match="not inside a partition"):
        sink.pre_commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    with pytest.raises(TransactionStateError):
        sink.commit(txn)
    sink.abort(txn)
    assert visible_rows(sink, PART) == []
    assert_idle(sink)


# ------------------------------------------------------------------------------------------ commit
def test_commit_publishes_once_and_is_idempotent(sink):
    txn = sink.begin(IV)
    rows = staged(sink, txn, make_rows("a", 9), parts=4)
    sink.pre_commit(txn)
    first = sink.commit(txn)
    assert first.partitions == {PART: "published"} and first.files == 4 and first.rows == 9
    second = sink.commit(txn)
    assert second.partitions == {PART: "already"}
    assert_exact_version(sink, PART, rows, txn)
    assert sink.status(IV)[txn.epoch].state is State.COMMITTED
    assert_staging_gone(sink, txn)
    # the non-data staged files became the transaction's checkpoint
    ckpt = sink.storage.join(sink.checkpoint_dir(txn), "state", "counts.json")
    assert sink.storage.read_json(ckpt) == {PART: 9}
    assert_idle(sink)


def test_commit_before_pre_commit_is_refused(sink):
    txn = sink.begin(IV)
    staged(sink, txn, make_rows("a", 3))
    with pytest.raises(TransactionStateError, match="pre_commit first"):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    assert visible_rows(sink, PART) == []
    sink.pre_commit(txn)  # the refusal did not harm the transaction
    sink.commit(txn)
    assert visible_rows(sink, PART) == sorted(make_rows("a", 3))
    assert_idle(sink)


@pytest.mark.parametrize("aborted_after", ["begin", "write", "pre_commit"])
def test_no_phase_proceeds_after_abort(sink, aborted_after):
    prior = commit_version(sink, IV, {PART: [make_rows("old", 2)]})
    txn = sink.begin(IV)
    if aborted_after != "begin":
        staged(sink, txn, make_rows("new", 4))
    if aborted_after == "pre_commit":
        sink.pre_commit(txn)
    assert sink.abort(txn) is State.ABORTED
    assert_staging_gone(sink, txn)
    with pytest.raises(TransactionAbortedError):
        sink.pre_commit(txn)
    with pytest.raises(TransactionAbortedError):
        sink.commit(txn)
    assert sink.recover(IV) == []  # nothing to resurrect
    assert_exact_version(sink, PART, make_rows("old", 2), prior)
    assert_idle(sink)


# ------------------------------------------------------------------------------------------- abort
def test_abort_is_idempotent_and_deletes_staging(sink):
    txn = sink.begin(IV)
    staged(sink, txn, make_rows("a", 4))
    assert sink.abort(txn) is State.ABORTED
    assert sink.abort(txn) is State.ABORTED
    assert_staging_gone(sink, txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    with pytest.raises(TransactionStateError, match="no such transaction"):
        sink.abort(sink.ref(IV, 99))
    assert_idle(sink)


def test_abort_after_commit_is_a_no_op(sink):
    txn = sink.begin(IV)
    rows = staged(sink, txn, make_rows("a", 5))
    sink.pre_commit(txn)
    sink.commit(txn)
    assert sink.abort(txn) is State.COMMITTED
    assert sink.abort(txn) is State.COMMITTED
    assert sink.status(IV)[txn.epoch].state is State.COMMITTED
    assert_exact_version(sink, PART, rows, txn)
    assert_idle(sink)


def test_abort_rolls_a_decided_but_unpublished_first_commit_forward(sink):
    """Hypothesis found it: the first commit of a partition dies after the decision, before the publish.
    Readers still see no version (the state before it), the log is consistent; abort finishes it."""
    from protocol_helpers import exact_reader_rows, failpoints

    txn = sink.begin(IV)
    rows = staged(sink, txn, make_rows("a", 5))
    sink.pre_commit(txn)
    with failpoints("commit.before_publish=error"), pytest.raises(Exception, match="before_publish"):
        sink.commit(txn)
    st = sink.status(IV)[txn.epoch]
    assert st.state is State.COMMITTED and not st.published
    assert sink.live_version(PART) is None and exact_reader_rows(sink, PART) == []
    assert log_problems(sink, IV, idle=False) == []
    assert log_problems(sink, IV) == [f"e{txn.epoch}: committed but never published",
                                      f"{PART}: live version None is not a committed epoch of {IV.token}"]
    assert sink.abort(txn) is State.COMMITTED
    assert_exact_version(sink, PART, rows, txn)
    assert_idle(sink)


def test_abort_keep_moves_staging_aside(sink):
    txn = sink.begin(IV)
    staged(sink, txn, make_rows("a", 3))
    sink.pre_commit(txn)
    assert sink.abort(txn, keep=True) is State.ABORTED
    kept = {e.rel for e in sink.storage.walk_files(sink.rejected_dir(txn))}
    assert {"data/dt=2026-01-01/part-00000.parquet", "state/counts.json"} <= kept
    assert visible_rows(sink, PART) == []
    assert_idle(sink)


# ---------------------------------------------------------------------------------- context manager
def test_context_manager_commits_on_success(sink):
    with sink.transaction(IV) as txn:
        rows = staged(sink, txn, make_rows("a", 6), parts=3)
    assert sink.status(IV)[txn.epoch].state is State.COMMITTED
    assert_exact_version(sink, PART, rows, txn)
    assert_idle(sink)


class Boom(Exception):
    pass


@pytest.mark.parametrize("failure", ["body", "validation"])
def test_context_manager_aborts_on_failure(sink, failure):
    prior = commit_version(sink, IV, {PART: [make_rows("old", 3)]})
    validate = (lambda txn, manifest: (False, {"why": "bad"})) if failure == "validation" else None
    expected = Boom if failure == "body" else TransactionAbortedError
    with pytest.raises(expected):
        with sink.transaction(IV, validate=validate) as txn:
            staged(sink, txn, make_rows("new", 4))
            if failure == "body":
                raise Boom()
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    assert_staging_gone(sink, txn)
    assert_exact_version(sink, PART, make_rows("old", 3), prior)
    assert_idle(sink)


# ---------------------------------------------------------------------------------- reprocessing
def test_reprocessing_replaces_the_version(sink):
    versions = [make_rows("v1", 6), make_rows("v2", 4, start=100), make_rows("v3", 9, start=200)]
    for rows, parts in zip(versions, [3, 1, 4]):
        txn = commit_version(sink, IV, {PART: split(rows, parts)})
        assert_exact_version(sink, PART, rows, txn)  # only the new rows, never a mix
        assert_idle(sink)


def test_reprocessing_one_interval_leaves_others_alone(sink):
    other = Interval.daily("2026-01-02")
    t_other = commit_version(sink, other, {"dt=2026-01-02": [make_rows("other", 3)]})
    commit_version(sink, IV, {PART: [make_rows("v1", 2)]})
    t2 = commit_version(sink, IV, {PART: [make_rows("v2", 5)]})
    assert_exact_version(sink, PART, make_rows("v2", 5), t2)
    assert_exact_version(sink, "dt=2026-01-02", make_rows("other", 3), t_other)
    assert_idle(sink)
    assert log_problems(sink, other) == []




LATE = "dt=2025-12-31"  # late events of the previous day: one interval's output spans two partitions


@pytest.mark.parametrize("new_output", ["empty", "fewer_partitions"])
def test_reprocessing_that_drops_a_partition_does_not_keep_the_old_rows(sink, new_output):
    first = {PART: [make_rows("day", 3)], LATE: [make_rows("late", 2)]}
    commit_version(sink, IV, first)
    second = {} if new_output == "empty" else {PART: [make_rows("day2", 4)]}
    commit_version(sink, IV, second)
    for part in first:
        assert visible_rows(sink, part) == sorted(r for fs in second.get(part, []) for r in fs)


def test_one_interval_publishes_several_partitions(sink):
    files = {PART: split(make_rows("day", 5), 2), LATE: [make_rows("late", 2, start=50)]}
    txn = commit_version(sink, IV, files)
    assert sink.status(IV)[txn.epoch].records["published"]["partitions"] == {PART: "published",
                                                                           LATE: "published"}
    assert_exact_version(sink, PART, make_rows("day", 5), txn)
    assert_exact_version(sink, LATE, make_rows("late", 2, start=50), txn)
    assert_idle(sink)


def test_nested_partition_is_published(sink, request):
    nested = f"{PART}/h=am"
    txn = commit_version(sink, IV, {nested: [make_rows("am", 3)]})
    assert_exact_version(sink, nested, make_rows("am", 3), txn)
    assert_idle(sink)


def test_file_added_to_staging_after_pre_commit_is_never_published(sink, request):
    """The manifest is the version: a late file from a zombie writer must not become visible."""
    txn = sink.begin(IV)
    rows = staged(sink, txn, make_rows("a", 4))
    sink.pre_commit(txn)
    write_parquet(sink, sink.storage.join(sink.data_dir(txn), PART, "late.parquet"), make_rows("zombie", 2))
    sink.commit(txn)
    assert_exact_version(sink, PART, rows, txn)


def test_staged_file_altered_after_pre_commit_is_not_published(sink):
    txn = sink.begin(IV)
    staged(sink, txn, make_rows("a", 4))
    sink.pre_commit(txn)
    write_parquet(sink, sink.storage.join(sink.data_dir(txn), PART, "part-00000.parquet"),
                  make_rows("altered", 40))
    with pytest.raises(StorageError, match="changed after pre_commit"):
        sink.commit(txn)  # checked BEFORE the decision: aborted, never a commit that cannot publish
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    assert visible_rows(sink, PART) == []
    assert sink.recover() == []  # nothing is left that would make recovery raise for ever
    rows = make_rows("retry", 3)
    commit_version(sink, IV, {PART: [rows]})
    assert visible_rows(sink, PART) == rows
    assert_idle(sink)


# ------------------------------------------------------------------------------------- validation
def _pre_committed(sink, tag="a", n=3):
    txn = sink.begin(IV)
    staged(sink, txn, make_rows(tag, n))
    sink.pre_commit(txn)
    return txn


def test_validation_required_before_commit(vsink):
    txn = vsink.begin(IV)
    staged(vsink, txn, make_rows("a", 3))
    with pytest.raises(TransactionStateError, match="pre_commit first"):
        vsink.record_validation(txn, True, {})
    vsink.pre_commit(txn)
    with pytest.raises(TransactionStateError, match="has not run"):
        vsink.commit(txn)
    assert vsink.record_validation(txn, True, {"checks": 4}) is True
    assert vsink.record_validation(txn, False, {}) is True  # the first verdict wins
    vsink.commit(txn)
    assert_exact_version(vsink, PART, make_rows("a", 3), txn)
    assert_idle(vsink)


def test_failed_validation_refuses_commit_for_good(vsink):
    txn = _pre_committed(vsink)
    assert vsink.record_validation(txn, False, {"nulls": 3}) is False
    assert vsink.record_validation(txn, True, {}) is False  # a retried gate cannot flip it
    with pytest.raises(TransactionStateError, match="validation failed"):
        vsink.commit(txn)
    assert vsink.recover(IV, abort_open=True)  # recovery aborts it instead
    assert vsink.status(IV)[txn.epoch].state is State.ABORTED
    assert visible_rows(vsink, PART) == []
    assert_idle(vsink)


@pytest.mark.parametrize("verdict", [None, False, True])
def test_recovery_commits_only_a_passing_validation(vsink, verdict):
    txn = _pre_committed(vsink)
    if verdict is not None:
        vsink.record_validation(txn, verdict, {})
    vsink.recover(IV)  # a plain recover: never takes over a maybe-running gate
    state = vsink.status(IV)[txn.epoch].state
    assert state is {None: State.PRE_COMMITTED, False: State.ABORTED, True: State.COMMITTED}[verdict]
    vsink.recover(IV, abort_open=True)  # what the next begin does
    final = vsink.status(IV)[txn.epoch].state
    assert final is (State.COMMITTED if verdict else State.ABORTED)
    assert visible_rows(vsink, PART) == (sorted(make_rows("a", 3)) if verdict else [])
    assert_idle(vsink)


@pytest.mark.parametrize("how", ["commit", "recover"])
def test_failing_verdict_is_never_committed_even_if_validation_is_optional(sink, how):
    txn = _pre_committed(sink)
    assert sink.record_validation(txn, False, {"malformed_share": 0.4}) is False
    if how == "commit":
        with pytest.raises(TransactionStateError):
            sink.commit(txn)
    else:
        sink.recover(IV)
    assert visible_rows(sink, PART) == []
