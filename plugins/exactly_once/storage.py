"""Storage adapters: the few primitives the protocol needs, on a local filesystem and on S3 (s3fs).

Both adapters offer the same operations; the difference that matters is how a partition is published:

* :class:`LocalStorage` (POSIX; HDFS has the same rename semantics) - the staged partition dir is
  renamed (atomic) to ``<table>/_versions/<partition>/<txn>/``, then the partition path
  ``<table>/<partition>`` - a symlink - is swapped to it with one ``rename(2)`` of a new link over the
  old one. A reader resolves the link once and sees the old or the new version, never a mix.
* :class:`~exactly_once.storage_s3.S3Storage` (module ``storage_s3``) - no atomic rename, so data
  files get per-transaction names (``<txn>--<file>``), are copied next to the live ones, then
  ``_MANIFEST.json`` is switched to name the new set with one conditional PUT, then older files are
  deleted. The commit point itself is elsewhere: the exclusive create (``If-None-Match: *``) of the
  transaction's outcome record in the log.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from .errors import ConfigError, StorageError, UnsafeIdentifierError
from .ids import parse_txn_name, safe_join

MANIFEST = "_MANIFEST.json"
SUCCESS = "_SUCCESS"
Hook = Callable[[str], None]


@dataclass(frozen=True)
class FileEntry:
    """A file below some directory: path relative to it, and its size in bytes."""

    rel: str
    size: int


def is_hidden(name: str) -> bool:
    """Spark/Hadoop/pyarrow readers skip names starting with ``_`` or ``.``."""
    return name.startswith(("_", "."))


def supersedes(current: str | None, candidate: str) -> bool:
    """True if the live version ``current`` is a newer epoch of the same interval than ``candidate``."""
    cur, cand = parse_txn_name(current or ""), parse_txn_name(candidate)
    return bool(cur and cand and cur[0] == cand[0] and cur[1] > cand[1])


def to_json(obj: Any) -> bytes:
    """Human-readable, stable JSON (sorted keys, indented) as bytes."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode()


