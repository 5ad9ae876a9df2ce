"""Nothing that was live is deleted early (issue 25, class 3; DESIGN §4 "Garbage").

A superseded version - its data files, its manifest and its checkpoint alike - is garbage only once a
newer version of its interval has been live for the grace period, measured on the STORAGE's clock.
Run on the local files target, the S3 files target (loopback moto server) and a local Delta table:

* a late finisher of an older epoch that finds itself superseded deletes nothing: another finisher of
  its epoch made that version live a moment ago, and a reader that resolved it must be able to finish;
* a publisher (or gc) whose clock is 2 h off does not shorten the grace: gc keeps a version replaced
  0 s ago whatever time a process wrote into the log;
* a rollback beside gc never publishes a version without its state: gc deleting the version while the
  rollback copies it (forced at the exact step) makes the rollback refuse, with nothing published.

Races are forced at the exact step with monkeypatch; clocks are skewed by patching ``time.time`` in the
one actor; nothing sleeps.
"""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from exactly_once import Interval, State, TransactionStateError
from exactly_once import rollback as rollback_module
from exactly_once.ops.maintenance import gc
from exactly_once.ops.rollback import rollback
from exactly_once.storage import MANIFEST
from exactly_once.storage.s3 import S3Storage
from exactly_once.targets.delta import DeltaTarget
from exactly_once.targets.files import LocalFilesTarget
from eo_testing import clock_off
from protocol_helpers import (assert_exact_version, commit_version, interleave, is_local, leftovers, make_rows,
                              open_sink, refresh, split, write_output)

IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"
HOUR = 3600.0
GRACE = HOUR  # gc's min_age in these tests: far longer than any test runs
STATE = "state/counts.json"  # the checkpoint file write_output leaves beside the data


@pytest.fixture(params=["files-local", pytest.param("files-s3", marks=pytest.mark.s3), "delta-local"])
def make_sink(request, tmp_path):
    """``make_sink()`` opens (another process's view of) one fresh table of the parametrized target."""
    if request.param == "files-s3":
        from conftest import make_bucket

        url = f"s3://{make_bucket(request.getfixturevalue('s3_server'))}/warehouse/t"
    else:
        url = str(tmp_path / "warehouse" / "t")
    if request.param.startswith("delta"):
        pytest.importorskip("deltalake")
        return lambda: open_sink(url, table_format="delta")
    return lambda: open_sink(url)


def resolve(sink) -> list[str]:
    """The live files of PART as a reader resolves them before reading (locally: through the link)."""
    refresh(sink)
    files = sink.live_files(PART)
    return [os.path.realpath(f) for f in files] if is_local(sink) else files


def read_rows(sink, paths: list[str]) -> list[tuple]:
    """The rows of ``paths``: FileNotFoundError if gc deleted one."""
    rows: list[tuple] = []
    for path in paths:
        with sink.storage.open(path, "rb") as f:
            t = pq.read_table(f, columns=["k", "v"])
        rows += zip(t.column("k").to_pylist(), t.column("v").to_pylist())
    return sorted(rows)


def checkpoint_state(sink, txn) -> bytes | None:
    path = sink.storage.join(sink.checkpoint_dir(txn), STATE)
    refresh(sink)
    return sink.storage.read_bytes(path) if sink.storage.exists(path) else None


def assert_kept(sink, old, old_files: list[str], old_rows) -> None:
    """``old``'s version is whole: the files a reader resolved, its checkpoint and its log manifest."""
    assert read_rows(sink, old_files) == sorted(old_rows)
    assert checkpoint_state(sink, old) is not None, f"{old.name}'s checkpoint was deleted within the grace"
    assert sink.status(IV)[old.epoch].manifest is not None, f"{old.name}'s manifest was compacted early"


def assert_collected(sink, old, old_files: list[str]) -> None:
    """Once the grace is over gc deletes ``old``'s version: data, checkpoint and log manifest."""
    report = gc(sink, min_age=0)
    assert report["failed"] == [] and report["versions"], report
    refresh(sink)
    assert not any(sink.storage.exists(p) for p in old_files)
    assert checkpoint_state(sink, old) is None and sink.status(IV)[old.epoch].manifest is None


# --------------------------------------------------------------------------- 1. late superseded finisher
def stall_inside_publish(monkeypatch, sink, txn, other):
    """Run ``other()`` inside ``txn``'s publish, after this finisher found nothing newer live and just
    before it acts on that: the Delta commit (on the snapshot read before: it loses the log entry, reads
    the table again and finds itself superseded), the local partition publish (before its lock), the S3
    manifest switch (after this finisher copied its files; it re-reads the manifest)."""
    if isinstance(sink.target, DeltaTarget):
        return interleave(monkeypatch, DeltaTarget, "_commit", lambda self, dt, app, t, *a: t == txn, other)
    if isinstance(sink.target, LocalFilesTarget):
        return interleave(monkeypatch, LocalFilesTarget, "_publish_partition", lambda self, t, *a: t == txn, other)
    return interleave(monkeypatch, S3Storage, "put_conditional",
                      lambda self, path, data: path.endswith(MANIFEST) and txn.name.encode() in data, other)


