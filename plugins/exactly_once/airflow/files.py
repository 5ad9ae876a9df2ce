"""Serve report files from one directory: a safe join that never follows a symlink and never escapes.

Each path component is opened relative to its parent's file descriptor with ``O_NOFOLLOW`` (and
``O_DIRECTORY`` for directories), so a symlink anywhere under the root - or one swapped in while the
request is served - is refused by the kernel, and ``..``, ``.``, empty, NUL and backslash components
are refused before anything is opened. The root itself is the configured reports directory.
"""
from __future__ import annotations

import mimetypes
import os
import stat
from dataclasses import dataclass

from ..errors import UnsafeIdentifierError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # a FIFO never blocks


@dataclass(frozen=True)
class Found:
    """A regular file's content, or ``directory=True`` when the path names a directory."""

    content: bytes = b""
    media_type: str = "application/octet-stream"
    directory: bool = False


def components(rel: str) -> list[str]:
    """The path components of ``rel``; UnsafeIdentifierError for anything that could escape the root."""
    parts = rel.split("/") if rel else []
    while parts and parts[-1] == "":
        parts.pop()  # a trailing slash names the directory itself
    for p in parts:
        if p in ("", ".", "..") or "\x00" in p or "\\" in p:
            raise UnsafeIdentifierError(f"unsafe path {rel!r}")
    return parts


def read_under(root: str, rel: str, *, index: str = "index.html") -> Found:
    """Read the regular file ``root/rel`` (``rel/index.html`` when ``rel`` ends with ``/``).

    Raises FileNotFoundError for anything missing, not regular, or reached through a symlink, and
    UnsafeIdentifierError for an unsafe ``rel``. Returns ``Found(directory=True)`` for a directory
    named without a trailing slash (the caller redirects, so that relative links in the page work).
    """
    parts = components(rel)
    if rel.endswith("/") or not parts:
        parts.append(index)
    fd = os.open(root, _DIR & ~os.O_NOFOLLOW)
    try:
        for seg, flags in [(seg, _DIR) for seg in parts[:-1]] + [(parts[-1], _FILE)]:
            child = _open_at(fd, seg, flags)
            os.close(fd)
            fd = child
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return Found(directory=True)
        if not stat.S_ISREG(info.st_mode):
            raise FileNotFoundError(rel)
        with os.fdopen(os.dup(fd), "rb") as f:
            content = f.read()
    finally:
        os.close(fd)
    media = mimetypes.guess_type(parts[-1])[0] or "application/octet-stream"
    return Found(content=content, media_type=media)


def read_url_under(url: str, rel: str, storage_options: dict | None = None, *,
                   index: str = "index.html") -> Found:
    """:func:`read_under` for a reports root on storage (``s3://...``): the same refusals of unsafe
    paths (object stores have no symlinks), FileNotFoundError for anything missing."""
    from ..storage import storage_for  # noqa: PLC0415 - only for a remote reports root

    parts = components(rel)
    if rel.endswith("/") or not parts:
        parts.append(index)
    store, base = storage_for(url, **(storage_options or {}))
    key = store.join(base, *parts)
    try:
        content = store.read_bytes(key)
    except (FileNotFoundError, IsADirectoryError):
        if store.list_names(key):
            return Found(directory=True)
        raise FileNotFoundError(rel) from None
    return Found(content=content, media_type=mimetypes.guess_type(parts[-1])[0] or "application/octet-stream")


def _open_at(parent: int, name: str, flags: int) -> int:
    """Open ``name`` under directory fd ``parent``; a symlink (ELOOP) or anything else raises FileNotFoundError."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:  # ELOOP (a symlink), ENOTDIR, ENOENT, EACCES ...
        raise FileNotFoundError(name) from exc
