"""Pipeline configuration: plain frozen data, declared in a DAG file (no environment reads, no Airflow).

Everything deployment-specific (the data root, the storage connection) is passed in by the DAG file,
usually from :mod:`exactly_once.settings`; credentials are resolved from the connection by the Airflow
layer, once per task, and handed to :class:`~exactly_once.protocol.pipeline.IntervalRun` - never stored here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Mapping, Sequence, Union

from ..errors import ConfigError
from ..ids import check_name, utc
from .layout import Partitions, Source, Template
from ..storage import redact
from ..targets import check_table_format
from ..targets.base import PublishTarget
from .transaction import TwoPhaseCommitSink

SourcesArg = Union[Source, str, Sequence[Union[Source, str]]]


def _source(value: Source | str) -> Source:
    return value if isinstance(value, Source) else Source(value)


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline writing one sink (table) from its sources; see ``docs/LAYOUT.md``.

    * ``application``: the write job (a PySpark script run by spark-submit) with ``application_args``
      and ``spark_conf``.
    * ``sources``: :class:`~exactly_once.protocol.layout.Source` declarations (a bare name means JSON lines under
      ``<root>/landing/<name>/dt=YYYY-MM-DD/``); ``partitions``: the partitions an interval owns (a
      template, a callable of the interval, or :class:`~exactly_once.protocol.layout.Partitions`).
    * ``stateful``: interval n reads the state committed by the interval that ends where n starts (the
      first interval - the one starting at or before ``start`` - reads none). Off by default.
    * ``suite``: the table's own GX suite (``expectations/<table>.json``; its companions
      ``<stem>.<name>.json`` run with it). The completeness check from the job's counts always runs;
      ``max_malformed_ratio`` is its limit on the share of rejected input records.
    * ``keep_rejected``: keep an aborted run's staging (data + quarantine) for inspection.
    * ``target``: where a committed version is published: files in ``table`` (the default), or a
      :class:`~exactly_once.targets.DatabaseTarget` / :class:`~exactly_once.targets.RedisTarget` (the
      staged Parquet is then the write-ahead log; ``table`` keeps only the transaction log and state).
    * ``root``: the data root (local path or ``s3://``); ``table``: the table URL (default
      ``<root>/warehouse/<sink>``); ``reports``: the local reports dir (default ``<root>/reports``).
    * ``table_format``: ``files`` (the default) or ``delta`` - the table is a Delta Lake table, each
      publish one Delta commit (docs/TARGETS.md); bound to the table on first use.
    * ``max_batch``: a backfill computes up to this many intervals in ONE write job, each still its own
      transaction (:mod:`exactly_once.protocol.batch`); the job must define ``compute_batch`` (docs/JOB_API.md).
      1 (the default): one interval per job.
    * ``one_task``: a run that does not batch (a scheduled or manual run, or a backfill run with ``max_batch``
      1) publishes its interval as a batch of one in its ``begin`` task - write, pre_commit, validate and
      commit in that one task (each still its own step of the protocol, logged by ``begin``) - and the group's
      other tasks are skipped: one task start and no hand-off between tasks instead of five (Airflow's
      scheduler takes up to ``scheduler_idle_sleep_time``, 1 s by default, per hand-off). An interval the
      batch of one could not publish (a failed gate) goes on through the phase tasks, which show why. A batch
      of one runs the job's own ``compute`` (no ``compute_batch`` needed). Off by default.
    """

    pipeline: str
    sink: str
    application: str
    root: str
    sources: SourcesArg = ()
    partitions: Union[Partitions, Template] = field(default_factory=Partitions)
    suite: str | None = None
    stateful: bool = False
    start: Union[datetime, date, str, None] = None
    max_malformed_ratio: float = 0.05
    keep_rejected: bool = False
    storage_conn_id: str | None = None
    table: str | None = None
    reports: str | None = None
    application_args: Sequence[str] = ()
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    target: PublishTarget | None = None
    table_format: str = "files"
    max_batch: int = 1
    one_task: bool = False

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline id")
        check_name(self.sink, "sink name")
        check_table_format(self.table_format)
        if self.table_format != "files" and self.target is not None:
            raise ConfigError(f"{self.pipeline}: give either target= or table_format={self.table_format!r}")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - normalising a frozen dataclass
        raw = self.sources
        sources = tuple(_source(s) for s in ([raw] if isinstance(raw, (Source, str)) else raw))
        if not sources:
            raise ConfigError(f"{self.pipeline}: declare at least one source, e.g. sources=Source('events')")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ConfigError(f"{self.pipeline}: source names must be unique, got {names}")
        set_("sources", sources)
        if not isinstance(self.partitions, Partitions):
            set_("partitions", Partitions(self.partitions))
        if self.start is not None:
            set_("start", utc(self.start))
        if not isinstance(self.max_malformed_ratio, (int, float)) or math.isnan(self.max_malformed_ratio) \
                or not 0.0 <= self.max_malformed_ratio <= 1.0:
            raise ConfigError(f"max_malformed_ratio must be within [0, 1], got {self.max_malformed_ratio}")
        if isinstance(self.application_args, str) or not all(isinstance(a, str) for a in self.application_args):
            raise ConfigError("application_args must be a list of strings, e.g. ['--min-delay', '15']")
        set_("application_args", tuple(self.application_args))
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(self.spark_conf).items()):
            raise ConfigError("spark_conf must map strings to strings, e.g. {'spark.executor.memory': '2g'}")
        set_("spark_conf", dict(self.spark_conf))
        if not isinstance(self.max_batch, int) or isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise ConfigError(f"{self.pipeline}: max_batch must be a whole number >= 1 (1: no batching), "
                              f"not {self.max_batch!r}")
        if not isinstance(self.one_task, bool):
            raise ConfigError(f"{self.pipeline}: one_task must be True or False, not {self.one_task!r}")

    @property
    def batched(self) -> bool:
        """Does a backfill of this pipeline compute several intervals per write job?"""
        return self.max_batch > 1

    @property
    def table_url(self) -> str:
        return self.table or f"{self.root.rstrip('/')}/warehouse/{self.sink}"

    def landing_url(self, source: Source | None = None) -> str:
        """The landing root of ``source`` (default: the first source)."""
        return (source or self.sources[0]).landing(self.root)  # type: ignore[union-attr,index]

    @property
    def reports_url(self) -> str:
        """The reports dir (Data Docs, run summaries): local, or a storage URL shared by a fleet."""
        if self.reports:
            return self.reports
        if "://" in self.root:
            raise ConfigError(f"{self.pipeline}: the data root is remote; give reports=<a local dir, or an "
                              "s3:// URL that every worker shares>")
        return f"{self.root.rstrip('/')}/reports"

    def sink_handle(self, storage_options: Mapping[str, Any] | None = None) -> TwoPhaseCommitSink:
        """The two-phase-commit sink of this pipeline's table. The gate always runs, so every commit
        needs a passing verdict."""
        return TwoPhaseCommitSink.at(self.table_url, pipeline=self.pipeline, sink=self.sink,
                                     storage_options=dict(storage_options or {}), require_validation=True,
                                     target=self.target, table_format=self.table_format)

    def describe(self) -> str:
        """One line for logs; never contains credentials."""
        landing = ", ".join(redact(self.landing_url(s)) for s in self.sources)  # type: ignore[union-attr]
        return f"{self.pipeline}/{self.sink}: sources={landing} table={redact(self.table_url)}"

