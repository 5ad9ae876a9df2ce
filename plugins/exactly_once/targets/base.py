"""The publish step as a pluggable target: what every target promises, and the staged version it publishes.

The protocol (:mod:`exactly_once.protocol.transaction`) decides; a target only publishes. The protocol calls
:meth:`PublishTarget.publish` after the transaction's outcome record says COMMITTED - possibly more than
once, from several processes at the same time, and after crashes anywhere inside an earlier call - so
every target makes the publish idempotent with a *marker* of its own, stored in the target system and
changed in the same atomic step as the data: ``(target, interval) -> epoch``. The marker is also what
:meth:`PublishTarget.live_epoch` reads when recovery must resolve a lost acknowledgement (the target
committed, the log does not know yet).
"""
from __future__ import annotations

import functools
import logging
import os
import posixpath
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, Mapping

from ..errors import StagedFileChangedError, UnsafeIdentifierError
from ..ids import Interval, TxnRef, check_partition
from ..records.manifest import ManifestFile, sha256_read
from ..records.ownership import Owner, check_location, claim_location

log = logging.getLogger(__name__)
PUBLISHED, ALREADY, SUPERSEDED = "published", "already", "superseded"
Opener = Callable[[str, str], IO[bytes]]


StagedFile = ManifestFile  # one sealed staged data file as the manifest lists it (name, size, rows, sha256, ...)


@dataclass(frozen=True)
class StagedVersion:
    """A pre-committed transaction's sealed output: partition -> its files, and a way to read them.

    ``partitions`` lists every partition the version owns; an empty tuple means "this partition is no
    longer produced" (publish an empty version of it). ``opener(partition, name)`` returns a binary file
    object of one staged file; the protocol backs it with its Storage, tests with local files.
    """

    partitions: Mapping[str, tuple[StagedFile, ...]]
    opener: Opener = field(repr=False, compare=False)
    root: str | None = None  # storage path of the staged data, for targets on the same storage (files)
    # the log's newest COMMITTED epoch of the interval, read when called (the protocol sets it): a target
    # whose marker is gone (evicted, deleted) asks it before publishing, so it never replaces a newer version
    newest_committed: Callable[[], int] | None = field(default=None, repr=False, compare=False)
    # ``(epoch, partition)`` -> that partition's files in the log's manifest of the interval's epoch if it
    # is COMMITTED, else None (the protocol sets it): a target tells its own old markers (written before
    # they named their owner) from another log's by what they list
    committed_files: Callable[[int, str], tuple[StagedFile, ...] | None] | None = \
        field(default=None, repr=False, compare=False)
    # a storage path -> the URL an error shows (``s3://bucket/key``; the storage's ``url``), else the path
    url: Callable[[str], str] | None = field(default=None, repr=False, compare=False)
    # of ``partitions``, those the protocol added empty because an earlier committed version of the interval
    # published them and this one does not (emptied, not produced: a target that records what a version holds
    # leaves them out of it)
    dropped: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        for part, files in self.partitions.items():
            check_partition(part)
            for f in files:
                if not isinstance(f, StagedFile) or "/" in f.name or f.name.startswith((".", "_")):
                    raise UnsafeIdentifierError(f"bad staged file {f!r} in {part}")

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], opener: Opener) -> "StagedVersion":
        """The version a pre_commit manifest describes (``{"partitions": {part: [{name, size, rows}]}}``)."""
        parts = {p: tuple(StagedFile(f["name"], int(f["size"]), f.get("rows")) for f in files)
                 for p, files in (manifest.get("partitions") or {}).items()}
        return cls(parts, opener)

    @classmethod
    def on(cls, storage: Any, root: str, partitions: Mapping[str, tuple[StagedFile, ...]],
           newest_committed: Callable[[], int] | None = None,
           committed_files: Callable[[int, str], tuple[StagedFile, ...] | None] | None = None,
           dropped: frozenset[str] = frozenset()) -> "StagedVersion":
        """The version whose files are ``<root>/<partition>/<name>`` on ``storage`` (the sealed staging)."""
        return cls(partitions, lambda part, name: storage.open(storage.join(root, part, name), "rb"), root,
                   newest_committed, committed_files, storage.url, dropped)

    def newer_committed(self, epoch: int) -> bool:
        """True if the log now holds a COMMITTED epoch newer than ``epoch`` (asked where the target's own
        marker - a database row, a manifest, a partition link - is gone: never publish an older version)."""
        return self.newest_committed is not None and self.newest_committed() > epoch

    def path(self, partition: str, name: str | None = None) -> str:
        """Storage path of a staged partition dir or file (targets that move or copy files)."""
        if self.root is None:
            raise ValueError("this staged version has no storage root; read it with open()")
        return posixpath.join(self.root, partition, *([name] if name else []))

    def open(self, partition: str, name: str) -> IO[bytes]:
        """A binary file object of staged file ``name`` of ``partition`` (the caller closes it).
        StagedFileChangedError if the file is gone, not the size its manifest says, or rewritten with other
        bytes (see :func:`staged_change`): it changed after pre_commit sealed it (a disk, an operator), and
        no target publishes it."""
        listed = self._listed.get((partition, name))
        try:
            fh = self.opener(partition, name)
        except FileNotFoundError:
            raise altered(self._where(partition, name), "is gone") from None
        if listed is not None:
            size = fh.seek(0, 2)
            fh.seek(0)
            mtime, inode = _stat_of(fh)
            what = staged_change(listed, size, etag=_etag_of(fh), mtime=mtime, inode=inode, digest=lambda: _sha256(fh))
            if what:
                fh.close()
                raise altered(self._where(partition, name), what)
        return fh

    @functools.cached_property
    def _listed(self) -> dict[tuple[str, str], StagedFile]:
        return {(part, f.name): f for part, files in self.partitions.items() for f in files}

    def _where(self, partition: str, name: str) -> str:
        if self.root is None:
            return f"{partition}/{name}"
        return self.url(self.path(partition, name)) if self.url else self.path(partition, name)

    @property
    def rows(self) -> int | None:
        """Total rows over every file, None if a file's count is unknown."""
        counts = [f.rows for fs in self.partitions.values() for f in fs]
        return None if None in counts else sum(counts)  # type: ignore[arg-type]

    def files(self) -> Iterator[tuple[str, StagedFile]]:
        """Every ``(partition, file)``, partitions in sorted order (a stable load order)."""
        for part in sorted(self.partitions):
            for f in self.partitions[part]:
                yield part, f


