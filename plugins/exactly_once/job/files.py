"""Rows per data file of a job's output, counted by Spark where the files are (``_file_rows.json``).

``pre_commit`` records every Parquet file's row count in the manifest (a Delta table's add actions carry
it too). A partition of one file takes it from ``Counts.rows_written``. For a partition of several files
:meth:`JobContext.finish <exactly_once.job.JobContext.finish>` counts them here, in ONE Spark action over
those files - the executors read the footers, next to the data and in parallel - and writes them beside
the counts as :data:`~exactly_once.contracts.FILE_ROWS`, instead of the protocol reading each footer from
the client afterwards (one GET per file on S3: 47 s at 10,000 files against the loopback S3 server).

Nothing here is trusted blindly: ``pre_commit`` takes a partition's counts only when they name exactly its
staged Parquet files and add up to ``rows_written``, and the gate compares every file's rows as it reads
them with the counts the manifest sealed (``rows_written_gap``), so a count that does not describe the bytes fails the gate.
A side file, not a ``Counts`` field: a reader of an older release ignores it (and reads the footers).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote

from ..contracts import FILE_ROWS
from ..storage import Storage, is_hidden, storage_for

log = logging.getLogger(__name__)


def multi_file_partitions(store: Storage, data_dir: str, partitions: Sequence[str]) -> dict[str, list[str]]:
    """``partition -> its Parquet data file names`` for the partitions of more than one such file (one
    recursive listing of ``data_dir``: on S3 one LIST per 1,000 files)."""
    owned, found = set(partitions), {}  # type: ignore[var-annotated]
    for entry in store.walk_files(data_dir):
        part, _, name = entry.rel.rpartition("/")
        if part in owned and name.endswith(".parquet") and not is_hidden(name):
            found.setdefault(part, []).append(name)
    return {p: sorted(names) for p, names in found.items() if len(names) > 1}


def count_file_rows(spark: Any, data_dir: str, partitions: Sequence[str], *, to_spark: Callable[[str], str],
                    storage_options: Mapping[str, Any] | None = None) -> dict[str, dict[str, int]]:
    """``partition -> {file name -> rows}`` for the partitions of ``partitions`` written as several Parquet
    files under ``data_dir`` (``{}`` when there is none: no Spark action then). ``to_spark`` turns a storage
    URL into the path Spark reads. A file Spark reported no rows of is checked by its own footer (0 rows);
    a partition with an unreadable one (an empty file) is left out; a failure is logged and gives ``{}``:
    ``pre_commit`` then reads the footers."""
    store, root = storage_for(data_dir, **dict(storage_options or {}))
    multi = multi_file_partitions(store, root, partitions)
    if not multi:
        return {}
    from pyspark.sql import functions as F

    suffix = {f"/{part}/{name}": (part, name) for part, names in multi.items() for name in names}
    paths = [to_spark(store.url(store.join(root, part, name))) for part, name in suffix.values()]
    try:
        counted = (spark.read.parquet(*paths).groupBy(F.col("_metadata.file_path").alias("path")).count()
                   .collect())
    except Exception as exc:  # noqa: BLE001 - an optimisation only: pre_commit reads the footers instead
        log.warning("could not count the rows of %d data files with Spark (%s: %s); pre_commit reads their "
                    "footers instead", len(paths), type(exc).__name__, str(exc).splitlines()[0][:200])
        return {}
    out: dict[str, dict[str, int]] = {part: {} for part in multi}
    for row in counted:
        path = unquote(str(row["path"]))
        match = next((key for key in suffix if path.endswith(key)), None)
        if match is None:
            log.warning("Spark counted rows of %s, which is none of the files listed; pre_commit reads the footers", path)
            return {}
        part, name = suffix[match]
        out[part][name] = int(row["count"])
    for part, names in multi.items():  # a file of no rows has no group: its own footer says so (or it is bad)
        for name in set(names) - set(out[part]):
            rows = _footer_rows(store, store.join(root, part, name))
            if rows is None:
                out[part].clear()
                break
            out[part][name] = rows
    return {part: files for part, files in out.items() if set(files) == set(multi[part])}


def _footer_rows(store: Storage, path: str) -> int | None:
    """The row count in ``path``'s Parquet footer; None if it is not a readable Parquet file."""
    import pyarrow.parquet as pq

    try:
        with store.open(path, "rb") as f:
            return int(pq.ParquetFile(f).metadata.num_rows)
    except Exception as exc:  # noqa: BLE001 - e.g. an empty file: the partition's footers are read at pre_commit
        log.warning("%s is not a readable Parquet file (%s): its partition's rows are not counted here", path, exc)
        return None


def write_file_rows(store: Storage, staging: str, found: Mapping[str, Mapping[str, int]]) -> None:
    """Write ``found`` as the staging dir's :data:`FILE_ROWS`, atomically (opening a JobContext removed
    the one an earlier attempt left)."""
    store.write_atomic(store.join(staging, FILE_ROWS),
                       json.dumps({p: dict(f) for p, f in found.items()}, sort_keys=True).encode())


def read_file_rows(store: Storage, staging: str) -> dict[str, dict[str, int]] | None:
    """The staging dir's :data:`FILE_ROWS`, or None (absent, or not a ``{partition: {file: int}}`` object:
    then nothing is taken from it)."""
    path = store.join(staging, FILE_ROWS)
    if not store.exists(path):
        return None
    try:
        doc = json.loads(store.read_bytes(path))
    except (ValueError, OSError):
        return None
    if not isinstance(doc, dict) or not all(isinstance(f, dict) and all(
            isinstance(n, str) and "/" not in n and isinstance(c, int) and not isinstance(c, bool) and c >= 0
            for n, c in f.items()) for f in doc.values()):
        return None
    return {str(p): dict(f) for p, f in doc.items()}

