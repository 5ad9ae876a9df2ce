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
  acknowledgement (table committed, our log not told); a marker another engine expired is replaced by the
  newest epoch whose ``<txn>/`` dir holds a live file (:meth:`DeltaTarget._live_epoch`);
* ``remove`` of every live file of the interval and ``add`` of the new ones (replace the interval). The
  interval's files are found by their partition values, so files another engine rewrote (OPTIMIZE,
  DELETE, UPDATE: new names outside our ``<txn>/`` dirs) go too (:meth:`DeltaTarget.interval_files`).

Before the decision the commit checks the sealed files against the manifest: locally after the seal's
``rename(2)``, byte for byte (sha256); on S3 by one LIST per 1,000 files, comparing sizes and ETags, so
a same-size rewrite after pre_commit aborts the transaction (what commits is what the gate read). That
LIST is the commit's only per-file cost on S3 (at 10,000 files on the loopback S3 server, 3 of a
commit's 4 s; 10 requests on AWS). A rewrite after the decision is not seen: nothing seals an S3 prefix,
so keep other writers out of the table's prefix (IAM). The staged files of a transaction are deleted
only after our log decided it (and gc sweeps a committed version only once a newer epoch has been
published for the grace period; a superseded publish deletes nothing: another finisher of its epoch may
have made it live a moment ago), so a file missing before the decision means an abort decided first; the
commit's exclusive decision then returns ABORTED and nothing is published. Files a late writer adds
are never published: the add actions are the manifest's files and sizes.
Tests: ``test_abort_or_gc_racing_a_commit_publishes_nothing``.

