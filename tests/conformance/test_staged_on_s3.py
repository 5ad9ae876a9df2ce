"""What goes live on S3 is what was sealed, through the copy window too (review of issue 44's same-size
check, session 20: reproducers of a fresh reviewer, each failing on the code before it).

files-s3 publishes by server-side copies and Delta on S3 copies a version staged outside the table into it:
a staged object rewritten with other bytes of the same size while it is copied must never be switched live
(or be committed), even if it is put back before the check after the copies; the way out the error names -
put the sealed file back, ``eo recover`` - must work."""
from __future__ import annotations

import pytest

from exactly_once.errors import StagedFileChangedError
from exactly_once.protocol.transaction import TwoPhaseCommitSink
from exactly_once.storage.s3 import S3Storage
from exactly_once.targets.s3files import S3FilesTarget
from protocol_helpers import interleave, make_rows

from .conftest import IV, PART

NEW = make_rows("new", 4, start=30)


def staged_version(world, sink):
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [NEW[:2], NEW[2:]]})
    sink.pre_commit(txn)
    return txn


def bad(rows) -> bool:
    return any(str(r["v"]).startswith("BAD-") for r in rows)


def test_a_rewrite_put_back_before_the_check_after_the_copies_is_still_refused(world, monkeypatch):
    """The staged object is rewritten as its batch's copy starts and the sealed bytes are put back before
    the check after the copies: the staged object is as sealed again, but its copy is not - checked by
    the copy's ETag (a server-side copy keeps a plain MD5), never switched live."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 copies staged objects into the live partition")
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_version(world, sink)
    real, calls = S3Storage.copy_files, []

    def copy_files(storage, pairs):
        if pairs and "/_staging/" in pairs[0][0]:
            calls.append(pairs)
            if len(calls) == 2:  # the second batch: rewritten as it is copied, then put back
                victim = pairs[-1][0]
                good = storage.read_bytes(victim)
                storage.write_atomic(victim, good.replace(b"new-", b"BAD-"))
                try:
                    return real(storage, pairs)
                finally:
                    storage.write_atomic(victim, good)
        return real(storage, pairs)

    monkeypatch.setattr(S3Storage, "copy_files", copy_files)
    with pytest.raises(StagedFileChangedError, match="while it was copied"):
        sink.commit(txn)
    monkeypatch.undo()
    assert len(calls) == 2 and world.read_rows() == world.rows({PART: [make_rows("old", 3)]})
    world.sink().recover(IV)  # the staged object is the sealed one: the bad copy is made again
    assert world.read_rows() == world.rows({PART: [NEW]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_second_finisher_copying_changed_bytes_over_a_live_version_says_so_and_recover_repairs_it(world, monkeypatch):
    """Two finishers of one version: B lists the live prefix, A publishes the whole partition, a zombie
    rewrites a staged object, B copies it over the objects A's manifest names. B must not report the
    version as published ("already"): it refuses, and once the file is put back, `eo recover` finds the
    live copy is not the sealed bytes and copies it again. (Readers may see the zombie's rows in between:
    RELIABILITY.md.)"""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 copies staged objects into the live partition")
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_version(world, sink)
    real_pp, real_copy, args, saved = S3FilesTarget._publish_partition, S3Storage.copy_files, [], {}

    def publish_partition(self, *a):
        args.append((self, a))
        return real_pp(self, *a)

    def copy_files(storage, pairs):
        if pairs and "/_staging/" in pairs[0][0] and not saved:
            self, a = args[0]
            saved["A"] = "publishing"
            saved["A"] = real_pp(self, *a)  # finisher A publishes the partition whole
            saved["path"] = victim = pairs[-1][0]
            saved["bytes"] = storage.read_bytes(victim)
            storage.write_atomic(victim, saved["bytes"].replace(b"new-", b"BAD-"))  # the zombie
        return real_copy(storage, pairs)

    monkeypatch.setattr(S3FilesTarget, "_publish_partition", publish_partition)
    monkeypatch.setattr(S3Storage, "copy_files", copy_files)
    with pytest.raises(StagedFileChangedError):
        sink.commit(txn)  # finisher B
    monkeypatch.undo()
    assert saved["A"] == "published"
    sink.storage.write_atomic(saved["path"], saved["bytes"])  # the advice: put it back, then `eo recover`
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [NEW]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_version_placed_into_a_delta_table_on_s3_is_checked_after_its_copies(world, monkeypatch):
    """The Delta target used on its own copies a version staged elsewhere into the table: a staged object
    rewritten as the copy starts (after the check before it) is refused by its copy's ETag, never committed."""
    if world.kind != "delta-s3":
        pytest.skip("only Delta on S3 copies a version staged outside the table into it")
    from .conftest import decided_elsewhere

    sink, txn, staged = decided_elsewhere(world, make_rows("old", 3), NEW)
    real, hit = S3Storage.copy_files, []

    def copy_files(storage, pairs):
        if pairs and not hit and "/elsewhere/" in pairs[0][0]:
            hit.append(pairs[-1][0])
            storage.write_atomic(pairs[-1][0], storage.read_bytes(pairs[-1][0]).replace(b"new-", b"BAD-"))
        return real(storage, pairs)

    monkeypatch.setattr(S3Storage, "copy_files", copy_files)
    with pytest.raises(StagedFileChangedError):
        sink.target.publish(txn, staged)
    monkeypatch.undo()
    assert hit and world.read_rows() == world.rows({PART: [make_rows("old", 3)]})


