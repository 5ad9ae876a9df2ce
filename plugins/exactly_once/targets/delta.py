"""Delta Lake target (delta-rs): publish a decided version as one Delta commit.

Why Delta and not Iceberg: a Delta commit is a put-if-absent of ``_delta_log/<n>.json`` - the primitive
this protocol already trusts (``link(2)`` locally, ``If-None-Match`` on S3) - so no catalog sits in the
commit path. The table at ``table`` is a plain Delta table that any Delta reader (delta-rs, Spark,
DuckDB's delta extension, Polars) reads at one snapshot.

A transaction stages in the table's data area, ``<table>/<txn>/`` (:meth:`DeltaTarget.staging_dir`):
its files are invisible to Delta readers until a commit names them. The sink seals them there (locally
one ``rename(2)`` of ``data/`` to ``sealed/``; on S3 they stay in ``data/``), so the publish moves
nothing: it is one Delta commit, O(1) requests whatever the file count, carrying

* ``txn{appId=exactly-once/<pipeline>/<sink>/<interval>, version=<epoch>}`` - the target's marker:
  an app version at or above the epoch means ``already`` / ``superseded``, which also resolves the lost
  acknowledgement (table committed, our log not told);
* ``remove`` of every live file of the interval and ``add`` of the new ones (replace the interval).

On S3 the commit does not list the sealed files to check them against the manifest (locally the
seal's ``rename(2)`` makes that check exact and cheap): at 10,000 files that listing was 3 of the 4 s
of a commit on the loopback S3 server, and it guarded nothing the decision needs. The staged files of
a transaction are deleted only after our log decided it: ``abort``, ``recover`` and ``begin`` (which
recovers older epochs before a new one starts) decide ABORTED before deleting, gc sweeps a version
only once a newer epoch published, and a superseded publish deletes after its own COMMITTED decision.
So a file missing before the decision means an abort decided first; the commit's exclusive decision
then returns ABORTED and nothing is published (a schema read that finds a file gone is treated the
same way). A same-name rewrite by a late writer could follow any listing (nothing seals an S3
prefix), and files it adds are never published: the add actions are the manifest's files and sizes.
Tests: ``test_abort_or_gc_racing_a_commit_publishes_nothing``.

The commit is attempted once per snapshot read (``max_commit_retries=0``): a lost race for the log
entry re-reads the table and judges again, so an older epoch can never land after a newer one.
"""
from __future__ import annotations

import logging
import posixpath
import time
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from .. import failpoints
from ..errors import StorageError, TargetSchemaError
from ..ids import Interval, TxnRef, parse_txn_name
from ..storage import Storage
from .base import ALREADY, PUBLISHED, SUPERSEDED, PublishTarget, StagedVersion, outcome, partition_values

log = logging.getLogger(__name__)
COMMIT_TRIES = 20  # lost races for the next log entry before giving up (each one re-reads the table)
CHECKPOINT_EVERY = 100  # delta.checkpointInterval: a checkpoint every 100 versions


def delta_storage_options(storage: Storage) -> tuple[str, dict[str, str]]:
    """``(table URI prefix, delta-rs storage options)`` for ``storage`` (local or s3fs)."""
    fs = getattr(storage, "fs", None)
    if fs is None:
        return "", {}
    opts: dict[str, str] = {"conditional_put": "etag"}  # put-if-absent of the log entry: If-None-Match
    kw = getattr(fs, "client_kwargs", {}) or {}
    if kw.get("endpoint_url"):
        opts["AWS_ENDPOINT_URL"] = kw["endpoint_url"]
        opts["AWS_ALLOW_HTTP"] = "true"
    opts["AWS_REGION"] = kw.get("region_name") or "us-east-1"
    for key, name in (("key", "AWS_ACCESS_KEY_ID"), ("secret", "AWS_SECRET_ACCESS_KEY"),
                      ("token", "AWS_SESSION_TOKEN")):
        if getattr(fs, key, None):
            opts[name] = getattr(fs, key)
    return "s3://", opts


