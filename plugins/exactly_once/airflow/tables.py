"""Which tables the Airflow plugin shows: the sinks the DAGs declare, plus configured table URLs.

* every :class:`~exactly_once.protocol.config.PipelineConfig` used by a phase operator of a DAG in the DAGs
  folder (parsed with Airflow's own ``DagBag``, re-parsed only when a DAG file changes);
* ``EO_TABLES``: extra table URLs, comma-separated (tables written by pipelines outside this folder);
  their pipeline and sink names come from their transaction logs.

A table is identified in URLs by ``(pipeline, sink)``: the pipeline is the DAG id, which is what
Airflow's authorization checks (a user sees a table only if they may read its DAG's runs).
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.config import PipelineConfig
from ..errors import ExactlyOnceError
from ..ops.inspection import open_table
from ..storage import redact
from ..protocol.transaction import TwoPhaseCommitSink

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableRef:
    """A table the plugin shows. ``config`` is None for a table known only by its URL (``EO_TABLES``)."""

    pipeline: str
    sink: str
    url: str
    config: PipelineConfig | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.pipeline, self.sink

    def handle(self) -> TwoPhaseCommitSink:
        """The sink, for reading its log."""
        if self.config is not None:
            return self.config.sink_handle()
        return open_table(self.url)

    def describe(self) -> str:
        return redact(self.url)


_lock = threading.Lock()
_cache: dict[str, Any] = {"stamp": None, "tables": []}


def _dags_folder() -> str:
    from airflow.configuration import conf

    return os.path.expanduser(conf.get("core", "dags_folder"))


def _stamp(folder: str) -> tuple[Any, ...]:
    files = sorted(Path(folder).rglob("*.py")) if os.path.isdir(folder) else []
    return (folder, os.environ.get("EO_TABLES", ""),
            tuple((str(f), f.stat().st_mtime_ns) for f in files if f.is_file()))


def declared_configs(folder: str) -> list[PipelineConfig]:
    """The PipelineConfig of every phase operator of every DAG in ``folder`` (one per table)."""
    from .compat import dag_bag_class

    bag = dag_bag_class()(dag_folder=folder, load_op_links=False)  # only the folder: never the example DAGs
    for path, error in bag.import_errors.items():
        log.warning("DAG file %s does not import; its tables are not shown: %s", path, error.splitlines()[-1:])
    found: dict[tuple[str, str], PipelineConfig] = {}
    for dag in bag.dags.values():
        for task in dag.tasks:
            # a phase operator, known by its phase and PipelineConfig: the operators sit above this module
            cfg = getattr(task, "config", None)
            if getattr(task, "phase", "") and isinstance(cfg, PipelineConfig):
                found.setdefault((cfg.pipeline, cfg.sink), cfg)
    return list(found.values())


def known_tables() -> list[TableRef]:
    """Every table the plugin shows, sorted by (pipeline, sink). Cached until a DAG file changes."""
    folder = _dags_folder()
    stamp = _stamp(folder)
    with _lock:
        if _cache["stamp"] == stamp:
            return list(_cache["tables"])
        tables = {(c.pipeline, c.sink): TableRef(c.pipeline, c.sink, c.table_url, c) for c in declared_configs(folder)}
        for url in filter(None, (u.strip() for u in os.environ.get("EO_TABLES", "").split(","))):
            try:
                sink = open_table(url)
            except (ExactlyOnceError, OSError) as exc:
                log.warning("EO_TABLES: %s is not shown: %s", redact(url), exc)
                continue
            tables.setdefault((sink.pipeline, sink.sink), TableRef(sink.pipeline, sink.sink, url))
        _cache.update(stamp=stamp, tables=[tables[k] for k in sorted(tables)])
        return list(_cache["tables"])


def find_table(pipeline: str, sink: str) -> TableRef | None:
    return next((t for t in known_tables() if t.key == (pipeline, sink)), None)


def tables_of(pipeline: str) -> list[TableRef]:
    return [t for t in known_tables() if t.pipeline == pipeline]
