"""The job-side API: what a write job uses to talk to the protocol (see ``docs/JOB_API.md``).

A PySpark script submitted by the pipeline's ``write`` task::

    from exactly_once.contracts import Counts
    from exactly_once.job import JobContext, run_job

    def compute(ctx: JobContext) -> Counts:
        df = ctx.read()                                   # the frozen inputs, checked unchanged
        out = df.groupBy("carrier").count()
        out.write.mode("overwrite").parquet(ctx.output_dir(ctx.partitions[0]))
        return Counts(records_in=df.count(), records_out=df.count(),
                      rows_written={ctx.partitions[0]: out.count()})

    if __name__ == "__main__":
        raise SystemExit(run_job(compute))

or a function on any SparkSession (including Spark Connect): ``ctx = JobContext.open(spark, spec)``,
compute, ``ctx.finish(counts)``. The context gives the spec (:class:`~exactly_once.contracts.JobSpec`),
the frozen inputs as Spark paths, the output dir of each owned partition, the previous and the new
state dir, the quarantine dir, and writes the counts last and atomically. Everything it hands out is
under the transaction's staging dir; ``s3://`` becomes ``s3a://`` and glob characters are escaped.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from functools import reduce
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import unquote

from .. import advice
from ..contracts import COUNTS, FILE_ROWS, QUARANTINE, STATE, BatchSpec, Counts, FrozenInput, JobSpec, SourceInputs
from ..errors import ContractError, StorageError
from ..storage import storage_for
from .options import job_storage_options

log = logging.getLogger(__name__)
_GLOB_CHARS = "\\*?[]{}"


def spark_path(path: str) -> str:
    """The URL Spark should use for ``path``: ``file://`` for local paths, ``s3a://`` for ``s3://``.

    Hadoop glob metacharacters are escaped, so a file literally named ``a[1].csv`` is read as such.
    """
    if path.startswith("s3://"):
        url = "s3a://" + path[len("s3://"):]
    elif "://" in path:
        url = path
    else:
        url = "file://" + os.path.abspath(path)
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in url)


def check_frozen(inputs: Sequence[FrozenInput], storage_options: Mapping[str, Any] | None = None) -> None:
    """Refuse (StorageError) unless every input is still the file that was frozen: its size, and its
    etag (S3) or mtime (local files), when both are known."""
    for item in inputs:
        store, key = storage_for(item.path, **dict(storage_options or {}))
        try:
            meta = store.file_meta(key)
        except FileNotFoundError:
            changed: str | None = f"size {item.size} -> missing"
        else:
            changed = item.changed_from(FrozenInput(item.path, item.rel, meta["size"], meta.get("mtime"),
                                                    meta.get("etag")))
        if changed:
            raise StorageError(f"source {item.path} changed since it was frozen ({changed}); replay is impossible: "
                               "reprocess the interval to read it as it is now: "
                               + advice.reprocess("<dag_id>", "<table-url>", "<interval start>"))


def _child(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


class JobContext:
    """One write job's view of its transaction. Opening it deletes a stale counts file (so a job that
    dies part-way never leaves a complete-looking staging dir), checks every frozen input, and clears
    the Spark cache: it belongs to the SparkContext, shared by every session of a long-lived server
    (Spark Connect), so an earlier attempt's ``persist()`` of the same files, never unpersisted, would
    otherwise hand this attempt the bytes that attempt read, not the frozen ones."""

    def __init__(self, spark: Any, spec: JobSpec, *, args: Sequence[str] = (),
                 storage_options: Mapping[str, Any] | None = None, prev_state: str | None | bool = True,
                 clear_cache: bool = True) -> None:
        self.spark = spark
        self.spec = spec
        self.args = list(args)
        self._options = dict(storage_options or {})
        # the predecessor's state: the spec's (True), another location (a batch), or False: chained in a
        # batch - the job computes it from the interval before this one
        self._prev = spec.prev_state if prev_state is True else prev_state
        self._store, self._staging = storage_for(spec.staging_dir, **self._options)
        self._store.remove_tree(self._store.join(self._staging, COUNTS))
        self._store.remove_tree(self._store.join(self._staging, FILE_ROWS))  # an earlier attempt's
        for source in spec.sources:
            check_frozen(source.inputs, self._options)
        if spark is not None and clear_cache:
            spark.catalog.clearCache()  # the server-wide cache: no attempt reads another one's cached data

    @classmethod
    def open(cls, spark: Any, spec: JobSpec | Mapping[str, Any] | str, **kwargs: Any) -> "JobContext":
        """A context for ``spec``: a JobSpec, its dict, or the URL/path of its JSON (``--spec``)."""
        if isinstance(spec, str):
            store, key = storage_for(spec, **dict(kwargs.get("storage_options") or {}))
            spec = JobSpec.from_json(store.read_bytes(key))
        elif not isinstance(spec, JobSpec):
            spec = JobSpec.from_dict(spec)
        return cls(spark, spec, **kwargs)

    @property
    def storage_options(self) -> dict[str, Any]:
        """The storage connection's options (s3fs) for a job's own reads/writes outside Spark; never log them."""
        return dict(self._options)

    # ------------------------------------------------------------------ inputs
    def source(self, name: str | None = None) -> SourceInputs:
        """The source ``name`` (the only one when None): format, options, frozen inputs."""
        return self.spec.source(name)

    def inputs(self, source: str | None = None) -> list[str]:
        """The frozen input files of ``source`` as Spark paths (escaped, ``s3a://``)."""
        return [spark_path(i.path) for i in self.source(source).inputs]

    def read(self, source: str | None = None, *, schema: Any = None) -> Any:
        """The frozen inputs of ``source`` read with its declared format and options. An interval
        without input files gives an empty DataFrame of ``schema`` (required then)."""
        src = self.source(source)
        if not src.inputs:
            if schema is None:
                raise ContractError(f"source {src.name} has no input files in this interval; pass schema= "
                                    "so that the job can read it as an empty DataFrame")
            return self.spark.createDataFrame([], schema)
        reader = self.spark.read.format(src.format).options(**dict(src.options))
        if schema is not None:
            reader = reader.schema(schema)
        return reader.load(self.inputs(src.name))

    def input_stats(self) -> tuple[int, int]:
        """(files, bytes) over every source's frozen inputs - for ``Counts.input_files/input_bytes``."""
        items = [i for s in self.spec.sources for i in s.inputs]
        return len(items), sum(i.size for i in items)

    # ------------------------------------------------------------------ outputs
    @property
    def partitions(self) -> tuple[str, ...]:
        """The partitions this interval owns; write each under :meth:`output_dir` and nowhere else."""
        return self.spec.partitions

    def output_dir(self, partition: str) -> str:
        """The Spark path to write ``partition`` to (refused for a partition the interval does not own)."""
        if partition not in self.spec.partitions:
            raise ContractError(f"partition {partition!r} is not owned by this interval (it owns "
                                f"{list(self.spec.partitions)})")
        return spark_path(_child(self.spec.data_dir, partition))

    @property
    def prev_state_dir(self) -> str | None:
        """The Spark path of the committed predecessor's state, or None (first interval, stateless)."""
        if self._prev is False:
            raise ContractError(f"{self.spec.txn} is chained in a batch: its previous state is the new state the "
                                "job computes for the interval before it (BatchContext.chained)")
        return spark_path(self._prev) if self._prev else None

    def read_prev_state(self, schema: Any) -> Any:
        """The predecessor's state as a DataFrame of ``schema`` (empty for the first interval)."""
        if self.prev_state_dir is None:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(self.prev_state_dir)

    @property
    def state_dir(self) -> str:
        """Where to write the new state (Parquet); it becomes the next interval's ``prev_state_dir``."""
        return spark_path(_child(self.spec.staging_dir, STATE))

    @property
    def quarantine_dir(self) -> str:
        """Where to write rejected input records (kept with the checkpoint, never published)."""
        return spark_path(_child(self.spec.staging_dir, QUARANTINE))

    def clear_quarantine(self) -> None:
        """Remove a quarantine an earlier attempt of this transaction left (when this one rejects nothing)."""
        self._store.remove_tree(self._store.join(self._staging, QUARANTINE))

    def finish(self, counts: Counts, *, count_files: bool = True) -> Counts:
        """Write ``counts`` as the job's last act, atomically: its presence means the job finished. First
        the rows of each file of a partition written as several Parquet files are counted and written beside
        them (:data:`~exactly_once.contracts.FILE_ROWS`, one Spark action; none for partitions of one file),
        so that ``pre_commit`` reads no footer. ``count_files=False``: the job wrote one file per partition."""
        if not isinstance(counts, Counts):
            raise ContractError(f"finish() takes exactly_once.contracts.Counts, not {type(counts).__name__}")
        unknown = set(counts.rows_written) - set(self.spec.partitions)
        if unknown:
            raise ContractError(f"rows_written names partitions this interval does not own: {sorted(unknown)}")
        if count_files and self.spark is not None and counts.rows_written:
            from .files import count_file_rows, write_file_rows

            found = count_file_rows(self.spark, self.spec.data_dir, sorted(counts.rows_written), to_spark=spark_path,
                                    storage_options=self._options)
            if found:
                write_file_rows(self._store, self._staging, found)
        self._store.write_atomic(self._store.join(self._staging, COUNTS), counts.to_json())
        return counts


class BatchContext:
    """One batched write job's view of its intervals (``--batch <url>``, :class:`BatchSpec`): one
    :class:`JobContext` per interval (``jobs``, in interval order), each its own transaction.

    The job computes every interval at once: :meth:`read` (or :meth:`tag` on its own read of
    :meth:`inputs`) gives the union of all frozen inputs with column :data:`INTERVAL` (the position of
    the row's interval in ``jobs``) and :data:`FILE` (the input file, as in the spec); :meth:`write`
    writes a frame with an :data:`INTERVAL` column in ONE Spark write and hands each interval its own
    files (data per owned partition, state, quarantine); :meth:`finish` writes each interval's counts
    last. A stateful batch chains: entry ``i`` with :meth:`chained` ``(i)`` starts from the new state
    the job computes for entry ``i - 1``; a chain's first entry from :meth:`read_prev_states`."""

    INTERVAL = "eo_interval"
    FILE = "eo_file"
    PARTITION = "eo_partition"
    KINDS = ("data", "state", "quarantine")

    def __init__(self, spark: Any, batch: BatchSpec, *, args: Sequence[str] = (),
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.spark, self.batch, self.args = spark, batch, list(args)
        self._options = dict(storage_options or {})
        self.jobs: list[JobContext] = []
        for entry in batch.entries:
            store, key = storage_for(entry.spec, **self._options)
            spec = JobSpec.from_json(store.read_bytes(key))
            if (spec.pipeline, spec.sink) != (batch.pipeline, batch.sink):
                raise ContractError(f"batch {batch.batch_id}: {spec.txn} is not a transaction of {batch.pipeline}/"
                                    f"{batch.sink}")
            if self.jobs and spec.interval.start < self.jobs[-1].spec.interval.end:
                raise ContractError(f"batch {batch.batch_id}: intervals must be distinct and in order")
            if entry.chained and spec.interval.start != self.jobs[-1].spec.interval.end:
                raise ContractError(f"batch {batch.batch_id}: {spec.txn} is chained on an interval that does not "
                                    "end at its start")
            self.jobs.append(JobContext(spark, spec, args=args, storage_options=self._options, clear_cache=False,
                                        prev_state=False if entry.chained else entry.prev_state))
        self._store, self._scratch = storage_for(batch.scratch_dir, **self._options)
        if spark is not None:
            spark.catalog.clearCache()  # as JobContext does, once for the whole batch
            self._list_on_driver(spark)

    def _list_on_driver(self, spark: Any) -> None:
        """The frozen inputs are files, not directories: on local storage, stat them on the driver. Past
        ``spark.sql.sources.parallelPartitionDiscovery.threshold`` paths (default 32) Spark would start
        a job with one task per path just to list them: seconds for a year of files, for nothing. Only
        ever raised (an operator's higher value stays); object stores keep Spark's parallel listing."""
        paths = {i.path for job in self.jobs for src in job.spec.sources for i in src.inputs}
        if not paths or any("://" in p and not p.startswith("file:") for p in paths):
            return
        key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
        if len(paths) + 1 > int(spark.conf.get(key, "32") or 32):
            spark.conf.set(key, str(len(paths) + 1))

    def __len__(self) -> int:
        return len(self.jobs)

    def chained(self, i: int) -> bool:
        """Does entry ``i`` start from the state the job computes for entry ``i - 1``?"""
        return self.batch.entries[i].chained

    def head(self, i: int) -> int:
        """The first entry of ``i``'s chain (``i`` itself when it is not chained)."""
        while self.chained(i):
            i -= 1
        return i

    # ------------------------------------------------------------------ inputs
    def inputs(self, source: str | None = None) -> list[str]:
        """Every interval's frozen input files of ``source`` as Spark paths, each once, in entry order."""
        return list(dict.fromkeys(p for job in self.jobs for p in job.inputs(source)))

    def tag(self, df: Any, source: str | None = None) -> Any:
        """``df`` - read straight from (some of) :meth:`inputs` - with :data:`INTERVAL` and :data:`FILE`
        added: one row per interval that froze the row's file (the file's path as in the spec). A row of
        a file no interval froze fails the job. No interval froze any file: ``df`` may be any empty frame
        (``spark.createDataFrame([], ...)``, which has no file metadata)."""
        from pyspark.sql import functions as F

        rows = [(_file_key(i.path), n, i.path) for n, job in enumerate(self.jobs) for i in job.source(source).inputs]
        if not rows:  # no interval has a file: ``df`` cannot come from one (it may have no _metadata at all)
            stray = F.raise_error(F.lit("exactly_once: a row, but no interval of the batch froze an input file"))
            return df.withColumn(self.INTERVAL, F.coalesce(F.lit(None).cast("int"), stray.cast("int"))) \
                .withColumn(self.FILE, F.lit(None).cast("string"))
        files = self.spark.createDataFrame(rows, f"eo_key string, {self.INTERVAL} int, {self.FILE} string")
        raw = F.url_decode(F.replace(F.col("_metadata.file_path"), F.lit("+"), F.lit("%2B")))
        keyed = df.withColumn("eo_key", F.regexp_replace(raw, r"^file:/+", "/"))
        tagged = keyed.join(F.broadcast(files), "eo_key", "left")
        missing = F.raise_error(F.concat(F.lit("exactly_once: input file not frozen by any interval: "), F.col("eo_key")))
        return tagged.withColumn(self.INTERVAL, F.coalesce(F.col(self.INTERVAL), missing)).drop("eo_key")

    def read(self, source: str | None = None, *, schema: Any = None) -> Any:
        """The union of every interval's frozen inputs of ``source``, read with its format and options,
        tagged (:meth:`tag`). No input files at all: an empty DataFrame of ``schema`` (required then)."""
        from pyspark.sql import functions as F

        src = self.jobs[0].source(source)
        paths = self.inputs(src.name)
        if not paths:
            if schema is None:
                raise ContractError(f"source {src.name} has no input files in this batch; pass schema=")
            empty = self.spark.createDataFrame([], schema)
            return empty.withColumn(self.INTERVAL, F.lit(None).cast("int")).withColumn(self.FILE, F.lit(None).cast("string"))
        reader = self.spark.read.format(src.format).options(**dict(src.options))
        return self.tag((reader.schema(schema) if schema is not None else reader).load(paths), src.name)

    def intervals_frame(self) -> Any:
        """One row per entry: :data:`INTERVAL`, ``interval_start``, ``interval_end`` (timestamps, UTC)."""
        rows = [(n, j.spec.interval.start, j.spec.interval.end) for n, j in enumerate(self.jobs)]
        return self.spark.createDataFrame(rows, f"{self.INTERVAL} int, interval_start timestamp, interval_end timestamp")

    def read_prev_states(self, schema: Any) -> Any:
        """The previous state of every chain's first entry, as one DataFrame of ``schema`` plus
        :data:`INTERVAL` (that entry); none for entries without a previous state."""
        from pyspark.sql import functions as F

        frames = [self.jobs[n].read_prev_state(schema).withColumn(self.INTERVAL, F.lit(n))
                  for n in range(len(self)) if not self.chained(n) and self.jobs[n].prev_state_dir]
        empty = self.spark.createDataFrame([], schema).withColumn(self.INTERVAL, F.lit(0))
        return reduce(lambda a, b: a.unionByName(b), frames, empty)

    # ------------------------------------------------------------------ outputs
    def write(self, df: Any, kind: str = "data", *, fmt: str = "parquet", sort_by: Sequence[str] = ()) -> None:
        """Write ``df`` (with an :data:`INTERVAL` column; for ``data`` of an interval that owns several
        partitions also :data:`PARTITION`) in one Spark write, then give each interval its files: ``data``
        under its partitions' output dirs, ``state`` as its new state, ``quarantine`` as its rejected
        records. What an earlier attempt left there is replaced. One file per interval (and partition),
        sorted by ``sort_by``; an interval without rows gets an empty file (``quarantine``: none)."""
        if kind not in self.KINDS:
            raise ContractError(f"write kind must be one of {self.KINDS}, not {kind!r}")
        by = [self.INTERVAL] + ([self.PARTITION] if self.PARTITION in df.columns else [])
        out = self._store.join(self._scratch, kind)
        (df.repartition(*by).sortWithinPartitions(*by, *sort_by).write.mode("overwrite").partitionBy(*by)
         .format(fmt).save(spark_path(self._store.url(out))))
        written = self._written(out, kind)
        schema = df.drop(*by).schema
        for n, job in enumerate(self.jobs):
            name = f"{self.INTERVAL}={n}"
            self._hand_over(job, kind, self._store.join(out, name), len(by) > 1, schema, fmt, name in written)

    def _written(self, out: str, kind: str) -> set[str]:
        """What the write left in ``out``, listed ONCE right after it: an interval is empty only if its
        directory is not there now - never because it vanished later (another write of this batch, a
        cleanup), which would hand the interval an empty file in place of its rows or its state. Refused
        when Spark's ``_SUCCESS`` marker (written unless configured off) is already gone."""
        names = set(self._store.list_names(out)) if self._store.exists(out) else set()
        marks = self.spark.conf.get("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "true")
        if "_SUCCESS" not in names and str(marks).lower() != "false":
            raise StorageError(f"batch {self.batch.batch_id}: the {kind} output {self._store.url(out)} vanished right "
                               "after the write (another write of this batch running, or a cleanup?)")
        return names

    def _hand_over(self, job: JobContext, kind: str, src: str, by_partition: bool, schema: Any, fmt: str,
                   found: bool) -> None:
        store, staging = job._store, job._staging
        if kind == "quarantine":
            job.clear_quarantine()
            if found:
                self._move(store, src, store.join(staging, QUARANTINE))
            return
        if kind == "state":
            targets = {STATE: src if found else ""}
        elif by_partition:
            names = {unquote(n.split("=", 1)[1]): n for n in self._store.list_names(src)} if found else {}
            if found and not names:
                raise StorageError(f"batch {self.batch.batch_id}: {self._store.url(src)} vanished during the hand-over")
            if unknown := sorted(set(names) - set(job.partitions)):
                raise ContractError(f"{job.spec.txn}: rows for partitions it does not own: {unknown}")
            targets = {f"data/{p}": self._store.join(src, names[p]) if p in names else "" for p in job.partitions}
        elif len(job.partitions) != 1:
            raise ContractError(f"{job.spec.txn} owns {list(job.partitions)}: give the rows a {self.PARTITION} column")
        else:
            targets = {f"data/{job.partitions[0]}": src if found else ""}
        if kind == "data":
            store.remove_tree(store.join(staging, "data"))
        for rel, path in targets.items():
            dst = store.join(staging, rel)
            store.remove_tree(dst)
            if path:
                self._move(store, path, dst)
            else:  # no rows: an empty file with the schema, as a single-interval job writes
                self.spark.createDataFrame([], schema).coalesce(1).write.format(fmt).save(spark_path(store.url(dst)))

    def _move(self, store: Any, src: str, dst: str) -> None:
        """Move what the write left at ``src`` (listed by :meth:`_written`) to ``dst``; StorageError if it is gone."""
        store.move_tree(src, dst)
        if not store.exists(dst):
            raise StorageError(f"batch {self.batch.batch_id}: {self._store.url(src)} vanished during the hand-over "
                               "(another write of this batch running, or a cleanup?)")

    def finish(self, counts: Sequence[Counts]) -> list[Counts]:
        """Write each interval's counts (``counts[i]`` for ``jobs[i]``) last, in order."""
        if len(counts) != len(self.jobs):
            raise ContractError(f"finish() needs one Counts per interval ({len(self.jobs)}), got {len(counts)}")
        return [job.finish(c, count_files=False) for job, c in zip(self.jobs, counts)]  # one file each (write)


def _file_key(path: str) -> str:
    """How Spark's ``_metadata.file_path`` names ``path`` once URL-decoded, ``file:`` prefix dropped."""
    if path.startswith("s3://"):
        return "s3a://" + path[len("s3://"):]
    return path if "://" in path else os.path.abspath(path)


def parse_args(argv: Sequence[str] | None = None, description: str = "") -> tuple[str, list[str]]:
    """``(--spec value, the application's own arguments)`` from the command line."""
    kind, url, rest = _parse(argv, description)
    if kind != "spec":
        raise ContractError("this job runs one interval: give --spec <url>, not --batch")
    return url, rest


def _parse(argv: Sequence[str] | None, description: str) -> tuple[str, str, list[str]]:
    parser = argparse.ArgumentParser(description=description, add_help=True)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--spec", help="path or s3:// URL of the job spec JSON (one interval)")
    group.add_argument("--batch", help="path or s3:// URL of a batch spec JSON (several intervals)")
    known, rest = parser.parse_known_args(argv)
    return ("spec", known.spec, rest) if known.spec else ("batch", known.batch, rest)


def spark_session(spec: JobSpec | BatchSpec, app_name: str) -> Any:
    """A Spark Connect session when the spec names a remote, else the classic session of spark-submit."""
    from pyspark.sql import SparkSession

    name = spec.txn if isinstance(spec, JobSpec) else spec.batch_id
    if spec.spark_remote:
        from .connect import connect_session

        scope = spec.session_scope if isinstance(spec, JobSpec) else spec.scratch_dir
        return connect_session(spec.spark_remote, name, 1, scope=scope)
    spark = SparkSession.builder.appName(f"{app_name} {name}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def execute(compute: Callable[[JobContext], Counts], spark: Any, spec: JobSpec, args: Sequence[str] = (),
            storage_options: Mapping[str, Any] | None = None) -> Counts:
    """Run ``compute`` for ``spec`` on ``spark`` (classic or Spark Connect) and write its counts last."""
    ctx = JobContext(spark, spec, args=args, storage_options=storage_options)
    return ctx.finish(compute(ctx))


BatchCompute = Callable[[BatchContext], Sequence[Counts]]


def execute_batch(compute_batch: BatchCompute | None, spark: Any, batch: BatchSpec, args: Sequence[str] = (),
                  storage_options: Mapping[str, Any] | None = None,
                  compute: Callable[[JobContext], Counts] | None = None) -> list[Counts]:
    """Run a job's ``compute_batch`` for ``batch`` on ``spark`` and write each interval's counts last.

    A batch of ONE interval (a run's ``one_task``) runs the job's single-interval ``compute`` when it is given -
    the interval's own plan, straight into its staging, exactly what its write task would run (a batch job's
    tagging, partitioned writes and hand-over cost ~2x its CPU for one interval) - so such a batch needs no
    ``compute_batch``. ContractError if the one it needs is missing."""
    ctx = BatchContext(spark, batch, args=args, storage_options=storage_options)
    if compute is not None and len(ctx) == 1:
        return [ctx.jobs[0].finish(compute(ctx.jobs[0]))]
    if compute_batch is None:
        raise ContractError(f"batch {batch.batch_id} of {len(ctx)} intervals: the job has no compute_batch; "
                            "set the pipeline's max_batch=1, or give run_job(..., compute_batch=...)")
    return ctx.finish(compute_batch(ctx))


def run_job(compute: Callable[[JobContext], Counts], argv: Sequence[str] | None = None, *,
            app_name: str | None = None, compute_batch: BatchCompute | None = None) -> int:
    """The ``__main__`` of a job script: parse ``--spec`` (other arguments go to ``ctx.args``), start
    Spark, open the context, run ``compute(ctx)``, write its counts last; prints them as one JSON line
    with the ``runtime`` it ran on: the driver's Python and where this library was imported from (a
    ``--py-files`` zip, an installed package or a checkout). With ``--batch <url>`` (a batched backfill)
    it runs ``compute_batch`` instead - ContractError for a job that has none (leave the pipeline's
    ``max_batch`` at 1)."""
    kind, url, rest = _parse(argv, (compute.__doc__ or "").strip().splitlines()[0] if compute.__doc__ else "")
    options = job_storage_options()  # the storage connection's, handed over by the write task (job/options.py)
    store, key = storage_for(url, **options)
    spec: JobSpec | BatchSpec = (JobSpec if kind == "spec" else BatchSpec).from_json(store.read_bytes(key))
    if isinstance(spec, BatchSpec) and compute_batch is None and len(spec.entries) != 1:
        raise ContractError(f"{app_name or 'this job'} has no compute_batch: it cannot run a batch (--batch); "
                            "set the pipeline's max_batch=1, or give run_job(..., compute_batch=...)")
    spark = spark_session(spec, app_name or getattr(compute, "__module__", "job"))
    try:
        if isinstance(spec, JobSpec):
            result: dict[str, Any] = {"txn": spec.txn, "counts": execute(compute, spark, spec, rest, options).to_dict()}
        else:
            done = execute_batch(compute_batch, spark, spec, rest, options, compute=compute)
            result = {"batch": spec.batch_id, "counts": [c.to_dict() for c in done]}
    finally:
        spark.stop()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # exactly_once/ (this is exactly_once/job/)
    result["runtime"] = {"python": sys.executable, "exactly_once": package}
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0
