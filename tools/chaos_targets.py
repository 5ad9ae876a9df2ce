"""The publish targets a chaos run can drive, and how its checks read each one.

``files`` is pv_pipeline's default table (Parquet under ``warehouse/app_pv``), ``delta`` the same DAG with
``EO_PV_TABLE_FORMAT=delta`` (a Delta Lake table at the same location), ``postgres`` the ``pv_to_db`` DAG
publishing into a table of the run's own PostgreSQL database (the Airflow metadata DB the run creates and
drops: nothing to clean up). Each target knows the DAG and sink to run, the settings that select it, the
sink to recover and check through, and what a reader of the target sees (``rows``, ``{day: [row]}``).
The data root is a local path or, for a fleet run (:mod:`tools.chaos_fleet`), an ``s3://`` URL read with
the given storage options; on S3 a files table is read the exact way, through its live manifests.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exactly_once.protocol.transaction import TwoPhaseCommitSink

TARGETS = ("files", "delta", "postgres")


@dataclass(frozen=True)
class ChaosTarget:
    kind: str
    dag_id: str
    sink: str

    @property
    def write_task(self) -> str:
        return f"{self.sink}.write"

    def settings(self, db_name: str) -> dict[str, str]:
        """Environment for every component (the deployment's metadata DB ``db_name`` holds pv_to_db's rows)."""
        if self.kind == "delta":
            return {"EO_PV_TABLE_FORMAT": "delta"}
        if self.kind == "postgres":
            return {"EO_DB_URL": f"postgresql://postgres@127.0.0.1:5432/{db_name}"}
        return {}

    def table(self, data_root: Path | str) -> str:
        return f"{str(data_root).rstrip('/')}/warehouse/{self.sink}"

    def open_sink(self, data_root: Path | str, db_name: str,
                  storage_options: dict[str, Any] | None = None) -> TwoPhaseCommitSink:
        """The sink the DAG publishes through (same pipeline, sink and target), for recover and the checks."""
        kwargs: dict[str, Any] = {"require_validation": True}
        if self.kind == "delta":
            kwargs["table_format"] = "delta"
        elif self.kind == "postgres":
            from exactly_once.targets import DatabaseTarget

            kwargs["target"] = DatabaseTarget(table="app_pv", url=self.settings(db_name)["EO_DB_URL"], mode="replace")
        return TwoPhaseCommitSink.at(self.table(data_root), pipeline=self.dag_id, sink=self.sink,
                                     storage_options=storage_options, **kwargs)

    def rows(self, data_root: Path | str, db_name: str,
             storage_options: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
        """What a reader of the target sees now, by day (``dt``)."""
        if self.kind == "postgres":
            from tools.deployment import MetaDB

            got = MetaDB(db_name).query("select to_regclass('public.app_pv') is not null")
            found = got[0][0] if got else False
            records = MetaDB(db_name).query(
                "select dt::text, app_id, pv, uv, cumulative_pv from app_pv") if found else []
            cols = ("dt", "app_id", "pv", "uv", "cumulative_pv")
            return _by_day([dict(zip(cols, r)) for r in records])
        if "://" in str(data_root):
            return self._live_rows(self.open_sink(data_root, db_name, storage_options))
        table = Path(self.table(data_root))
        if not table.exists():
            return {}
        if self.kind == "delta":
            import deltalake

            if not (table / "_delta_log").exists():
                return {}
            return _by_day(deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist())
        import pyarrow.dataset as ds

        return _by_day(ds.dataset(str(table), format="parquet", partitioning="hive").to_table().to_pylist())


    def _live_rows(self, sink: TwoPhaseCommitSink) -> dict[str, list[dict[str, Any]]]:
        """A files table on S3 as an exact reader sees it: the files its live manifests name."""
        import pyarrow.parquet as pq

        if self.kind != "files":
            raise ValueError(f"reading a {self.kind} target on S3 is not supported by the chaos checks")
        table, out = sink.table, {}
        parts = [n for n in sink.storage.list_names(table) if n.startswith("dt=")] if sink.storage.exists(table) else []
        for part in sorted(parts):
            for path in sink.live_files(part):
                with sink.storage.open(path, "rb") as f:
                    out.setdefault(part[3:], []).extend(dict(r, dt=part[3:]) for r in pq.read_table(f).to_pylist())
        return out


def _by_day(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(str(r["dt"]), []).append(r)
    return out


def chaos_target(kind: str) -> ChaosTarget:
    if kind not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, not {kind!r}")
    return ChaosTarget(kind, "pv_to_db" if kind == "postgres" else "pv_pipeline",
                       "app_pv_db" if kind == "postgres" else "app_pv")
