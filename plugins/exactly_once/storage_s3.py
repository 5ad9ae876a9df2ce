"""The S3 adapter (s3fs): exclusive create is ``PutObject`` with ``If-None-Match: *``; publish copies.

S3 has no rename, so a partition is published in three steps (see :meth:`S3Storage.publish_partition`):
copy the staged files next to the live ones under per-transaction names (``<txn>--<file>``), switch the
partition's ``_MANIFEST.json`` with one *conditional* PUT (``If-Match`` on the ETag read before the
switch, ``If-None-Match: *`` for the first version), then delete files of older versions. Exact readers
follow the manifest; the commit point itself is elsewhere (the outcome record in the log).
"""
from __future__ import annotations

import errno
import json
import posixpath
import time
from typing import Any, Iterable

from .errors import StorageError
from .storage import MANIFEST, SUCCESS, FileEntry, Hook, Storage, is_hidden, supersedes, to_json

SWITCH_TRIES = 20  # conditional manifest PUTs before giving up (each lost race re-reads first)


class S3Storage(Storage):
    """S3 through s3fs (also MinIO and other S3 servers with conditional writes)."""

    def __init__(self, fs: Any, display_root: str = "s3://") -> None:
        self.fs = fs
        self.display_root = display_root

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def list_names(self, path: str) -> list[str]:
        try:
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, refresh=True))
        except FileNotFoundError:
            return []

    def create_exclusive(self, path: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        return True

    def write_atomic(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)  # a single PUT replaces the object atomically

    def makedirs(self, path: str) -> None:
        return None

    def walk_files(self, path: str) -> list[FileEntry]:
        try:
            found = self.fs.find(path, detail=True, withdirs=False)
        except FileNotFoundError:
            return []
        base = path.rstrip("/") + "/"
        return sorted((FileEntry(p[len(base):], int(info["size"])) for p, info in found.items()
                       if p.startswith(base)), key=lambda e: e.rel)

    def remove_tree(self, path: str) -> None:
        self.fs.invalidate_cache(path)
        if self.fs.isfile(path):
            self.fs.rm(path)
            return
        keys = [posixpath.join(path, e.rel) for e in self.walk_files(path)]
        if keys:
            self.fs.rm(keys)
        self.fs.invalidate_cache(path)

    def _copy(self, pairs: Iterable[tuple[str, str]]) -> None:
        pairs = list(pairs)
        if pairs:
            self.fs.copy([s for s, _ in pairs], [d for _, d in pairs])  # batched, concurrent

    def move_tree(self, src: str, dst: str) -> None:
        entries = self.walk_files(src)
        try:
            self._copy((self.join(src, e.rel), self.join(dst, e.rel)) for e in entries)
        except FileNotFoundError:
            if self.walk_files(src):  # else a concurrent finisher moved it first
                raise
        self.remove_tree(src)

    def open(self, path: str, mode: str = "rb") -> Any:
        return self.fs.open(path, mode)

    def file_meta(self, path: str) -> dict[str, Any]:
        info = self.fs.info(path)
        return {"size": int(info["size"]), "mtime": None, "etag": str(info.get("ETag", "")).strip('"')}

    def _manifest(self, live: str) -> dict[str, Any] | None:
        """The live partition's manifest (one GET), None if it has none yet."""
        try:
            return json.loads(self.fs.cat_file(self.join(live, MANIFEST)))
        except FileNotFoundError:
            return None

    def read_manifest(self, live: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(manifest, ETag)`` of a live partition, ``(None, None)`` if it has none yet.

        The ETag is read *before* the body: a conditional PUT with it fails if the manifest changed at
        any point after the ETag was read, so a decision taken on the body is never applied to a newer
        manifest than the one it was taken on.
        """
        path = self.join(live, MANIFEST)
        self.fs.invalidate_cache(path)
        try:
            etag = str(self.fs.info(path)["ETag"])
        except FileNotFoundError:
            return None, None
        manifest = self._manifest(live)
        return (manifest, etag) if manifest is not None else (None, None)

    def put_manifest(self, live: str, body: bytes, etag: str | None) -> bool:
        """Replace the manifest only if it is still the one with ``etag`` (None: only if there is none).

        Returns False when another publisher changed it first (HTTP 412, or the create lost).
        """
        path = self.join(live, MANIFEST)
        try:
            if etag is None:
                self.fs.pipe_file(path, body, mode="create")
            else:
                self.fs.pipe_file(path, body, IfMatch=etag)
        except FileExistsError:
            return False
        except OSError as exc:  # s3fs maps 412 PreconditionFailed (If-Match) to EINVAL
            if exc.errno != errno.EINVAL:
                raise
            return False
        finally:
            self.fs.invalidate_cache(path)
        return True

    def publish_partition(self, staged: str, table: str, partition: str, version: str,
                          files: list[dict[str, Any]], hook: Hook) -> str:
        """Copy ``version``'s files in, switch the manifest to them, delete older versions' files.

        Returns ``published``, ``already`` (this version was live and complete) or ``superseded`` (a
        newer version of the same interval is live: nothing of it is touched). Safe against any number
        of concurrent publishers of the same or other versions: the switch is conditional, and no
        publisher deletes a file of a version newer than its own.
        """
        live = self.join(table, partition)
        self.fs.invalidate_cache(live)
        current = self._manifest(live)
        if current and supersedes(current["version"], version):
            return "superseded"
        live_files = [dict(f, name=f"{version}--{f['name']}") for f in files]
        present = {e.rel: e.size for e in self.walk_files(live)}
        todo = [(self.join(staged, f["name"]), self.join(live, lf["name"]))
                for f, lf in zip(files, live_files) if present.get(lf["name"]) != f["size"]]
        staged_sizes = {e.rel: e.size for e in self.walk_files(staged)} if todo else {}
        for f, lf in zip(files, live_files):
            if present.get(lf["name"]) != f["size"] and staged_sizes.get(f["name"]) != f["size"]:
                raise StorageError(f"staged file {f['name']} of {version} is missing or altered")
        half = len(todo) // 2
        try:
            self._copy(todo[:half])
            hook("commit.mid_publish")  # some files copied, manifest not switched: its readers see the old
            self._copy(todo[half:])
        except FileNotFoundError:  # staging moved away: another finisher completed this publish
            now = self._manifest(live)
            if now and (now["version"] == version or supersedes(now["version"], version)):
                return "already" if now["version"] == version else "superseded"
            raise
        target = {"version": version, "files": live_files}
        for _ in range(SWITCH_TRIES):
            now, etag = self.read_manifest(live)  # a newer version may have gone live while we copied
            if now and supersedes(now["version"], version):
                return "superseded"
            if now == target or self.put_manifest(live, to_json(target), etag):
                break
        else:
            raise StorageError(f"the manifest of {live} kept changing during {SWITCH_TRIES} switch attempts")
        self.write_atomic(self.join(live, SUCCESS), version.encode())
        self._delete_older(live, version, {lf["name"] for lf in live_files})
        return "already" if current and current["version"] == version and not todo else "published"

    def _delete_older(self, live: str, version: str, keep: set[str]) -> None:
        """Delete the live partition's data files that belong to versions older than ``version``.

        Files of a *newer* version (copied in by a publisher that overtook this one) are never touched.
        """
        stale = [self.join(live, e.rel) for e in self.walk_files(live)
                 if "/" not in e.rel and not is_hidden(e.rel) and e.rel not in keep
                 and not supersedes(e.rel.split("--", 1)[0], version)]
        if stale:
            self.fs.rm(stale)

    def sweep(self, table: str, min_age: float) -> list[str]:
        gone: list[str] = []
        now = time.time()
        found = self.fs.find(table, detail=True, withdirs=False) if self.exists(table) else {}
        base = table.rstrip("/") + "/"
        for path in [p for p in found if p.endswith("/" + MANIFEST) and not is_hidden(p[len(base):])]:
            live = path.rsplit("/", 1)[0]
            keep = {f["name"] for f in json.loads(self.fs.cat_file(path))["files"]}
            for p, info in found.items():
                name = p[len(live) + 1:]
                if (p.startswith(live + "/") and "/" not in name and not is_hidden(name) and name not in keep
                        and now - info["LastModified"].timestamp() >= min_age):
                    self.fs.rm(p)
                    gone.append(p)
        return gone

    def live_version(self, table: str, partition: str) -> str | None:
        m = self._manifest(self.join(table, partition))
        return m["version"] if m else None

    def live_files(self, table: str, partition: str) -> list[str]:
        live = self.join(table, partition)
        m = self._manifest(live)
        return [self.join(live, f["name"]) for f in m["files"]] if m else []

    def url(self, path: str) -> str:
        return f"s3://{path}"
