"""Publish targets: the idempotent publish step of a sink (DESIGN §4 "Publish targets").

The protocol decides (the outcome record in the transaction log); a target only makes a decided
version live, idempotently, with a marker of its own that it changes atomically with the data:

* files (the default) - :mod:`.files` (local: versioned dirs behind a symlink) and :mod:`.s3files`
  (S3: per-version names and a conditional manifest switch);
* :class:`DatabaseTarget` - PostgreSQL / MariaDB / MySQL: rows + marker in one database transaction;
* :class:`RedisTarget` - Redis: values + marker in one MULTI/EXEC, guarded by WATCH;
* ``table_format="delta"`` - :mod:`.delta`: the table is a Delta Lake table, one Delta commit per publish.

See docs/TARGETS.md.
"""
from ..errors import ConfigError
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

TABLE_FORMATS = ("files", "delta")


def check_table_format(table_format: str) -> str:
    """``files`` or ``delta``; ConfigError naming the choice otherwise (Iceberg is refused with the reason)."""
    if table_format == "iceberg":
        raise ConfigError("table_format='iceberg' is not supported: an Iceberg commit is a compare-and-swap in "
                          "a catalog; use table_format='delta' (a Delta commit is a put-if-absent of its log "
                          "entry, the primitive this protocol already relies on)")
    if table_format not in TABLE_FORMATS:
        raise ConfigError(f"table_format must be one of {TABLE_FORMATS}, got {table_format!r}")
    return table_format


def target_from_binding(binding: dict | None, url: str | None = None) -> PublishTarget | None:
    """The database / Redis target an owner record binds (``{kind, location, spec}``), rebuilt for tools
    that address a table by URL (``eo recover|gc|rollback``); None for files and Delta (the table format
    rebuilds those). ``url``: a target URL with credentials for the same server (``EO_TARGET_URL``)."""
    kind = (binding or {}).get("kind")
    if kind in ("database", "redis"):
        cls = DatabaseTarget if kind == "database" else RedisTarget
        return cls.from_spec(binding["spec"], url)  # type: ignore[index,union-attr]
    if kind not in (None, "files", "delta"):
        raise ConfigError(f"the table's target is a {kind} ({binding.get('location')}) that tools cannot rebuild "
                          "from the owner record; run recover/gc/rollback with a sink built as the pipeline "
                          "builds it")
    return None


def target_for(storage: Storage, table: str, home: str, table_format: str, pipeline: str,
               sink: str) -> PublishTarget:
    """The target that publishes a table of ``table_format`` (``files`` or ``delta``)."""
    if check_table_format(table_format) == "delta":
        from .delta import DeltaTarget

        return DeltaTarget(storage, table, pipeline=pipeline, sink=sink)
    return files_target(storage, table, home)


__all__ = ["TABLE_FORMATS", "check_table_format", "target_for", "target_from_binding",
           "ALREADY", "PUBLISHED", "SUPERSEDED", "DatabaseTarget", "PublishTarget", "RedisTarget", "StagedFile",
           "StagedVersion", "files_target"]
