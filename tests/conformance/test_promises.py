"""Promises of every target that only the end state after ``recover`` used to show (issue 44):

* between a crash mid-publish and recovery, readers still see the previous version and the target's
  marker has not moved;
* a reprocess whose new version no longer produces a partition the old one had empties it;
* another owner's marker (or claim) already in the target: a publish refuses it - never "already" or
  "superseded" on its epoch - and ``live_epoch``/``is_live`` do not take it for ours;
* two publishers of one interval at once inside a database (or on local files): the second waits for
  the first's lock (the marker row; the partition's flock) and the newer epoch wins whole (forced: the
  first holds the lock until the second is seen waiting for it, never a sleep);
* what readers get back after a publish is exactly the staged rows (test_refusals checks the same
  for the versions a target takes without refusing).
"""
from __future__ import annotations

import re
import threading
import time

import pytest

from exactly_once import State
from exactly_once.errors import ExactlyOnceError, OwnershipError, StagedFileChangedError, StorageError
from exactly_once.targets.base import StagedVersion
from protocol_helpers import CRASH_EXIT, interleave, make_rows, run_child

from .conftest import IV, PART, PIPELINE, SINK

PART_B = "dt=2026-02-01"  # a second partition the interval owns (no other interval of the suite writes it)


def test_between_a_crash_mid_publish_and_recovery_readers_see_the_previous_version(world):
    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    t1 = world.commit(sink, IV, {PART: [old]})
    ops = [{"op": "begin"}, {"op": "write", "files": {PART: [new[:2], new[2:]]}}, {"op": "pre_commit"},
           {"op": "commit"}]
    code, _, err = run_child(world.log_url("p", "t"), IV, ops, failpoints_spec="commit.mid_publish=crash",
                             sink_kwargs=world.sink_kwargs())
    assert code == CRASH_EXIT, err
    t2 = sink.ref(IV, t1.epoch + 1)
    st = world.sink().status(IV)[t2.epoch]
    assert st.state is State.COMMITTED and not st.published  # decided, its publish cut short
    assert world.read_rows() == world.rows({PART: [old]})  # readers: the previous version, whole
    target = world.sink().target
    assert target.is_live(t1, [PART]) and not target.is_live(t2, [PART])  # the marker has not moved
    if not world.keeps_copies:
        assert target.live_epoch(IV) == t1.epoch
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.sink().target.is_live(t2, [PART])
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_reprocess_that_drops_a_partition_empties_it(world):
    sink = world.sink()
    a, b, again = make_rows("a", 3), make_rows("b", 2, start=10), make_rows("c", 2, start=20)
    world.commit(sink, IV, {PART: [a], PART_B: [b]})
    assert world.read_rows() == world.rows({PART: [a], PART_B: [b]})
    world.commit(sink, IV, {PART: [again]})  # the new version no longer produces PART_B
    assert world.read_rows() == world.rows({PART: [again]})
    world.commit(sink, IV, {PART_B: [b]})  # and back: PART emptied, PART_B again
    assert world.read_rows() == world.rows({PART_B: [b]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_file_written_after_pre_commit_is_never_published(world):
    """A zombie writer adds a file to the staging after pre_commit (it outlived its task): the commit
    publishes exactly the files the manifest lists - readers get back the staged rows, not the zombie's."""
    from protocol_helpers import write_parquet

    sink = world.sink()
    rows = make_rows("a", 3)
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows]})
    sink.pre_commit(txn)
    write_parquet(sink, sink.storage.join(sink.data_dir(txn), PART, "part-zombie.parquet"), [(77, "zombie")])
    sink.commit(txn)
    assert world.read_rows() == world.rows({PART: [rows]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_staged_file_rewritten_after_pre_commit_is_never_published(world):
    """A zombie rewrites a staged file after pre_commit, same size, other bytes: what commits is what
    pre_commit sealed and the gate read (sha256 locally, the ETag on S3) - refused before the decision."""
    sink = world.sink()
    old, rows = make_rows("old", 2), make_rows("a", 3, start=10)
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows]})
    sink.pre_commit(txn)
    biggest = max(sink.storage.walk_files(sink.storage.join(sink.data_dir(txn), PART)), key=lambda e: e.size)
    path = sink.storage.join(sink.data_dir(txn), PART, biggest.rel)
    data = bytearray(sink.storage.read_bytes(path))
    data[len(data) // 2] ^= 0xFF  # one byte flipped: the same size
    with sink.storage.open(path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(ExactlyOnceError):
        sink.commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
    assert world.read_rows() == world.rows({PART: [old]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_recovery_claims_the_verdict_of_the_attempt_it_commits_and_unknown_epochs_are_refused(world):
    """Recovery commits an ungated pre-committed attempt only after recording a passing verdict on it, so
    a validation still running cannot record a failure on a committed version; a commit of an epoch begin
    never allocated is refused and publishes nothing."""
    from exactly_once.errors import TransactionStateError

    sink = world.sink()
    rows = make_rows("a", 3)
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows]})
    sink.pre_commit(txn)
    world.sink().recover(IV)  # another process: the next begin, `eo recover`
    assert sink.status(IV)[txn.epoch].state is State.COMMITTED
    assert sink.record_validation(txn, False, {"late": True}) is True  # the claimed verdict stands
    with pytest.raises(TransactionStateError):
        sink.commit(sink.ref(IV, txn.epoch + 7))
    assert world.read_rows() == world.rows({PART: [rows]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("at", ["equal", "newer"], ids=["foreign-at-our-epoch", "foreign-newer"])
def test_another_owners_marker_in_the_target_is_refused(world, at):
    sink = world.sink()
    old = make_rows("old", 3)
    t1 = world.commit(sink, IV, {PART: [old]})
    if not world.keeps_copies:  # our marker names our owner id: a twin with our names and its own log is not it
        from dataclasses import replace

        from exactly_once.records.ownership import Owner

        twin = replace(sink.target, owner=Owner("e" * 32, PIPELINE, SINK, "file:///elsewhere/_exactly_once/t"))
        assert twin.live_epoch(IV) is None and not twin.is_live(t1, [PART])
    foreign_epoch = t1.epoch + (1 if at == "equal" else 5)  # "equal": the epoch our next begin takes
    world.foreign_marker(IV, foreign_epoch)
    bound, unbound = sink.target, world.sink().target  # as the owner publishes; as `eo status` reads
    for target in (bound, unbound):
        assert not target.is_live(sink.ref(IV, foreign_epoch), [PART])  # another owner's epoch is not ours
    if not world.keeps_copies:  # the marker is per interval: it is not ours, so nothing of ours is live
        assert bound.live_epoch(IV) is None
    with pytest.raises(ExactlyOnceError):
        with sink.transaction(IV) as txn:
            world.stage(sink, txn, {PART: [make_rows("new", 2, start=40)]})
    assert sink.status(IV)[txn.epoch].state is State.ABORTED, "refused after the decision"
    assert txn.epoch == t1.epoch + 1
    # the target's own check, without the protocol's: a publish at the foreign epoch or past it
    for epoch in (foreign_epoch, foreign_epoch + 1):
        with pytest.raises(OwnershipError):
            bound.publish(sink.ref(IV, epoch), StagedVersion({PART: ()}, lambda p, n: None))
        assert not bound.is_live(sink.ref(IV, epoch), [PART])
    world.clear_foreign_marker(IV, t1, getattr(bound, "owner", None))
    assert world.read_rows() == world.rows({PART: [old]})  # nothing of ours was touched


@pytest.mark.parametrize("waiter", ["newer", "older"])
def test_two_publishers_at_once_queue_on_the_targets_lock(world, monkeypatch, tmp_path, waiter):
    """Two publishes of one interval at once (a reprocess racing a rollback's republish), in two threads:
    the first holds the target's lock - a database's marker row, the local files' partition ``flock`` -
    until the second is seen waiting for it (on the server; at its ``flock``), never a sleep; then the
    newer epoch wins whole."""
    from exactly_once.targets import files as local_files
    from target_helpers import stage

    if world.place.db is None and world.kind != "files-local":
        pytest.skip("no lock to queue on: Redis and S3 files re-read after a lost race (test_late_finisher)")
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("v1", 2)]})
    target = sink.target
    rows = {5: make_rows("e5", 3, start=50), 6: make_rows("e6", 2, start=60)}
    staged = {epoch: stage(tmp_path, {PART: [[{"k": k, "v": v} for k, v in rs]]}) for epoch, rs in rows.items()}
    first, second = (5, 6) if waiter == "newer" else (6, 5)
    seen: dict = {}
    if world.kind == "files-local":  # the second thread's flock attempt finds the lock held
        hook, real_flock = "_settled", local_files.fcntl.flock

        def flock(fd, op):
            try:
                return real_flock(fd, op)
            except BlockingIOError:
                if threading.current_thread() is not threading.main_thread():
                    seen["waiting"] = True
                raise

        monkeypatch.setattr(local_files.fcntl, "flock", flock)
        waiting = lambda: seen.get("waiting", False)  # noqa: E731
    else:
        hook, waiting = "_lock_marker", world.lock_waiters
    cls = type(target)
    real = getattr(cls, hook)

    def locked_then_let_the_other_run(self, *args):
        result = real(self, *args)
        if threading.current_thread() is threading.main_thread() and "thread" not in seen:
            other = threading.Thread(target=lambda: seen.update(result=target.publish(sink.ref(IV, second),
                                                                                        staged[second])))
            seen["thread"] = other
            other.start()
            deadline = time.monotonic() + 60
            while not waiting() and other.is_alive():  # a condition on the lock, not a delay
                assert time.monotonic() < deadline, "the second publisher neither waited nor finished"
                time.sleep(0.01)
            seen["finished_while_locked"] = not other.is_alive()
        return result

    monkeypatch.setattr(cls, hook, locked_then_let_the_other_run)
    result = target.publish(sink.ref(IV, first), staged[first])
    seen["thread"].join(60)
    monkeypatch.undo()
    assert not seen["finished_while_locked"], "the second publisher did not wait for the lock"
    assert set(result.values()) == {"published"}
    assert set(seen["result"].values()) == {"published" if second == 6 else "superseded"}
    assert world.read_rows() == world.rows({PART: [rows[6]]})  # the newer epoch, whole, never a mix
    assert target.is_live(sink.ref(IV, 6), [PART]) and not target.is_live(sink.ref(IV, 5), [PART])


