"""What differs between PostgreSQL (psycopg2) and MariaDB/MySQL (PyMySQL) for the database target.

Everything here works on an open DB-API connection inside the caller's transaction. Identifiers reach
SQL only allow-listed (:func:`~exactly_once.targets.base.check_identifier`) *and* quoted; values are
always bound parameters or travel in the bulk stream (CSV, quoted by pyarrow), never pasted into SQL.

Bulk paths: PostgreSQL ``COPY ... FROM STDIN (FORMAT csv)`` streamed from the Parquet batches;
MariaDB/MySQL ``LOAD DATA LOCAL INFILE`` of a private temporary CSV file, after which every warning
counts as an error (``LOCAL`` turns data errors into warnings, so this is what keeps it strict).
"""
from __future__ import annotations

import io
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TargetSchemaError, UnsafeIdentifierError
from .base import check_identifier
from .csv_rows import CsvStream, csv_chunks
from .endpoint import Endpoint

STAGE = "_eo_stage"  # the session-private staging table of upsert mode
_NESTED = (pa.types.is_nested, pa.types.is_binary, pa.types.is_large_binary, pa.types.is_fixed_size_binary,
           getattr(pa.types, "is_binary_view", lambda t: False))
_STRING_VIEW = getattr(pa.types, "is_string_view", lambda t: False)  # pyarrow >= 16; CSV cannot write it


@dataclass(frozen=True)
class TableInfo:
    """A target table as the database describes it."""

    columns: dict[str, str]            # column name -> the database's type
    unique_keys: tuple[frozenset[str], ...]

    def column(self, name: str, case_insensitive: bool) -> str | None:
        if name in self.columns:
            return name
        if case_insensitive:
            return next((c for c in self.columns if c.lower() == name.lower()), None)
        return None


class Resolved(str):
    """``schema.table`` as the database itself named it (:meth:`Dialect.identity`): not a name the user
    gave, so not allow-listed - its parts are quoted with their quote characters escaped (a MariaDB database
    ``dw-prod`` is a valid schema)."""

    schema: str
    name: str

    def __new__(cls, schema: str, name: str) -> "Resolved":
        out = super().__new__(cls, f"{schema}.{name}")
        out.schema, out.name = schema, name
        return out


def split_table(name: str, what: str = "table") -> tuple[str | None, str]:
    """``schema.table`` or ``table`` -> (schema or None, table), each part allow-listed (a
    :class:`Resolved` name: its parts as the database gave them)."""
    if isinstance(name, Resolved):
        return name.schema, name.name
    parts = name.split(".") if isinstance(name, str) else [name]
    if len(parts) > 2:
        raise UnsafeIdentifierError(f"{what} {name!r}: expected table or schema.table")
    return (check_identifier(parts[0], f"{what} schema"), check_identifier(parts[1], what)) if len(parts) == 2 \
        else (None, check_identifier(parts[0], what))


