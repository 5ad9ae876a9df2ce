"""Section ``dbload``: the database target's load vs a naive ``executemany`` loader vs the database's own bulk
path, on PostgreSQL and MariaDB/MySQL (loopback servers), same rows for all three.

* ``ours``  - :class:`exactly_once.targets.DatabaseTarget` (replace mode) publishing the staged Parquet
  (8 files, like a Spark job's output): marker lock, delete of the interval, COPY / LOAD DATA, marker, COMMIT;
* ``bulk``  - the database's own bulk path on a CSV of the same rows prepared beforehand (untimed):
  ``COPY ... FROM STDIN (FORMAT csv)`` / ``LOAD DATA LOCAL INFILE``, then COMMIT - what ``psql \\copy`` or
  ``mysqlimport --local`` do;
* ``naive`` - read the Parquet, ``cursor.executemany("INSERT ... VALUES (%s, ...)", rows)``, COMMIT: the
  at-least-once loader most pipelines start with.

Every loader opens its own connection (the fixed cost a loader process pays) and commits once.

Each repetition truncates the table (untimed) and runs the three in a rotating order; the table's
content after each variant is checked equal (row count and a sha256 over the sorted rows).
"""
from __future__ import annotations

import hashlib
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from bench.common import clock, loadavg, say, stats

from exactly_once import Interval, TxnRef
from exactly_once.targets import DatabaseTarget, StagedFile, StagedVersion

ADMIN = {"postgresql": "postgresql://postgres@127.0.0.1:5432/postgres", "mysql": "mysql://root@127.0.0.1:3306/test"}
VARIANTS = ("ours", "bulk", "naive")
COLS = ("dt", "app_id", "pv", "uv", "cumulative_pv")
DAY = "2030-01-01"
FILES = 8