def test_a_connection_killed_inside_the_publish_is_started_over(world, monkeypatch):
    """The database kills the publisher's session after the load and the marker, before COMMIT (a
    failover, an admin's kill): the server rolls both back and the publish starts over on a new
    connection - the new version goes live once, whole."""
    if world.place.db is None:
        pytest.skip("a database target's retry on a broken connection")
    from exactly_once.targets import database

    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    world.commit(sink, IV, {PART: [old]})
    real, killed = database.failpoint, []

    def kill_the_publisher(name: str) -> None:
        if name == "commit.mid_publish" and not killed:
            killed.append(world.kill_other_sessions())
        real(name)

    monkeypatch.setattr(database, "failpoint", kill_the_publisher)
    world.commit(sink, IV, {PART: [new[:2], new[2:]]})
    monkeypatch.undo()
    assert killed == [1], killed  # exactly the publisher's session was killed, once
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


@pytest.mark.parametrize("damage", ["lost", "grown", "rewritten", "rewritten_in_the_same_second"])
def test_a_sealed_file_lost_or_altered_after_the_decision_is_never_published(world, monkeypatch, damage):
    """Between the decision and the publish one of the version's sealed files is deleted, or rewritten
    with other bytes - longer, or the same size (a disk or an operator): the publish refuses it with an
    error of ours - never a version with rows missing or other rows - and readers keep the previous
    version. Put back from a backup (new mtime or ETag, the sealed bytes), the file publishes.
    ``rewritten_in_the_same_second``: a filesystem that keeps whole-second mtimes (ext3, FAT, some NFS
    servers), the file rewritten in place within the second - same inode, same mtime: still refused."""
    import os

    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    coarse = damage == "rewritten_in_the_same_second"
    if coarse and not world.sink().storage.can_rename:
        pytest.skip("local mtimes: S3's ETag changes with the bytes")
    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [new[:2], new[2:]]})
    for e in sink.storage.walk_files(sink.data_dir(txn)) if coarse else ():  # as that filesystem stamps them
        os.utime(sink.storage.join(sink.data_dir(txn), e.rel), (1_767_225_600, 1_767_225_600))
    sink.pre_commit(txn)
    saved = {}

    def damage_it() -> None:  # the sealed files, as the decided version lists them
        sealed = sorted(e.rel for e in sink.storage.walk_files(sink.sealed_dir(txn)) if e.rel.startswith(PART))
        victim = saved["path"] = sink.storage.join(sink.sealed_dir(txn), sealed[-1])
        saved["bytes"] = sink.storage.read_bytes(victim)
        if damage == "lost":
            sink.storage.remove_tree(victim)
        elif damage == "grown":
            sink.storage.write_atomic(victim, saved["bytes"] + b"\0" * 64)
        else:  # the same size: one byte of the data pages flipped (Parquet's magic and footer kept)
            data = bytearray(saved["bytes"])
            data[4] ^= 0xFF
            if not coarse:
                sink.storage.write_atomic(victim, bytes(data))
                return
            stamp = os.stat(victim).st_mtime
            with open(victim, "r+b") as fh:  # in place: the same inode
                fh.write(bytes(data))
            os.utime(victim, (stamp, stamp))  # and, within that second, the same mtime

    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, damage_it)
    with pytest.raises(ExactlyOnceError) as refused:
        sink.commit(txn)
    assert state["fired"]
    assert world.read_rows() == world.rows({PART: [old]})
    monkeypatch.undo()
    assert isinstance(refused.value, StagedFileChangedError), refused.value
    assert "changed after pre_commit sealed it" in str(refused.value), refused.value
    said = re.search(r"sealed staged file (\S+) (is gone|has \d+ bytes|was rewritten)", str(refused.value))
    assert said.group(2).split()[0] == {"lost": "is", "grown": "has"}.get(damage, "was"), refused.value
    where = re.sub(r"^(file|s3)://", "", said.group(1))  # the storage path of the URL the error names
    sink.storage.write_atomic(where, saved["bytes"])  # the advice: put the file back there, then `eo recover`
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_version_staged_outside_a_delta_table_is_checked_before_it_is_copied_in(world):
    """The Delta target used on its own publishes a version staged outside the table: on S3 its files are
    copied in (the copies' ETags are their own), so a same-size rewrite after the decision must be caught on
    the staged files before the copy - never committed. Locally they are renamed in and checked there."""
    if not world.is_delta:
        pytest.skip("a Delta table places a version staged elsewhere")
    from .conftest import decided_elsewhere

    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    sink, txn, staged = decided_elsewhere(world, old, new)
    st = sink.storage
    victim = staged.path(PART, staged.partitions[PART][-1].name)
    sealed = st.read_bytes(victim)
    st.write_atomic(victim, sealed.replace(b"new-", b"BAD-"))  # the same size, other rows
    with pytest.raises(StagedFileChangedError) as refused:
        sink.target.publish(txn, staged)
    assert refused.value.what == "was rewritten with other bytes of the same size", refused.value
    assert world.read_rows() == world.rows({PART: [old]})
    st.write_atomic(re.sub(r"^(file|s3)://", "", refused.value.path), sealed)  # put back where it says: published whole
    sink.target.publish(txn, staged)
    assert world.read_rows() == world.rows({PART: [new]})


