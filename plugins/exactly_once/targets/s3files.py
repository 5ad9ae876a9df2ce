"""S3 files target: per-version object names next to the live ones, and a conditional manifest switch.

S3 has no rename, so a partition is published in two steps: copy the sealed files into the partition
prefix under per-version names (``<txn>--<name>``), then switch the partition's ``_MANIFEST.json`` to
them with one conditional PUT (``If-Match`` the ETag read before, ``If-None-Match: *`` for the first
version). The switch re-reads the manifest first and never replaces a newer epoch's. Files of
superseded versions - also the copies of a late finisher that finds itself superseded: another finisher
of its epoch may have made those very files live a moment ago - stay until gc finds, in the log, that a
newer version has been published for the grace period, so an exact reader that resolved the old
manifest can finish. What readers see:

* exact readers (the manifest, :meth:`S3FilesTarget.live_files`) see one complete version;
* listing readers see the live files plus, while a publish copies or during the grace period,
  another version's files: they are not exact on S3 (use the manifest, or a table-format target);
* files in the prefix that the protocol did not write (no ``<txn>--`` name) are never deleted.
"""
from __future__ import annotations

import json
import logging
import posixpath
from typing import Any, Callable, Iterable

from ..errors import StorageError, TargetSchemaError
from ..ids import parse_txn_name, published_name, version_of
from ..records.manifest import ManifestFile, sha256_of
from ..storage import MANIFEST, SUCCESS, FileEntry, supersedes, to_json
from ..storage.s3 import S3Storage
from .. import failpoints
from ..ids import TxnRef
from .base import FilesTarget, StagedFile, StagedVersion, altered, copied_as_sealed, staged_change

log = logging.getLogger(__name__)
SWITCH_TRIES = 20  # conditional manifest PUTs before giving up (each lost race re-reads first)