class Storage(ABC):
    """Primitives over one filesystem. Paths are plain strings (absolute local paths or ``bucket/key``)."""

    display_root: str = ""

    def join(self, base: str, *parts: str) -> str:
        """Join ``parts`` under ``base``, refusing anything that would escape it."""
        return safe_join(base, *parts)

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    def read_json(self, path: str) -> Any:
        return json.loads(self.read_bytes(path))

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list_names(self, path: str) -> list[str]:
        """Names directly below ``path`` (files and dirs); ``[]`` if it does not exist."""

    @abstractmethod
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist; atomic and durable. False if it existed."""

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Create or replace ``path``; a reader sees the old or the new content, never a part."""

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create a directory (no-op on object stores, where directories are implicit)."""

    @abstractmethod
    def walk_files(self, path: str) -> list[FileEntry]:
        """Every file below ``path`` (recursively); refuses symlinks. ``[]`` if it does not exist."""

    @abstractmethod
    def remove_tree(self, path: str) -> None:
        """Delete ``path`` (a file, or a dir and everything below it) without following symlinks; no
        error if absent."""

    @abstractmethod
    def move_tree(self, src: str, dst: str) -> None:
        """Move a directory tree; idempotent (if ``src`` is gone and ``dst`` exists, nothing to do)."""

    @abstractmethod
    def open(self, path: str, mode: str = "rb") -> Any: ...

    @abstractmethod
    def file_meta(self, path: str) -> dict[str, Any]:
        """``{"size": int, "mtime": float | None, "etag": str | None}`` of a file."""

    @abstractmethod
    def publish_partition(self, staged: str, table: str, partition: str, version: str,
                          files: list[dict[str, Any]], hook: Hook) -> str:
        """Make ``version`` (the staged files ``files`` of ``partition``) the live one. Idempotent.

        Returns ``"published"``, ``"already"`` (it was live) or ``"superseded"`` (a newer epoch of the same
        interval is live; nothing is changed). Raises StorageError if the staged files are not as listed.
        """

    @abstractmethod
    def live_version(self, table: str, partition: str) -> str | None:
        """The transaction name whose version of ``partition`` is live, or None."""

    @abstractmethod
    def live_files(self, table: str, partition: str) -> list[str]:
        """Exact list of the live data files of ``partition`` (what an exact reader should read)."""

    @abstractmethod
    def sweep(self, table: str, min_age: float) -> list[str]:
        """Delete data that no live version references and that is older than ``min_age`` seconds:
        superseded version dirs (local), stray files next to a live manifest (S3). Returns what went."""

    def url(self, path: str) -> str:
        """A URL for ``path`` that Spark and people understand (never with credentials)."""
        return path


class LocalStorage(Storage):
    """Local POSIX filesystem: exclusive create by ``link(2)``, publish by ``rename(2)`` + symlink swap."""

    display_root = "file://"

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def list_names(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    @staticmethod
    def _fsync_dir(path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_tmp(self, path: str, data: bytes) -> str:
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def create_exclusive(self, path: str, data: bytes) -> bool:
        tmp = self._write_tmp(path, data)
        try:
            os.link(tmp, path)  # atomic, fails if path exists: readers never see a partial record
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._fsync_dir(os.path.dirname(path))
        return True

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = self._write_tmp(path, data)
        os.replace(tmp, path)
        self._fsync_dir(os.path.dirname(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def walk_files(self, path: str) -> list[FileEntry]:
        if os.path.islink(path):
            raise UnsafeIdentifierError(f"refusing symlink {path}")
        out: list[FileEntry] = []
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            for name in dirnames + filenames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    raise UnsafeIdentifierError(f"refusing symlink in staged output: {full}")
            for name in filenames:
                full = os.path.join(dirpath, name)
                out.append(FileEntry(os.path.relpath(full, path), os.stat(full).st_size))
        return sorted(out, key=lambda e: e.rel)

    def remove_tree(self, path: str) -> None:
        for _ in range(20):  # a concurrent remover or a zombie writer may change the tree under us
            try:
                if os.path.islink(path) or os.path.isfile(path):
                    os.unlink(path)  # a link is removed, never followed
                elif os.path.isdir(path):
                    shutil.rmtree(path)  # fd-based: does not follow symlinks inside the tree
                return
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
        raise StorageError(f"could not remove {path}: it keeps changing")

    def _walk_settled(self, path: str) -> list[FileEntry]:
        """``walk_files`` of a dir that a concurrent finisher of the same commit may be writing into:
        its manifest's temp file can vanish between the listing and the stat - list again."""
        for _ in range(20):
            try:
                return self.walk_files(path)
            except FileNotFoundError:
                continue
        raise StorageError(f"could not list {path}: it keeps changing")

    def move_tree(self, src: str, dst: str) -> None:
        if not os.path.lexists(src):
            return
        if os.path.lexists(dst):
            self.remove_tree(src)  # an earlier attempt moved it already; src is a leftover
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            os.rename(src, dst)
        except OSError:
            if os.path.lexists(src) and not os.path.lexists(dst):
                raise
            self.remove_tree(src)  # a concurrent finisher moved it first

    def open(self, path: str, mode: str = "rb") -> Any:
        return open(path, mode)

    def file_meta(self, path: str) -> dict[str, Any]:
        st = os.stat(path)
        return {"size": st.st_size, "mtime": st.st_mtime, "etag": None}

    def publish_partition(self, staged: str, table: str, partition: str, version: str,
                          files: list[dict[str, Any]], hook: Hook) -> str:
        vdir = self.join(table, "_versions", partition, version)
        link = self.join(table, partition)
        if os.path.lexists(link) and not os.path.islink(link):
            raise StorageError(f"{link} is a plain directory not managed by exactly-once; move it away")
        if os.path.isdir(staged) and not os.path.islink(staged) and not os.path.lexists(vdir):
            os.makedirs(os.path.dirname(vdir), exist_ok=True)
            try:
                os.rename(staged, vdir)  # atomic; a leftover `staged` after this is a zombie's, left for abort
            except OSError:
                if not os.path.isdir(vdir):
                    raise  # else: a concurrent finisher of the same commit renamed it first
        for f in files:
            p = os.path.join(vdir, f["name"])
            if not os.path.isfile(p) or os.path.islink(p) or os.stat(p).st_size != f["size"]:
                raise StorageError(f"staged file {f['name']} of {version} is missing or altered")
        listed = {f["name"] for f in files}
        for entry in self._walk_settled(vdir) if os.path.isdir(vdir) else []:
            if entry.rel not in listed and not any(is_hidden(s) for s in entry.rel.split("/")):
                with contextlib.suppress(FileNotFoundError):  # a concurrent finisher removed it first
                    os.unlink(os.path.join(vdir, entry.rel))  # written after pre_commit: not this version
        self.write_atomic(os.path.join(vdir, MANIFEST), to_json({"version": version, "files": files}))
        hook("commit.mid_publish")
        current = self.live_version(table, partition)
        if current == version:
            return "already"
        if supersedes(current, version):
            return "superseded"
        os.makedirs(os.path.dirname(link), exist_ok=True)  # nested partitions: dt=X/h=Y
        rel = os.path.relpath(vdir, os.path.dirname(link))
        tmp = os.path.join(os.path.dirname(link), f".{os.path.basename(link)}.{uuid.uuid4().hex}.link")
        os.symlink(rel, tmp)
        os.replace(tmp, link)  # the atomic switch for plain readers
        self._fsync_dir(os.path.dirname(link))
        return "published"

    def live_version(self, table: str, partition: str) -> str | None:
        link = self.join(table, partition)
        return os.path.basename(os.readlink(link)) if os.path.islink(link) else None

    def sweep(self, table: str, min_age: float) -> list[str]:
        versions, gone = os.path.join(table, "_versions"), []
        now = time.time()
        for dirpath, dirnames, _ in os.walk(versions, followlinks=False):
            for name in [d for d in dirnames if parse_txn_name(d)]:
                dirnames.remove(name)  # do not descend into a version
                vdir = os.path.join(dirpath, name)
                partition = os.path.relpath(dirpath, versions)
                if self.live_version(table, partition) != name and now - os.lstat(vdir).st_mtime >= min_age:
                    self.remove_tree(vdir)
                    gone.append(vdir)
        return gone

    def live_files(self, table: str, partition: str) -> list[str]:
        link = self.join(table, partition)
        if not os.path.islink(link):
            return []
        m = self.read_json(os.path.join(link, MANIFEST))
        return [os.path.join(link, f["name"]) for f in m["files"]]