def test_without_checksums_a_plain_etag_that_moved_still_refuses(world, monkeypatch):
    """``checksums=False``: no sha256 to read again, but two plain (single-part) ETags are each the MD5 of
    the bytes - a different one proves other bytes: refused, never published."""
    if world.kind not in ("files-s3", "delta-s3"):
        pytest.skip("ETags: S3 only")
    sink = world.sink(checksums=False)
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_version(world, sink)
    st, sealed = sink.storage, sink.sealed_dir(txn)
    victim = st.join(sealed, sorted(e.rel for e in st.walk_files(sealed) if e.rel.endswith(".parquet"))[-1])

    def rewrite() -> None:  # after the decision, before the publish
        st.write_atomic(victim, st.read_bytes(victim).replace(b"new-", b"BAD-"))

    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, rewrite)
    with pytest.raises(StagedFileChangedError, match=r"was rewritten \(ETag"):
        sink.commit(txn)
    assert state["fired"] and not bad(world.read_rows())


def staged_multipart(world, sink):
    """A version of NEW staged as S3A's committers upload: each file a (one-part) multipart upload, pre-committed."""
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [NEW[:2], NEW[2:]]})
    st = sink.storage
    for e in st.walk_files(sink.data_dir(txn)):
        if e.rel.endswith(".parquet"):
            path = st.join(sink.data_dir(txn), e.rel)
            data, (bucket, key, _) = st.read_bytes(path), st.fs.split_path(path)
            up = st.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
            part = st.fs.call_s3("upload_part", Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=1, Body=data)
            st.fs.call_s3("complete_multipart_upload", Bucket=bucket, Key=key, UploadId=up["UploadId"],
                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    st.fs.invalidate_cache()
    sink.pre_commit(txn)
    return txn


def test_a_published_multipart_version_whose_record_was_lost_is_already_published(world, monkeypatch, tmp_path):
    """A crash after the publish (its staging retired) and before its `published` record: recover publishes
    again and must find it "already" live - the copies of multipart objects cannot be judged by their ETags
    and their staging is gone, so they are not judged at all, never refused as gone."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 copies staged objects into the live partition")
    from exactly_once.errors import FailpointError

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_multipart(world, sink)
    monkeypatch.setenv("EO_FAILPOINTS", "commit.after_publish=error:once")
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "fp"))
    with pytest.raises(FailpointError):
        sink.commit(txn)
    monkeypatch.delenv("EO_FAILPOINTS")
    live = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    assert sink.storage.read_json(live)["owner"] == sink.target.owner.id  # a manifest names its owner
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [NEW]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_an_ownerless_manifest_naming_our_version_with_other_sizes_is_replaced_never_taken_as_published(world):
    """files-s3: a live manifest with no owner (a first-release writer's: another log, one deleted and started
    over) names the very version we publish, with our file names but other sizes. It is not ours: our files
    are copied over its objects and the manifest switched. Taken as ours, multipart copies (whose ETags tell
    nothing) would make the publish "already" done, and readers would keep the other bytes."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 keeps a manifest per partition")
    import json
    import posixpath

    from exactly_once.ids import published_name

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    st, live = sink.storage, sink.storage.join(sink.table, PART)
    txn = staged_multipart(world, sink)
    ours = {posixpath.basename(e.rel): e.size for e in st.walk_files(sink.sealed_dir(txn))
            if e.rel.endswith(".parquet")}
    [old] = [e for e in st.walk_files(live) if e.rel.endswith(".parquet")]
    other = st.read_bytes(st.join(live, old.rel))  # the old rows: a readable file of another size
    assert ours and all(size != len(other) for size in ours.values()), (ours, len(other))
    names = [published_name(txn.name, n) for n in sorted(ours)]
    for n in names:
        st.write_atomic(st.join(live, n), other)
    st.write_atomic(st.join(live, "_MANIFEST.json"), json.dumps(
        {"version": txn.name, "files": [{"name": n, "size": len(other)} for n in names]}).encode())
    sink.commit(txn)
    assert st.read_json(st.join(live, "_MANIFEST.json")).get("owner") == sink.target.owner.id  # switched
    assert world.read_rows() == world.rows({PART: [NEW]})
    assert world.log_problems(sink, IV) == []


