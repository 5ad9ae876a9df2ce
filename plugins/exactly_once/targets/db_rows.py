"""Checks of the staged rows that the :mod:`database target <exactly_once.targets.database>` runs as it
loads them (in its dry run before the decision, and again in the publish)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TargetSchemaError
from ..ids import TxnRef


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
