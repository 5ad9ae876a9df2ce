"""Publish targets: the idempotent publish step of a sink (DESIGN §4 "Publish targets").

The protocol decides (the outcome record in the transaction log); a target only makes a decided
version live, idempotently, with a marker of its own that it changes atomically with the data:

* files (the default) - :mod:`.files` (local: versioned dirs behind a symlink) and :mod:`.s3files`
  (S3: per-version names and a conditional manifest switch);
* :class:`DatabaseTarget` - PostgreSQL / MariaDB / MySQL: rows + marker in one database transaction;
* :class:`RedisTarget` - Redis: values + marker in one MULTI/EXEC, guarded by WATCH.

See docs/TARGETS.md.
"""
from .base import ALREADY, PUBLISHED, SUPERSEDED, PublishTarget, StagedFile, StagedVersion
from .database import DatabaseTarget
from .keyvalue import RedisTarget

__all__ = ["ALREADY", "PUBLISHED", "SUPERSEDED", "DatabaseTarget", "PublishTarget", "RedisTarget", "StagedFile",
           "StagedVersion"]
