"""Publish targets: the idempotent publish step of a sink (DESIGN §4 "Publish targets").

The protocol decides (the outcome record in the transaction log); a target only makes a decided
version live, idempotently, with a marker of its own that it changes atomically with the data:

* files (the default) - :mod:`.files` (local: versioned dirs behind a symlink) and :mod:`.s3files`
  (S3: per-version names and a conditional manifest switch);
* :class:`DatabaseTarget` - PostgreSQL / MariaDB / MySQL: rows + marker in one database transaction;
* :class:`RedisTarget` - Redis: values + marker in one MULTI/EXEC, guarded by WATCH.

See docs/TARGETS.md.
"""
from ..storage import Storage
from .base import ALREADY, PUBLISHED, SUPERSEDED, PublishTarget, StagedFile, StagedVersion
from .database import DatabaseTarget
from .keyvalue import RedisTarget


def files_target(storage: Storage, table: str, home: str) -> PublishTarget:
    """The files target for ``storage``: versioned dirs + symlink swap locally, copies + manifest on S3."""
    if storage.can_rename:
        from .files import LocalFilesTarget

        return LocalFilesTarget(storage, table, home)  # type: ignore[arg-type]
    from .s3files import S3FilesTarget

    return S3FilesTarget(storage, table)  # type: ignore[arg-type]

__all__ = ["ALREADY", "PUBLISHED", "SUPERSEDED", "DatabaseTarget", "PublishTarget", "RedisTarget", "StagedFile",
           "StagedVersion", "files_target"]
