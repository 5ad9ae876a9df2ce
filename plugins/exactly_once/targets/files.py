"""Local (POSIX) files target: versioned directories behind an atomically swapped symlink.

A partition's versions live outside the table directory, in ``<home>/_versions/<partition>/<txn>/``,
with file names unique per version (``<txn>--<name>``). The partition path readers see,
``<table>/<partition>``, is a symlink to the live version, swapped with one ``rename(2)``. What a
plain reader (Spark, pyarrow, DuckDB, Polars: anything that lists ``<table>``) can see:

* it resolves the link once per directory listing and sees the old or the new version, never both:
  the internals (staging, versions, log) are not below the table directory, so no glob reaches them;
* a reader that listed a partition before a swap and opens its files after it gets FileNotFoundError
  (the names it planned are not in the new version) and may retry; it never reads a mix;
* a reader that resolved the link (realpath) keeps reading the old version until gc removes it, which
  happens only after a newer version has been live for the grace period.

Publishers of one partition are ordered by an ``flock`` on ``<home>/_locks/<partition>.lock`` around
the whole check-and-swap, so a stalled older publisher can never swap the link back (gc takes the same
lock before it deletes a version). The lock is re-entrant within a thread and released by the kernel
when its holder dies.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
import uuid
from typing import Callable, Iterator

from ..errors import StorageError, TargetSchemaError
from ..ids import parse_txn_name, published_name
from ..records.manifest import ManifestFile, sha256_of
from ..storage import MANIFEST, LocalStorage, is_hidden, supersedes, to_json
from .. import failpoints
from ..ids import TxnRef
from .base import FilesTarget, StagedVersion, altered, staged_change

log = logging.getLogger(__name__)
LOCK_TIMEOUT = 120.0  # seconds a publisher waits for another one of the same partition
_held = threading.local()


@contextlib.contextmanager
def partition_lock(path: str, timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (re-entrant in this thread); StorageError after ``timeout``."""
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StorageError(f"{path} stayed locked by another publisher for {timeout:.0f} s; "
                                       "retry (a stalled process holds it until it exits)") from None
                time.sleep(0.01)
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class LocalFilesTarget(FilesTarget):
    """Publishes into ``table`` on a local filesystem; internals under ``home``."""

    def __init__(self, storage: LocalStorage, table: str, home: str) -> None:
        self.storage = storage
        self.table = table
        self.home = home

    def _vdir(self, partition: str, version: str) -> str:
        return self.storage.join(self.home, "_versions", partition, version)

    def _lock(self, partition: str) -> str:
        return self.storage.join(self.home, "_locks", partition + ".lock")

    def _publish_partition(self, txn: TxnRef, staged: StagedVersion, part: str,
                           files: tuple[ManifestFile, ...]) -> str:
        version, link = txn.name, self.storage.join(self.table, part)
        with partition_lock(self._lock(part)):
            done = self._settled(txn, staged, part, link)
            if done:
                return done
            vdir = self._vdir(part, version)
            self._fill(txn, staged, part, files, vdir)
            failpoints.failpoint("commit.mid_publish")
            done = self._settled(txn, staged, part, link)  # re-read once more right before the switch
            if done:
                return done
            tmp = os.path.join(os.path.dirname(link), f".{os.path.basename(link)}.{uuid.uuid4().hex}.link")
            try:
                os.makedirs(os.path.dirname(link), exist_ok=True)  # nested partitions: dt=X/h=Y
                # relative between the real dirs: the table dir (or a parent) may itself be a symlink
                os.symlink(os.path.relpath(os.path.realpath(vdir), os.path.realpath(os.path.dirname(link))), tmp)
                self.storage.rename(tmp, link)  # the atomic switch for plain readers, made durable
            except OSError:  # another writer's plain file where a parent goes, put since the check: the way out
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                up = self._plain_parent(part)
                if up:
                    raise TargetSchemaError(self._not_ours(up)) from None
                raise
            return "published"

    def _plain_parent(self, part: str) -> str | None:
        """A nested partition's parent path (``dt=X`` of ``dt=X/h=Y``) that is not a directory, if any: another
        writer's plain file where the publish must make the directory."""
        keys = part.split("/")
        return next((up for up in (os.path.join(self.table, *keys[:i]) for i in range(1, len(keys)))
                     if os.path.lexists(up) and not os.path.isdir(up)), None)

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: the location is ours (see :meth:`FilesTarget.check`), and no partition
        path of the version - nor a nested partition's parent - is a plain directory or file another writer
        made (the switch could never replace it: TargetSchemaError, the transaction is aborted and the other
        writer's files stay)."""
        super().check(txn, staged)
        for part in staged.partitions:
            link = self.storage.join(self.table, part)
            if os.path.lexists(link) and not os.path.islink(link):
                raise TargetSchemaError(self._not_ours(link))
            up = self._plain_parent(part)  # the publish makes a nested partition's parent directories
            if up:
                raise TargetSchemaError(self._not_ours(up))
            self._foreign_link(txn, link, self.live_version(part))

    @staticmethod
    def _foreign_link(txn: TxnRef, link: str, current: str | None) -> None:
        """TargetSchemaError if the partition's link points at something that is not a version of
        ``txn``'s interval (another interval's version, or a link another writer made)."""
        parsed = parse_txn_name(current or "")
        if current is not None and (parsed is None or parsed[0] != txn.interval.token):
            raise TargetSchemaError(f"{link} is live with {current!r}, not a version of {txn.interval.token}: a "
                                    "partition belongs to one interval, and exactly-once switches only links it "
                                    "made. Check the pipeline's partitioning, or move another writer's link out "
                                    "of the table, then run the interval again")

    @staticmethod
    def _not_ours(link: str) -> str:
        return (f"{link} is a plain {'directory' if os.path.isdir(link) else 'file'} that exactly-once did not "
                "make (another writer's?); a partition path is a link the publish switches. Move it out of the "
                "table (its rows are not this pipeline's), then re-run the interval (or, if already "
                "committed, `eo recover` the table)")

    def _settled(self, txn: TxnRef, staged: StagedVersion, part: str, link: str) -> str | None:
        """``already``/``superseded`` if the live version makes publishing ``txn`` moot, else None. Only a
        link into this sink's own version store counts: one left by a deleted log (its store gone with it)
        names versions of another log - even ``txn``'s own name - and is replaced, never taken for ours.
        Without a link of ours (removed by an operator, never made: a partition the newer version does
        not have), ``superseded`` if the log has a newer COMMITTED epoch: an older version never goes live."""
        current = self.live_version(part)
        if current is not None and not (os.path.isdir(link) and os.path.isdir(vdir := self._vdir(part, current))
                                        and os.path.samefile(link, vdir)):
            self._foreign_link(txn, link, current)
            current = None  # dangling, or into another store: not a version of this log
        if current is None:
            if os.path.lexists(link) and not os.path.islink(link):
                raise TargetSchemaError(self._not_ours(link))
            return "superseded" if staged.newer_committed(txn.epoch) else None
        if current == txn.name:
            return "already"
        if supersedes(current, txn.name):
            return "superseded"
        self._foreign_link(txn, link, current)
        return None

    def _fill(self, txn: TxnRef, staged: StagedVersion, part: str, files: tuple[ManifestFile, ...], vdir: str) -> None:
        """Move the staged partition into ``vdir`` under per-version names, check every file against
        the manifest, drop files it does not list, write the version's manifest. Idempotent."""
        src = staged.path(part)
        if os.path.isdir(src) and not os.path.islink(src) and not os.path.lexists(vdir):
            os.makedirs(os.path.dirname(vdir), exist_ok=True)
            try:
                self.storage.rename(src, vdir)  # atomic; a zombie writing into `src` later is not seen
            except OSError:
                if not os.path.isdir(vdir):
                    raise
        os.makedirs(vdir, exist_ok=True)  # a partition this version no longer produces: empty version
        wanted = {}
        for f in files:
            final = os.path.join(vdir, published_name(txn.name, f.name))
            wanted[os.path.basename(final)] = f
            if not os.path.lexists(final) and os.path.isfile(os.path.join(vdir, f.name)):
                os.rename(os.path.join(vdir, f.name), final)
            st = os.stat(final) if os.path.isfile(final) and not os.path.islink(final) else None  # a link: gone
            what = staged_change(f, st and st.st_size, mtime=st and st.st_mtime, inode=st and st.st_ino,
                                 digest=lambda: sha256_of(self.storage, final))  # noqa: B023 - called here, now
            if what:
                raise altered(final, what)
        for entry in self.storage.walk_settled(vdir):
            if entry.rel not in wanted and not any(is_hidden(s) for s in entry.rel.split("/")):
                self.storage.remove_tree(os.path.join(vdir, entry.rel))  # not in the sealed version
        listed = [ManifestFile(name, f.size, f.rows, getattr(f, "sha256", None)).to_dict() for name, f in wanted.items()]
        self.storage.write_atomic(os.path.join(vdir, MANIFEST), to_json({"version": txn.name,
                                                                        "files": listed}))

    def live_version(self, partition: str) -> str | None:
        link = self.storage.join(self.table, partition)
        return os.path.basename(os.readlink(link)) if os.path.islink(link) else None

    def live_files(self, partition: str) -> list[str]:
        link = self.storage.join(self.table, partition)
        if not os.path.islink(link):
            return []
        m = self.storage.read_json(os.path.join(link, MANIFEST))
        return [os.path.join(link, f["name"]) for f in m["files"]]

    def versions(self) -> Iterator[tuple[str, str]]:
        """Every (partition, version) that has a version dir."""
        root = self.storage.join(self.home, "_versions")
        for dirpath, dirnames, _ in os.walk(root, followlinks=False):
            for name in [d for d in dirnames if parse_txn_name(d)]:
                dirnames.remove(name)  # do not descend into a version
                yield os.path.relpath(dirpath, root), name

    def sweep(self, garbage: Callable[[str], bool]) -> list[str]:
        gone = []
        for part, version in list(self.versions()):
            if not garbage(version):
                continue
            with partition_lock(self._lock(part)):
                if self.live_version(part) != version:
                    vdir = self._vdir(part, version)
                    self.storage.remove_tree(vdir)
                    gone.append(vdir)
        return gone

    def stored_files(self, partition: str, version: str, names: list[str]) -> dict[str, str] | None:
        vdir = self._vdir(partition, version)
        paths = {n: os.path.join(vdir, published_name(version, n)) for n in names}
        return paths if os.path.isdir(vdir) and all(os.path.isfile(p) for p in paths.values()) else None

    def describe(self) -> str:
        return f"files at file://{self.table}"
