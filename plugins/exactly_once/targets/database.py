"""The database target (PostgreSQL, MariaDB/MySQL): the seeds' write-ahead-log sink, made exactly-once.

The staged Parquet of a committed transaction is the write-ahead log. :meth:`DatabaseTarget.publish`
loads it in ONE database transaction together with the interval's marker row in a commit table
(``_eo_commits`` by default, created if missing)::

    BEGIN
      INSERT marker (target table, interval) at epoch 0 unless it exists     -- so there is a row to lock
      SELECT epoch ... FOR UPDATE                                             -- concurrent publishers queue here
      epoch == ours -> ROLLBACK, 'already';  epoch > ours -> ROLLBACK, 'superseded'
      replace: DELETE the interval's previous rows, bulk-load the new ones
      upsert:  bulk-load into a private stage table, INSERT ... ON CONFLICT/DUPLICATE KEY UPDATE
      UPDATE marker SET epoch = ours, partitions, rows
    COMMIT                                                                    -- rows and marker, or neither

The seed's defect of the write-ahead-log sink (a crash between the write and its acknowledgement
writes the batch again on restart) cannot happen: the acknowledgement *is* the marker, committed in the
same transaction as the rows, and every later publish of the same epoch finds it and does nothing.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, OwnershipError, TargetSchemaError, TargetUnavailableError
from ..failpoints import failpoint
from ..ids import Interval, TxnRef
from ..records.ownership import Owner
from . import db_claims
from .db_claims import Marker
from .base import ALREADY, PUBLISHED, SUPERSEDED, PublishTarget, StagedVersion, check_identifier, outcome, \
    partition_values
from .db_retries import with_retries
from .db_rows import (one_schema, refuse_null_keys, refuse_one_column_twice, refuse_other_unique, refuse_outside,
                      same_partition_value, staged_columns)
from .endpoint import Endpoint, resolve, same_database, where, without_password
from .sql_dialects import DIALECTS, Dialect, TableInfo, split_table

logger = logging.getLogger(__name__)
MODES = ("replace", "upsert")
DB_DIALECTS = ("postgresql", "mysql")
T = TypeVar("T")


@dataclass(frozen=True)
class DatabaseTarget(PublishTarget):
    """Publish a sink's interval into ``table`` of a PostgreSQL or MariaDB/MySQL database.

    * ``conn_id`` (an Airflow connection of type postgres / mysql) or ``url``
      (``postgresql://user@host:5432/db``, ``mysql://root@host:3306/db``): exactly one. The URL's password
      is never shown (not in repr, logs or errors).
    * ``mode="replace"``: the interval's previous rows are deleted, then the new ones inserted. The
      interval's rows are those whose ``interval_column`` lies in ``[start, end)`` if it is set, else those
      whose partition columns (``dt`` of ``dt=2026-01-01``) match a partition of the new *or* the previous
      version - so partitions a reprocess no longer produces are emptied.
    * ``mode="upsert"``: rows are inserted or, when their ``key_columns`` exist, updated (``ON CONFLICT DO
      UPDATE`` / ``ON DUPLICATE KEY UPDATE``; the table needs a PRIMARY KEY or UNIQUE index on exactly those
      columns). Keys a reprocess no longer produces are *kept* with their old values: upsert never deletes.
    * ``partition_columns``: add each partition's ``key=value`` pairs to its rows as columns (what hive
      readers do); on by default.
    * ``commit_table``: the marker table (``table`` or ``schema.table``), created if missing.
    * ``retries``: how often a publish that hit a deadlock or a broken connection starts over on a new
      connection (safe: the marker decides) before it raises TargetUnavailableError.
    * ``create_sql``: a ``CREATE TABLE`` statement (your code, never data) run once, in its own
      transaction before the publish, when ``table`` does not exist.
    """

    table: str
    conn_id: str | None = None
    url: str | None = field(default=None, repr=False)
    mode: str = "replace"
    key_columns: tuple[str, ...] = ()
    interval_column: str | None = None
    partition_columns: bool = True
    commit_table: str = "_eo_commits"
    retries: int = 2
    batch_rows: int = 65536
    create_sql: str | None = None
    owner: Owner | None = field(default=None, repr=False, compare=False)  # set by claim()
    pinned: str | None = field(default=None, repr=False, compare=False)  # set by claim(): see resolved()
    keeps_staged_copies = True  # rows are replaced in place: rollback republishes the kept staged files

    def __post_init__(self) -> None:
        split_table(self.table, "table")
        split_table(self.commit_table, "commit table")
        object.__setattr__(self, "key_columns", tuple(check_identifier(k, "key column") for k in self.key_columns))
        if self.interval_column is not None:
            check_identifier(self.interval_column, "interval column")
        if self.mode not in MODES:
            raise ConfigError(f"mode {self.mode!r}: expected one of {MODES}")
        if self.mode == "upsert" and not self.key_columns:
            raise ConfigError("mode='upsert' needs key_columns (the table's primary or unique key)")
        if self.mode == "replace" and not (self.interval_column or self.partition_columns):
            raise ConfigError("mode='replace' needs interval_column or partition_columns=True to know which "
                              "rows are the interval's previous version")
        if bool(self.conn_id) == bool(self.url):
            raise ConfigError("give exactly one of conn_id (an Airflow connection) or url")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ConfigError(f"retries must be an integer >= 0, not {self.retries!r}")

    # ------------------------------------------------------------------ the contract
    def describe(self) -> str:
        return f"database target {where(self.conn_id, self.url, DB_DIALECTS)} table {self.table} ({self.mode})"

    def endpoint(self) -> Endpoint:
        """The resolved connection (reads the Airflow connection each time: it may be rotated)."""
        return resolve(self.conn_id, self.url, DB_DIALECTS)

    # ------------------------------------------------------------------ ownership
    SPEC = ("table", "conn_id", "mode", "key_columns", "interval_column", "partition_columns", "commit_table",
            "retries", "batch_rows", "create_sql")

    def binding(self) -> dict[str, Any]:
        """``{kind: database, location, spec}``; the spec's URL has no password (see :meth:`from_spec`)."""
        ep = self.endpoint()
        spec = {k: getattr(self, k) for k in self.SPEC}
        spec["key_columns"] = list(self.key_columns)
        if self.url:
            spec["url"] = without_password(self.url)
        try:  # where the names resolve now (search_path), in which database: a sink keeps both, like its spec
            spec.update(with_retries(self.endpoint(), 0, self.describe, f"resolve {self.table}",
                                     lambda conn: db_claims.whereabouts(self, conn), logger))
        except TargetUnavailableError:  # unreachable (the claim that follows a bind says so): not compared
            pass
        return {"kind": "database", "spec": spec, "location": f"{ep.dialect}://{ep.host}:{ep.port}/"
                f"{ep.database or ''} table {self.table} (markers in {self.commit_table})",
                "tunable": ["conn_id", "url", "retries", "batch_rows", "create_sql"],  # may change after binding
                "hints": db_claims.BINDING_HINTS}

    @classmethod
    def from_spec(cls, spec: dict[str, Any], url: str | None = None) -> "DatabaseTarget":
        """The target a binding's ``spec`` describes. Credentials are never in it: they come from the
        Airflow connection (``conn_id``), from ``url`` (e.g. ``EO_TARGET_URL``: it must point at the same
        database) or from the driver's environment (PostgreSQL: ``PGPASSWORD``, ``~/.pgpass``)."""
        kwargs = {k: v for k, v in spec.items() if k in cls.SPEC or k == "url"}
        kwargs["key_columns"] = tuple(kwargs.get("key_columns") or ())
        if url and kwargs.get("url"):
            kwargs["url"] = same_database(kwargs["url"], url, DB_DIALECTS)
        return cls(**kwargs)

    def claim(self, owner: Owner) -> "DatabaseTarget":
        """Insert (or find) this table's claim row for ``owner`` (:mod:`.db_claims`); OwnershipError if
        another owner holds the table. Returns the target that publishes as ``owner``."""
        def body(conn: Any) -> str:
            cur = conn.cursor()
            resolved = self.resolved(cur)
            claims, key = self._ensure_commit_table(conn, cur)
            db_claims.claim_table(self.dialect, cur, claims, key, self.commit_table, owner)
            db_claims.claim(self.dialect, cur, self.commit_table, self.table, owner)
            conn.commit()
            return resolved

        pinned = self._with_retries(f"claim {self.table} for {owner.pipeline}/{owner.sink}", body)
        return replace(self, owner=owner, pinned=pinned)

    def claimed_by(self, owner_id: str) -> bool:
        """This table's claim row in the commit table names ``owner_id`` (:meth:`PublishTarget.claimed_by`)."""
        return self._with_retries("read the claim", lambda c: db_claims.holder(self.dialect, c, self) == owner_id)

    def resolved(self, cur: Any) -> str:
        """Where the table and the commit table resolve now: ``schema.table (markers in schema.table)``.
        An unqualified name follows PostgreSQL's ``search_path``; a sink is bound to what they resolved to
        at its first run (its owner record's spec, and :meth:`claim` pins it), so a changed ``search_path``
        never sends a publish - rows or marker - into another schema (:meth:`_check_resolved`)."""
        d = self.dialect
        return "{}.{} (markers in {}.{})".format(*d.identity(cur, self.table), *d.identity(cur, self.commit_table))

    def _check_resolved(self, cur: Any) -> None:
        """ConfigError (nothing is changed: it runs first) if the names resolve elsewhere than when claimed."""
        now = self.resolved(cur) if self.pinned else None
        if now != self.pinned:
            raise ConfigError(f"{self.table} now resolves to {now}, but {self.describe()} was bound to {self.pinned} "
                              "(did the search_path change?): nothing was published. Restore the search_path the "
                              "sink was bound with (ALTER ROLE/DATABASE ... SET search_path), then run the "
                              "interval again (or `eo recover` the table if it is committed)")

    def _ensure_commit_table(self, conn: Any, cur: Any) -> tuple[str, str]:
        """Create the commit table and the table claims' table if missing (each in its own transaction);
        returns where this table's table claim lives and its key (:func:`.db_claims.claims_table`)."""
        d = self.dialect
        self._ensure_table(conn, cur, self.commit_table, d.commit_table_ddl(d.table(self.commit_table)))
        db_claims.ensure_marker_columns(d, conn, cur, self.commit_table)
        claims, key = db_claims.claims_table(d, cur, self.table)
        self._ensure_table(conn, cur, claims, db_claims.claims_table_ddl(d, claims))
        for table in (self.commit_table, claims):
            d.exact_names(conn, cur, table)
        return claims, key

    def publish(self, txn: TxnRef, staged: StagedVersion) -> dict[str, str]:
        """Load ``staged`` as the live version of ``txn.interval`` in one database transaction with its marker.

        Returns per partition ``published`` / ``already`` / ``superseded`` (see :class:`PublishTarget`).
        Raises TargetSchemaError (nothing published: the table does not fit the rows), OwnershipError (the
        table's claim or marker belongs to another owner), ConfigError (a privilege is missing) or TargetUnavailableError (the database
        could not be reached or broke off ``retries + 1`` times; publishing again is safe).
        """
        verdict = self._with_retries(f"publish {txn.name}", lambda conn: self._publish_once(conn, txn, staged))
        return outcome(staged.partitions, verdict)

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision, a dry run of the publish: the same load (the delete of the interval's
        previous rows, the bulk load, the upsert, the interval check) in a database transaction that is
        always rolled back. Whatever the database would refuse - a missing table or column, a type, a
        NULL, a duplicate key, a constraint, rows outside the interval - aborts the transaction
        (TargetSchemaError) instead of leaving it COMMITTED and unpublishable. The price: the rows are
        loaded twice. TargetUnavailableError (nothing decided: commit again) if the database is down."""
        self._with_retries(f"check {txn.name}", lambda conn: self._dry_run(conn, txn, staged))

    def _dry_run(self, conn: Any, txn: TxnRef, staged: StagedVersion) -> None:
        d, cur = self.dialect, conn.cursor()
        self._check_resolved(cur)
        if self.create_sql:
            self._ensure_table(conn, cur, self.table, self.create_sql)
        db_claims.ensure_marker_columns(d, conn, cur, self.commit_table)
        marker = self._peek_marker(cur, txn.interval)
        self._refuse_foreign(marker, txn)  # before the decision, as the publish would
        if marker.epoch < txn.epoch:  # else already or superseded: the publish will load nothing
            try:
                if marker.epoch == 0 and d.table_info(cur, self.commit_table) is not None:
                    self._refuse_overlap(cur, d, txn)
                self._load(cur, d, txn, staged, marker)
                if d.immediate_sql:  # the deferred constraints checked now, as the COMMIT the dry run never
                    cur.execute(d.immediate_sql)  # makes would (retroactively: a replace's delete-then-insert ok)
            finally:
                conn.rollback()
            if self.mode == "replace":
                self._reserve(conn, cur, txn, staged)

    def _reserve(self, conn: Any, cur: Any, txn: TxnRef, staged: StagedVersion) -> None:
        """After a dry run that passed: what the interval brings that is new to the table (its partitions, its
        range) checked once more under the table's lock, against what other intervals published or reserved,
        and reserved in its marker row (:func:`.db_claims.reserve`) - committed before the decision."""
        d = self.dialect
        self._ensure_commit_table(conn, cur)
        marker = self._lock_marker(cur, txn.interval)
        if marker.epoch < txn.epoch:
            new: list[str] = []  # by interval column: the row's range is what is reserved
            if self.interval_column:
                if marker.epoch == 0:
                    self._refuse_overlap(cur, d, txn, lock=True)
            else:
                new = sorted(set(staged.partitions) - staged.dropped - set(marker.partitions))  # dropped: emptied
                db_claims.refuse_same_partitions(d, cur, self.commit_table, self.table, txn.name, txn.interval,
                                                 d.table_info(cur, self.table), new)
            db_claims.reserve(d, cur, self.commit_table, self.table, txn.interval, txn.epoch, new)
        conn.commit()

    def live_epoch(self, interval: Interval) -> int | None:
        """The epoch the marker says is live for ``interval`` (None: never published here, or - once
        claimed - the marker is another owner's)."""
        marker = self._with_retries(f"read the marker of {interval.token}", lambda conn: self._read_marker(conn, interval))
        if marker is None or (self.owner is not None and not db_claims.same_owner(self.owner, marker.owner,
                                                                                   marker.pipeline, marker.sink)):
            return None  # another owner's marker: our version of the interval is not live
        return marker.epoch

    def is_live(self, txn: TxnRef, partitions: list[str]) -> bool:
        """The marker is at ``txn``'s epoch and ours (by owner id once claimed, else by ``txn``'s names)."""
        marker = self._with_retries(f"read the marker of {txn.interval.token}",
                                    lambda conn: self._read_marker(conn, txn.interval))
        return marker is not None and marker.epoch == txn.epoch and db_claims.same_owner(
            self.owner, marker.owner, marker.pipeline, marker.sink, txn.pipeline, txn.sink)

    # ------------------------------------------------------------------ one attempt
    @property
    def dialect(self) -> Dialect:
        return DIALECTS[self.endpoint().dialect]

    def _publish_once(self, conn: Any, txn: TxnRef, staged: StagedVersion) -> str:
        d = self.dialect
        cur = conn.cursor()
        self._check_resolved(cur)  # before anything is created where the names resolve now
        # DDL first, each in its own transaction (MySQL commits DDL implicitly: never inside ours)
        claims, key = self._ensure_commit_table(conn, cur)
        if self.create_sql:
            self._ensure_table(conn, cur, self.table, self.create_sql)
        if self.owner is not None:  # the table's claims are ours (the sink claimed them before deciding)
            db_claims.claim_table(d, cur, claims, key, self.commit_table, self.owner)
            db_claims.check(d, cur, self.commit_table, self.table, self.owner)
        marker = self._lock_marker(cur, txn.interval)
        self._refuse_foreign(marker, txn)
        newest = staged.newest_committed() if marker.epoch == 0 and staged.newest_committed else 0
        if newest > txn.epoch:  # the marker row is gone (deleted, truncated) but the log has a newer version
            marker = replace(marker, epoch=newest)  # superseded: an older one is never published over it
        if marker.epoch >= txn.epoch:
            conn.rollback()
            verdict = ALREADY if marker.epoch == txn.epoch else SUPERSEDED
            logger.info("%s: %s (marker at epoch %d) in %s", txn.name, verdict, marker.epoch, self.describe())
            return verdict
        if marker.epoch == 0:
            self._refuse_overlap(cur, d, txn, lock=True)
        rows = self._load(cur, d, txn, staged, marker)
        parts = sorted(set(staged.partitions) - staged.dropped)  # what the version holds (dropped: emptied)
        cur.execute(f"UPDATE {d.table(self.commit_table)} SET epoch = %s, pipeline = %s, sink = %s, owner = %s, "
                    "partitions = %s, rows_loaded = %s, committed_at = %s, reserved = NULL WHERE target = %s AND "
                    "interval_token = %s",
                    (txn.epoch, txn.pipeline, txn.sink, self.owner.id if self.owner else None, json.dumps(parts),
                     rows, self._ts(d, datetime.now(timezone.utc)), self.table, txn.interval.token))
        failpoint("commit.mid_publish")  # loaded, marker set, not committed: a crash here rolls both back
        conn.commit()
        logger.info("%s: published %d rows (%d partitions) into %s", txn.name, rows, len(parts), self.describe())
        return PUBLISHED

    def _refuse_foreign(self, marker: Marker, txn: TxnRef) -> None:
        """OwnershipError if ``marker`` was set by another owner: its epoch is never "already published"."""
        if marker.epoch and not db_claims.same_owner(self.owner, marker.owner, marker.pipeline, marker.sink,
                                                     txn.pipeline, txn.sink):
            raise OwnershipError(f"{self.table} is published by pipeline {marker.pipeline!r} (sink {marker.sink!r}, "
                                 f"owner id {marker.owner or 'unknown'}), not {txn.pipeline}/{txn.sink}: a table "
                                 "belongs to one sink (its epochs are that sink's); publish into another table")

    def _refuse_overlap(self, cur: Any, d: Dialect, txn: TxnRef, lock: bool = False) -> None:
        """replace by ``interval_column``: refuse an interval overlapping a published one
        (:func:`.db_claims.refuse_overlap`)."""
        if self.mode == "replace" and self.interval_column:
            db_claims.refuse_overlap(d, cur, self.commit_table, self.table, txn.name, txn.interval,
                                     (self._ts(d, txn.interval.start), self._ts(d, txn.interval.end)),
                                     self.interval_column, lock)

    def _ensure_table(self, conn: Any, cur: Any, name: str, ddl: str) -> None:
        """Run ``ddl`` if table ``name`` does not exist, in its own transaction; a concurrent creator may win."""
        d = self.dialect
        if d.table_info(cur, name) is None:
            try:
                cur.execute(ddl)
                conn.commit()
            except Exception as exc:  # lost the race: "already exists" / unique violation in pg_type
                if d.classify(exc) != "schema":
                    raise
                conn.rollback()
                if d.table_info(cur, name) is None:
                    raise
        conn.commit()

    def _lock_marker(self, cur: Any, interval: Interval) -> Marker:
        d = self.dialect
        ct = d.table(self.commit_table)
        cur.execute(d.marker_insert_sql(ct), (self.table, interval.token, self._ts(d, interval.start),
                                              self._ts(d, interval.end)))
        cur.execute(f"SELECT epoch, pipeline, sink, partitions, owner FROM {ct} WHERE target = %s AND "
                    "interval_token = %s FOR UPDATE", (self.table, interval.token))
        return db_claims.marker_row(*cur.fetchone())

    def _peek_marker(self, cur: Any, interval: Interval) -> Marker:
        """The marker of ``interval`` without locking it (epoch 0 if there is none)."""
        d = self.dialect
        info = d.table_info(cur, self.commit_table)
        if info is None:
            return Marker(0, None, None, ())
        owner = "owner" if info.column("owner", d.case_insensitive_columns) else "NULL"
        cur.execute(f"SELECT epoch, pipeline, sink, partitions, {owner} FROM {d.table(self.commit_table)} "
                    "WHERE target = %s AND interval_token = %s", (self.table, interval.token))
        row = cur.fetchone()
        return db_claims.marker_row(*row) if row else Marker(0, None, None, ())

    def _read_marker(self, conn: Any, interval: Interval) -> Marker | None:
        """The marker of ``interval`` (None: none with an epoch > 0), read without a lock."""
        marker = self._peek_marker(conn.cursor(), interval)
        conn.rollback()
        return marker if marker.epoch > 0 else None

    # ------------------------------------------------------------------ the load
    def _load(self, cur: Any, d: Dialect, txn: TxnRef, staged: StagedVersion, marker: Marker) -> int:
        info = d.table_info(cur, self.table)
        if info is None:
            raise TargetSchemaError(f"table {self.table} does not exist in {self.endpoint().describe()}; create it "
                                    f"(columns as the job writes them{', plus the partition keys' if self.partition_columns else ''})")
        file_cols, part_cols = staged_columns(staged, d, self.partition_columns)
        cols, table_sql = self._table_columns(info, d, [*file_cols, *part_cols]), d.table(self.table)
        refuse_one_column_twice([*file_cols, *part_cols], cols, self.table)
        own = set(staged.partitions) - staged.dropped  # dropped: emptied where our marker holds them, else no-op
        lost = set() if marker.epoch else db_claims.lost_partitions(staged, txn)  # the marker row is gone
        parts = sorted(own | set(marker.partitions))
        if self.mode == "replace":
            if not self.interval_column:  # by partition columns; a lost marker's: emptied unless another holds them
                db_claims.refuse_same_partitions(d, cur, self.commit_table, self.table, txn.name, txn.interval,
                                                 info, sorted(own - set(marker.partitions)))
                parts = sorted({*parts, *lost} - {p for p, *_ in db_claims.same_partitions(
                    d, cur, self.commit_table, self.table, txn.name, txn.interval, info, sorted(lost), False)})
            for where, params in self._interval_rows(d, info, txn.interval, parts):
                cur.execute(f"DELETE FROM {table_sql} WHERE {where}", params)
        if not cols:
            return 0
        counted = [0]
        check = self.interval_column if self.mode == "replace" else None
        in_file = next((c for c in file_cols if check and d.same_name(c, check)), None)
        keys = self._check_keys(info, d, cols, cur) if self.mode == "upsert" else []
        batches = self._batches(staged, d, file_cols, part_cols, counted,
                                (in_file, txn, [False]) if in_file else None,
                                [c for c in file_cols if info.column(c, d.case_insensitive_columns) in keys])
        if self.mode == "replace":
            loaded = d.load(cur, table_sql, cols, batches)
        else:
            stage = d.create_stage(cur, table_sql, d.temp_at(cur, self.table))
            loaded = d.load(cur, stage, cols, batches)
            cur.execute(d.upsert_sql(table_sql, stage, cols, keys))
        if loaded != counted[0]:
            raise TargetSchemaError(f"{txn.name}: the database loaded {loaded} of {counted[0]} staged rows")
        if self.mode == "replace":  # where the rows landed (a trigger may move them; see _check_landed)
            self._check_landed(cur, d, info, txn, parts, counted[0])
        return counted[0]

    def _check_landed(self, cur: Any, d: Dialect, info: TableInfo, txn: TxnRef, parts: list[str], loaded: int) -> None:
        """replace: after the load, in its transaction, the rows the interval's delete matches must be exactly
        the ``loaded`` ones. Fewer: some landed elsewhere (a trigger, default or generated column rewrote the
        partition or interval column; an interval column outside the interval or NULL) and would double at
        every reprocess, whose delete never matches them. More: rows not ours are in the interval. Counts
        every writer's rows, so a concurrent writer's row can mask one of ours (docs/TARGETS.md, Known limits)."""
        clauses = self._interval_rows(d, info, txn.interval, parts)  # one OR: a row two spellings of a value
        cur.execute(f"SELECT count(*) FROM {d.table(self.table)} WHERE " + " OR ".join(  # match (EU/eu, 3/03)
            f"({w})" for w, _ in clauses), tuple(p for _, ps in clauses for p in ps))  # is counted once
        inside = int(cur.fetchone()[0])
        by = f"{self.interval_column} in [{txn.interval.start.isoformat()}, {txn.interval.end.isoformat()})" \
            if self.interval_column else f"the partition columns of {parts}"
        if inside != loaded:
            raise TargetSchemaError(
                f"{txn.name}: after loading {loaded} row(s), {inside} row(s) of {self.table} have {by}, what a "
                "reprocess deletes as the interval's. " + (
                    f"{loaded - inside} landed outside the interval (or NULL): a trigger, default or generated "
                    "column of the table rewrote the value, or the staged rows carry it; they would double at "
                    "every reprocess. Drop the table's rewrite of that column, or filter the rows in the job"
                    if inside < loaded else f"{inside - loaded} are not the staged rows (another writer inserting "
                    "into the interval, a trigger adding rows): stop it, then run the interval again"))

    def _table_columns(self, info: TableInfo, d: Dialect, wanted: Sequence[str]) -> list[str]:
        out, missing = [], []
        for c in wanted:
            found = info.column(c, d.case_insensitive_columns)
            (out if found else missing).append(found or c)
        if missing:
            hint = " (or set partition_columns=False)" if self.partition_columns else ""
            raise TargetSchemaError(f"table {self.table} has no column(s) {missing} that the staged rows carry; "
                                    f"its columns are {list(info.columns)}. Add them (ALTER TABLE ... ADD COLUMN) "
                                    f"or drop them from the job's output{hint}; nothing was published")
        return [check_identifier(c, "column") for c in out]

    def _check_keys(self, info: TableInfo, d: Dialect, cols: Sequence[str], cur: Any) -> list[str]:
        keys = self._table_columns(info, d, self.key_columns)
        absent = [k for k in keys if k not in cols]
        if absent:
            raise TargetSchemaError(f"key column(s) {absent} are not in the staged rows ({list(cols)})")
        if frozenset(keys) not in info.unique_keys:
            raise TargetSchemaError(f"upsert into {self.table} needs a PRIMARY KEY or UNIQUE index on exactly "
                                    f"{list(keys)}; create one (CREATE UNIQUE INDEX ... ON {self.table} ({', '.join(keys)}))"
                                    f" - without it duplicates would be inserted; nothing was published")
        refuse_other_unique(d, cur, info, self.table, keys, cols)
        return keys

    def _interval_rows(self, d: Dialect, info: TableInfo, interval: Interval, parts: list[str]
                       ) -> list[tuple[str, tuple[Any, ...]]]:
        """replace: the WHERE clauses (with their parameters) of the interval's rows - its time range by
        ``interval_column``, else one per partition of ``parts`` by its partition columns."""
        if self.interval_column:
            col = d.quote(self._table_columns(info, d, [self.interval_column])[0])
            return [(f"{col} >= %s AND {col} < %s", (self._ts(d, interval.start), self._ts(d, interval.end)))]
        out = []
        for part in parts:
            values = partition_values(part)
            cols = self._table_columns(info, d, list(values))
            out.append((" AND ".join(f"{d.quote(c)} = %s" for c in cols), tuple(values.values())))
        return out

    def _batches(self, staged: StagedVersion, d: Dialect, file_cols: list[str], part_cols: list[str],
                 counted: list[int], check: tuple[str, TxnRef, list[bool]] | None = None,
                 keys: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
        names = [*file_cols, *part_cols]
        for part, f in staged.files():
            values = partition_values(part)
            own = {c: values[k] for k in values if k not in part_cols for c in file_cols if d.same_name(c, k)} \
                if self.partition_columns else {}
            with staged.open(part, f.name) as fh:
                pf = pq.ParquetFile(fh)
                one_schema(pf.schema_arrow.names, file_cols, f"{part}/{f.name}")
                for b in pf.iter_batches(batch_size=self.batch_rows, columns=file_cols):
                    for col, value in own.items():
                        same_partition_value(b.column(col), value, f"{part}/{f.name}", col)
                    arrays = [b.column(c) for c in file_cols]
                    arrays += [pa.repeat(pa.scalar(values[k], pa.string()), b.num_rows) for k in part_cols]
                    if check:
                        refuse_outside(b, check, self.interval_column)
                    refuse_null_keys(b, keys, f"{part}/{f.name}")
                    counted[0] += b.num_rows
                    yield d.prepare(pa.RecordBatch.from_arrays(arrays, names=names))

    @staticmethod
    def _ts(d: Dialect, value: datetime) -> datetime:
        return value.astimezone(timezone.utc).replace(tzinfo=None) if d.name == "mysql" else value

    # ------------------------------------------------------------------ connections and errors
    def _with_retries(self, what: str, body: Callable[[Any], T]) -> T:
        """``body(conn)`` on a fresh connection, started over on a deadlock or a broken connection
        (:func:`.db_retries.with_retries`)."""
        return with_retries(self.endpoint(), self.retries, self.describe, what, body, logger)

