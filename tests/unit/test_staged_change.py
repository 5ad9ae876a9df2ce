"""How a sealed staged file found at publish is told from the one pre_commit sealed
(:func:`exactly_once.targets.base.staged_change`), and the manifest fields it relies on."""
from __future__ import annotations

import hashlib
import io
import os

import pytest

from exactly_once.errors import StagedFileChangedError
from exactly_once.records.manifest import ManifestFile
from exactly_once.storage import LocalStorage
from exactly_once.targets.base import StagedVersion, staged_change

DATA = b"the sealed bytes"
SHA = hashlib.sha256(DATA).hexdigest()
OTHER = hashlib.sha256(b"other bytes here").hexdigest()


def removed() -> str:
    raise FileNotFoundError("gone since it was listed")


def never() -> str:
    raise AssertionError("read again although no hint moved")


@pytest.mark.parametrize("sealed, found, digest, want", [
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5), dict(size=None), never, "is gone"),
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5), dict(size=17, mtime=1.5), never, "has 17 bytes where its manifest says 16"),
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5), dict(size=16, mtime=1.5), never, None),  # nothing moved: not read
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5), dict(size=16, mtime=2.5), lambda: SHA, None),  # touched, or put back
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5), dict(size=16, mtime=2.5), lambda: OTHER,
     "was rewritten with other bytes of the same size"),
    (ManifestFile("a", 16, mtime=1.5), dict(size=16, mtime=2.5), never, None),  # no sha256: an mtime alone never refuses
    (ManifestFile("a", 16, mtime=None), dict(size=16, mtime=2.5), never, None),  # an older manifest: no mtime to compare
    (ManifestFile("a", 16, sha256=SHA, etag="e1"), dict(size=16, etag="e1"), never, None),
    (ManifestFile("a", 16, sha256=SHA, etag="e1"), dict(size=16, etag="e2"), lambda: SHA, None),  # re-uploaded, same bytes
    (ManifestFile("a", 16, sha256=SHA, etag="e1"), dict(size=16, etag="e2"), lambda: OTHER,
     "was rewritten with other bytes of the same size"),
    (ManifestFile("a", 16, etag="e1"), dict(size=16, etag="e2"), never,
     "was rewritten (ETag e2, sealed as e1)"),  # no sha256, but two plain MD5s: other bytes
    (ManifestFile("a", 16, etag="e1-2"), dict(size=16, etag="e2"), never, None),  # a multipart ETag: size only
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5, inode=7), dict(size=16, mtime=1.5, inode=8), lambda: OTHER,
     "was rewritten with other bytes of the same size"),  # replaced by a rename within the same clock tick
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5, inode=7), dict(size=16, mtime=1.5, inode=8), lambda: SHA, None),
    (ManifestFile("a", 16, sha256=SHA, mtime=1.5, inode=7), dict(size=16, mtime=1.5, inode=7), never, None),
    (ManifestFile("a", 16, sha256=SHA, mtime=2.0, inode=7), dict(size=16, mtime=2.0, inode=7), lambda: OTHER,
     "was rewritten with other bytes of the same size"),  # whole-second mtimes: always read again
    (ManifestFile("a", 16, sha256=SHA, mtime=2.0), dict(size=16, mtime=2.0), lambda: SHA, None),
    (ManifestFile("a", 16, mtime=2.0), dict(size=16, mtime=2.0), never, None),  # nothing to decide with: size only
    (ManifestFile("a", 16, sha256=SHA, etag="e1"), dict(size=16, etag="e2"), removed, "is gone"),  # deleted after the LIST
    (ManifestFile("a", 16, etag="e1"), dict(size=16, etag=None), never, None),  # a listing without ETags
])
def test_staged_change(sealed, found, digest, want):
    assert staged_change(sealed, found.get("size"), etag=found.get("etag"), mtime=found.get("mtime"), inode=found.get("inode"),
                         digest=digest) == want


@pytest.mark.parametrize("mtime, want", [(1234.5, 1234.5), (7, 7.0), (None, None), (True, None), ("1", None)])
def test_a_manifest_entry_keeps_its_mtime_and_inode_and_an_older_one_has_none(mtime, want):
    d = {"name": "a", "size": 1, "rows": None, "sha256": SHA, **({} if mtime is None else {"mtime": mtime, "inode": mtime})}
    f = ManifestFile.from_dict(d)
    assert f.mtime == want and f.inode == (mtime if type(mtime) is int else None)
    assert ("mtime" in f.to_dict()) is (want is not None)
    assert ManifestFile.from_dict(f.to_dict()) == f


def test_a_local_listing_gives_the_mtime_os_stat_gives(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "f").write_bytes(DATA)
    [entry] = LocalStorage().walk_files(str(tmp_path))
    st = os.stat(tmp_path / "p" / "f")
    assert (entry.rel, entry.size, entry.mtime, entry.inode) == ("p/f", len(DATA), st.st_mtime, st.st_ino)


def test_open_reads_a_file_again_only_when_its_mtime_moved(tmp_path):
    path = tmp_path / "dt=1" / "f"
    path.parent.mkdir()
    path.write_bytes(DATA)
    os.utime(path, ns=(0, 1_700_000_000_123_456_789))  # sub-second: an mtime that is a hint
    sealed = ManifestFile("f", len(DATA), sha256=SHA, mtime=os.stat(path).st_mtime, inode=os.stat(path).st_ino)
    staged = StagedVersion.on(LocalStorage(), str(tmp_path), {"dt=1": (sealed,)})
    with staged.open("dt=1", "f") as fh:
        assert fh.read() == DATA
    path.write_bytes(DATA[::-1])  # same size, other bytes: the mtime moves
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 10**9))
    with pytest.raises(StagedFileChangedError) as refused:
        staged.open("dt=1", "f")
    assert refused.value.what == "was rewritten with other bytes of the same size"
    path.write_bytes(DATA)  # put back: read again, the sealed bytes
    with staged.open("dt=1", "f") as fh:
        assert fh.tell() == 0 and fh.read() == DATA
    opened = StagedVersion({"dt=1": (sealed,)}, lambda part, name: io.BytesIO(DATA[::-1]))  # no mtime, no ETag
    with opened.open("dt=1", "f") as fh:  # nothing hints at a change: only the size is compared
        assert fh.read() == DATA[::-1]


@pytest.mark.parametrize("copy, sealed_etag, trusted", [
    (None, "m1", False),
    (dict(size=15, etag="m1"), "m1", False),
    (dict(size=16, etag="m1"), "m1", True),  # a server-side copy keeps a plain MD5 ETag
    (dict(size=16, etag="m2"), "m1", False),  # copied from other bytes: made again
    (dict(size=16, etag="x"), "m1-2", False),  # a multipart ETag is not kept by a copy: never trusted
    (dict(size=16, etag=None), None, True),  # a manifest without ETags: the size, as before
])
def test_a_live_copy_is_trusted_only_as_a_copy_of_the_sealed_bytes(copy, sealed_etag, trusted):
    from exactly_once.storage import FileEntry
    from exactly_once.targets.base import copied_as_sealed

    entry = FileEntry("f", **copy) if copy else None
    assert copied_as_sealed(entry, ManifestFile("f", 16, etag=sealed_etag)) is trusted
