"""The manifest: the typed contract between ``pre_commit``, the gate, the publish targets and readers.

A manifest seals one transaction's staged output: every data file per partition with its size, row
count (Parquet footers) and sha256, plus the writer's other files (state, counts, quarantine) as
``extras``. It is stored as JSON in the transaction log's ``pre_committed`` record (:meth:`to_dict`)
and read back with :meth:`from_dict`; from then on a commit never needs to look at the writer again.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import StorageError
from ..ids import TxnRef, check_partition
from ..storage import MANIFEST, FileEntry, Storage, is_hidden

MANIFEST_THREADS = 8  # concurrent file reads while building a manifest (checksums, parquet footers)


@dataclass(frozen=True)
class ManifestFile:
    """One sealed file: its name (relative to its partition, or to the staging dir for extras), and
    what identifies its content: ``sha256`` (read at pre_commit) and, on S3, the listed ``etag``; on local
    disk its ``mtime`` and ``inode`` at pre_commit (hints only: a file whose mtime or inode moved is read
    again at publish)."""

    name: str
    size: int
    rows: int | None = None
    sha256: str | None = None
    etag: str | None = None
    mtime: float | None = None
    inode: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "size": self.size, "rows": self.rows, "sha256": self.sha256}
        return {**d, **({"etag": self.etag} if self.etag else {}),
                **({"mtime": self.mtime} if self.mtime is not None else {}),
                **({"inode": self.inode} if self.inode is not None else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ManifestFile":
        mtime, inode = d.get("mtime"), d.get("inode")
        return cls(str(d["name"]), int(d["size"]), d.get("rows"), d.get("sha256"), d.get("etag"),
                   float(mtime) if isinstance(mtime, (int, float)) and not isinstance(mtime, bool) else None,
                   inode if isinstance(inode, int) and not isinstance(inode, bool) else None)


@dataclass(frozen=True)
class Manifest:
    """What one transaction publishes: ``partitions`` maps each partition path to its data files."""

    txn: TxnRef
    partitions: Mapping[str, tuple[ManifestFile, ...]]
    extras: tuple[ManifestFile, ...] = field(default=())

    @property
    def version(self) -> str:
        return self.txn.name

    @property
    def files(self) -> int:
        return sum(len(fs) for fs in self.partitions.values())

    @property
    def rows(self) -> int | None:
        """Total rows (None if some file's row count is unknown: not Parquet)."""
        counts = [f.rows for fs in self.partitions.values() for f in fs]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]

    def rows_by_file(self) -> dict[str, dict[str, int]]:
        """``partition -> {file name -> rows}`` of the partitions of several Parquet files: the counts the gate
        checks against the rows it reads (a partition of one file is checked by its total)."""
        return {p: {f.name: f.rows for f in fs if f.rows is not None} for p, fs in self.partitions.items()
                if sum(f.rows is not None for f in fs) > 1}

    def to_dict(self) -> dict[str, Any]:
        return {"txn": self.txn.to_dict(), "version": self.version, "files": self.files, "rows": self.rows,
                "partitions": {p: [f.to_dict() for f in fs] for p, fs in self.partitions.items()},
                "extras": [f.to_dict() for f in self.extras]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        return cls(TxnRef.from_dict(d["txn"]),
                   {p: tuple(ManifestFile.from_dict(f) for f in fs) for p, fs in d["partitions"].items()},
                   tuple(ManifestFile.from_dict(f) for f in d.get("extras", [])))


def check_layout(txn: TxnRef, partitions: list[str]) -> None:
    """Refuse partitions that nest (``a=1`` beside ``a=1/b=2``: publishing one would move the other)
    and partitions of different shapes in one transaction."""
    shapes = {tuple(seg.split("=", 1)[0] for seg in p.split("/")) for p in partitions}
    if len(shapes) > 1:
        raise StorageError(f"{txn.name}: staged partitions of different shapes {sorted(shapes)}; every "
                           "partition of a table must use the same keys in the same order")
    ordered = sorted(partitions)
    for a, b in zip(ordered, ordered[1:]):
        if b.startswith(a + "/"):
            raise StorageError(f"{txn.name}: partition {b!r} is nested inside partition {a!r}; write data "
                               "files only at the partition depth the table declares")


def build(storage: Storage, txn: TxnRef, staging: str, data_dirs: tuple[str, ...], *,
          checksums: bool = True, partition_rows: Mapping[str, int] | None = None,
          file_rows: Mapping[str, Mapping[str, int]] | None = None) -> Manifest:
    """Describe every file under ``staging``: files below one of ``data_dirs`` (top-level names) are
    partitioned data (hidden names - ``_SUCCESS``, ``.crc``, committer temp files - are never data),
    everything else is an extra. Refuses symlinks, data outside a partition dir and nested partitions.

    ``partition_rows`` (the writer's own row count per partition): the Parquet file that is a partition's
    only data file takes its row count from there instead of from its footer (one read less per file: one
    GET on S3). ``file_rows`` (the writer's rows per data file of a partition) does the same for a partition
    of several files - only when it names exactly the partition's Parquet files and adds up to its
    ``partition_rows``; otherwise the footers are read. The caller vouches for the counts (a gate compares
    them with what is staged before anything commits)."""
    todo: list[tuple[str | None, str, str, int, FileEntry]] = []  # (partition or None, path, name, size, entry)
    for entry in storage.walk_files(staging):  # refuses symlinks
        top, _, rest = entry.rel.partition("/")
        if top in data_dirs:
            part, _, name = rest.rpartition("/")
            if any(is_hidden(seg) for seg in rest.split("/")):
                continue
            if not part:
                raise StorageError(f"{txn.name}: data file {rest!r} is not inside a partition dir")
            todo.append((check_partition(part), storage.join(staging, entry.rel), name, entry.size, entry))
        elif entry.rel != MANIFEST:
            todo.append((None, storage.join(staging, entry.rel), entry.rel, entry.size, entry))
    check_layout(txn, sorted({t[0] for t in todo if t[0] is not None}))
    files_in: dict[str, int] = {}
    for t in todo:
        if t[0] is not None:
            files_in[t[0]] = files_in.get(t[0], 0) + 1
    known = {p: int(n) for p, n in (partition_rows or {}).items() if files_in.get(p) == 1
             and isinstance(n, int) and not isinstance(n, bool) and n >= 0}
    per_file = _trusted_file_rows(todo, partition_rows or {}, file_rows or {})
    # Reading every byte (sha256) and every parquet footer is I/O plus hashing that releases the GIL:
    # a few threads make it ~N times faster on a multi-core machine and on S3 (one request per read).
    if any(t[2].endswith(".parquet") for t in todo):
        import pyarrow.parquet  # noqa: F401 - imported once here, not concurrently by the workers
    with ThreadPoolExecutor(max_workers=max(1, min(MANIFEST_THREADS, len(todo)))) as pool:
        described = list(pool.map(lambda t: describe(storage, t[1], t[2], t[3], checksums, t[4],
                                                     None if t[0] is None else known.get(t[0], per_file.get((t[0], t[2])))),
                                  todo))
    partitions: dict[str, list[ManifestFile]] = {}
    extras = []
    for (part, *_), desc in zip(todo, described):
        if part is None:
            extras.append(desc)
        else:
            partitions.setdefault(part, []).append(desc)
    return Manifest(txn, {p: tuple(fs) for p, fs in sorted(partitions.items())}, tuple(extras))


def _trusted_file_rows(todo: list[tuple[str | None, str, str, int, FileEntry]], partition_rows: Mapping[str, int],
                       file_rows: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, str], int]:
    """``(partition, file name) -> rows`` from ``file_rows``, for the partitions where it names exactly the
    staged Parquet files and adds up to ``partition_rows`` (what the gate checks against the staged data)."""
    staged: dict[str, set[str]] = {}
    for part, _, name, *_ in todo:
        if part is not None and name.endswith(".parquet"):
            staged.setdefault(part, set()).add(name)
    out: dict[tuple[str, str], int] = {}
    for part, files in file_rows.items():
        counts = dict(files) if isinstance(files, Mapping) else {}
        if (set(counts) != staged.get(part) or part not in partition_rows
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values())
                or sum(counts.values()) != partition_rows[part]):
            continue
        out.update({(part, name): n for name, n in counts.items()})
    return out


