"""Races that real processes hit only sometimes, forced deterministically: inside one step of attempt A,
at the exact point where A has looked but not yet acted, another process runs its whole step (see
``protocol_helpers.interleave``). Each test states what must hold whichever process wins."""
from __future__ import annotations

import os

import pytest

from exactly_once import FailpointError, FencedError, Interval, State, TransactionAbortedError
from exactly_once import failpoints as failpoints_module
from exactly_once import manifest as manifest_module
from exactly_once import transaction as transaction_module
from exactly_once.storage import MANIFEST
from protocol_helpers import (assert_exact_version, commit_version, failpoints, interleave, is_local, leftovers,
                              log_problems, make_rows, open_sink, split, table_url,  # noqa: F401
                              write_output, write_parquet)

IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"




def assert_clean(sink, part, rows, txn):
    assert_exact_version(sink, part, rows, txn)
    assert leftovers(sink) == []
    assert log_problems(sink, IV) == []


# ------------------------------------------------------------------- two finishers of one commit
def _inject_finisher(monkeypatch, sink, txn, point, other):
    """Run ``other`` when ``sink`` is about to move ``txn``'s staged data (publish) or its staging dir
    (checkpoint): locally at the rename, on S3 at the copy."""
    data, staging = sink.storage.join(sink.sealed_dir(txn), PART), sink.staging_dir(txn)
    if is_local(sink):
        src = data if point == "publish" else staging
        return interleave(monkeypatch, os, "rename", lambda s, d, *a: s == src, other)
    in_data = (lambda srcs, dsts: srcs[0].startswith(data + "/")) if point == "publish" else \
        (lambda srcs, dsts: not srcs[0].startswith(sink.data_dir(txn) + "/"))
    return interleave(monkeypatch, sink.storage.fs, "copy", in_data, other)


@pytest.mark.parametrize("point", ["publish", "checkpoint"])
def test_two_finishers_of_one_commit(table_url, monkeypatch, request, point):
    """A commits; while it moves the files, a recovery in another process finishes the same commit.
    A must then find the work done and return - not die halfway with FileNotFoundError."""
    sink = open_sink(table_url)
    commit_version(sink, IV, {PART: [make_rows("prior", 2)]})
    rows = make_rows("new", 12, start=100)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: split(rows, 4)})
    sink.pre_commit(txn)
    other = open_sink(table_url)
    fired = _inject_finisher(monkeypatch, sink, txn, point, lambda: other.recover(IV))
    result = sink.commit(txn)
    monkeypatch.undo()
    assert fired["fired"] and fired["result"] == [f"{txn.name}: commit finished (rolled forward)"]
    assert set(result.partitions.values()) <= {"published", "already"}
    assert_clean(sink, PART, rows, txn)


def test_two_finishers_meet_in_the_version_dir(tmp_path, monkeypatch):
    """Local: while A lists the published version dir (to drop files written after pre_commit), B -
    finishing the same commit - writes that dir's manifest: B's temp file is in A's listing and renamed
    away before A stats it (seen once in CI as a FileNotFoundError). A must list again and finish."""
    sink = open_sink(str(tmp_path / "table"))
    commit_version(sink, IV, {PART: [make_rows("prior", 2)]})
    rows = make_rows("new", 12, start=100)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: split(rows, 4)})
    sink.pre_commit(txn)
    vdir = sink.storage.join(sink.home, "_versions", PART, txn.name)
    b_tmp = os.path.join(vdir, ".tmp-" + "b" * 32)
    started = interleave(monkeypatch, os, "walk", lambda path, *a: path == vdir,
                         lambda: open(b_tmp, "xb").close())
    renamed = interleave(monkeypatch, os, "stat", lambda path, *a: path == b_tmp,
                         lambda: os.replace(b_tmp, os.path.join(vdir, MANIFEST)))
    result = sink.commit(txn)
    monkeypatch.undo()
    assert started["fired"] and renamed["fired"]
    assert set(result.partitions.values()) == {"published"}
    assert_clean(sink, PART, rows, txn)


