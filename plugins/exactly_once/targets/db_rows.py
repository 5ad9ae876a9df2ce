"""Checks of the staged rows that the :mod:`database target <exactly_once.targets.database>` runs as it
loads them (in its dry run before the decision, and again in the publish)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import TargetSchemaError
from ..ids import TxnRef
from .base import StagedVersion, partition_values

if TYPE_CHECKING:
    from .sql_dialects import Dialect, TableInfo


def refuse_outside(batch: pa.RecordBatch, check: tuple[str, TxnRef, list[bool]], column: str | None) -> None:
    """TargetSchemaError if a staged row's interval ``column`` (in the batch: ``check[0]``) is outside the
    interval or NULL: a reprocess deletes only the interval's rows, so it would stay and be loaded again
    beside its copy. Checked on our rows before they are loaded (another writer's rows cannot mask one);
    a column that is not a date/time sets ``check[2][0]`` (the database compares, after the load)."""
    col, txn, unchecked = check
    values = batch.column(col)
    if not (pa.types.is_timestamp(values.type) or pa.types.is_date(values.type)):
        unchecked[0] = True
        return
    ts = values.cast(pa.timestamp("us", tz="UTC"))
    iv = txn.interval
    inside = pc.and_(pc.greater_equal(ts, pa.scalar(iv.start, ts.type)), pc.less(ts, pa.scalar(iv.end, ts.type)))
    outside = batch.num_rows - (pc.sum(pc.fill_null(inside, False)).as_py() or 0)
    if outside:
        raise TargetSchemaError(
            f"{txn.name}: {outside} staged row(s) have {column} outside the interval "
            f"[{iv.start.isoformat()}, {iv.end.isoformat()}) or NULL; a reprocess replaces only the "
            "interval's rows, so they would double. Filter them in the job")


def same_partition_value(values: pa.Array, wanted: str, where: str, col: str) -> None:
    """TargetSchemaError unless every value of a staged file's own partition column ``col`` is its
    directory's ``wanted`` (as text, or as the column's type: ``hour=03`` and 3). A row whose value
    differs would be loaded with it, and a reprocess - deleting the partition's rows by the directory's
    value - would never remove it: it would double at every publish."""
    text = pa.scalar(wanted, pa.string())
    try:
        same = pc.equal(values.cast(pa.string()), text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        same = pa.array([False] * len(values))
    try:
        same = pc.or_(same, pc.equal(values, text.cast(values.type)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    bad = len(values) - (pc.sum(pc.fill_null(same, False)).as_py() or 0)
    if bad:
        other = pc.filter(values, pc.invert(pc.fill_null(same, False)))[0].as_py()
        raise TargetSchemaError(
            f"staged file {where} carries its own partition column {col!r}: {bad} row(s) with {other!r} and "
            f"not its directory's {wanted!r}. A reprocess replaces the partition's rows by the directory's "
            "value, so they would stay and double; drop the column from the job's output (the target adds "
            "it from the directory) or write each row under its own partition")


def refuse_null_keys(batch: pa.RecordBatch, keys: Sequence[str], where: str) -> None:
    """Upsert: TargetSchemaError if a staged row has NULL in a key column (``keys``: the key columns the
    staged file carries). A UNIQUE index treats NULLs as distinct, so such a row never matches the row a
    previous publish loaded: every reprocess would insert it again beside its copy."""
    for col in keys:
        nulls = batch.column(col).null_count
        if nulls:
            raise TargetSchemaError(
                f"staged file {where}: {nulls} row(s) with NULL in key column {col!r}. A unique key treats NULLs "
                "as distinct, so the upsert would insert them again at every reprocess (doubles); give them a "
                "value in the job (e.g. coalesce to a sentinel) or filter them out")


def refuse_other_unique(d: "Dialect", cur: Any, info: "TableInfo", table: str, keys: Sequence[str],
                        cols: Sequence[str]) -> None:
    """Upsert on MySQL/MariaDB: TargetSchemaError if ``table`` has a UNIQUE index other than the key (or
    one containing it) that a loaded row can collide on. ``ON DUPLICATE KEY UPDATE`` updates the row
    matching ANY unique index, so a staged row with a new key whose other unique value an existing row
    holds would overwrite that row and be lost, silently. An index is harmless when one of its columns is
    not loaded (``cols``) and gets a fresh value (AUTO_INCREMENT: a surrogate primary key) or NULL (a
    nullable column without default; NULLs are distinct); a DEFAULT, the implicit one of a NOT NULL column,
    or a generated column may collide.
    (PostgreSQL's ``ON CONFLICT (key)`` raises on another index's conflict instead: the dry run refuses it.)"""
    if not d.upsert_matches_any_unique:
        return
    others = [k for k in info.unique_keys if not k >= frozenset(keys)]
    if others:
        cur.execute("SELECT COLUMN_NAME, COLUMN_DEFAULT, EXTRA, IS_NULLABLE FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", d.identity(cur, table))
        fresh = {name.lower() for name, default, extra, nullable in cur.fetchall()
                 if "auto_increment" in (extra or "").lower() or nullable == "YES" and (
                     default is None or str(default).upper() == "NULL") and "generated" not in (extra or "").lower()}
        loaded = {c.lower() for c in cols}
        others = [k for k in others if not any(c.lower() not in loaded and c.lower() in fresh for c in k)]
    if others:
        raise TargetSchemaError(
            f"upsert into {table}: the table has UNIQUE index(es) on {sorted(sorted(k) for k in others)} besides "
            f"the key {list(keys)}, over columns the load fills; MariaDB/MySQL's ON DUPLICATE KEY UPDATE would "
            "update the row matching any of them, so a staged row could silently overwrite another row and be "
            "lost. Drop those indexes (ALTER TABLE ... DROP INDEX), make the key the only unique one, or "
            "publish with mode='replace'")


def refuse_one_column_twice(staged: list[str], cols: list[str], table: str) -> None:
    """TargetSchemaError if two ``staged`` columns resolve to one of ``table``'s columns ``cols`` (MariaDB's
    names ignore case: ``v`` and ``V``); LOAD DATA (v, v) would keep the last one's value without a word."""
    twice = sorted({c for c in cols if cols.count(c) > 1})
    if twice:
        named = [n for n, c in zip(staged, cols) if c in twice]
        raise TargetSchemaError(f"staged columns {named} are one column {twice} of table {table} (its column "
                                "names ignore case): one of them would be lost; rename it in the job")