def sha256_of(storage: Storage, path: str) -> str:
    """The sha256 of a file's content (read in 1 MiB chunks)."""
    with storage.open(path, "rb") as f:
        return sha256_read(f)


def sha256_read(f: Any) -> str:
    """The sha256 of what is left to read of an open binary file (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: f.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


def describe(storage: Storage, path: str, name: str, size: int, checksums: bool = True,
             listed: FileEntry | None = None, rows: int | None = None) -> ManifestFile:
    """Size, sha256 (if ``checksums``), what its ``listed`` entry says (ETag, mtime, inode) and the Parquet
    row count of one file (``rows`` if given, else read from its footer)."""
    sha = sha256_of(storage, path) if checksums else None
    if not name.endswith(".parquet"):
        rows = None
    elif rows is None:
        import pyarrow.parquet as pq

        with storage.open(path, "rb") as f:
            rows = pq.ParquetFile(f).metadata.num_rows
    return ManifestFile(name, size, rows, sha, *((listed.etag, listed.mtime, listed.inode) if listed else ()))


def difference(storage: Storage, root: str, manifest: Manifest, content: bool = False) -> str | None:
    """The first way the files below ``root`` (``<partition>/<name>``) differ from ``manifest`` - a file
    missing, of another size, of another listed ETag (S3: one LIST per 1,000 files) or, with
    ``content``, of another sha256 (every byte read again) - or None if every file is there as sealed."""
    found = {e.rel: e for e in storage.walk_files(root)}
    todo = []
    for part, files in manifest.partitions.items():
        for f in files:
            entry, rel = found.get(f"{part}/{f.name}"), f"{part}/{f.name}"
            if entry is None or entry.size != f.size:
                return f"{rel} is {'missing' if entry is None else f'{entry.size} bytes, not {f.size}'}"
            if f.etag and entry.etag and entry.etag != f.etag:
                return f"{rel} was rewritten (ETag {entry.etag}, sealed as {f.etag})"
            if content and f.sha256:
                todo.append((rel, f.sha256))
    with ThreadPoolExecutor(max_workers=max(1, min(MANIFEST_THREADS, len(todo)))) as pool:
        digests = list(pool.map(lambda t: sha256_of(storage, storage.join(root, t[0])), todo))
    return next((f"{rel} was rewritten (its sha256 is not the one sealed at pre_commit)"
                 for (rel, sha), got in zip(todo, digests) if got != sha), None)


def seal(storage: Storage, data: str, sealed: str, manifest: Manifest, verify: bool = True,
         content: bool = False) -> str | None:
    """Move the staged output from the writer's path ``data`` to ``sealed`` (where storage can rename;
    the same path on S3) and, if ``verify``, compare it with ``manifest`` (with ``content``, byte for
    byte through the sha256): the first difference, or None. A same-size rewrite after pre_commit is
    caught by the ETag on S3 and by ``content`` locally (what was validated is what commits).

    Another finisher of the same transaction may overtake: it sealed first (then this one checks what
    it sealed), or it already decided and published or deleted the files (then they are reported
    missing, and the caller's exclusive decision returns what that process decided) - never a
    FileNotFoundError out of the middle of a commit."""
    if sealed != data and storage.exists(data) and not storage.exists(sealed):
        try:
            storage.rename(data, sealed)  # type: ignore[attr-defined]
        except OSError:
            if storage.exists(data) and not storage.exists(sealed):
                raise  # nobody else moved it: a real failure
    if not verify:
        return None
    try:
        return difference(storage, sealed, manifest, content)
    except FileNotFoundError as exc:  # removed while listed: only a decided publish or abort does that
        return f"{exc.filename} vanished while it was checked"