The commit is attempted once per snapshot read (``max_commit_retries=0``): a lost race for the log
entry re-reads the table and judges again, so an older epoch can never land after a newer one.
"""
from __future__ import annotations

import logging
import posixpath
import time
from typing import Any, Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from .. import failpoints
from . import delta_checks
from ..errors import StorageError, TargetSchemaError
from ..ids import Interval, TxnRef, parse_txn_name
from ..storage import Storage
from ..records.manifest import sha256_of
from .base import (ALREADY, PUBLISHED, SUPERSEDED, LocationOwned, PublishTarget, StagedVersion, altered, outcome,
                   copied_as_sealed, partition_values, staged_change)

log = logging.getLogger(__name__)
COMMIT_TRIES = 20  # lost races for the next log entry before giving up (each one re-reads the table)
CHECKPOINT_EVERY = 100  # delta.checkpointInterval: a checkpoint every 100 versions
CLOCK_PROBE = "_eo_clock"  # <table>/_eo_clock: the storage's "now" (a "_" name: Delta readers and VACUUM skip it)


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

# Writer features a delta-rs commit of add/remove actions honours (the rules of the last three are checked
# by ``check_layout``'s other clauses); any other one is refused before the decision.
WRITABLE_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
                               "timestampNtz", "variantType", "variantType-preview"})

class DeltaTarget(LocationOwned, PublishTarget):
    """Publishes ``pipeline``/``sink`` into the Delta table at ``table`` on ``storage``; once claimed
    (:meth:`claim`), only as the owner that ``<table>/_eo_owner.json`` names (Delta's VACUUM and readers
    skip ``_`` names)."""

    kind = "delta"

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
        """Every live file of snapshot ``dt``: ``{path, size_bytes, partition.<key>...}``. ``path`` is the
        file's path relative to the table: the log holds it URI-encoded (``%3A``, ``%20``), and delta-rs
        encodes a path given to an action again, so a remove must name the decoded path."""
        if dt is None:
            return []
        return [{**a, "path": unquote(a["path"])} for a in pa.table(dt.get_add_actions(flatten=True)).to_pylist()]

    def live_epoch(self, interval: Interval) -> int | None:
        return self._live_epoch(self.snapshot(), interval)

    def _live_epoch(self, dt: Any, interval: Interval) -> int | None:
        """The epoch of ``interval`` live in snapshot ``dt``: its ``txn`` marker, else (another engine
        expired the marker: ``delta.setTransactionRetentionDuration``, then a checkpoint) the newest
        epoch of the interval whose ``<txn>/`` dir holds a live file - a second marker no retention
        expires (only a commit of that epoch makes those files live). None: nothing of ours is live."""
        if dt is None:
            return None
        marker = dt.transaction_version(self.txn_application(interval))
        if marker is not None:
            return marker
        dirs = self._interval_dirs({a["path"].split("/", 1)[0] for a in self.live_actions(dt)}, interval)
        return max((parsed[1] for d in dirs if (parsed := parse_txn_name(d))), default=None)

    def live_version(self, partition: str) -> str | None:
        versions = {a["path"].split("/", 1)[0] for a in self.live_actions(self.snapshot())
                    if ("/" + a["path"].rpartition("/")[0]).endswith("/" + partition)}
        versions = {v for v in versions if parse_txn_name(v)}  # not files another engine rewrote (OPTIMIZE)
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
        self.check_owner()  # another owner's app transaction at our epoch is never "already"
        app = self.txn_application(txn.interval)
        dt = self.snapshot()
        done = self._settled(dt, txn, staged)
        if done:
            return outcome(staged.partitions, done)
        base = self._in_table(txn, staged)
        self._check_files(staged, self.storage.join(self.table, base))
        failpoints.failpoint("commit.mid_publish")  # files in the data area, not committed: invisible
        schema = self.staged_schema(txn, staged, base)
        for attempt in range(COMMIT_TRIES):
            dt = dt if attempt == 0 else self.snapshot()  # a lost race re-reads the table
            done = self._settled(dt, txn, staged)
            if done:
                break
            if self._commit(dt, app, txn, staged, schema, base):
                done = PUBLISHED
                break
        else:
            raise StorageError(f"{self.describe()}: lost the race for the next log entry {COMMIT_TRIES} times")
        # SUPERSEDED: a newer epoch is live, but ours may have been live until a moment ago (another
        # finisher of this epoch published it): its files go only through gc's sweep, after the grace
        return outcome(staged.partitions, done)

    def _settled(self, dt: Any, txn: TxnRef, staged: StagedVersion) -> str | None:
        live = self._live_epoch(dt, txn.interval)
        if live is None:  # marker expired and no live file of ours: never an older version over the log's newest
            return SUPERSEDED if staged.newer_committed(txn.epoch) else None
        if live < txn.epoch:
            return None
        return ALREADY if live == txn.epoch else SUPERSEDED

    def _in_table(self, txn: TxnRef, staged: StagedVersion) -> str:
        """The table-relative dir of the sealed files (``<txn>/sealed`` locally, ``<txn>/data`` on S3:
        the sink stages in the table, see :meth:`staging_dir`). A version staged elsewhere (the target
        used on its own) is first placed into ``<table>/<txn>/`` (renamed locally, copied on S3)."""
        root = (staged.root or "").rstrip("/")
        if root.startswith(self.table.rstrip("/") + "/"):
            return root[len(self.table.rstrip("/")) + 1:]
        if not self.storage.can_rename and staged.root:
            self._check_files(staged, root)  # copied below: what is checked after is the copies
        self._place(txn, staged)
        return txn.name

    def _check_files(self, staged: StagedVersion, root: str) -> None:
        """StorageError if a file the version lists is gone from ``root`` (a storage path), has another size than
        its manifest says or was rewritten (:func:`staged_change`: a server-side copy keeps a plain MD5 ETag;
        one of a multipart upload's is read again): a commit names files by path and size, unread, so a
        changed one would go live."""
        present = {e.rel: e for e in self.storage.walk_files(root)}
        for part, f in staged.files():
            e, path = present.get(f"{part}/{f.name}"), self.storage.join(root, part, f.name)
            what = staged_change(f, e and e.size, etag=e and e.etag, mtime=e and e.mtime,
                                 inode=e and e.inode, digest=lambda: sha256_of(self.storage, path))  # noqa: B023
            if what:
                raise altered(self.storage.url(path), what)

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
            present = {e.rel: e for e in self.storage.walk_files(dest)}
            todo = [(staged.path(part, f.name), self.storage.join(dest, f.name)) for f in files
                    if not copied_as_sealed(present.get(f.name), f)]
            self.storage.copy_files(todo)  # type: ignore[attr-defined]

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: the staged columns must fit the table's (TargetSchemaError otherwise),
        and the table is widened by the new ones here, not at publish (a table that does not exist yet
        is created here, without files: an empty version 0). A column, once in the table, keeps its type,
        so a version that passed this check still fits at publish whatever other intervals commit in
        between; only an outside writer changing a column's type can refuse it later (then the publish
        names the way out: fix the table, ``eo recover``). OwnershipError if another owner holds the location."""
        self.check_owner()
        schema = self.staged_schema(txn, staged)  # also refuses files that disagree on a column's type
        dt = self.snapshot()
        if dt is None and schema is None and not staged.partitions:
            return  # an empty version and no table yet: nothing to check, nothing to create (see _commit)
        dt = dt or self._create(staged, schema)
        if self._settled(dt, txn, staged) is None:
            self.check_schema(dt, schema, txn)
            self.check_layout(dt, staged, txn)
            delta_checks.check_not_null(dt, staged, txn, self.describe())

    def _create(self, staged: StagedVersion, schema: pa.Schema | None) -> Any:
        """Create the table, without files, with ``schema`` (partition keys as strings if None); a
        concurrent creator may win (its table is then judged like any other). Returns the snapshot."""
        from deltalake import Schema
        from deltalake.transaction import create_table_with_add_actions

        keys = sorted({k for p in staged.partitions for k in partition_values(p)})
        fields = schema or pa.schema([(k, pa.string()) for k in keys])
        try:
            create_table_with_add_actions(self.uri, Schema.from_arrow(fields), [], mode="error", partition_by=keys,
                                          configuration={"delta.checkpointInterval": str(self.checkpoint_every)},
                                          storage_options=self.options)
        except Exception as exc:
            if not (type(exc).__name__ == "TableAlreadyExistsError" or "already exists" in str(exc)):
                raise
        return self.snapshot()

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

        now = self._now_ms()
        keys = sorted({k for p in staged.partitions for k in partition_values(p)})
        values = {part: partition_values(part) for part in staged.partitions}  # once per partition
        adds = [AddAction(f"{base}/{part}/{f.name}", f.size, values[part], now, True,
                          '{"numRecords": %d}' % f.rows if f.rows is not None else "{}")
                for part, f in staged.files()]
        props = CommitProperties(max_commit_retries=0, app_transactions=[Transaction(app, txn.epoch, now)],
                                 custom_metadata={"exactly_once.txn": txn.name, **(
                                     {"exactly_once.owner": self.owner.id} if self.owner else {})})
        hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
        try:
            if dt is None and not adds and not keys:
                return True  # an empty first version: no table to create (it has no column), nothing to show
            if dt is None:  # only a target used on its own, without check(): the sink's check creates it
                fields = schema or pa.schema([(k, pa.string()) for k in keys])
                create_table_with_add_actions(self.uri, Schema.from_arrow(fields), adds, mode="error",
                                              partition_by=keys, configuration={
                                                  "delta.checkpointInterval": str(self.checkpoint_every)},
                                              storage_options=self.options, commit_properties=props,
                                              post_commithook_properties=hooks)
                return True
            self.check_layout(dt, staged, txn)
            table_schema = self.check_schema(dt, schema, txn)
            removes = [RemoveAction(a["path"], True, now, a["size_bytes"], self._values(a))
                       for a in self.interval_files(dt, staged, txn.interval)]
            dt.create_write_transaction(removes + adds, "append", Schema.from_arrow(table_schema),
                                        partition_by=dt.metadata().partition_columns,
                                        commit_properties=props, post_commithook_properties=hooks)
            return True
        except CommitFailedError as exc:
            if dt is not None and not self.storage.exists(self.storage.join(
                    self.table, "_delta_log", f"{dt.version() + 1:020d}.json")):  # nobody took the entry
                raise TargetSchemaError(f"{self.describe()} refused the commit of {txn.name}: {exc}. Nothing was "
                                        "published; undo the table change that refuses it, then run "
                                        "`eo recover`") from exc
            log.info("%s: lost the race for the next Delta log entry (%s); re-reading", txn.name, exc)
            return False
        except Exception as exc:
            if type(exc).__name__ == "TableAlreadyExistsError" or "already exists" in str(exc):
                return False  # another first publisher created the table
            raise

    def _now_ms(self) -> int:
        """The time stamped on a commit's actions, in ms: the later of this process's clock and the
        storage's (the timestamp the storage gives ``<table>/_eo_clock`` written now). A ``remove``
        action's deletionTimestamp is where VACUUM's retention starts (and the ``txn`` marker's
        lastUpdated where its expiry does): from a slow publisher clock alone, a VACUUM with Delta's
        default 7 days deleted a version superseded a moment ago, under a reader pinned to it."""
        probe = self.storage.join(self.table, CLOCK_PROBE)
        self.storage.makedirs(self.table)
        self.storage.write_atomic(probe, b"")
        return int(max(time.time(), self.storage.modified_at(probe)) * 1000)

    def interval_files(self, dt: Any, staged: StagedVersion, interval: Interval) -> list[dict[str, Any]]:
        """The live files of snapshot ``dt`` (its add actions) that hold ``interval``'s rows, wherever they
        live now: every file whose partition values are one of the interval's partitions (``staged``
        lists them all: the new version's, and the ones its older versions published), and every file in
        one of the interval's ``<txn>/`` dirs. Another engine's OPTIMIZE, DELETE or UPDATE rewrites our
        files under new names outside our dirs; their partition values still say whose rows they hold,
        because a partition belongs to one interval (the sink's partition claims) and :meth:`check_layout`
        refuses a table whose partitioning no longer matches the sink's. The caller commits the removes
        on ``dt`` itself (``max_commit_retries=0``): if anyone committed since ``dt`` was read, the commit
        fails and the removes are computed again on the newer snapshot - never a stale list."""
        owned = {tuple(sorted(partition_values(p).items())) for p in staged.partitions}
        live = self.live_actions(dt)
        dirs = self._interval_dirs({a["path"].split("/", 1)[0] for a in live}, interval)
        return [a for a in live if tuple(sorted(self._values(a).items())) in owned
                or a["path"].split("/", 1)[0] in dirs]

    @staticmethod
    def _values(action: dict[str, Any]) -> dict[str, str | None]:
        """A flattened add action's partition values, as strings (how Delta's log stores them)."""
        return {k[len("partition."):]: None if v is None else str(v) for k, v in action.items()
                if k.startswith("partition.")}

    def check_layout(self, dt: Any, staged: StagedVersion, txn: TxnRef) -> None:
        """TargetSchemaError, with nothing changed, if another engine changed the table so that this
        publish would not be exact or would break the table's own rules:

        * re-partitioned: its files may mix several intervals' rows and cannot be removed whole;
        * deletion vectors: a ``remove`` by path does not name a file's vector (its live rows);
        * ``delta.appendOnly``: replacing the interval removes files;
        * ``delta.setTransactionRetentionDuration``: the ``txn`` marker would expire;
        * writer features delta-rs cannot commit to (rowTracking, domainMetadata, identityColumns, ...: not
          in ``WRITABLE_FEATURES``): its commit would be refused after the decision;
        * CHECK constraints, invariants, generated columns: a commit of staged files is not checked by them;
        * column mapping (a mode but ``none``, or legacy writer protocol 5-6): readers want physical names.
        """
        keys = sorted({k for p in staged.partitions for k in partition_values(p)})
        meta = dt.metadata()
        config = meta.configuration or {}
        rules = sorted(k[len("delta.constraints."):] for k in config if k.startswith("delta.constraints."))
        rules += sorted(f.name for f in dt.schema().fields
                        if {"delta.invariants", "delta.generationExpression"} & set(f.metadata or {}))
        problems = []
        if keys and sorted(meta.partition_columns) != keys:
            problems.append(f"it is partitioned by {sorted(meta.partition_columns)}, {txn.name} by {keys} (so its "
                            "files may mix several intervals' rows): restore the partitioning or write a new table")
        protocol, mapping = dt.protocol(), str(config.get("delta.columnMapping.mode") or "none").lower()
        features = set(protocol.writer_features or ())
        if mapping != "none" or (protocol.writer_features is None and protocol.min_writer_version >= 5):
            problems.append(f"it uses column mapping (mode {mapping}, writer protocol {protocol.min_writer_version}): "
                            "readers resolve physical column names the staged files lack. Publish into a table "
                            "without it (a new one, or CREATE TABLE ... AS SELECT without the mode)")
        if unknown := sorted(features - WRITABLE_FEATURES - {"deletionVectors"}):
            problems.append(f"it has the writer features {unknown}, which the Delta writer here (delta-rs) "
                            "cannot commit to: publish into a table without them")
        if "deletionVectors" in features:
            problems.append("it has the writer feature deletionVectors (a remove by path does not name a "
                            "file's vector): disable them and purge (REORG TABLE ... APPLY (PURGE))")
        if str(config.get("delta.appendOnly", "")).lower() == "true":
            problems.append("it is delta.appendOnly (replacing an interval removes files): unset it")
        if config.get("delta.setTransactionRetentionDuration"):
            problems.append("it sets delta.setTransactionRetentionDuration (our txn marker would expire, and "
                            "with it what says an epoch is live): unset it")
        if rules:
            problems.append(f"it has constraints, invariants or generated columns {rules}, which a commit of "
                            "staged files does not check: drop them, or check them in the job and the gate")
        if problems:
            raise TargetSchemaError(f"another writer changed {self.describe()}; {txn.name} cannot replace its "
                                    f"interval there: {'; '.join(problems)}. Nothing was published; fix the "
                                    "table, then re-run the interval (or `eo recover` a decided one)")

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
        delta_checks.clashes(table, staged, txn, self.describe())
        new = [f for f in staged if f.name not in table.names]
        if new:
            dt.alter.add_columns([Field(f.name, Schema.from_arrow(pa.schema([f])).fields[0].type, nullable=True)
                                  for f in new])
            log.info("%s: widened %s by %s", txn.name, self.describe(), [f.name for f in new])
            dt.update_incremental()
            table = pa.schema(dt.schema().to_arrow())
        return table

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