def delta_type(t: pa.DataType) -> pa.DataType:
    """Arrow type of a staged column as Delta stores it: any timestamp (Spark's INT96 reads as ns)
    becomes Delta ``timestamp`` (microseconds, UTC)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    return t


class DeltaTarget(PublishTarget):
    """Publishes ``pipeline``/``sink`` into the Delta table at ``table`` on ``storage``."""

    def __init__(self, storage: Storage, table: str, *, pipeline: str, sink: str,
                 checkpoint_every: int = CHECKPOINT_EVERY) -> None:
        self.storage = storage
        self.checkpoint_every = checkpoint_every  # set when the table is created
        self.table = table
        self.pipeline, self.sink = pipeline, sink
        scheme, self.options = delta_storage_options(storage)
        self.uri = scheme + table

    # ------------------------------------------------------------------ reading the table
    def txn_application(self, interval: Interval) -> str:
        """Delta's transaction application id (``txn.appId``) of this sink's interval; its version is the epoch."""
        return f"exactly-once/{self.pipeline}/{self.sink}/{interval.token}"

    def snapshot(self, version: int | None = None) -> Any:
        """The table (delta-rs ``DeltaTable``) at its newest or a given version; None before the first commit."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri, version=version, storage_options=self.options)
        except TableNotFoundError:  # no log entry yet (the dir may hold staged transactions)
            return None

    @staticmethod
    def live_actions(dt: Any) -> list[dict[str, Any]]:
        """Every live file of snapshot ``dt``: ``{path, size_bytes, partition.<key>...}``."""
        return pa.table(dt.get_add_actions(flatten=True)).to_pylist() if dt is not None else []

    def live_epoch(self, interval: Interval) -> int | None:
        dt = self.snapshot()
        return dt.transaction_version(self.txn_application(interval)) if dt is not None else None

    def live_version(self, partition: str) -> str | None:
        versions = {a["path"].split("/", 1)[0] for a in self.live_actions(self.snapshot())
                    if ("/" + a["path"].rpartition("/")[0]).endswith("/" + partition)}
        return max(versions) if versions else None

    def live_files(self, partition: str) -> list[str]:
        return sorted(self.storage.join(self.table, a["path"]) for a in self.live_actions(self.snapshot())
                      if ("/" + a["path"].rpartition("/")[0]).endswith("/" + partition))

    def commit_versions(self) -> dict[str, int]:
        """Transaction name -> the Delta table version its publish committed (time travel: read the
        table ``as of`` it). Commits made by others are not listed."""
        dt = self.snapshot()
        return {h["exactly_once.txn"]: int(h["version"]) for h in (dt.history() if dt is not None else [])
                if "exactly_once.txn" in h}

    def stored_files(self, partition: str, version: str, names: list[str]) -> dict[str, str] | None:
        for sub in ("sealed", "data", ""):  # staged in the table (local, S3), or placed there
            paths = {n: self.storage.join(self.table, version, sub, partition, n) for n in names}
            if all(self.storage.exists(p) for p in paths.values()):
                return paths
        return None

    publishes_in_place = True  # the sealed files are the live files

    def staging_dir(self, txn: TxnRef) -> str | None:
        """``<table>/<txn>``: the writer stages in the table's data area, invisible to Delta readers
        until the commit names its files, so that the publish moves nothing (O(1) requests on S3)."""
        return self.storage.join(self.table, txn.name)

    def describe(self) -> str:
        return f"delta table at {self.storage.url(self.table)}"

    # ------------------------------------------------------------------ publishing
    def publish(self, txn: TxnRef, staged: StagedVersion) -> dict[str, str]:
        app = self.txn_application(txn.interval)
        dt = self.snapshot()
        done = self._settled(dt, app, txn)
        if done:
            return outcome(staged.partitions, done)
        base = self._in_table(txn, staged)
        failpoints.failpoint("commit.mid_publish")  # files in the data area, not committed: invisible
        schema = self.staged_schema(txn, staged, base)
        for attempt in range(COMMIT_TRIES):
            dt = dt if attempt == 0 else self.snapshot()  # a lost race re-reads the table
            done = self._settled(dt, app, txn)
            if done:
                break
            if self._commit(dt, app, txn, staged, schema, base):
                done = PUBLISHED
                break
        else:
            raise StorageError(f"{self.describe()}: lost the race for the next log entry {COMMIT_TRIES} times")
        if done == SUPERSEDED:  # a newer epoch is live: our files can never become live
            self.storage.remove_tree(self.storage.join(self.table, txn.name))
        return outcome(staged.partitions, done)

    def _settled(self, dt: Any, app: str, txn: TxnRef) -> str | None:
        live = dt.transaction_version(app) if dt is not None else None
        if live is None or live < txn.epoch:
            return None
        return ALREADY if live == txn.epoch else SUPERSEDED

    def _in_table(self, txn: TxnRef, staged: StagedVersion) -> str:
        """The table-relative dir of the sealed files (``<txn>/sealed`` locally, ``<txn>/data`` on S3:
        the sink stages in the table, see :meth:`staging_dir`). A version staged elsewhere (the target
        used on its own) is first placed into ``<table>/<txn>/`` (renamed locally, copied on S3)."""
        root = (staged.root or "").rstrip("/")
        if root.startswith(self.table.rstrip("/") + "/"):
            return root[len(self.table.rstrip("/")) + 1:]
        self._place(txn, staged)
        return txn.name

    def _place(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Put the sealed files into ``<table>/<txn>/<partition>/`` (idempotent)."""
        for part, files in staged.partitions.items():
            if not files:
                continue
            dest = self.storage.join(self.table, txn.name, part)
            if self.storage.can_rename:
                src = staged.path(part)
                if self.storage.exists(src) and not self.storage.exists(dest):
                    self.storage.makedirs(posixpath.dirname(dest))
                    self.storage.rename(src, dest)  # type: ignore[attr-defined]
                missing = [f.name for f in files if not self.storage.exists(self.storage.join(dest, f.name))]
                if missing:
                    raise StorageError(f"{txn.name}: staged files {missing[:3]} of {part} are gone")
                continue
            present = {e.rel: e.size for e in self.storage.walk_files(dest)}
            todo = [(staged.path(part, f.name), self.storage.join(dest, f.name)) for f in files
                    if present.get(f.name) != f.size]
            self.storage.copy_files(todo)  # type: ignore[attr-defined]

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: the staged columns must fit the table's (new columns are fine: they
        widen it at publish). TargetSchemaError otherwise."""
        dt = self.snapshot()
        if dt is not None and self._settled(dt, self.txn_application(txn.interval), txn) is None:
            self.clashes(pa.schema(dt.schema().to_arrow()), self.staged_schema(txn, staged), txn)

    def staged_schema(self, txn: TxnRef, staged: StagedVersion, base: str | None = None) -> pa.Schema | None:
        """The Arrow schema of the version (one file per partition read - below ``<table>/<base>`` if
        given, else through ``staged``; partition keys as strings), None if it has no file.
        TargetSchemaError if its files disagree on a column's type."""
        fields: dict[str, pa.DataType] = {}
        for part, files in sorted(staged.partitions.items()):
            if not files:
                continue
            path = self.storage.join(self.table, base or "", part, files[0].name)
            with (self.storage.open(path, "rb") if base else staged.open(part, files[0].name)) as fh:
                schema = pq.read_schema(fh)
            for f in schema:
                self._merge(fields, f.name, delta_type(f.type), f"{txn.name} {part}")
            for key in partition_values(part):
                self._merge(fields, key, pa.string(), f"{txn.name} {part}")
        return pa.schema(list(fields.items())) if fields else None

    @staticmethod
    def _merge(fields: dict[str, pa.DataType], name: str, typ: pa.DataType, where: str) -> None:
        if name in fields and fields[name] != typ:
            raise TargetSchemaError(f"{where}: column {name!r} is {typ}, elsewhere {fields[name]}; make the "
                                    "job write one type per column")
        fields[name] = typ

    def _commit(self, dt: Any, app: str, txn: TxnRef, staged: StagedVersion, schema: pa.Schema | None,
                base: str) -> bool:
        """One Delta commit on snapshot ``dt``; False if another writer took the log entry first."""
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import (AddAction, CommitProperties, PostCommitHookProperties,
                                           RemoveAction, Transaction, create_table_with_add_actions)

        now = int(time.time() * 1000)
        keys = sorted({k for p in staged.partitions for k in partition_values(p)})
        values = {part: partition_values(part) for part in staged.partitions}  # once per partition
        adds = [AddAction(f"{base}/{part}/{f.name}", f.size, values[part], now, True,
                          '{"numRecords": %d}' % f.rows if f.rows is not None else "{}")
                for part, f in staged.files()]
        props = CommitProperties(max_commit_retries=0, app_transactions=[Transaction(app, txn.epoch, now)],
                                 custom_metadata={"exactly_once.txn": txn.name})
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        try:
            if dt is None:
                fields = schema or pa.schema([(k, pa.string()) for k in keys])
                create_table_with_add_actions(self.uri, Schema.from_arrow(fields), adds, mode="error",
                                              partition_by=keys, configuration={
                                                  "delta.checkpointInterval": str(self.checkpoint_every)},
                                              storage_options=self.options, commit_properties=props,
                                              post_commithook_properties=hooks)
                return True
            table_schema = self.check_schema(dt, schema, txn)
            live = self.live_actions(dt)
            ours = self._interval_dirs({a["path"].split("/", 1)[0] for a in live}, txn.interval)
            removes = [RemoveAction(a["path"], True, now, a["size_bytes"],
                                    {k[len("partition."):]: v for k, v in a.items() if k.startswith("partition.")})
                       for a in live if a["path"].split("/", 1)[0] in ours]
            dt.create_write_transaction(removes + adds, "append", Schema.from_arrow(table_schema),
                                        partition_by=dt.metadata().partition_columns,
                                        commit_properties=props, post_commithook_properties=hooks)
            return True
        except CommitFailedError as exc:
            log.info("%s: lost the race for the next Delta log entry (%s); re-reading", txn.name, exc)
            return False
        except Exception as exc:
            if type(exc).__name__ == "TableAlreadyExistsError" or "already exists" in str(exc):
                return False  # another first publisher created the table
            raise

    @staticmethod
    def _interval_dirs(dirs: set[str], interval: Interval) -> set[str]:
        """The transaction dirs among ``dirs`` that belong to ``interval`` (judged once per dir, not per file)."""
        token = interval.token
        return {d for d in dirs if (parsed := parse_txn_name(d)) is not None and parsed[0] == token}

    def check_schema(self, dt: Any, staged: pa.Schema | None, txn: TxnRef) -> pa.Schema:
        """The table's schema, widened by the staged version's new columns (a metadata commit of its
        own, before the data commit: harmless if the publish never follows). TargetSchemaError, with
        nothing changed, if a staged column's type differs from the table's."""
        from deltalake import Field, Schema

        table = pa.schema(dt.schema().to_arrow())
        if staged is None:
            return table
        self.clashes(table, staged, txn)
        new = [f for f in staged if f.name not in table.names]
        if new:
            dt.alter.add_columns([Field(f.name, Schema.from_arrow(pa.schema([f])).fields[0].type, nullable=True)
                                  for f in new])
            log.info("%s: widened %s by %s", txn.name, self.describe(), [f.name for f in new])
            dt.update_incremental()
            table = pa.schema(dt.schema().to_arrow())
        return table

    def clashes(self, table: pa.Schema, staged: pa.Schema | None, txn: TxnRef) -> None:
        """TargetSchemaError if a staged column's type differs from the table's."""
        clash = [f"{f.name}: table {table.field(f.name).type}, staged {f.type}" for f in staged or ()
                 if f.name in table.names and table.field(f.name).type != f.type]
        if clash:
            raise TargetSchemaError(f"{txn.name} does not fit {self.describe()}: {'; '.join(clash)}. Nothing "
                                    "was published; cast the columns in the job, or write a new table")

    # ------------------------------------------------------------------ gc
    def sweep(self, garbage: Callable[[str], bool]) -> list[str]:
        """Delete ``<table>/<txn>/`` dirs the log calls garbage and the newest snapshot does not use."""
        dt = self.snapshot()
        live = {a["path"].split("/", 1)[0] for a in self.live_actions(dt)}
        gone = []
        for name in self.storage.list_names(self.table):
            if parse_txn_name(name) and name not in live and garbage(name):
                path = self.storage.join(self.table, name)
                self.storage.remove_tree(path)
                gone.append(path)
        return gone