class S3FilesTarget(FilesTarget):
    """Publishes into ``table`` (``bucket/prefix``) on S3."""

    def __init__(self, storage: S3Storage, table: str) -> None:
        self.storage = storage
        self.table = table

    def read_manifest(self, live: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(manifest, ETag)`` of a live partition, ``(None, None)`` if it has none yet. The ETag is read
        *before* the body, so a switch conditioned on it fails if the manifest changed after it."""
        path = self.storage.join(live, MANIFEST)
        etag = self.storage.etag(path)
        if etag is None:
            return None, None
        try:
            manifest = json.loads(self.storage.read_bytes(path))
        except FileNotFoundError:
            return None, None
        except ValueError:
            manifest = None
        if not (isinstance(manifest, dict) and isinstance(manifest.get("version"), str) and isinstance(
                manifest.get("files"), list) and all(isinstance(f, dict) and {"name", "size"} <= f.keys()
                                                 for f in manifest["files"])):
            raise TargetSchemaError(f"s3://{path} is not a manifest exactly-once wrote (another tool's?): the partition's "
                                    "live version cannot be told. Move it out of the table's prefix, then run the "
                                    "interval again (or, if already committed, `eo recover` the table)")
        return manifest, etag

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: the location is ours (:meth:`FilesTarget.check`), and no partition of the version
        - those it empties included - is live with another interval's version or a manifest exactly-once did
        not write (TargetSchemaError, as the publish would refuse it after the decision)."""
        super().check(txn, staged)
        for part in staged.partitions:
            live = self.storage.join(self.table, part)
            self._refuse_other_interval(live, self.read_manifest(live)[0], txn)

    @staticmethod
    def _refuse_other_interval(live: str, current: dict[str, Any] | None, txn: TxnRef) -> None:
        parsed = parse_txn_name(current["version"]) if current else None
        if current and (parsed is None or parsed[0] != txn.interval.token):
            raise TargetSchemaError(f"s3://{live} is live with {current['version']}, a version of another interval "
                                    "(or another tool's manifest); a partition belongs to one interval: check the "
                                    "partitioning, or move the other writer's _MANIFEST.json out of the prefix, then "
                                    "run the interval again")

    def _ours(self, manifest: dict[str, Any] | None, txn: TxnRef, staged: StagedVersion, part: str) -> bool:
        """A live manifest this sink's log switched: its owner id is ours (a manifest of another log - one
        deleted and started over - names versions that are not this log's, even with the same names). One
        written before manifests named their owner is ours only if the log has its version COMMITTED with
        the same files (names, sizes, and sha256 where both record it)."""
        if not manifest:
            return False
        if "owner" in manifest:
            return manifest["owner"] == (self.owner.id if self.owner else None)
        parsed = parse_txn_name(manifest.get("version", ""))
        if parsed is None or parsed[0] != txn.interval.token or staged.committed_files is None:
            return False
        logged = staged.committed_files(parsed[1], part)
        if logged is None:
            return False
        want = {published_name(manifest["version"], f.name): (f.size, f.sha256) for f in logged}
        live = {f["name"]: (f["size"], f.get("sha256")) for f in manifest.get("files", [])}
        return want.keys() == live.keys() and all(
            live[n][0] == size and (sha is None or live[n][1] in (None, sha)) for n, (size, sha) in want.items())

    def _change(self, staged: StagedVersion, part: str, f: StagedFile, found: FileEntry | None) -> str | None:
        """How staged file ``f`` of ``part``, listed as ``found`` (a FileEntry, None if gone), differs from
        what pre_commit sealed (:func:`staged_change`: its size, then its ETag, read again if that moved)."""
        return staged_change(f, found and found.size, etag=found and found.etag,
                             digest=lambda: sha256_of(self.storage, staged.path(part, f.name)))

    def _check_staged(self, live: str, txn: TxnRef, staged: StagedVersion, part: str,
                      files: list[StagedFile], copied: bool = False) -> str | None:
        """Check ``files`` of ``part`` against what pre_commit sealed: None if they are as sealed, the outcome
        if another finisher completed the publish meanwhile (its copies as sealed) or a newer version is
        COMMITTED (superseded: its staging may be retired), else StagedFileChangedError.

        Before the copies the staged objects are checked (one LIST). After them (``copied``) the copies are:
        one LIST of the live prefix, each copy's ETag against the sealed plain MD5 - so a rewrite inside the
        copy window is refused even if the staged object was put back meanwhile, and so is a copy another
        finisher made over a live version's objects; a file whose sealed ETag is a multipart one (not kept by
        a copy) is checked on its staged object again instead."""
        if not files:
            return None
        changed: list[tuple[StagedFile, str]] = []
        if copied:
            changed = [(f, "was rewritten while it was copied (its copy is not the sealed bytes)")
                       for f in self._unsealed_copies(live, txn, files)]
            files = [f for f in files if not f.etag or "-" in f.etag]
        found = {e.rel: e for e in self.storage.walk_files(staged.path(part))} if files else {}
        changed += [(f, what) for f in files if (what := self._change(staged, part, f, found.get(f.name)))]
        if not changed:
            return None
        done = self._outcome_if_done(live, txn, staged, part)  # another finisher completed it meanwhile?
        if done:
            return done
        if staged.newer_committed(txn.epoch):  # a newer version retired this staging: never this one back
            return "superseded"
        raise altered(self.storage.url(staged.path(part, changed[0][0].name)), changed[0][1])

    def _unsealed_copies(self, live: str, txn: TxnRef, files: Iterable[StagedFile]) -> list[StagedFile]:
        """The ``files`` with a plain-MD5 sealed ETag whose copy in ``live`` (one LIST) is not the sealed bytes
        (:func:`copied_as_sealed`); a multipart ETag's copy cannot be judged so and is not listed here."""
        copies = {e.rel: e for e in self.storage.walk_files(live) if "/" not in e.rel}
        return [f for f in files if f.etag and "-" not in f.etag
                and not copied_as_sealed(copies.get(published_name(txn.name, f.name)), f)]

    def _outcome_if_done(self, live: str, txn: TxnRef, staged: StagedVersion, part: str) -> str | None:
        """"already" if ``txn``'s version is live here with copies as sealed (where their ETags tell: a copy
        made over them of changed bytes is made again), "superseded" if a newer one of ours is, else None."""
        now, _ = self.read_manifest(live)
        if not self._ours(now, txn, staged, part):
            return None
        if now and now["version"] == txn.name:
            return None if self._unsealed_copies(live, txn, staged.partitions.get(part, ())) else "already"
        if now and supersedes(now["version"], txn.name):
            return "superseded"
        return None

    def _publish_partition(self, txn: TxnRef, staged: StagedVersion, part: str,
                           files: tuple[ManifestFile, ...]) -> str:
        version, live = txn.name, self.storage.join(self.table, part)
        current, _ = self.read_manifest(live)
        done = self._outcome_if_done(live, txn, staged, part) if current else None
        if done:
            return done
        self._refuse_other_interval(live, current, txn)
        names = [published_name(version, f.name) for f in files]
        present = {e.rel: e for e in self.storage.walk_files(live) if "/" not in e.rel} \
            if self._ours(current, txn, staged, part) else {}  # another log's objects may share our names and sizes: copy all
        todo = [(staged.path(part, f.name), self.storage.join(live, n), f)
                for f, n in zip(files, names) if not copied_as_sealed(present.get(n), f)]
        done = self._check_staged(live, txn, staged, part, [f for _, _, f in todo])
        if done:
            return done
        half = len(todo) // 2
        try:
            self.storage.copy_files([(s, d) for s, d, _ in todo[:half]])
            failpoints.failpoint("commit.mid_publish")  # some files copied, manifest not switched: its readers see the old
            self.storage.copy_files([(s, d) for s, d, _ in todo[half:]])
        except FileNotFoundError:  # staging moved away: another finisher completed this publish
            done = self._outcome_if_done(live, txn, staged, part)
            if done:
                return done
            raise
        done = self._check_staged(live, txn, staged, part, [f for _, _, f in todo], copied=True)  # rewritten while copied?
        if done:
            return done
        target = {"version": version, **({"owner": self.owner.id} if self.owner else {}), "files": [ManifestFile(n, f.size, f.rows, getattr(f, "sha256", None)).to_dict()
                                                for f, n in zip(files, names)]}
        for _ in range(SWITCH_TRIES):
            now, etag = self.read_manifest(live)  # a newer version may have gone live while we copied
            ours = self._ours(now, txn, staged, part)
            if ours and supersedes(now["version"], version):  # type: ignore[index]
                return "superseded"  # our copies stay for gc: another finisher may have made them live
            if not ours and staged.newer_committed(txn.epoch):
                return "superseded"  # the manifest is gone (expired, deleted): never an older version back
            if now == target or self.storage.put_conditional(self.storage.join(live, MANIFEST),
                                                             to_json(target), if_match=etag):
                break
        else:
            raise StorageError(f"the manifest of s3://{live} kept changing during {SWITCH_TRIES} switches")
        self.storage.write_atomic(self.storage.join(live, SUCCESS), b"")  # Hadoop's marker: empty
        return "published" if todo or not current else "already"

    def live_version(self, partition: str) -> str | None:
        m, _ = self.read_manifest(self.storage.join(self.table, partition))
        return m["version"] if m else None

    def live_files(self, partition: str) -> list[str]:
        live = self.storage.join(self.table, partition)
        m, _ = self.read_manifest(live)
        return [self.storage.join(live, f["name"]) for f in m["files"]] if m else []

    def sweep(self, garbage: Callable[[str], bool]) -> list[str]:
        gone: list[str] = []
        by_dir: dict[str, list[str]] = {}
        for entry in self.storage.walk_files(self.table):
            folder, _, name = entry.rel.rpartition("/")
            if folder and not any(s.startswith(("_", ".")) for s in folder.split("/")):
                by_dir.setdefault(folder, []).append(name)
        for folder, names in by_dir.items():
            live = self.storage.join(self.table, folder)
            candidates = [n for n in names if version_of(n) and garbage(version_of(n))]  # type: ignore[arg-type]
            if not candidates:
                continue
            try:
                current, _ = self.read_manifest(live)
            except TargetSchemaError as exc:  # the live version cannot be told: nothing here is garbage
                log.warning("gc keeps every file of s3://%s: %s", live, exc)
                continue
            keep = {f["name"] for f in current["files"]} if current else set()
            for name in candidates:
                if name not in keep and version_of(name) != (current or {}).get("version"):
                    path = posixpath.join(live, name)
                    self.storage.remove_tree(path)
                    gone.append(path)
        return gone

    def stored_files(self, partition: str, version: str, names: list[str]) -> dict[str, str] | None:
        live = self.storage.join(self.table, partition)
        present = {e.rel for e in self.storage.walk_files(live) if "/" not in e.rel}
        paths = {n: self.storage.join(live, published_name(version, n)) for n in names}
        return paths if all(published_name(version, n) in present for n in names) else None

    def describe(self) -> str:
        return f"files at s3://{self.table}"
