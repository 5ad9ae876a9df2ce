"""Checks of a staged version against a Delta table's schema that the :mod:`Delta target
<exactly_once.targets.delta>` runs before the decision (and again in the publish): each raises
TargetSchemaError with nothing committed to the table."""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TargetSchemaError
from ..ids import TxnRef
from .base import StagedVersion


def clashes(table: pa.Schema, staged: pa.Schema | None, txn: TxnRef, where: str) -> None:
    """TargetSchemaError if a staged column's type differs from the table's, or if its name differs from a
    table column's only in case: Delta column names are case-insensitive, so it is neither that column
    (a writer matches names exactly) nor a new one beside it (delta-rs: "Duplicate field name")."""
    by_lower = {n.lower(): n for n in table.names}
    case = [f"{f.name!r} (the table has {by_lower[f.name.lower()]!r})" for f in staged or ()
            if f.name not in table.names and f.name.lower() in by_lower]
    if case:
        raise TargetSchemaError(
            f"{txn.name} does not fit {where}: staged column(s) {', '.join(case)} differ from the table's only in "
            "case; Delta column names are case-insensitive, so such a column can be neither added beside the "
            "table's nor written into it. Nothing was published; rename the column in the job to the table's "
            "spelling (e.g. withColumnRenamed), then run the interval again")
    clash = [f"{f.name}: table {table.field(f.name).type}, staged {f.type}" for f in staged or ()
             if f.name in table.names and table.field(f.name).type != f.type]
    if clash:
        raise TargetSchemaError(f"{txn.name} does not fit {where}: {'; '.join(clash)}. Nothing "
                                "was published; cast the columns in the job, or write a new table")


def check_not_null(dt: Any, staged: StagedVersion, txn: TxnRef, where: str) -> None:
    """TargetSchemaError if the table declares a column NOT NULL (another engine made it) and a staged
    file lacks it or holds nulls in it (Parquet footer statistics; a file without them is refused too):
    a commit of add actions is not checked against it. Reads footers only for tables with such columns."""
    keys = dt.metadata().partition_columns
    required = [f.name for f in dt.schema().fields if not f.nullable and f.name not in keys]
    bad: list[str] = []
    for part, f in staged.files() if required else ():
        with staged.open(part, f.name) as fh:
            meta = pq.ParquetFile(fh).metadata
        cols = {meta.row_group(0).column(j).path_in_schema: j for j in range(meta.num_columns)} \
            if meta.num_row_groups else {}
        for name in required:
            j = cols.get(name)
            stats = [meta.row_group(g).column(j).statistics for g in range(meta.num_row_groups)] \
                if j is not None else []
            if meta.num_rows and (j is None or any(st is None or not st.has_null_count or st.null_count
                                                   for st in stats)):
                bad.append(f"{part}/{f.name}: {name}")
    if bad:
        raise TargetSchemaError(f"{txn.name} does not fit {where}: the table declares NOT NULL "
                                f"columns that staged files lack or hold nulls in ({'; '.join(bad[:5])}). "
                                "Nothing was published; fill the columns in the job, or drop NOT NULL")