def staged_columns(staged: StagedVersion, d: "Dialect", partition_columns: bool) -> tuple[list[str], list[str]]:
    """(columns of the staged files, partition keys to add as columns), from the first file. A key the
    files carry themselves - by the dialect's rule for names: ``DT`` is ``dt`` on MariaDB - is not added
    again: the load checks the files' values against their directory instead (:func:`same_partition_value`)."""
    files = list(staged.files())
    if not files:
        return [], []
    part, first = files[0]
    with staged.open(part, first.name) as fh:
        file_cols = list(pq.ParquetFile(fh).schema_arrow.names)
    keys = list(partition_values(part)) if partition_columns else []
    for p in staged.partitions:
        if partition_columns and list(partition_values(p)) != keys:
            raise TargetSchemaError(f"partitions {part!r} and {p!r} have different keys")
    return file_cols, [k for k in keys if not any(d.same_name(c, k) for c in file_cols)]


def one_schema(names: Sequence[str], file_cols: Sequence[str], where: str) -> None:
    """TargetSchemaError unless a staged file's columns ``names`` are the first file's ``file_cols``: the
    load takes the first file's columns, so another file's own columns would be dropped without a word."""
    missing = sorted(set(file_cols) - set(names))
    extra = sorted(set(names) - set(file_cols))
    if missing or extra:
        raise TargetSchemaError(f"staged file {where} " + (
            f"lacks column(s) {missing} that other staged files have" if missing else
            f"has column(s) {extra} that other staged files lack") + "; the job must write one schema")
