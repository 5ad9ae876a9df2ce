"""Rows per data file of a job's output, counted by Spark where the files are.

``pre_commit`` records every Parquet file's row count in the manifest (a Delta table's add actions carry
it too). A partition of one file takes it from ``Counts.rows_written``. For a partition of several files
the job counts them here, in ONE Spark action over those files - the executors read the footers, next
to the data and in parallel - instead of the protocol reading each footer from the client afterwards
(one GET per file on S3: 47 s at 10,000 files against the loopback S3 server; docs/BENCHMARKS.md).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote

from ..storage import is_hidden, storage_for

log = logging.getLogger(__name__)


def multi_file_partitions(data_dir: str, partitions: Sequence[str],
                          storage_options: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """``partition -> its Parquet data file names`` for the partitions of more than one such file (one
    listing per partition)."""
    store, root = storage_for(data_dir, **dict(storage_options or {}))
    found: dict[str, list[str]] = {}
    for part in partitions:
        path = store.join(root, part)
        names = sorted(n for n in store.list_names(path) if n.endswith(".parquet") and not is_hidden(n)) \
            if store.exists(path) else []
        if len(names) > 1:
            found[part] = names
    return found


def count_file_rows(spark: Any, data_dir: str, partitions: Sequence[str], *, to_spark: Callable[[str], str],
                    storage_options: Mapping[str, Any] | None = None) -> dict[str, dict[str, int]]:
    """``partition -> {file name -> rows}`` for every partition of ``partitions`` written as several
    Parquet files under ``data_dir`` (``{}`` when there is none: no Spark action then). ``to_spark`` turns
    a storage URL into the path Spark reads. A failure is logged and gives ``{}``: ``pre_commit`` then
    reads the footers itself, as it always could."""
    multi = multi_file_partitions(data_dir, partitions, storage_options)
    if not multi:
        return {}
    from pyspark.sql import functions as F

    store, root = storage_for(data_dir, **dict(storage_options or {}))
    suffix = {f"/{part}/{name}": (part, name) for part, names in multi.items() for name in names}
    paths = [to_spark(store.url(store.join(root, part, name))) for part, name in suffix.values()]
    try:
        counted = (spark.read.parquet(*paths).groupBy(F.col("_metadata.file_path").alias("path")).count()
                   .collect())
    except Exception as exc:  # noqa: BLE001 - an optimisation only: pre_commit reads the footers instead
        log.warning("could not count the rows of %d data files with Spark (%s: %s); pre_commit reads their "
                    "footers instead", len(paths), type(exc).__name__, str(exc).splitlines()[0][:200])
        return {}
    out: dict[str, dict[str, int]] = {part: {name: 0 for name in names} for part, names in multi.items()}
    for row in counted:
        path = unquote(str(row["path"]))
        match = next((key for key in suffix if path.endswith(key)), None)
        if match is None:
            log.warning("Spark counted rows of %s, which is none of the files listed; pre_commit reads the footers", path)
            return {}
        part, name = suffix[match]
        out[part][name] = int(row["count"])
    return out