def staged_change(f: StagedFile, size: int | None, etag: str | None = None, mtime: float | None = None,
                  inode: int | None = None, digest: Callable[[], str] | None = None) -> str | None:
    """How the sealed staged file found now - ``size`` (None: gone), its listed ``etag`` (S3), its ``mtime``
    and ``inode`` (local) - differs from ``f``, its manifest entry; None if it is the file pre_commit sealed.

    The size decides first. A moved ETag, mtime or inode only hints that the bytes changed (a file replaced
    by a rename gets a new inode; one rewritten in place a new mtime): where the manifest holds the file's
    sha256, ``digest()`` reads the file again and the content decides, so a file put back from a backup is
    the sealed file again. An mtime in whole seconds (ext3, FAT, some NFS servers: a rewrite in the same
    second keeps it) is no hint at all: such a file is always read again. With no sha256 recorded
    (``checksums=False``) two plain (single-part) ETags still decide - each is the MD5 of the bytes -; any
    other moved hint cannot, and only the size is compared (a warning says so). Not caught: a same-size
    rewrite in place that keeps the old mtime (set back, or within one clock tick)."""
    if size is None:
        return "is gone"
    if size != f.size:
        return f"has {size} bytes where its manifest says {f.size}"
    moved = [what for what, was, now in (("ETag", f.etag, etag), ("mtime", f.mtime, mtime), ("inode", f.inode, inode))
             if was is not None and now is not None and was != now]
    if not moved and not (f.mtime is not None and float(f.mtime).is_integer()):
        return None
    if f.sha256 and digest is not None:
        try:
            got = digest()
        except FileNotFoundError:  # removed since it was listed
            return "is gone"
        return None if got == f.sha256 else "was rewritten with other bytes of the same size"
    if "ETag" in moved and "-" not in f.etag + etag:  # type: ignore[operator] - two plain MD5s: other bytes
        return f"was rewritten (ETag {etag}, sealed as {f.etag})"
    if moved:
        log.warning("staged file %s: its %s moved since pre_commit and no sha256 was recorded (checksums=False) "
                    "to tell whether its bytes did: only its size is compared", f.name, " and ".join(moved))
    return None


def copied_as_sealed(copy: Any, f: StagedFile) -> bool:
    """Is ``copy`` (a listed object: a ``FileEntry``; None if absent) a copy of sealed file ``f``? Its size,
    and its ETag where the sealed one is a plain MD5 (a server-side copy keeps it); a multipart upload's ETag
    (``-N``) is not kept by a copy, so such a copy is made again rather than trusted."""
    if copy is None or copy.size != f.size:
        return False
    return not f.etag or ("-" not in f.etag and copy.etag == f.etag)