def redact(url: str) -> str:
    """``url`` with any user-info (``key:secret@``) replaced by ``***@``; safe to log."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        return url.replace(parts.netloc, "***@" + (parts.hostname or ""), 1)
    if ":" in parts.netloc and "@" in url:  # key:se/cret@host - a '/' in the secret ends the netloc early
        return f"{parts.scheme}://***@{url.rsplit('@', 1)[1]}"
    return url


def storage_for(url: str, **options: Any) -> tuple[Storage, str]:
    """``(storage, root path)`` for a local path / ``file://`` URL or an ``s3://bucket/prefix`` URL.

    S3 options go to :class:`s3fs.S3FileSystem` (``key``, ``secret``, ``endpoint_url`` ...); without them
    s3fs uses the usual AWS environment. Credentials inside the URL are refused (they would be logged).
    """
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        path = os.path.abspath(parts.path if parts.scheme else url)
        return LocalStorage(), path
    if parts.scheme in ("s3", "s3a"):
        if parts.username or parts.password or ":" in parts.netloc:  # no bucket name holds a ':'
            raise ConfigError(f"credentials in a storage URL are refused ({redact(url)}); use a connection")
        import s3fs  # imported lazily: local runs need no AWS stack

        endpoint = options.pop("endpoint_url", None) or os.environ.get("EO_S3_ENDPOINT_URL")
        client_kwargs = dict(options.pop("client_kwargs", {}) or {})
        if endpoint:
            client_kwargs.setdefault("endpoint_url", endpoint)
        client_kwargs.setdefault("region_name", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
        fs = s3fs.S3FileSystem(client_kwargs=client_kwargs, **options)
        root = (parts.netloc + parts.path).rstrip("/")
        from .storage_s3 import S3Storage  # noqa: PLC0415 - with s3fs, only for s3:// URLs

        return S3Storage(fs), root
    raise ConfigError(f"unsupported storage URL scheme {parts.scheme!r} in {redact(url)}")