def _rows(n: int) -> pa.Table:
    import numpy as np

    rng = np.random.default_rng(n)
    pv = rng.integers(0, 1_000_000, n)
    return pa.table({"app_id": pa.array([f"app_{i:08d}" for i in range(n)]), "pv": pa.array(pv),
                     "uv": pa.array(pv // 3), "cumulative_pv": pa.array(pv * 7)})


def _stage(base: Path, table: pa.Table) -> StagedVersion:
    part = f"dt={DAY}"
    d = base / part
    d.mkdir(parents=True, exist_ok=True)
    files = []
    step = -(-table.num_rows // FILES)
    for i in range(FILES):
        chunk = table.slice(i * step, step)
        pq.write_table(chunk, d / f"part-{i:05d}.parquet")
        files.append(StagedFile(f"part-{i:05d}.parquet", (d / f"part-{i:05d}.parquet").stat().st_size, chunk.num_rows))
    return StagedVersion({part: tuple(files)}, lambda p, n: open(base / p / n, "rb"))


class _Db:
    """A scratch database on one server, with the three loaders."""

    def __init__(self, kind: str, work: Path) -> None:
        self.kind, self.work = kind, work
        self.name = f"eo_bench_{uuid.uuid4().hex[:8]}"
        self._admin(f'CREATE DATABASE {self.q(self.name)}')
        self.url = ADMIN[kind].rsplit("/", 1)[0] + "/" + self.name
        self.conn = self._connect(self.name)
        self.run(f"CREATE TABLE app_pv (dt date NOT NULL, app_id varchar(64) NOT NULL, pv bigint NOT NULL, "
                 f"uv bigint NOT NULL, cumulative_pv bigint NOT NULL, PRIMARY KEY (dt, app_id))")
        self.conn.commit()

    def q(self, ident: str) -> str:
        return f'"{ident}"' if self.kind == "postgresql" else f"`{ident}`"

    def _connect(self, db: str) -> Any:
        if self.kind == "postgresql":
            import psycopg2

            return psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=db)
        import pymysql

        return pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", database=db,
                               local_infile=True, autocommit=False)

    def _admin(self, sql: str) -> None:
        conn = self._connect("postgres" if self.kind == "postgresql" else "test")
        if self.kind == "postgresql":
            conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql)
        conn.commit()
        conn.close()

    def run(self, sql: str, params: Any = None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def reset(self) -> None:
        self.run("TRUNCATE TABLE app_pv")
        self.run("DELETE FROM _eo_commits") if self.run(self._exists_sql(), ("_eo_commits",)) else None
        self.conn.commit()

    def _exists_sql(self) -> str:
        if self.kind == "postgresql":
            return "SELECT 1 FROM pg_tables WHERE tablename = %s"
        return "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"

    def digest(self) -> tuple[int, str]:
        rows = self.run("SELECT dt, app_id, pv, uv, cumulative_pv FROM app_pv ORDER BY app_id")
        self.conn.commit()
        h = hashlib.sha256()
        for r in rows:
            h.update(("|".join(map(str, r)) + "\n").encode())
        return len(rows), h.hexdigest()

    # ------------------------------------------------------------------ the three loaders
    # Each opens its own connection, as a loader process (or the target) does: the same fixed cost for all.
    def bulk(self, csv_path: Path) -> None:
        cols = ", ".join(COLS)
        conn = self._connect(self.name)
        with conn.cursor() as cur:
            if self.kind == "postgresql":
                with open(csv_path, "rb") as f:
                    cur.copy_expert(f"COPY app_pv ({cols}) FROM STDIN WITH (FORMAT csv)", f, size=1 << 20)
            else:
                cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE app_pv CHARACTER SET utf8mb4 FIELDS TERMINATED "
                            f"BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' LINES TERMINATED BY '\\n' ({cols})",
                            (str(csv_path),))
        conn.commit()
        conn.close()

    def naive(self, staged: StagedVersion) -> None:
        sql = f"INSERT INTO app_pv ({', '.join(COLS)}) VALUES (%s, %s, %s, %s, %s)"
        conn = self._connect(self.name)
        with conn.cursor() as cur:
            for part, f in staged.files():
                with staged.open(part, f.name) as fh:
                    t = pq.read_table(fh)
                rows = [(DAY, *r) for r in zip(*(t.column(c).to_pylist() for c in COLS[1:]))]
                cur.executemany(sql, rows)
        conn.commit()
        conn.close()

    def close(self) -> None:
        self.conn.close()
        self._admin(f"DROP DATABASE IF EXISTS {self.q(self.name)}")


def _csv(path: Path, table: pa.Table) -> Path:
    t = table.add_column(0, "dt", pa.array([DAY] * table.num_rows))
    pacsv.write_csv(t.select(list(COLS)), path, pacsv.WriteOptions(include_header=False, null_string="NULL"))
    return path


def _one_size(db: _Db, n: int, reps: int, warmup: int, tmp: Path, epoch: list[int]) -> dict[str, Any]:
    table = _rows(n)
    staged = _stage(tmp / f"staged-{n}", table)
    csv_path = _csv(tmp / f"rows-{n}.csv", table)
    target = DatabaseTarget("app_pv", url=db.url)
    iv = Interval.daily(DAY)

    def ours() -> None:
        epoch[0] += 1
        assert target.publish(TxnRef("bench", "app_pv", iv, epoch[0]), staged) == {f"dt={DAY}": "published"}

    run: dict[str, Callable[[], None]] = {"ours": ours, "bulk": lambda: db.bulk(csv_path),
                                          "naive": lambda: db.naive(staged)}
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    digests: dict[str, tuple[int, str]] = {}
    for _ in range(warmup):
        for v in VARIANTS:
            db.reset()
            run[v]()
    for rep in range(reps):
        order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
        for v in order:
            db.reset()
            samples[v].append(clock(run[v])[0])
            if rep == reps - 1:
                digests[v] = db.digest()
    bulk_med = stats(samples["bulk"])["median"]
    out: dict[str, Any] = {"variants": {}, "loadavg": loadavg(), "csv_bytes": csv_path.stat().st_size}
    for v in VARIANTS:
        s = stats(samples[v])
        out["variants"][v] = {"seconds": s, "rows_per_s": round(n / s["median"]), "ratio_to_bulk": round(s["median"] / bulk_med, 3)}
    out["outputs_equal"] = len(set(digests.values())) == 1 and digests["bulk"][0] == n
    out["digest"] = {v: list(d) for v, d in digests.items()}
    line = ", ".join(f"{v} {out['variants'][v]['rows_per_s']:,}/s ({out['variants'][v]['ratio_to_bulk']:.2f}x)" for v in VARIANTS)
    say(f"  {db.kind} {n:>9,} rows: {line}; equal={out['outputs_equal']}")
    return out


def db_load(work: Path, sizes: list[int], reps: int, warmup: int, kinds: tuple[str, ...] = ("postgresql", "mysql")
            ) -> dict[str, Any]:
    """The dbload section: per database, per size, the three loaders' medians, rows/s and ratio to bulk."""
    out: dict[str, Any] = {"sizes": sizes, "reps": reps, "files": FILES, "databases": {}}
    say(f"db load: {sizes} rows on {kinds}")
    tmp = Path(tempfile.mkdtemp(prefix="dbload-", dir=work))
    try:
        for kind in kinds:
            db = _Db(kind, tmp)
            epoch = [0]
            try:
                version = db.run("SELECT version()")[0][0]
                db.conn.commit()
                res = {"server": version, "sizes": {}}
                for i, n in enumerate(sizes):
                    res["sizes"][str(n)] = _one_size(db, n, reps, warmup if i == 0 else 0, tmp, epoch)
                out["databases"][kind] = res
            finally:
                db.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
