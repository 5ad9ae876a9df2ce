"""Storage adapters: the few I/O primitives the protocol needs, on a local filesystem and on S3 (s3fs).

Both adapters offer the same operations (read, list, exclusive create, atomic replace, walk, remove,
move); how a version is *published* on top of them is a publish target's business
(:mod:`exactly_once.targets`). :class:`LocalStorage` is POSIX (HDFS has the same rename semantics);
:class:`~exactly_once.storage.s3.S3Storage` lives in ``storage_s3``.
"""
from __future__ import annotations

import errno
import importlib
import json
import os
import posixpath
import shutil
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from ..errors import ConfigError, StorageError, UnsafeIdentifierError
from ..ids import parse_txn_name, safe_join

MANIFEST = "_MANIFEST.json"
SUCCESS = "_SUCCESS"
Hook = Callable[[str], None]


@dataclass(frozen=True)
class FileEntry:
    """A file below some directory: path relative to it, its size in bytes, its ETag where the storage
    lists one (S3: a digest of the content, so a same-size rewrite changes it), and its mtime and inode
    where the storage has them (local disk: ``os.stat``'s ``st_mtime`` and ``st_ino``)."""

    rel: str
    size: int
    etag: str | None = None
    mtime: float | None = None
    inode: int | None = None


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
    can_rename: bool = False  # an atomic rename of a directory exists (POSIX, HDFS), not on S3

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
    def modified_at(self, path: str) -> float:
        """When ``path`` was last written, by the STORAGE's clock (local mtime, S3 ``LastModified``),
        never the caller's; fresh, not cached. FileNotFoundError if it does not exist."""

    def url(self, path: str) -> str:
        """A URL for ``path`` that Spark and people understand (never with credentials)."""
        return path


class LocalStorage(Storage):
    """Local POSIX filesystem: exclusive create by ``link(2)``, publish by ``rename(2)`` + symlink swap."""

    display_root = "file://"
    can_rename = True

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
                st = os.stat(full)
                out.append(FileEntry(os.path.relpath(full, path), st.st_size, mtime=st.st_mtime, inode=st.st_ino))
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

    def walk_settled(self, path: str) -> list[FileEntry]:
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
            self.rename(src, dst)
        except OSError:
            if os.path.lexists(src) and not os.path.lexists(dst):
                raise
            self.remove_tree(src)  # a concurrent finisher moved it first

    def rename(self, src: str, dst: str) -> None:
        """``rename(2)`` made durable: both parent directories are fsync'ed, so a crash after it
        returns cannot bring the old name back."""
        os.rename(src, dst)
        self._fsync_dir(os.path.dirname(dst))
        if os.path.dirname(src) != os.path.dirname(dst):
            self._fsync_dir(os.path.dirname(src))

    def open(self, path: str, mode: str = "rb") -> Any:
        return open(path, mode)

    def file_meta(self, path: str) -> dict[str, Any]:
        st = os.stat(path)
        return {"size": st.st_size, "mtime": st.st_mtime, "etag": None}

    def modified_at(self, path: str) -> float:
        return os.stat(path, follow_symlinks=False).st_mtime



def redact(url: str) -> str:
    """``url`` with any user-info (``key:secret@``) replaced by ``***@`` (the host and port kept); safe to log."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        return url.replace(parts.netloc, "***@" + parts.netloc.rsplit("@", 1)[1], 1)
    if ":" in parts.netloc and "@" in url:  # key:se/cret@host - a '/' in the secret ends the netloc early
        return f"{parts.scheme}://***@{url.rsplit('@', 1)[1]}"
    return url


INTERNALS = "_exactly_once"  # a table's internals: <parent>/_exactly_once/<table name>/


def default_home(table: str) -> str:
    """Where a table's internals live: ``<parent>/_exactly_once/<name>``, outside the table directory,
    so that no reader listing or globbing the table can reach staged, superseded or log files."""
    parent, name = posixpath.split(table.rstrip("/"))
    if not parent or not name or parent.endswith(":"):
        raise ConfigError(f"table location {table!r} needs a parent directory (e.g. <bucket>/warehouse/t)")
    return posixpath.join(parent, INTERNALS, name)


_BACKENDS = {"s3": ".s3", "s3a": ".s3"}  # URL scheme -> module with open_url(url, options)


def storage_for(url: str, **options: Any) -> tuple[Storage, str]:
    """``(storage, root path)`` for a local path / ``file://`` URL or an ``s3://bucket/prefix`` URL.

    S3 options go to :class:`s3fs.S3FileSystem` (``key``, ``secret``, ``endpoint_url`` ...); without them
    s3fs uses the usual AWS environment. Credentials inside the URL are refused (they would be logged).
    """
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        path = os.path.abspath(parts.path if parts.scheme else url)
        return LocalStorage(), path
    backend = _BACKENDS.get(parts.scheme)
    if backend is not None:  # imported by name, fsspec-style: its SDK only where such a URL is used
        return importlib.import_module(backend, __package__).open_url(url, options)
    raise ConfigError(f"unsupported storage URL scheme {parts.scheme!r} in {redact(url)}")