def test_a_publish_interrupted_after_placing_a_version_staged_outside_a_delta_table_is_finished(world, monkeypatch,
                                                                                                   tmp_path):
    """The Delta target used on its own, locally: a version staged outside the table is renamed into it, then the
    publish stops before its Delta commit (a crash there leaves the same files). Publishing again finds the
    files already placed - the staging dir is empty now - and commits them: never 'gone', never stuck."""
    if world.kind != "delta-local":
        pytest.skip("only a local Delta table renames a version staged outside it into place")
    from exactly_once.failpoints import FailpointError

    from .conftest import decided_elsewhere

    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    sink, txn, staged = decided_elsewhere(world, old, new)
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "failpoints"))
    monkeypatch.setenv("EO_FAILPOINTS", "commit.mid_publish=error:once")  # after the rename, before the commit
    with pytest.raises(FailpointError):
        sink.target.publish(txn, staged)
    assert not sink.storage.exists(staged.path(PART, staged.partitions[PART][0].name))  # moved into the table
    assert world.read_rows() == world.rows({PART: [old]})
    assert sink.target.publish(txn, staged) == {PART: "published"}
    assert world.read_rows() == world.rows({PART: [new]})


def test_a_file_gone_from_a_version_staged_outside_a_delta_table_is_refused_before_the_copy(world):
    """The same with a staged file deleted after the decision, on S3 where the files are copied in: refused
    naming it before anything is copied (put it back, then publish again), nothing published - not the copy's
    own error halfway. (Locally the version is renamed into the table first and checked there.)"""
    if world.kind != "delta-s3":
        pytest.skip("only Delta on S3 copies a version staged outside the table into it")
    from .conftest import decided_elsewhere

    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    sink, txn, staged = decided_elsewhere(world, old, new)
    st = sink.storage
    victim = staged.path(PART, staged.partitions[PART][0].name)
    sealed = st.read_bytes(victim)
    st.remove_tree(victim)  # (a file: removed as a tree of one)
    with pytest.raises(StorageError) as refused:
        sink.target.publish(txn, staged)
    assert victim.rsplit("/", 1)[1] in str(refused.value) and "gone" in str(refused.value), refused.value
    assert world.read_rows() == world.rows({PART: [old]})
    assert not st.exists(st.join(sink.table, txn.name))  # nothing of it copied or renamed into the table
    st.write_atomic(victim, sealed)
    sink.target.publish(txn, staged)
    assert world.read_rows() == world.rows({PART: [new]})


