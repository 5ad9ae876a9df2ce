"""The publish-target interface and the sealed version a target publishes."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..ids import TxnRef
from ..manifest import ManifestFile
from ..storage import Storage

Hook = Callable[[str], None]


@dataclass(frozen=True)
class StagedVersion:
    """A decided (COMMITTED) version, sealed by ``pre_commit``: what a target publishes.

    ``partitions`` maps every partition the interval owns to the files of this version; a partition an
    older version of the interval published and this one no longer produces maps to ``()`` (published
    as an empty version). Files are read from ``root/<partition>/<name>`` on ``storage``.
    """

    txn: TxnRef
    partitions: Mapping[str, tuple[ManifestFile, ...]]
    storage: Storage
    root: str

    @property
    def version(self) -> str:
        return self.txn.name

    def path(self, partition: str, name: str | None = None) -> str:
        """Storage path of a staged partition dir, or of one staged file in it."""
        return self.storage.join(self.root, partition, *([name] if name else []))

    def open(self, partition: str, name: str) -> Any:
        """A binary file object for one staged file."""
        return self.storage.open(self.path(partition, name), "rb")


class PublishTarget(ABC):
    """The idempotent publish step of one sink; called only after the outcome record says COMMITTED."""

    @abstractmethod
    def publish(self, staged: StagedVersion, hook: Hook) -> dict[str, str]:
        """Make ``staged`` the live version of its interval's partitions.

        Contract: idempotent; safe under any number of concurrent calls (processes) for the same or other
        epochs of the same interval; never makes an older epoch live over a newer one. Returns, per
        partition, ``published``, ``already`` (this version was live) or ``superseded`` (a newer epoch is
        live; nothing was changed). ``hook("commit.mid_publish")`` is called part-way (failpoints).
        """

    @abstractmethod
    def live_version(self, partition: str) -> str | None:
        """The transaction name whose version of ``partition`` is live, or None."""

    @abstractmethod
    def sweep(self, garbage: Callable[[str], bool]) -> list[str]:
        """Delete the data of versions that are not live and for which ``garbage(version)`` is true (the
        protocol decides that from the log). Never touches data it did not write. Returns what went."""

    def live_files(self, partition: str) -> list[str]:
        """Exact list of the live data files of ``partition`` (what an exact reader should read)."""
        return []

    def describe(self) -> str:
        """One line for logs; never contains credentials."""
        return type(self).__name__