@pytest.mark.parametrize("decided", ["commit", "abort"])
@pytest.mark.parametrize("point", ["seal_rename", "seal_check"])
def test_a_finisher_overtaken_while_sealing_returns_the_decision(tmp_path, monkeypatch, point, decided):
    """Local: A is about to seal the staged output (rename ``data/`` -> ``sealed/``) or is checking the
    sealed files against the manifest when B - another finisher of the same transaction - decides
    (commits and publishes, or aborts) and the sealed dir is gone. A must return B's decision (the
    commit, as ``already``; or the abort, as a protocol error), never FileNotFoundError (it made CI flaky)."""
    sink = open_sink(str(tmp_path / "table"))
    rows = make_rows("new", 6)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: split(rows, 2)})
    sink.pre_commit(txn)
    other = open_sink(str(tmp_path / "table"))
    b = (lambda: other.commit(txn)) if decided == "commit" else (lambda: other.abort(txn))
    data, sealed = sink.data_dir(txn), sink.sealed_dir(txn)
    if point == "seal_rename":
        fired = interleave(monkeypatch, os, "rename", lambda src, *a: src == data, b)
    else:  # A sealed, lists sealed/ and stats a file that B's publish or abort has just removed
        fired = interleave(monkeypatch, os, "stat", lambda path, *a: str(path).startswith(sealed + "/"), b)
    if decided == "commit":
        result = sink.commit(txn)
        assert set(result.partitions.values()) == {"already"}
        monkeypatch.undo()
        assert_clean(sink, PART, rows, txn)
    else:
        with pytest.raises((TransactionAbortedError, FencedError)):
            sink.commit(txn)
        monkeypatch.undo()
        assert sink.status(IV)[txn.epoch].state is State.ABORTED
        assert leftovers(sink) == [] and sink.live_version(PART) is None
    assert fired["fired"]


# --------------------------------------------------------- an abort lands while A seals its output
def test_pre_commit_racing_an_abort_of_the_same_txn(table_url, monkeypatch, request):
    """While A lists and checksums its staged files, a newer attempt begins and aborts A (deleting its
    staging). A's pre_commit must end in a protocol error (aborted/fenced), never a raw I/O error."""
    sink = open_sink(table_url)
    a = sink.begin(IV)
    write_output(sink, a, {PART: split(make_rows("A", 8), 4)})
    other = open_sink(table_url)
    fired = interleave(monkeypatch, manifest_module, "describe", lambda *args: True, lambda: other.begin(IV))
    with pytest.raises((TransactionAbortedError, FencedError)):
        sink.pre_commit(a)
    monkeypatch.undo()
    b = fired["result"]
    assert sink.abort(a) is State.ABORTED
    b_rows = make_rows("B", 5, start=50)
    write_output(other, b, {PART: [b_rows]})
    other.pre_commit(b)
    other.commit(b)
    assert_clean(sink, PART, b_rows, b)


def test_begin_while_a_fenced_attempt_is_still_writing(table_url, monkeypatch, request):
    """B's begin aborts A (older, open) while A's writer is still adding files. B must begin anyway;
    A's late files are A's teardown's business, and nothing of A ever becomes visible."""
    sink = open_sink(table_url)
    a = sink.begin(IV)
    write_output(sink, a, {PART: split(make_rows("A", 8), 4)})
    late = sink.storage.join(sink.data_dir(a), PART, "late.parquet")
    zombie_write = lambda: write_parquet(sink, late, make_rows("late", 3, start=900))  # noqa: E731
    data = sink.data_dir(a)
    if is_local(sink):  # the file appears after rmtree emptied the dir, before it removes the dir
        interleave(monkeypatch, os, "rmdir", lambda path, *x, **k: path == data, zombie_write)
    else:  # the file appears after the delete listed the keys, before it deletes them
        interleave(monkeypatch, sink.storage.fs, "rm", lambda keys, *x, **k: True, zombie_write)
    b = sink.begin(IV)
    monkeypatch.undo()
    assert b.epoch == a.epoch + 1 and sink.status(IV)[a.epoch].state is State.ABORTED
    with pytest.raises(TransactionAbortedError):
        sink.pre_commit(a)
    assert sink.abort(a) is State.ABORTED  # A's teardown removes what its writer left
    b_rows = make_rows("B", 4, start=50)
    write_output(sink, b, {PART: [b_rows]})
    sink.pre_commit(b)
    sink.commit(b)
    assert_clean(sink, PART, b_rows, b)