def test_a_publish_where_nothing_changed_reads_no_staged_byte_again(world, monkeypatch):
    """At publish each sealed file is checked against its manifest entry: its size, and its mtime and inode
    (local) or ETag (S3). Only a file whose hint moved is read again (sha256): a publish where nothing
    changed reads no byte of the version a second time, on every target."""
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    from exactly_once.targets import base, delta, files, s3files

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    reads, publishing = [], []
    for module in (files, s3files, delta):
        monkeypatch.setattr(module, "sha256_of", lambda storage, path, real=module.sha256_of:
                            (reads.append(path) if publishing else None) or real(storage, path))
    monkeypatch.setattr(base, "_sha256", lambda fh, real=base._sha256: (reads.append(fh) if publishing else None) or real(fh))
    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, lambda: publishing.append(1))
    new = make_rows("new", 4, start=30)
    world.commit(sink, IV, {PART: [new[:2], new[2:]]})
    assert state["fired"] and publishing
    assert reads == [], f"read again at publish although nothing changed: {reads}"
    assert world.read_rows() == world.rows({PART: [new]})


def test_our_own_version_under_a_manifest_an_older_release_wrote_is_already_published(world):
    """files-s3: a live manifest written before manifests named their owner is ours when the log has its
    version COMMITTED with the same files (names and sizes): publishing that version again (a recover after
    the upgrade) is "already" - nothing copied or switched again."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 reads manifests written before they named their owner")
    import json
    from functools import partial

    sink = world.sink()
    t1 = world.commit(sink, IV, {PART: [make_rows("v1", 3)]})
    path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    legacy = {k: v for k, v in sink.storage.read_json(path).items() if k != "owner"}
    sink.storage.write_atomic(path, json.dumps(legacy).encode())
    files = sink.log.committed_files(IV, t1.epoch, PART)
    staged = StagedVersion.on(sink.storage, sink.sealed_dir(t1), {PART: files},
                              partial(sink.log.newest_committed, IV), partial(sink.log.committed_files, IV))
    assert sink.target.publish(t1, staged) == {PART: "already"}
    assert sink.storage.read_json(path) == legacy  # not switched again
    assert world.read_rows() == world.rows({PART: [make_rows("v1", 3)]})


def test_a_staged_file_rewritten_while_the_publish_copies_never_goes_live(world, monkeypatch):
    """files-s3 publishes by server-side copies after checking the staged files (one LIST). A same-size
    rewrite of a file still to be copied, made while the first copies run, is copied as it is - so the staged
    files are checked again after the copies, before the manifest switch: refused, readers keep the old
    version; the file put back, `recover` copies it again (the bad copy has the right size but not the sealed
    ETag) and the version goes live whole."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 copies staged files into the live partition before switching")
    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    sink = world.sink()
    old, new = make_rows("old", 3), make_rows("new", 4, start=30)
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [new[:2], new[2:]]})
    sink.pre_commit(txn)
    saved = {}

    def rewrite_the_last() -> None:  # a zombie overwrites a staged object still to be copied
        names = sorted(e.rel for e in sink.storage.walk_files(sink.sealed_dir(txn)) if e.rel.startswith(PART))
        victim = saved["path"] = sink.storage.join(sink.sealed_dir(txn), names[-1])
        saved["bytes"] = sink.storage.read_bytes(victim)
        sink.storage.write_atomic(victim, saved["bytes"].replace(b"new-", b"BAD-"))  # the same size

    state = interleave(monkeypatch, type(sink.storage), "copy_files", lambda self, pairs: bool(pairs), rewrite_the_last)
    with pytest.raises(StagedFileChangedError, match="was rewritten while it was copied"):
        sink.commit(txn)
    assert state["fired"]
    monkeypatch.undo()
    assert world.read_rows() == world.rows({PART: [old]})
    sink.storage.write_atomic(saved["path"], saved["bytes"])  # the advice: put it back, then `eo recover`
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [new]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_without_checksums_a_file_touched_after_the_decision_is_published_by_its_size(world, monkeypatch):
    """``checksums=False`` records no sha256: a sealed file whose mtime moved after the decision (touched,
    its bytes unchanged) cannot be judged by content, and only its size is compared - published, with a
    warning, never a raw error."""
    import os

    from exactly_once.protocol.transaction import TwoPhaseCommitSink

    sink = world.sink(checksums=False)
    if not sink.storage.can_rename:
        pytest.skip("local mtimes (S3: test_staged_on_s3's plain ETags)")
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = sink.begin(IV)
    new = make_rows("new", 4, start=30)
    world.stage(sink, txn, {PART: [new[:2], new[2:]]})
    sink.pre_commit(txn)

    def touch() -> None:
        for e in sink.storage.walk_files(sink.sealed_dir(txn)):
            path = sink.storage.join(sink.sealed_dir(txn), e.rel)
            os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1_000_000_123))

    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, touch)
    sink.commit(txn)
    assert state["fired"] and world.read_rows() == world.rows({PART: [new]})