def test_a_late_superseded_finisher_deletes_nothing_that_was_live(make_sink, monkeypatch):
    """Epoch 1 decided COMMITTED and its finisher stalled inside the publish. Meanwhile another process
    finished epoch 1's publish (recovery), a reader resolved its files, and epoch 2 replaced it. The
    stalled finisher then finds itself superseded: it must not delete epoch 1's files (Delta: the
    ``<table>/<txn>/`` dir, S3: the published copies) - the reader is still reading them - and gc keeps
    them, the checkpoint and the manifest until epoch 2 has been live for the grace period."""
    sink, other = make_sink(), make_sink()
    old_rows, new_rows = make_rows("e1", 5), make_rows("e2", 3, start=50)
    t1 = sink.begin(IV)
    write_output(sink, t1, {PART: split(old_rows, 2)})
    sink.pre_commit(t1)
    seen: dict[str, list[str]] = {}

    def recovery_then_a_newer_epoch():
        assert other.recover(IV) == [f"{t1.name}: commit finished (rolled forward)"]
        seen["files"] = resolve(other)  # a reader resolves epoch 1, live now
        return commit_version(other, IV, {PART: [new_rows]})

    stalled = stall_inside_publish(monkeypatch, sink, t1, recovery_then_a_newer_epoch)
    assert sink.commit(t1).partitions == {PART: "superseded"}
    monkeypatch.undo()
    t2 = stalled["result"]
    assert stalled["fired"] and len(seen["files"]) == 2
    assert read_rows(sink, seen["files"]) == sorted(old_rows)  # the reader finishes
    assert_exact_version(sink, PART, new_rows, t2)
    assert gc(sink, min_age=GRACE)["failed"] == []
    assert_kept(sink, t1, seen["files"], old_rows)
    assert_collected(sink, t1, seen["files"])
    assert_exact_version(sink, PART, new_rows, t2)
    assert leftovers(sink) == [] and checkpoint_state(sink, t2) is not None


# --------------------------------------------------------------------------- 2. the storage's clock
@pytest.mark.parametrize("actor", ["publisher 2 h slow", "gc 2 h fast"])
def test_grace_is_measured_on_the_storage_clock(make_sink, monkeypatch, actor):
    """Epoch 2 replaces epoch 1 a moment ago. Whether the commit worker's clock is 2 h slow (the time it
    writes into its ``published`` record is 2 h old) or gc's own clock is 2 h fast, gc with a grace of
    1 h keeps epoch 1 whole: the grace runs on the storage's clock."""
    sink = make_sink()
    old_rows, new_rows = make_rows("e1", 4), make_rows("e2", 2, start=50)
    t1 = commit_version(sink, IV, {PART: split(old_rows, 2)})
    old_files = resolve(sink)
    with clock_off(monkeypatch, -2 * HOUR if actor.startswith("publisher") else 0.0):
        t2 = commit_version(sink, IV, {PART: [new_rows]})
    with clock_off(monkeypatch, 2 * HOUR if actor.startswith("gc") else 0.0):
        report = gc(sink, min_age=GRACE)
    assert report["failed"] == [] and report["versions"] == [], report  # the data stays: the grace
    assert report["checkpoints"] == [] and report["log_records"] == [], report  # and so does the rest
    assert_kept(sink, t1, old_files, old_rows)
    assert_exact_version(sink, PART, new_rows, t2)
    assert_collected(sink, t1, old_files)
    assert_exact_version(sink, PART, new_rows, t2)
    assert leftovers(sink) == []


# --------------------------------------------------------------------------- 3. rollback beside gc
@pytest.mark.parametrize("when", ["before the data copy", "before the state copy", "within the grace"])
def test_rollback_beside_gc_never_publishes_a_version_without_its_state(make_sink, monkeypatch, when):
    """``rollback(IV, 1)`` copies epoch 1's files, then its checkpoint. gc (another process) runs at the
    forced step. With the grace over (``min_age=0``) gc deletes epoch 1 meanwhile: the rollback refuses
    with the true reason and publishes nothing (epoch 2 stays live). Within the grace gc deletes
    nothing of epoch 1, and the rollback publishes it with its state."""
    sink, collector = make_sink(), make_sink()
    old_rows, new_rows = make_rows("e1", 4), make_rows("e2", 2, start=50)
    t1 = commit_version(sink, IV, {PART: split(old_rows, 2)})
    t2 = commit_version(sink, IV, {PART: [new_rows]})
    old_state = checkpoint_state(sink, t1)
    min_age = GRACE if when == "within the grace" else 0.0
    real_copy, copies, ran = rollback_module._copy, [], {}

    def copy_beside_gc(rb_sink, src, dst):
        if when == "before the data copy" and not copies:
            ran["report"] = gc(collector, min_age=min_age)
        copied = real_copy(rb_sink, src, dst)
        copies.append(dst)
        if when != "before the data copy" and len(copies) == 2:  # epoch 1's two data files copied
            ran["report"] = gc(collector, min_age=min_age)  # the state is next
        return copied

    monkeypatch.setattr(rollback_module, "_copy", copy_beside_gc)
    if when == "within the grace":
        result = rollback(sink, IV, 1)
        monkeypatch.undo()
        assert ran["report"]["failed"] == [] and ran["report"]["checkpoints"] == []
        assert result.extra["rollback_of"] == t1.name
        assert_exact_version(sink, PART, old_rows, result.txn)
        assert checkpoint_state(sink, result.txn) == old_state  # the rolled-back version has its state
        assert leftovers(sink) == []
        return
    with pytest.raises(TransactionStateError, match="refused: its .* was deleted while the rollback copied it"):
        rollback(sink, IV, 1)
    monkeypatch.undo()
    assert ran["report"]["failed"] == [] and ran["report"]["checkpoints"], ran["report"]  # gc took epoch 1
    assert_exact_version(sink, PART, new_rows, t2)  # nothing was published
    assert {e: s.state for e, s in sink.status(IV).items()} == {1: State.COMMITTED, 2: State.COMMITTED,
                                                                3: State.ABORTED}
    assert leftovers(sink) == []