def altered(path: str, what: str) -> StagedFileChangedError:
    """The refusal of a sealed staged file (at storage ``path``) that changed as ``what`` says (from
    :func:`staged_change`), at publish: the version is decided (before the decision, the protocol aborts
    instead: ``decisions.staged_refusal`` words it from ``path`` and ``what``)."""
    return StagedFileChangedError(
        f"sealed staged file {path} {what}: it changed after pre_commit sealed it, and a changed file is never "
        "published. The version is decided: put the file back there from a backup, then run `eo recover` (the "
        "interval's next runs wait for it)", path, what)


def _etag_of(fh: IO[bytes]) -> str | None:
    """The ETag of an open S3 object (s3fs lists it in the file's ``details``), else None."""
    details = getattr(fh, "details", None)
    etag = str(details.get("ETag") or "").strip('"') if isinstance(details, Mapping) else ""
    return etag or None


def _stat_of(fh: IO[bytes]) -> tuple[float | None, int | None]:
    """The mtime and inode of an open local file (as ``os.stat`` gives them), else Nones."""
    try:
        st = os.fstat(fh.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last two
        return None, None
    return st.st_mtime, st.st_ino


def _sha256(fh: IO[bytes]) -> str:
    """The sha256 of an open file's whole content; leaves it at its start."""
    fh.seek(0)
    digest = sha256_read(fh)
    fh.seek(0)
    return digest


def partition_values(partition: str) -> dict[str, str]:
    """``dt=2026-01-01/hour=03`` -> ``{"dt": "2026-01-01", "hour": "03"}`` (hive-style partition columns)."""
    return dict(seg.split("=", 1) for seg in check_partition(partition).split("/"))


class PublishTarget(ABC):
    """The idempotent publish step of one sink; the protocol calls it only after the outcome record says
    COMMITTED."""

    @abstractmethod
    def publish(self, txn: TxnRef, staged: StagedVersion) -> dict[str, str]:
        """Make txn's sealed staged output the live version of txn.interval.

        Idempotent; safe under concurrent calls for the same or other epochs of the same interval (from
        any number of processes); never goes back to an older epoch. Returns per partition
        ``published`` | ``already`` (this epoch was already applied) | ``superseded`` (a newer epoch is
        live; nothing changed).
        """

    @abstractmethod
    def live_epoch(self, interval: Interval) -> int | None:
        """The epoch whose version of ``interval`` is live in the target (the marker), None if none."""

    @abstractmethod
    def describe(self) -> str:
        """One line for logs; never contains a credential."""

    def binding(self) -> dict[str, Any]:
        """What the sink's owner record binds: ``{kind, location, spec}`` - the kind of target, where it
        publishes (never a credential) and, for targets that tools rebuild from the record (``eo recover``),
        the arguments to do so (:func:`~exactly_once.targets.target_from_binding`). A sink configured with
        another kind or location than the bound one is refused."""
        return {"kind": type(self).__name__, "location": self.describe()}

    def claim(self, owner: Owner) -> "PublishTarget":
        """Bind the target's location to ``owner`` before anything is decided, and return the target
        that publishes as ``owner`` (its markers carry the owner; a marker or claim of another owner is
        refused with OwnershipError, never taken for "already published"). OwnershipError if another
        owner holds the location. Targets without a claim of their own return themselves."""
        return self

    publishes_in_place = False  # True: the sealed staged files become the live files (they are not removed)
    after_refusal = "nothing of it is live"  # what readers see of a version whose publish was refused midway
    # True: the target replaces rows in place (databases, Redis), so the protocol keeps each published
    # version's sealed staged files in its checkpoint (gc: after the grace period) for rollback
    keeps_staged_copies = False

    def staging_dir(self, txn: TxnRef) -> str | None:
        """Where ``txn``'s writer stages, if the target wants it somewhere of its own (a Delta table: in
        its data area, so that the sealed files can be committed where they are); None: the sink's home."""
        return None

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Refuse ``staged`` before the decision (TargetSchemaError: the transaction is aborted, nothing is
        published) where the target can tell it will never fit; most targets check inside publish."""

    def is_live(self, txn: TxnRef, partitions: list[str]) -> bool:
        """True if ``txn``'s version is what readers see (recovery: a live version is never aborted)."""
        return self.live_epoch(txn.interval) == txn.epoch

    def claimed_by(self, owner_id: str) -> bool:
        """True if the target itself holds the claim of owner ``owner_id`` (a database's claim row, a Redis
        namespace's owner key): configured under another location (``localhost`` for ``127.0.0.1``, a
        failover primary's name), it is still the table that owner bound. False where it keeps none."""
        return False

    def live_version(self, partition: str) -> str | None:
        """The transaction name live in ``partition``, where the target tracks partitions (files)."""
        return None

    def live_files(self, partition: str) -> list[str]:
        """Exact list of the live data files of ``partition`` (files targets; exact readers)."""
        return []

    def stored_files(self, partition: str, version: str, names: list[str]) -> dict[str, str] | None:
        """Storage paths of a published ``version``'s files of ``partition`` (by their staged ``names``),
        or None if the target keeps no copy of it (gc removed it, or the target keeps none: databases and
        Redis replace rows in place - the protocol keeps their staged files, see ``keeps_staged_copies``).
        Rollback republishes from these."""
        return None

    def sweep(self, garbage: Callable[[str], bool]) -> list[str]:
        """Delete data of versions that are not live and for which ``garbage(version)`` is true (the
        protocol decides that from the log); never data the target did not write. Returns what went.
        Targets that replace an interval's rows inside the publish itself have nothing to sweep."""
        return []


def refused_after_decision(txn: TxnRef, target: PublishTarget, url: str, exc: Exception) -> Exception:
    """The error of a publish refused after the decision (the target changed since its check): the same
    type as ``exc``, saying what readers see, that nothing is lost and which command finishes the publish once
    fixed. A files table switches its partitions one at a time: those before the refused one are live."""
    return type(exc)(f"{txn.name} is COMMITTED, but {target.describe()} refused its publish: {exc} -- "
                     f"{target.after_refusal}, "
                     f"and its staged files are kept; fix the target, then run `eo recover {url}` "
                     "(or retry the commit) to finish the publish. Other intervals are not blocked.")


def outcome(partitions: Mapping[str, Any], verdict: str) -> dict[str, str]:
    """The same verdict for every partition of a version (targets publish an interval all at once)."""
    return {p: verdict for p in sorted(partitions)}


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_identifier(name: str, what: str = "identifier") -> str:
    """A SQL/Redis-safe identifier (``[A-Za-z_][A-Za-z0-9_]*``, <= 63 characters) or UnsafeIdentifierError.

    Identifiers are quoted as well when they reach SQL; the allow-list makes quoting a second line of
    defence instead of the only one, and keeps names portable between PostgreSQL and MySQL.
    """
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise UnsafeIdentifierError(
            f"unsafe {what} {name!r}: use letters, digits and '_' (not starting with a digit, at most 63)")
    return name


class LocationOwned:
    """A target at a storage location (files, Delta): ``<table>/_eo_owner.json`` names its owner."""

    storage: Any
    table: str
    owner: Owner | None = None
    kind = "files"

    def binding(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.storage.url(self.table)}

    def claim(self, owner: Owner) -> Any:
        claim_location(self.storage, self.table, owner, self.kind)
        self.owner = owner
        return self

    def check_owner(self) -> None:
        """Before a publish: OwnershipError if the location is bound to another owner than ours."""
        if self.owner is not None:
            check_location(self.storage, self.table, self.owner)


class FilesTarget(LocationOwned, PublishTarget):
    """A target that publishes files partition by partition and tracks the live version per partition
    (local and S3 files); subclasses implement ``_publish_partition`` and ``live_version``."""

    after_refusal = "its partitions switched before the refusal are live, the others keep their previous version"

    def publish(self, txn: TxnRef, staged: StagedVersion) -> dict[str, str]:
        self.check_owner()
        return {part: self._publish_partition(txn, staged, part, files) for part, files in staged.partitions.items()}

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: OwnershipError if the location is bound to another owner (its publish
        would refuse: nothing may be decided that can never be published)."""
        self.check_owner()

    @abstractmethod
    def _publish_partition(self, txn: TxnRef, staged: StagedVersion, part: str, files: tuple[StagedFile, ...]) -> str:
        """Publish one partition of ``staged``; ``published`` / ``already`` / ``superseded``."""

    def live_epoch(self, interval: Interval) -> int | None:
        """Files track the live version per partition (:meth:`live_version`), not per interval."""
        return None

    def is_live(self, txn: TxnRef, partitions: list[str]) -> bool:
        return any(self.live_version(p) == txn.name for p in partitions)