class Dialect(ABC):
    """One database family: connecting, quoting, metadata, the marker's SQL, the bulk load, errors."""

    name: str
    case_insensitive_columns = False
    quote_char = '"'
    upsert_matches_any_unique = False  # MySQL's ON DUPLICATE KEY UPDATE: any unique index, not only the key
    immediate_sql: str | None = None  # makes deferred constraints checked at each statement (the dry run's)

    def same_name(self, a: str, b: str) -> bool:
        """Do column names ``a`` and ``b`` name one column here (MariaDB's column names ignore case)?"""
        return a == b or (self.case_insensitive_columns and a.lower() == b.lower())

    def quote(self, ident: str) -> str:
        return f"{self.quote_char}{check_identifier(ident, 'column')}{self.quote_char}"

    def table(self, name: str) -> str:
        schema, table = split_table(name)
        if isinstance(name, Resolved):  # the database's own names: quoted, the quote character doubled
            q = self.quote_char
            return ".".join(q + p.replace(q, q + q) + q for p in (schema, table))
        return ".".join(self.quote(p) for p in (schema, table) if p)

    def columns_sql(self, cols: Sequence[str]) -> str:
        return ", ".join(self.quote(c) for c in cols)

    @abstractmethod
    def connect(self, ep: Endpoint) -> Any: """An open connection, autocommit off, session set up."""

    ts_type, text_type, table_options = "timestamptz", "text", ""
    name_type = "varchar(255)"  # a table name in the commit and claims tables: compared exactly

    def commit_table_ddl(self, table_sql: str) -> str:
        """CREATE TABLE IF NOT EXISTS of the commit table (one marker row per target table and interval, and
        a claim row per target table: :mod:`.db_claims`)."""
        ts = self.ts_type
        return (f"CREATE TABLE IF NOT EXISTS {table_sql} (target {self.name_type} NOT NULL, "
                "interval_token varchar(64) NOT NULL, epoch bigint NOT NULL, pipeline varchar(128), "
                f"sink varchar(128), interval_start {ts}, interval_end {ts}, partitions {self.text_type}, "
                f"rows_loaded bigint, committed_at {ts}, owner varchar(64), owner_home {self.text_type}, "
                f"reserved {self.text_type}, "
                f"PRIMARY KEY (target, interval_token)){self.table_options}")

    @abstractmethod
    def table_info(self, cur: Any, name: str) -> TableInfo | None: """None if there is no such table."""

    def exact_names(self, conn: Any, cur: Any, table: str) -> None:
        """Make ``table``'s ``target`` column (a table name) compare exactly, if it was made otherwise."""

    @abstractmethod
    def identity(self, cur: Any, name: str) -> tuple[str, str]:
        """(schema, table): the table ``name`` denotes, whatever its spelling (``t`` or ``public.t``); a
        missing table is where an unqualified name would create it (the current schema / database)."""

    @abstractmethod
    def marker_insert_sql(self, table_sql: str) -> str:
        """Insert the marker row at epoch 0 unless it exists (params: target, interval, start, end)."""

    @abstractmethod
    def load(self, cur: Any, table_sql: str, cols: Sequence[str], batches: Iterator[pa.RecordBatch]) -> int:
        """Bulk-load ``batches`` into ``cols`` of the table; returns the rows the database loaded."""

    @abstractmethod
    def create_stage(self, cur: Any, table_sql: str, at: str) -> str:
        """A private empty copy of the table, its name prefixed by ``at`` (:meth:`temp_at`); its SQL name."""

    def temp_at(self, cur: Any, table: str) -> str:
        """Where this session's temporary tables go, as a prefix of their names: PostgreSQL's own temporary
        schema, named by none."""
        return ""

    @abstractmethod
    def upsert_sql(self, table_sql: str, stage_sql: str, cols: Sequence[str], keys: Sequence[str]) -> str:
        """Move every row of the stage into the table, updating rows whose key exists."""

    @abstractmethod
    def classify(self, exc: BaseException) -> str | None:
        """``schema`` | ``transient`` | ``unavailable`` | ``permission`` | ``config`` | None (no database error)."""

    def prepare(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Columns the CSV bulk path can carry exactly; refuses nested and binary columns."""
        arrays = []
        for name, col in zip(batch.schema.names, batch.columns):
            t = col.type
            if pa.types.is_dictionary(t):
                col, t = col.cast(t.value_type), t.value_type
            if _STRING_VIEW(t):
                col, t = col.cast(pa.string()), pa.string()
            if any(check(t) for check in _NESTED):
                raise TargetSchemaError(f"column {name!r} has type {t}: the database target loads flat scalar "
                                        "columns only; flatten or encode it in the job (e.g. to_json)")
            if pa.types.is_duration(t):  # the CSV holds its count of units, which an interval column reads as seconds
                raise TargetSchemaError(f"column {name!r} has type {t}, which the database target cannot load "
                                        "faithfully; cast it in the job to a count of a unit (int64) or a string")
            if (pa.types.is_timestamp(t) or pa.types.is_time64(t)) and t.unit == "ns":
                try:  # databases keep microseconds; refuse to drop digits silently
                    col = col.cast(pa.timestamp("us", t.tz) if pa.types.is_timestamp(t) else pa.time64("us"))
                except pa.ArrowInvalid:
                    raise TargetSchemaError(f"column {name!r} has nanoseconds the database cannot store; "
                                            "round it to microseconds in the job") from None
            arrays.append(col)
        return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


# --------------------------------------------------------------------------------------------- PostgreSQL


class Postgres(Dialect):
    name = "postgresql"
    immediate_sql = "SET CONSTRAINTS ALL IMMEDIATE"

    def connect(self, ep: Endpoint) -> Any:
        import psycopg2

        opts = {"connect_timeout": "10", "application_name": "exactly-once", **ep.options}
        conn = psycopg2.connect(host=ep.host, port=ep.port, user=ep.user, password=ep.password,
                                dbname=ep.database, **opts)
        conn.autocommit = False
        conn.set_client_encoding("UTF8")  # COPY sends UTF-8: a LATIN1 default would store mojibake
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        conn.commit()
        return conn

    def table_info(self, cur: Any, name: str) -> TableInfo | None:
        reg = self.table(name)
        cur.execute("SELECT c.relkind, (SELECT u.relname FROM pg_class u WHERE u.relpersistence = 'u' AND (u.oid = "
                    "c.oid OR u.oid IN (SELECT relid FROM pg_partition_tree(c.oid))) LIMIT 1) FROM pg_class c "
                    "WHERE c.oid = to_regclass(%s)", (reg,))  # its kind; it or a partition of it UNLOGGED
        kind = cur.fetchone()
        if kind is None:
            return None
        if kind[0] not in ("r", "p"):
            raise TargetSchemaError(f"{name!r} is not a table (relkind {kind[0]!r}); publish into a plain table")
        if kind[1] is not None:
            raise TargetSchemaError(f"table {name!r} is UNLOGGED, or its partition {kind[1]!r} is: a crash empties "
                                    "it, and what was published there would be lost while the log says it is live. "
                                    "ALTER TABLE ... SET LOGGED")
        cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                    "to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (reg,))
        cols = dict(cur.fetchall())
        cur.execute("SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                    "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND "
                    "i.indisunique AND i.indpred IS NULL GROUP BY i.indexrelid", (reg,))
        return TableInfo(cols, tuple(frozenset(r[0]) for r in cur.fetchall()))

    def identity(self, cur: Any, name: str) -> tuple[str, str]:
        cur.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.oid = to_regclass(%s)", (self.table(name),))
        row = cur.fetchone()
        if row is None:
            schema, table = split_table(name)
            cur.execute("SELECT current_schema()")
            row = (schema or cur.fetchone()[0], table)
        return row[0], row[1]

    def marker_insert_sql(self, table_sql: str) -> str:
        return (f"INSERT INTO {table_sql} (target, interval_token, epoch, interval_start, interval_end) "
                "VALUES (%s, %s, 0, %s, %s) ON CONFLICT (target, interval_token) DO NOTHING")

    def load(self, cur: Any, table_sql: str, cols: Sequence[str], batches: Iterator[pa.RecordBatch]) -> int:
        raw = CsvStream(csv_chunks(batches))
        try:
            cur.copy_expert(f"COPY {table_sql} ({self.columns_sql(cols)}) FROM STDIN WITH (FORMAT csv)",
                            io.BufferedReader(raw, buffer_size=1 << 20), size=1 << 20)
        except Exception:
            if raw.error is not None:  # our side stopped the COPY: raise why, not psycopg2's wrapper
                raise raw.error from None
            raise
        return cur.rowcount

    def create_stage(self, cur: Any, table_sql: str, at: str) -> str:
        cur.execute(f"CREATE TEMP TABLE {self.quote(STAGE)} (LIKE {table_sql} INCLUDING DEFAULTS) ON COMMIT DROP")
        return self.quote(STAGE)

    def upsert_sql(self, table_sql: str, stage_sql: str, cols: Sequence[str], keys: Sequence[str]) -> str:
        rest = [c for c in cols if c not in keys]
        action = ("DO UPDATE SET " + ", ".join(f"{self.quote(c)} = EXCLUDED.{self.quote(c)}" for c in rest)
                  if rest else "DO NOTHING")
        c = self.columns_sql(cols)
        return f"INSERT INTO {table_sql} ({c}) SELECT {c} FROM {stage_sql} ON CONFLICT ({self.columns_sql(keys)}) {action}"

    def classify(self, exc: BaseException) -> str | None:
        import psycopg2

        if not isinstance(exc, psycopg2.Error):
            return None
        code = exc.pgcode or ""
        if code in ("40P01", "40001", "55P03"):
            return "transient"
        if code[:2] in ("08", "53") or code.startswith("57P") or code in LIMITS or code == "" and \
                isinstance(exc, (psycopg2.OperationalError, psycopg2.InterfaceError)):
            return "unavailable"  # also a statement timeout, a read-only (standby) database, no disk/memory left
        if code in ("42501",):
            return "permission"
        if code[:2] in ("21", "22", "23", "42"):
            return "schema"
        return None


# what to do when every try ends with one of these (retried: each may pass on a later try)
LIMITS = {"57014": "a statement was cancelled (statement_timeout, or pg_cancel_backend): if every try ends so, raise "
                   "the target user's statement_timeout (ALTER ROLE ... SET statement_timeout) or publish smaller "
                   "intervals",
          "25006": "the server takes no writes (a standby, or default_transaction_read_only): point the target at "
                   "the primary"}


def advice(exc: BaseException) -> str | None:
    """What to do about ``exc`` if retrying alone may not end it (PostgreSQL's SQLSTATE; class 53: resources)."""
    code = getattr(exc, "pgcode", None) or ""
    if code[:2] == "53":
        return "the server is out of disk, memory or connections: free them"
    return LIMITS.get(code)


# --------------------------------------------------------------------------------------------- MariaDB/MySQL
_MY_SCHEMA = {1146, 1054, 1366, 1264, 1265, 1292, 1406, 1048, 1062, 1364, 1451, 1452, 1263, 1261, 1262, 1136,
              1050}  # 1050: the table exists (a CREATE that lost the race), as PostgreSQL's class 42
_MY_UNAVAILABLE = {0, 1053, 1927, 2003, 2006, 2013, 2014, 2055}
_MY_PERMISSION = {1044, 1045, 1142, 1143, 1148, 2068, 3948}
_TRANSACTIONAL = {"innodb", "xtradb", "ndbcluster", "ndb", "tokudb", "rocksdb"}


class MySQL(Dialect):
    name = "mysql"
    case_insensitive_columns = True
    quote_char = "`"
    upsert_matches_any_unique = True
    ts_type, text_type, table_options = "datetime(6)", "longtext", " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    # table names are case-sensitive where lower_case_table_names=0 (Linux): `t` and `T` are two tables,
    # so the commit and claims tables compare them byte for byte, not by the default _ci collation
    name_type = "varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    # the name as given, exactly, where the server keeps names case-sensitive (information_schema compares _ci)
    _WHERE = ("TABLE_SCHEMA = COALESCE(%s, DATABASE()) AND TABLE_NAME = %s AND "
              "(@@lower_case_table_names <> 0 OR BINARY TABLE_NAME = %s)")

    def exact_names(self, conn: Any, cur: Any, table: str) -> None:
        """A commit or claims table made before names compared exactly: ALTER its ``target`` to _bin (once;
        two names that differ only in case cannot both be in it yet, so the change never fails on data)."""
        schema, name = split_table(table)
        cur.execute(f"SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE {self._WHERE} AND "
                    "COLUMN_NAME = 'target'", (schema, name, name))
        row = cur.fetchone()
        if row and row[0] and not row[0].endswith("_bin"):
            cur.execute(f"ALTER TABLE {self.table(table)} MODIFY target {self.name_type} NOT NULL")
        conn.commit()

    def connect(self, ep: Endpoint) -> Any:
        import pymysql

        opts: dict[str, Any] = {"connect_timeout": 10, "charset": "utf8mb4", **ep.options}
        opts["connect_timeout"] = int(opts["connect_timeout"])
        # the password as UTF-8 bytes (PyMySQL would encode text as latin-1: a non-ASCII one never matches)
        conn = pymysql.connect(host=ep.host, port=ep.port, user=ep.user or "", password=(ep.password or "").encode(),
                               database=ep.database, local_infile=True, autocommit=False, **opts)
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
                        "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'")
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION sql_notes = 0")  # notes would push a load's warnings off the list it shows
            # no gap locks: a publish locks only the rows of its own interval, not its neighbours'
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.commit()
        return conn


    def identity(self, cur: Any, name: str) -> tuple[str, str]:
        schema, table = split_table(name)
        cur.execute(f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE {self._WHERE}",
                    (schema, table, table))
        row = cur.fetchone()
        if row is None:
            cur.execute("SELECT COALESCE(%s, DATABASE())", (schema,))
            row = (cur.fetchone()[0], table)
        return row[0], row[1]

    def table_info(self, cur: Any, name: str) -> TableInfo | None:
        schema, table = split_table(name)
        where, args = self._WHERE, (schema, table, table)
        cur.execute(f"SELECT ENGINE, TABLE_TYPE FROM information_schema.TABLES WHERE {where}", args)
        row = cur.fetchone()
        if row is None:
            return None
        if row[1] != "BASE TABLE":
            raise TargetSchemaError(f"{name!r} is a {row[1]}, not a table; publish into a plain table")
        if (row[0] or "").lower() not in _TRANSACTIONAL:
            raise TargetSchemaError(f"table {name!r} uses the {row[0]} engine, which has no transactions: the "
                                    f"load and its marker could not commit together. ALTER TABLE ... ENGINE=InnoDB")
        cur.execute(f"SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE {where} "
                    "ORDER BY ORDINAL_POSITION", args)
        cols = {r[0]: r[1] for r in cur.fetchall()}
        cur.execute(f"SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE {where} "
                    "AND NON_UNIQUE = 0", args)
        keys: dict[str, set[str]] = {}
        for index, col in cur.fetchall():
            keys.setdefault(index, set()).add(col)
        return TableInfo(cols, tuple(frozenset(k) for k in keys.values()))

    def marker_insert_sql(self, table_sql: str) -> str:
        return (f"INSERT INTO {table_sql} (target, interval_token, epoch, interval_start, interval_end) "
                "VALUES (%s, %s, 0, %s, %s) ON DUPLICATE KEY UPDATE epoch = epoch")

    def prepare(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        batch = super().prepare(batch)
        arrays = []
        for col in batch.columns:
            t = col.type
            if pa.types.is_boolean(t):
                col = col.cast(pa.int8())  # MySQL reads 1/0, not true/false
            elif pa.types.is_timestamp(t) and t.tz is not None:
                col = pc.cast(col, pa.timestamp(t.unit))  # the UTC wall clock; the session is at +00:00
            arrays.append(col)
        return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)

    def load(self, cur: Any, table_sql: str, cols: Sequence[str], batches: Iterator[pa.RecordBatch]) -> int:
        tmp = tempfile.mkdtemp(prefix="eo-load-")  # private (0700): the CSV holds the interval's rows
        try:
            path = os.path.join(tmp, "rows.csv")
            with open(path, "wb") as f:
                for chunk in csv_chunks(batches, "NULL"):
                    f.write(chunk)
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table_sql} CHARACTER SET utf8mb4 "
                        "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
                        f"LINES TERMINATED BY '\\n' ({self.columns_sql(cols)})", (path,))
            loaded = cur.rowcount
            self.raise_on_warnings(cur, f"LOAD DATA into {table_sql}")
            return loaded
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def raise_on_warnings(cur: Any, what: str) -> None:
        """LOAD DATA LOCAL reports bad values, duplicates and truncation as warnings: make them errors. The
        session records no notes (``sql_notes`` 0, set by :meth:`connect`: a decimal rounded to the column's
        scale is one), so that the first warnings shown, and the count, are warnings."""
        cur.execute("SHOW WARNINGS LIMIT 5")
        bad = [w for w in cur.fetchall() if w[0] in ("Warning", "Error")]
        cur.execute("SELECT @@warning_count")
        if bad or cur.fetchone()[0]:
            shown = "; ".join(f"{w[1]}: {w[2]}" for w in bad) or "warnings the server did not list"
            raise TargetSchemaError(f"{what} rejected rows ({shown})")

    def create_stage(self, cur: Any, table_sql: str, at: str) -> str:
        stage = f"{at}{self.quote(STAGE)}"
        cur.execute(f"CREATE TEMPORARY TABLE {stage} LIKE {table_sql}")
        return stage

    def temp_at(self, cur: Any, table: str) -> str:
        """MariaDB's temporary tables live in a database: the table's own (a connection may name none)."""
        return f"{self.quote(self.identity(cur, table)[0])}."

    def upsert_sql(self, table_sql: str, stage_sql: str, cols: Sequence[str], keys: Sequence[str]) -> str:
        rest = [c for c in cols if c not in keys] or list(keys)[:1]  # nothing to update: a no-op assignment
        c = self.columns_sql(cols)
        updates = ", ".join(f"{self.quote(x)} = VALUES({self.quote(x)})" for x in rest)
        return f"INSERT INTO {table_sql} ({c}) SELECT {c} FROM {stage_sql} ON DUPLICATE KEY UPDATE {updates}"

    def classify(self, exc: BaseException) -> str | None:
        import pymysql

        if not isinstance(exc, pymysql.err.Error):
            return None
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        if code in (1213, 1205):
            return "transient"
        if code in _MY_UNAVAILABLE or isinstance(exc, pymysql.err.InterfaceError):
            return "unavailable"
        if code in _MY_PERMISSION:
            return "permission"
        if code == 1046:  # "No database selected": the connection names none, a table name neither
            return "config"
        if code in _MY_SCHEMA or isinstance(exc, (pymysql.err.DataError, pymysql.err.IntegrityError,
                                                  pymysql.err.ProgrammingError)):
            return "schema"
        if isinstance(exc, pymysql.err.OperationalError):
            return "unavailable"
        return None


DIALECTS: dict[str, Dialect] = {"postgresql": Postgres(), "mysql": MySQL()}
