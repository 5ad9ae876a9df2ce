"""The S3 adapter (s3fs): I/O primitives only; publishing a version is :mod:`exactly_once.targets.s3files`.

Conditional writes are sent as one ``PutObject`` whatever their size (never a multipart upload, which
drops ``If-None-Match``/``If-Match``) and judged by the HTTP status, not by the error body's wording:
S3 servers differ there (MinIO answers a failed ``If-None-Match`` with a 412 that names no condition,
which s3fs turns into ``OSError(EINVAL)``; AWS may answer 409 ``ConditionalRequestConflict`` while a
concurrent conditional write is in flight - that one is retried).
"""
from __future__ import annotations

import os
import posixpath
import time
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError, StorageError
from . import FileEntry, Storage, redact

CONFLICT_RETRIES = 10  # 409 ConditionalRequestConflict: another conditional write is in flight
MAX_PUT = 5 * 2**30  # the largest single PUT S3 accepts


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed S3 call (s3fs keeps botocore's ClientError as the ``__cause__``)."""
    for err in (exc, exc.__cause__, exc.__context__):
        response = getattr(err, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status is not None:
                return int(status)
    return None


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
            names = {posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, refresh=True)}
        except FileNotFoundError:
            return []
        return sorted(n for n in names if n)

    def put_conditional(self, path: str, data: bytes, *, if_match: str | None = None) -> bool:
        """One PUT of ``data`` that succeeds only if ``path`` does not exist (``if_match=None``) or still
        has the ETag ``if_match``. Returns False when the condition failed (HTTP 412: it exists, or it
        changed). Sizes beyond a single PUT are refused rather than sent without their condition."""
        if len(data) > MAX_PUT:
            raise StorageError(f"{path}: {len(data)} bytes is more than one conditional PUT can carry")
        bucket, key, _ = self.fs.split_path(path)
        condition = {"IfMatch": if_match} if if_match is not None else {"IfNoneMatch": "*"}
        try:
            for attempt in range(CONFLICT_RETRIES):
                try:
                    self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
                    return True
                except (OSError, FileExistsError) as exc:
                    status = http_status(exc)
                    if status == 412 or isinstance(exc, FileExistsError):
                        return False
                    if status != 409 or attempt == CONFLICT_RETRIES - 1:
                        raise
                    time.sleep(0.05 * 2 ** min(attempt, 5))  # a concurrent conditional write is in flight
            return False
        finally:
            self.fs.invalidate_cache(path)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        return self.put_conditional(path, data)

    def etag(self, path: str) -> str | None:
        """The current ETag of ``path`` (fresh, not cached), None if it does not exist."""
        self.fs.invalidate_cache(path)
        try:
            return str(self.fs.info(path)["ETag"])
        except FileNotFoundError:
            return None

    def write_atomic(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)  # a single PUT replaces the object atomically

    def makedirs(self, path: str) -> None:
        return None

    def _objects_below(self, path: str) -> list[dict[str, Any]]:
        """Every object whose key starts with ``path/`` (one paginated ListObjectsV2, uncached)."""
        bucket, key, _ = self.fs.split_path(path.rstrip("/"))
        prefix, token, out = key + "/" if key else "", None, []
        while True:
            page = self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix,
                                   **({"ContinuationToken": token} if token else {}))
            out += [{**o, "path": f"{bucket}/{o['Key']}"} for o in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return out

    def walk_files(self, path: str) -> list[FileEntry]:
        """Every object below ``path``; zero-byte folder markers (``.../`` keys that Hadoop's S3A and
        consoles create) are not files and are skipped."""
        base = path.rstrip("/") + "/"
        return sorted((FileEntry(o["path"][len(base):], int(o["Size"]), str(o.get("ETag") or "").strip('"') or None)
                       for o in self._objects_below(path)
                       if not o["Key"].endswith("/")), key=lambda e: e.rel)

    def remove_tree(self, path: str) -> None:
        bucket, key, _ = self.fs.split_path(path.rstrip("/"))
        keys = [o["Key"] for o in self._objects_below(path)]
        if self.fs.isfile(path):
            keys.append(key)
        for i in range(0, len(keys), 1000):  # folder markers included: nothing is left behind
            self.fs.call_s3("delete_objects", Bucket=bucket,
                            Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
        self.fs.invalidate_cache(path)

    def copy_files(self, pairs: list[tuple[str, str]]) -> None:
        """Server-side copies, batched and concurrent."""
        if pairs:
            self.fs.copy([s for s, _ in pairs], [d for _, d in pairs])

    def move_tree(self, src: str, dst: str) -> None:
        entries = self.walk_files(src)
        try:
            self.copy_files([(self.join(src, e.rel), self.join(dst, e.rel)) for e in entries])
        except FileNotFoundError:
            if self.walk_files(src):  # else a concurrent finisher moved it first
                raise
        self.remove_tree(src)

    def open(self, path: str, mode: str = "rb") -> Any:
        return self.fs.open(path, mode)

    def file_meta(self, path: str) -> dict[str, Any]:
        info = self.fs.info(path)
        return {"size": int(info["size"]), "mtime": None, "etag": str(info.get("ETag", "")).strip('"')}

    def modified_at(self, path: str) -> float:
        self.fs.invalidate_cache(path)
        return float(self.fs.info(path)["LastModified"].timestamp())  # the server's clock, 1 s resolution

    def url(self, path: str) -> str:
        return f"s3://{path}"


def open_url(url: str, options: dict[str, Any]) -> tuple[Storage, str]:
    """``(storage, root)`` for an ``s3://bucket/prefix`` URL (:func:`exactly_once.storage.storage_for`):
    ``options`` go to :class:`s3fs.S3FileSystem`; credentials inside the URL are refused (they would be
    logged); ``EO_S3_ENDPOINT_URL`` and ``AWS_DEFAULT_REGION`` apply when the options give none."""
    parts = urlsplit(url)
    if parts.username or parts.password or ":" in parts.netloc:  # no bucket name holds a ':'
        raise ConfigError(f"credentials in a storage URL are refused ({redact(url)}); use a connection")
    try:
        import s3fs  # imported lazily: local runs need no AWS stack
    except ImportError as exc:
        raise ConfigError(f"{redact(url)} needs s3fs: pip install 'exactly-once-pipelines[s3]' "
                          "(or s3fs on the Spark driver for the job side)") from exc

    options = dict(options)
    endpoint = options.pop("endpoint_url", None) or os.environ.get("EO_S3_ENDPOINT_URL")
    client_kwargs = dict(options.pop("client_kwargs", {}) or {})
    if endpoint:
        client_kwargs.setdefault("endpoint_url", endpoint)
    client_kwargs.setdefault("region_name", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    fs = s3fs.S3FileSystem(client_kwargs=client_kwargs, **options)
    return S3Storage(fs), (parts.netloc + parts.path).rstrip("/")
