"""Helpers for the publish-target tests: staged versions on local files, fresh databases, row readers."""
from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from exactly_once import Interval, TxnRef
from exactly_once.targets import StagedFile, StagedVersion

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
MY_ADMIN = "mysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


def reachable(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def txn(day: str = "2026-01-01", epoch: int = 1, pipeline: str = "pv_to_db", sink: str = "app_pv") -> TxnRef:
    return TxnRef(pipeline, sink, Interval.daily(day), epoch)


def stage(root: Path, parts: dict[str, list[pa.Table | list[dict[str, Any]]]],
          schema: pa.Schema | None = None) -> StagedVersion:
    """Write each partition's tables (one Parquet file each) under a fresh dir below ``root``; the version
    reading them (its directory is ``version.root``, for a child process: :func:`staged_from_dir`)."""
    base = Path(root) / uuid.uuid4().hex
    for part, tables in parts.items():
        d = base / part
        d.mkdir(parents=True, exist_ok=True)
        for i, t in enumerate(tables):
            table = t if isinstance(t, pa.Table) else pa.Table.from_pylist(t, schema=schema)
            pq.write_table(table, d / f"part-{i:05d}.parquet")
    return staged_from_dir(base, empty=[p for p, tables in parts.items() if not tables])


def staged_from_dir(base: Path | str, empty: list[str] = ()) -> StagedVersion:
    """The staged version of the Parquet files below ``base`` (partition = their directory, relative)."""
    base = Path(base)
    files: dict[str, list[StagedFile]] = {p: [] for p in empty}
    for path in sorted(base.rglob("*.parquet")):
        part = path.parent.relative_to(base).as_posix()
        files.setdefault(part, []).append(StagedFile(path.name, path.stat().st_size,
                                                     pq.ParquetFile(path).metadata.num_rows))
    version = StagedVersion({p: tuple(fs) for p, fs in files.items()}, lambda p, n: open(base / p / n, "rb"))
    object.__setattr__(version, "root", str(base))  # test-only attribute: where a child finds the files
    return version


def gone(version: StagedVersion) -> StagedVersion:
    """The same manifest whose files no longer exist (cleaned up after an earlier publish)."""
    def missing(partition: str, name: str) -> Any:
        raise FileNotFoundError(f"{partition}/{name} was cleaned up")

    return StagedVersion(version.partitions, missing)


def pv_rows(prefix: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` rows shaped like app_pv (the demo's table is only test data here)."""
    return [{"app_id": f"{prefix}{i:05d}", "pv": i, "uv": i % 7, "cumulative_pv": 10 * i}
            for i in range(start, start + n)]


def split(rows: list, k: int) -> list[list]:
    return [rows[i::k] for i in range(k)]


def pg_connect(dbname: str) -> Any:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=dbname, connect_timeout=5)
    conn.autocommit = True
    return conn


def my_connect(db: str | None) -> Any:
    import pymysql

    return pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", database=db, autocommit=True,
                           connect_timeout=5, local_infile=True)


def _admin(kind: str, sql: str) -> None:
    c = pg_connect("postgres") if kind == "postgresql" else my_connect(None)
    with c.cursor() as cur:
        cur.execute(sql)
    c.close()


def fresh_database(kind: str) -> Iterator[str]:
    """Create a uniquely named database, yield its URL, drop it afterwards (with any session still on it)."""
    name = f"eo_t_{uuid.uuid4().hex[:10]}"
    pg = kind == "postgresql"
    _admin(kind, f'CREATE DATABASE "{name}"' if pg else f"CREATE DATABASE `{name}`")
    try:
        yield (PG_ADMIN if pg else MY_ADMIN).rsplit("/", 1)[0] + f"/{name}"
    finally:
        _admin(kind, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' if pg else f"DROP DATABASE IF EXISTS `{name}`")


def db_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


class Db:
    """A plain admin session on a test database (autocommit), for setup and for asserting on rows."""

    def __init__(self, url: str) -> None:
        self.url, self.kind = url, "postgresql" if url.startswith("postgresql") else "mysql"
        self.conn = pg_connect(db_name(url)) if self.kind == "postgresql" else my_connect(db_name(url))

    def q(self, ident: str) -> str:
        return f'"{ident}"' if self.kind == "postgresql" else f"`{ident}`"

    def run(self, sql: str, params: Any = None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def rows(self, table: str, cols: str = "*", order: str = "1") -> list[tuple]:
        return self.run(f"SELECT {cols} FROM {self.q(table)} ORDER BY {order}")

    def count(self, table: str) -> int:
        return self.run(f"SELECT count(*) FROM {self.q(table)}")[0][0]

    def backend_pid(self) -> int:
        return self.run("SELECT pg_backend_pid()" if self.kind == "postgresql" else "SELECT CONNECTION_ID()")[0][0]

    def close(self) -> None:
        self.conn.close()


def app_pv_ddl(kind: str, table: str = "app_pv", unique: bool = True) -> str:
    dt = "date"
    key = ", PRIMARY KEY (dt, app_id)" if unique else ""
    engine = " ENGINE=InnoDB" if kind == "mysql" else ""
    q = (lambda s: f'"{s}"') if kind == "postgresql" else (lambda s: f"`{s}`")
    return (f"CREATE TABLE {q(table)} (dt {dt} NOT NULL, app_id varchar(64) NOT NULL, pv bigint NOT NULL, "
            f"uv bigint NOT NULL, cumulative_pv bigint NOT NULL{key}){engine}")


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}