# ---------------------------------------------------------------- a slow publisher is overtaken
@pytest.mark.parametrize("stalled", ["first_publish", "retried_publish"])
def test_slow_publisher_of_an_older_commit_never_overwrites_a_newer_one(table_url, monkeypatch, request,
                                                                        stalled):
    """A decided COMMITTED and stalls in the middle of publishing (GC pause, slow copy) - either its first
    publish, or a retried commit task re-running the publish after a lost acknowledgement. Meanwhile the
    next attempt rolls A forward, commits B and publishes it. When A resumes, B must stay live and whole."""
    sink = open_sink(table_url)
    a = sink.begin(IV)
    write_output(sink, a, {PART: split(make_rows("A", 8), 4)})
    sink.pre_commit(a)
    if stalled == "retried_publish":  # published, but the acknowledgement (published record) was lost
        with failpoints("commit.after_publish=error"), pytest.raises(FailpointError):
            sink.commit(a)
    b_rows = make_rows("B", 6, start=600)
    other = open_sink(table_url)
    point = "commit.mid_publish" if stalled == "first_publish" else "commit.before_publish"
    where = failpoints_module if point == "commit.mid_publish" else transaction_module  # the target's / the protocol's
    fired = interleave(monkeypatch, where, "failpoint", lambda name: name == point,
                       lambda: commit_version(other, IV, {PART: split(b_rows, 3)}))
    result = sink.commit(a)
    monkeypatch.undo()
    b = fired["result"]
    assert b.epoch == a.epoch + 1
    assert result.partitions[PART] in ("superseded", "already", "published")
    assert {e: s.state for e, s in sink.status(IV).items()} == {a.epoch: State.COMMITTED,
                                                               b.epoch: State.COMMITTED}
    assert_clean(sink, PART, b_rows, b)


@pytest.mark.parametrize("table_url", ["s3"], indirect=True)
@pytest.mark.parametrize("step", ["put_conditional", "write_atomic"])
def test_s3_publisher_overtaken_at_the_manifest_switch_or_the_cleanup(table_url, monkeypatch, step):
    """S3 only (locally the switch is one rename). A has copied its files and read the manifest's ETag;
    right then - or after its switch, right before it writes ``_SUCCESS`` - B commits and publishes
    whole. A's conditional PUT must lose (412) and A must report "superseded"; A's tail must never
    touch B's files. Either way B stays live and complete."""
    sink = open_sink(table_url)
    assert not is_local(sink)
    a = sink.begin(IV)
    write_output(sink, a, {PART: split(make_rows("A", 8), 4)})
    sink.pre_commit(a)
    b_rows = make_rows("B", 6, start=600)
    other = open_sink(table_url)
    at = (lambda path, *a, **k: path.endswith("/" + MANIFEST)) if step == "put_conditional" else \
        (lambda path, *a, **k: path.endswith("/_SUCCESS"))
    fired = interleave(monkeypatch, sink.storage, step, at,
                       lambda: commit_version(other, IV, {PART: split(b_rows, 3)}))
    result = sink.commit(a)
    monkeypatch.undo()
    assert fired["fired"]
    b = fired["result"]
    assert b.epoch == a.epoch + 1
    assert result.partitions[PART] == ("superseded" if step == "put_conditional" else "published")
    assert_clean(sink, PART, b_rows, b)
