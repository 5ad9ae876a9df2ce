"""The frames the quality gate validates: the staged data, and two small frames derived from it.

* ``data``       - the staged partition ``<staging>/data/<partition>/`` as written (pandas or Spark);
* ``counts``     - ONE row: the write job's ``_counts.json`` next to what the staged data really holds,
                   with derived columns (``completeness_gap``, ``page_views_gap``, ``rows_written_gap``,
                   ``partition_rows_gap``, ``malformed_ratio``) for GX to check;
* ``checkpoint`` - one row per app in (staged output | previous checkpoint | staged ``_state``): the
                   previous ``cumulative_pv`` and the gaps ``cumulative_gap`` / ``state_gap`` that must be 0.

Only arithmetic lives here; every rule (which value is acceptable) is in the suites in ``expectations/``.
The derived frames are O(apps) and are always built and validated with pandas.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .errors import ConfigError, StorageError
from .storage import LocalStorage, Storage, storage_for

STATE_DIR = "_state"
DATA_DIR = "data"
KEY, PV, CUM = "app_id", "pv", "cumulative_pv"


@dataclass
class Frames:
    """What one validation looks at. ``data`` is a pandas or Spark DataFrame (per engine)."""

    data: Any
    counts: pd.DataFrame
    checkpoint: pd.DataFrame | None
    rows: int
    notes: dict[str, Any] = field(default_factory=dict)


class FrameReader:
    """Reads parquet dirs for one engine: ``pandas`` (pyarrow, no JVM) or ``spark`` (a SparkSession).

    URLs are local paths, ``file://`` or ``s3://`` (pandas: through the project's s3fs adapter with
    ``storage_options``; Spark: through its own Hadoop filesystem configuration).
    """

    def __init__(self, engine: str, spark: Any = None, storage_options: dict[str, Any] | None = None):
        if engine not in ("pandas", "spark"):
            raise ConfigError(f"unknown quality engine {engine!r}: use 'pandas' or 'spark'")
        if engine == "spark" and spark is None:
            raise ConfigError("engine='spark' needs a SparkSession (spark=...)")
        self.engine, self.spark, self.options = engine, spark, dict(storage_options or {})

    def _fs(self, url: str) -> tuple[Storage, str]:
        return storage_for(url, **dict(self.options))

    def exists(self, url: str) -> bool:
        storage, path = self._fs(url)
        return storage.exists(path)

    def read_native(self, url: str) -> Any | None:
        """The parquet dir at ``url`` as this engine's DataFrame, or None if it does not exist."""
        if not self.exists(url):
            return None
        if self.engine == "spark":
            return self.spark.read.parquet(url)
        import pyarrow.dataset as ds

        storage, path = self._fs(url)
        fs = None if isinstance(storage, LocalStorage) else getattr(storage, "fs", None)
        # pyarrow skips "_"/"." prefixed names (_SUCCESS, .crc), like Spark readers do
        return ds.dataset(path, format="parquet", filesystem=fs).to_table().to_pandas()

    def read_pandas(self, url: str | None, columns: list[str]) -> pd.DataFrame | None:
        """``columns`` of the parquet dir at ``url`` as pandas (None if no url or no such dir)."""
        frame = self.read_native(url) if url else None
        if frame is None:
            return None
        if self.engine == "spark":
            frame = frame.select(*[c for c in columns if c in frame.columns]).toPandas()
        return frame[[c for c in columns if c in frame.columns]]


def _num(counts: dict[str, Any], key: str) -> float | None:
    value = counts.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _minus(first: float | None, *rest: float | None) -> float | None:
    """``first - sum(rest)``, or None when any operand is missing (a missing count must not pass)."""
    if first is None or any(v is None for v in rest):
        return None
    return first - sum(v for v in rest if v is not None)