def test_a_multipart_staged_object_rewritten_after_the_decision_is_refused_and_put_back_publishes(world, monkeypatch):
    """Spark's S3A committers upload staged files as multipart uploads: their ETags (``-N``) are not MD5s of
    the bytes, so a rewrite (a plain PUT, another ETag) is judged by the sha256 read again - refused; the
    file put back the same way (other ETag, the sealed bytes) publishes, and no copy of a multipart object
    is trusted by its ETag."""
    if world.kind not in ("files-s3", "delta-s3"):
        pytest.skip("ETags: S3 only")
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_multipart(world, sink)
    st, sealed = sink.storage, sink.sealed_dir(txn)
    parquet = [e for e in st.walk_files(sealed) if e.rel.endswith(".parquet")]  # sorted by path
    assert parquet and all(e.etag and "-" in e.etag for e in parquet), parquet
    victim, saved = st.join(sealed, parquet[-1].rel), {}

    def rewrite() -> None:  # after the decision, before the publish: the same size, other rows
        saved["bytes"] = st.read_bytes(victim)
        st.write_atomic(victim, saved["bytes"].replace(b"new-", b"BAD-"))

    state = interleave(monkeypatch, TwoPhaseCommitSink, "_publish", lambda *a: True, rewrite)
    with pytest.raises(StagedFileChangedError, match="was rewritten with other bytes of the same size"):
        sink.commit(txn)
    monkeypatch.undo()
    assert state["fired"] and world.read_rows() == world.rows({PART: [make_rows("old", 3)]})
    st.write_atomic(victim, saved["bytes"])  # put back by a plain PUT: another ETag, the sealed bytes
    world.sink().recover(IV)
    assert world.read_rows() == world.rows({PART: [NEW]})
    assert world.log_problems(sink, IV) == [] and world.leftovers() == []


