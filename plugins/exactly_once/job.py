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
from typing import Any, Callable, Mapping, Sequence

from .contracts import COUNTS, QUARANTINE, STATE, Counts, FrozenInput, JobSpec, SourceInputs
from .errors import ContractError, StorageError
from .storage import storage_for

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
    """Refuse (StorageError) unless every input still has its frozen size (and etag, when both known)."""
    for item in inputs:
        store, key = storage_for(item.path, **dict(storage_options or {}))
        try:
            meta = store.file_meta(key)
        except FileNotFoundError:
            meta = {"size": "missing", "etag": None}
        if meta["size"] != item.size:
            raise StorageError(f"source {item.path} changed since it was frozen (size {item.size} -> "
                               f"{meta['size']}); replay is impossible")
        if item.etag and meta.get("etag") and item.etag != meta["etag"]:
            raise StorageError(f"source {item.path} changed since it was frozen (etag {item.etag} -> "
                               f"{meta['etag']}); replay is impossible")


def _child(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


class JobContext:
    """One write job's view of its transaction. Opening it deletes a stale counts file (so a job that
    dies part-way never leaves a complete-looking staging dir) and checks every frozen input."""

    def __init__(self, spark: Any, spec: JobSpec, *, args: Sequence[str] = (),
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.spark = spark
        self.spec = spec
        self.args = list(args)
        self._options = dict(storage_options or {})
        self._store, self._staging = storage_for(spec.staging_dir, **self._options)
        self._store.remove_tree(self._store.join(self._staging, COUNTS))
        for source in spec.sources:
            check_frozen(source.inputs, self._options)

    @classmethod
    def open(cls, spark: Any, spec: JobSpec | Mapping[str, Any] | str, **kwargs: Any) -> "JobContext":
        """A context for ``spec``: a JobSpec, its dict, or the URL/path of its JSON (``--spec``)."""
        if isinstance(spec, str):
            store, key = storage_for(spec, **dict(kwargs.get("storage_options") or {}))
            spec = JobSpec.from_json(store.read_bytes(key))
        elif not isinstance(spec, JobSpec):
            spec = JobSpec.from_dict(spec)
        return cls(spark, spec, **kwargs)

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
        return spark_path(self.spec.prev_state) if self.spec.prev_state else None

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

    def finish(self, counts: Counts) -> Counts:
        """Write ``counts`` as the job's last act, atomically: its presence means the job finished."""
        if not isinstance(counts, Counts):
            raise ContractError(f"finish() takes exactly_once.contracts.Counts, not {type(counts).__name__}")
        unknown = set(counts.rows_written) - set(self.spec.partitions)
        if unknown:
            raise ContractError(f"rows_written names partitions this interval does not own: {sorted(unknown)}")
        self._store.write_atomic(self._store.join(self._staging, COUNTS), counts.to_json())
        return counts


def parse_args(argv: Sequence[str] | None = None, description: str = "") -> tuple[str, list[str]]:
    """``(--spec value, the application's own arguments)`` from the command line."""
    parser = argparse.ArgumentParser(description=description, add_help=True)
    parser.add_argument("--spec", required=True, help="path or s3:// URL of the job spec JSON")
    known, rest = parser.parse_known_args(argv)
    return known.spec, rest


def spark_session(spec: JobSpec, app_name: str) -> Any:
    """A Spark Connect session when the spec names a remote, else the classic session of spark-submit."""
    from pyspark.sql import SparkSession

    if spec.spark_remote:
        from .connect import connect_session

        return connect_session(spec.spark_remote, spec.txn, 1, scope=spec.session_scope)
    spark = SparkSession.builder.appName(f"{app_name} {spec.txn}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def execute(compute: Callable[[JobContext], Counts], spark: Any, spec: JobSpec, args: Sequence[str] = (),
            storage_options: Mapping[str, Any] | None = None) -> Counts:
    """Run ``compute`` for ``spec`` on ``spark`` (classic or Spark Connect) and write its counts last."""
    ctx = JobContext(spark, spec, args=args, storage_options=storage_options)
    return ctx.finish(compute(ctx))


def run_job(compute: Callable[[JobContext], Counts], argv: Sequence[str] | None = None, *,
            app_name: str | None = None) -> int:
    """The ``__main__`` of a job script: parse ``--spec`` (other arguments go to ``ctx.args``), start
    Spark, open the context, run ``compute(ctx)``, write its counts last; prints them as one JSON line."""
    spec_url, rest = parse_args(argv, (compute.__doc__ or "").strip().splitlines()[0] if compute.__doc__ else "")
    store, key = storage_for(spec_url)
    spec = JobSpec.from_json(store.read_bytes(key))
    spark = spark_session(spec, app_name or getattr(compute, "__module__", "job"))
    try:
        counts = execute(compute, spark, spec, rest)
    finally:
        spark.stop()
    sys.stdout.write(json.dumps({"txn": spec.txn, "counts": counts.to_dict()}, sort_keys=True) + "\n")
    return 0