def counts_frame(counts: dict[str, Any], *, partition: str, staged_rows: int, sum_pv: int | None
                 ) -> pd.DataFrame:
    """One row: the job's counts, what the staged partition holds, and the derived gaps/ratio."""
    get = {k: _num(counts, k) for k in ("lines_read", "malformed", "valid_lines", "duplicates_dropped",
                                        "distinct_events", "page_views", "rows_written", "apps_in_state")}
    per_partition = counts.get("rows_per_partition")
    partition_rows = (per_partition.get(partition, 0) if isinstance(per_partition, dict) else None)
    lines, malformed = get["lines_read"], get["malformed"]
    ratio = None if lines is None or malformed is None else (round(malformed / lines, 6) if lines else 0.0)
    row = {**get, "staged_rows": staged_rows, "sum_pv": sum_pv, "partition_rows": partition_rows,
           "completeness_gap": _minus(lines, get["distinct_events"], get["duplicates_dropped"], malformed),
           "page_views_gap": _minus(get["page_views"], sum_pv),
           "rows_written_gap": _minus(get["rows_written"], staged_rows),
           "partition_rows_gap": _minus(partition_rows, staged_rows),
           "malformed_ratio": ratio}
    return pd.DataFrame([row])


def checkpoint_frame(out: pd.DataFrame, prev: pd.DataFrame | None, state: pd.DataFrame | None
                     ) -> pd.DataFrame:
    """Per app: ``cumulative_gap = cumulative_pv - (prev + pv)`` (written apps only) and ``state_gap``.

    ``prev`` is the previous committed state (None: first interval, every previous value is 0);
    ``state`` the staged new state (None: not staged, ``state_gap`` stays empty and is not checked).
    A missing previous value counts as 0; an app missing from the new state counts as 0 there.
    """
    empty = pd.DataFrame({KEY: pd.Series(dtype=object), CUM: pd.Series(dtype="int64")})
    frame = out[[KEY, PV, CUM]].merge(
        (prev if prev is not None else empty).rename(columns={CUM: "prev_cumulative_pv"}), on=KEY, how="outer")
    if state is not None:
        frame = frame.merge(state.rename(columns={CUM: "state_cumulative_pv"}), on=KEY, how="outer")
    expected = frame["prev_cumulative_pv"].fillna(0) + frame[PV].fillna(0)
    frame["expected_cumulative_pv"] = expected
    frame["cumulative_gap"] = frame[CUM] - expected  # NaN (not checked) for apps not written this interval
    frame["state_gap"] = (frame["state_cumulative_pv"].fillna(0) - expected if state is not None
                          else pd.Series([None] * len(frame), dtype="float64"))
    return frame.sort_values(KEY, na_position="first").reset_index(drop=True)


def build_frames(reader: FrameReader, *, staging_dir: str, partition: str, counts: dict[str, Any],
                 prev_state_dir: str | None) -> Frames:
    """Read the staged partition, the staged ``_state`` and the previous state; derive the small frames."""
    data_url = posixpath.join(staging_dir.rstrip("/"), DATA_DIR, partition)
    notes: dict[str, Any] = {"data": data_url}
    data = reader.read_native(data_url)
    if data is None:
        notes["data_missing"] = True
        data = reader.spark.createDataFrame([], "x string") if reader.engine == "spark" else pd.DataFrame()
        data = data.drop("x") if reader.engine == "spark" else data
    local = data.select(*[c for c in (KEY, PV, CUM) if c in data.columns]).toPandas() \
        if reader.engine == "spark" else data
    rows = len(local)
    sum_pv = int(local[PV].fillna(0).sum()) if PV in local.columns else None
    counts_df = counts_frame(counts, partition=partition, staged_rows=rows, sum_pv=sum_pv)
    checkpoint = None
    if all(c in local.columns for c in (KEY, PV, CUM)):
        prev = reader.read_pandas(prev_state_dir, [KEY, CUM])
        if prev_state_dir and prev is None:
            raise StorageError(f"previous checkpoint state {prev_state_dir} does not exist")
        state = reader.read_pandas(posixpath.join(staging_dir.rstrip("/"), STATE_DIR), [KEY, CUM])
        notes.update(prev_state=prev_state_dir, state_staged=state is not None)
        checkpoint = checkpoint_frame(local, prev, state)
    else:
        notes["checkpoint_skipped"] = "staged data lacks app_id/pv/cumulative_pv"
    return Frames(data=data, counts=counts_df, checkpoint=checkpoint, rows=rows, notes=notes)