def test_a_multipart_staged_object_rewritten_while_it_is_copied_is_refused(world, monkeypatch):
    """A multipart object's copy cannot be judged by its ETag, so after the copies its staged object is
    checked again (its sha256): rewritten as its batch was copied, it is refused, never switched live."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 copies staged objects into the live partition")
    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("old", 3)]})
    txn = staged_multipart(world, sink)
    real, calls = S3Storage.copy_files, []

    def copy_files(storage, pairs):
        if pairs and "/_staging/" in pairs[0][0]:
            calls.append(pairs)
            if len(calls) == 2:  # the second batch's object, rewritten as it is copied
                storage.write_atomic(pairs[-1][0], storage.read_bytes(pairs[-1][0]).replace(b"new-", b"BAD-"))
        return real(storage, pairs)

    monkeypatch.setattr(S3Storage, "copy_files", copy_files)
    with pytest.raises(StagedFileChangedError, match="was rewritten with other bytes of the same size"):
        sink.commit(txn)
    monkeypatch.undo()
    assert len(calls) == 2 and world.read_rows() == world.rows({PART: [make_rows("old", 3)]})


def test_a_sealed_object_gone_on_s3_is_named_by_its_s3_url(world):
    """A target that reads the staged version (the databases, Redis) through ``StagedVersion.open`` names a
    sealed object that is gone by the URL an operator can put it back at (``s3://bucket/key``), not the bare key."""
    if world.kind != "files-s3":
        pytest.skip("one S3 kind is enough: StagedVersion.open is the same for every target staged on S3")
    from .conftest import staged_elsewhere

    sink = world.sink()
    staged = staged_elsewhere(sink, sink.begin(IV), [NEW[:2], NEW[2:]])
    gone = staged.partitions[PART][0].name
    sink.storage.remove_tree(staged.path(PART, gone))
    with pytest.raises(StagedFileChangedError) as err:
        staged.open(PART, gone).close()
    assert err.value.path == sink.storage.url(staged.path(PART, gone)) and err.value.path.startswith("s3://")
    assert str(err.value).startswith(f"sealed staged file s3://{staged.path(PART, gone)} is gone")
    staged.open(PART, staged.partitions[PART][1].name).close()  # the other one is as sealed


def test_a_target_reading_a_staged_object_refuses_a_same_size_rewrite_and_reads_it_put_back(world):
    """A database or Redis target reads the staged files (``StagedVersion.open``); staged on S3, an object
    rewritten with other bytes of the same size after pre_commit is told by its moved ETag and refused - never
    loaded - and put back it is the sealed file again."""
    if world.kind != "files-s3":
        pytest.skip("only the S3 world stages on S3")
    from exactly_once.targets.base import StagedVersion

    sink = world.sink()
    txn = staged_version(world, sink)
    manifest = sink.status(IV)[txn.epoch].manifest
    staged = StagedVersion.on(sink.storage, sink.sealed_dir(txn), manifest.partitions)
    part, f = next(iter(staged.files()))
    path = staged.path(part, f.name)
    sealed = sink.storage.read_bytes(path)
    with staged.open(part, f.name) as fh:
        assert fh.read() == sealed
    middle = len(sealed) // 2
    sink.storage.write_atomic(path, sealed[:middle] + bytes([sealed[middle] ^ 1]) + sealed[middle + 1:])
    with pytest.raises(StagedFileChangedError, match="rewritten"):
        staged.open(part, f.name)
    sink.storage.write_atomic(path, sealed)
    with staged.open(part, f.name) as fh:
        assert fh.read() == sealed


def test_a_manifest_of_the_first_releases_shape_is_still_read(world):
    """The first release's manifests list each file by name and size only, with no owner: still a manifest of
    ours to the check and the publish - a reprocess over it publishes, and readers get the new version."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 keeps a manifest per partition")
    import json

    sink = world.sink()
    old = make_rows("old", 3)
    world.commit(sink, IV, {PART: [old]})
    path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    first = sink.storage.read_json(path)
    sink.storage.write_atomic(path, json.dumps({"version": first["version"], "files": [
        {"name": f["name"], "size": f["size"]} for f in first["files"]]}).encode())
    assert sink.live_files(PART)
    world.commit(world.sink(), IV, {PART: [NEW]})
    assert world.read_rows() == world.rows({PART: [NEW]})


def test_a_manifest_an_older_release_wrote_with_a_version_we_cannot_read_is_refused_by_us(world):
    """files-s3: a live manifest with no owner (written before manifests named it) whose version is not a
    transaction name at all (another tool's, hand-edited), or that is no manifest of ours at all (no version,
    not JSON), is never taken for ours: refused before the decision with our error naming it, nothing
    switched; `recover` and gc of the table run past it."""
    if world.kind != "files-s3":
        pytest.skip("only files-s3 reads manifests written before they named their owner")
    import json

    from exactly_once.ops.maintenance import gc

    from .test_target_breaks import refused_before_deciding

    sink = world.sink()
    world.commit(sink, IV, {PART: [make_rows("v1", 3)]})
    path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    foreign = {**{k: v for k, v in sink.storage.read_json(path).items() if k != "owner"}, "version": "nightly-load"}
    for theirs, says in ((json.dumps(foreign).encode(), "nightly-load, a version of another interval"),
                         (json.dumps({"files": ["part-0.parquet"]}).encode(), "not a manifest exactly-once wrote"),
                         (json.dumps({"version": sink.ref(IV, 1).name, "files": [{"name": "part-0.parquet"}]}).encode(),
                          "not a manifest exactly-once wrote"),  # ours by its name, but no sizes to tell
                         (b"part-0.parquet\n", "not a manifest exactly-once wrote")):
        sink.storage.write_atomic(path, theirs)
        err = refused_before_deciding(world, sink, {PART: [make_rows("v2", 2, start=20)]})
        assert says in str(err), err
        assert sink.storage.read_bytes(path) == theirs
        sink.recover()
        gc(sink, min_age=0)
