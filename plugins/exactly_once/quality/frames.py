"""The frames the quality gate validates: the staged data, and small frames derived from it.

* ``data``       - the staged partitions the interval owns, ``<staging>/data/<partition>/``, as written
                   (pandas or Spark), concatenated;
* ``counts``     - ONE row: every field of the job's :class:`~exactly_once.contracts.Counts` and its
                   ``metrics`` (by name), what the staged data really holds (``staged_rows``,
                   ``sum_<column>`` for each numeric data column) and the derived ``completeness_gap``,
                   ``rejected_ratio``, ``rows_written_gap`` and ``unowned_partitions`` (see
                   :func:`counts_frame`);
* ``checkpoint`` - for a pipeline with keyed state: the staged data, the previous committed state
                   (columns prefixed ``prev_``) and the staged new state (``state_``), outer-joined on the
                   suite's ``key_columns``.

A suite may derive more columns from its frame in ``meta.eo``: ``fill`` (``{column: value}`` for missing
values and missing columns) then ``derive`` (``{name: pandas expression}``, evaluated in order). Only
arithmetic lives here; every rule is in a suite (the completeness suite in :mod:`exactly_once.quality`,
the table's own in ``expectations/``). The derived frames are small and always use pandas.
"""
from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence
from urllib.parse import unquote

import pandas as pd

from ..contracts import STATE, Counts
from ..errors import ConfigError, ContractError, StorageError
from ..storage import LocalStorage, Storage, storage_for

DATA_DIR = "data"
COUNT_FIELDS = ("records_in", "records_out", "records_rejected", "records_deduplicated", "records_filtered",
                "state_rows", "input_files", "input_bytes")


@dataclass
class Frames:
    """What one validation looks at. ``data`` is a pandas or Spark DataFrame (per engine)."""

    data: Any
    counts: pd.DataFrame
    rows: int
    notes: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


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

    def read_native(self, url: str, per_file: dict[str, int] | None = None) -> Any | None:
        """The parquet dir at ``url`` as this engine's DataFrame, or None if it does not exist. ``per_file``
        (a dict) receives the rows of each file read, by file name, counted from the rows read."""
        if not self.exists(url):
            return None
        if self.engine == "spark":
            frame = self.spark.read.parquet(url)
            if per_file is not None:
                from pyspark.sql import functions as F  # noqa: N812

                for row in frame.groupBy(F.col("_metadata.file_name").alias("f")).count().collect():
                    per_file[unquote(str(row["f"]))] = int(row["count"])
            return frame
        import pyarrow.dataset as ds

        storage, path = self._fs(url)
        fs = None if isinstance(storage, LocalStorage) else getattr(storage, "fs", None)
        # pyarrow skips "_"/"." prefixed names (_SUCCESS, .crc), like Spark readers do
        dataset = ds.dataset(path, format="parquet", filesystem=fs)
        if per_file is None:
            return dataset.to_table().to_pandas()
        import pyarrow as pa

        batches, counted = [], Counter({posixpath.basename(f): 0 for f in dataset.files})
        for tagged in dataset.scanner().scan_batches():  # the same scan as to_table, each batch with its file
            batches.append(tagged.record_batch)
            counted[posixpath.basename(tagged.fragment.path)] += tagged.record_batch.num_rows
        per_file.update(counted)
        return pa.Table.from_batches(batches, schema=dataset.schema).to_pandas()

    def read_pandas(self, url: str | None) -> pd.DataFrame | None:
        """The parquet dir at ``url`` as pandas (None if no url or no such dir)."""
        frame = self.read_native(url) if url else None
        if frame is not None and self.engine == "spark":
            frame = frame.toPandas()
        return frame

    def read_partitions(self, staging_dir: str, partitions: Sequence[str], per_file: Mapping[str, dict[str, int]]
                        | None = None) -> tuple[Any, dict[str, int], list[str]]:
        """The staged ``partitions`` concatenated, rows per partition, and the partitions missing; the rows of
        each file of a partition in ``per_file`` go into ``per_file[partition]``."""
        frames, rows, missing = [], {}, []
        for part in partitions:
            frame = self.read_native(posixpath.join(staging_dir.rstrip("/"), DATA_DIR, part),
                                     (per_file or {}).get(part))
            if frame is None:
                missing.append(part)
                continue
            frames.append(frame)
            rows[part] = frame.count() if self.engine == "spark" else len(frame)
        if not frames:
            empty = self.spark.createDataFrame([], "x string").drop("x") if self.engine == "spark" else pd.DataFrame()
            return empty, rows, missing
        if self.engine == "spark":
            data = frames[0]
            for f in frames[1:]:
                data = data.unionByName(f, allowMissingColumns=True)
            return data, rows, missing
        return (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)), rows, missing

    def staged_partitions(self, staging_dir: str) -> list[str]:
        """Every partition dir with data files below ``<staging>/data`` (``key=value[/...]``)."""
        storage, path = self._fs(posixpath.join(staging_dir.rstrip("/"), DATA_DIR))
        parts = set()
        for entry in storage.walk_files(path):
            head, _, name = entry.rel.rpartition("/")
            if head and not name.startswith(("_", ".")):
                parts.add(head)
        return sorted(parts)


def _num(counts: Mapping[str, Any], key: str) -> float | None:
    value = counts.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def counts_frame(raw: Mapping[str, Any], *, owned: Sequence[str], staged: Mapping[str, int],
                 staged_partitions: Sequence[str], sums: Mapping[str, float],
                 file_gap: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """One row: the job's counts next to what is staged, with the derived gaps. Returns (frame, problems).

    * ``completeness_gap = records_in - (records_out + records_rejected + records_deduplicated +
      records_filtered)`` - every record read is accounted for exactly once (0);
    * ``rejected_ratio = records_rejected / records_in`` (0 for no input);
    * ``rows_written_gap`` - sum over partitions of ``|rows_written[p] - staged rows of p|``, plus ``file_gap``
      (the job's rows per file against the rows read from each file) (0);
    * ``unowned_partitions`` - partitions reported or staged that the interval does not own (0).

    A counts document that breaks its contract leaves the affected columns empty (null), so the
    completeness suite fails on them, and is reported in ``problems``.
    """
    problems: list[str] = []
    try:
        Counts.from_dict(raw)
    except ContractError as exc:
        problems.append(f"counts do not follow the contract: {exc}")
    defaults = {f.name: f.default for f in fields(Counts) if isinstance(f.default, int)}
    get = {k: _num(raw, k) if k in raw else defaults.get(k) for k in COUNT_FIELDS}
    rin, rout, rej, dedup, filt = (get[k] for k in COUNT_FIELDS[:5])
    written = dict(raw["rows_written"]) if isinstance(raw.get("rows_written"), Mapping) else None
    gap = total = None
    if written is not None and all(_num(written, p) is not None for p in written):
        total = sum(written.values())
        gap = sum(abs(written.get(p, 0) - staged.get(p, 0)) for p in set(written) | set(staged)) + file_gap
    ratio = None if rin is None or rej is None else (round(rej / rin, 6) if rin else 0.0)
    complete = None if None in (rin, rout, rej, dedup, filt) else rin - (rout + rej + dedup + filt)  # type: ignore[operator]
    metrics = raw.get("metrics") if isinstance(raw.get("metrics"), Mapping) else {}
    row = {**get, **{k: _num(metrics, k) for k in metrics}, **{f"sum_{c}": v for c, v in sums.items()},
           "rows_written": total, "staged_rows": sum(staged.values()), "completeness_gap": complete,
           "rejected_ratio": ratio, "rows_written_gap": gap,
           "unowned_partitions": len((set(written or {}) | set(staged_partitions)) - set(owned))}
    return pd.DataFrame([row]), problems


def checkpoint_frame(data: pd.DataFrame, prev: pd.DataFrame | None, state: pd.DataFrame | None,
                     keys: Sequence[str]) -> pd.DataFrame:
    """``data`` outer-joined on ``keys`` with the previous state (``prev_<col>``) and the new state
    (``state_<col>``); a missing state contributes its columns from ``state``'s schema or nothing."""
    def prefixed(frame: pd.DataFrame | None, prefix: str) -> pd.DataFrame:
        if frame is None:
            return pd.DataFrame({k: pd.Series(dtype=object) for k in keys})
        return frame.rename(columns={c: f"{prefix}{c}" for c in frame.columns if c not in keys})

    frame = data.merge(prefixed(prev, "prev_"), on=list(keys), how="outer")
    frame = frame.merge(prefixed(state, "state_"), on=list(keys), how="outer")
    return frame.sort_values(list(keys), na_position="first").reset_index(drop=True)


def apply_derivations(frame: pd.DataFrame, eo: Mapping[str, Any], suite: str) -> pd.DataFrame:
    """Apply a suite's ``meta.eo.fill`` and ``meta.eo.derive`` to (a copy of) ``frame``."""
    frame = frame.copy()
    for column, value in (eo.get("fill") or {}).items():
        frame[column] = frame[column].fillna(value) if column in frame.columns else value
    for name, expr in (eo.get("derive") or {}).items():
        try:
            frame[name] = frame.eval(expr, engine="python")
        except Exception as exc:  # noqa: BLE001 - a suite's expression: report it as a configuration error
            raise ConfigError(f"suite {suite}: meta.eo.derive[{name!r}] = {expr!r} failed: {exc}") from None
    return frame


def build_frames(reader: FrameReader, *, staging_dir: str, partitions: Sequence[str], counts: Mapping[str, Any],
                 file_rows: Mapping[str, Mapping[str, int]] | None = None) -> Frames:
    """Read the staged partitions; derive the counts frame. ``file_rows`` (the job's rows per file,
    ``_file_rows.json``): each listed partition's files are counted as read, and every difference adds to
    ``rows_written_gap`` - pre_commit took these counts for the manifest without reading a footer."""
    seen: dict[str, dict[str, int]] = {p: {} for p in (file_rows or {}) if p in partitions}
    data, staged, missing = reader.read_partitions(staging_dir, partitions, seen)
    notes: dict[str, Any] = {"data": [posixpath.join(staging_dir, DATA_DIR, p) for p in partitions],
                             "partitions_not_staged": missing}
    numeric = _numeric_sums(reader, data)
    off = {f"{p}/{name}": [claimed.get(name), seen[p].get(name, 0)] for p, claimed in (file_rows or {}).items()
           if p in seen for name in sorted(set(claimed) | set(seen[p])) if claimed.get(name) != seen[p].get(name, 0)}
    if off:
        notes["file_rows_vs_staged"] = off
    frame, problems = counts_frame(counts, owned=partitions, staged=staged,
                                   staged_partitions=reader.staged_partitions(staging_dir), sums=numeric,
                                   file_gap=sum(abs((c or 0) - s) for c, s in off.values()))
    written = counts.get("rows_written")
    if isinstance(written, Mapping):  # per partition: [the job's rows_written, rows staged], where they differ
        notes["rows_written_vs_staged"] = {p: [written.get(p), staged.get(p, 0)]
                                           for p in sorted(set(written) | set(staged))
                                           if written.get(p) != staged.get(p, 0)}
    return Frames(data=data, counts=frame, rows=sum(staged.values()), notes=notes, problems=problems)


def _numeric_sums(reader: FrameReader, data: Any) -> dict[str, float]:
    if reader.engine == "spark":
        from pyspark.sql import functions as F  # noqa: N812

        cols = [f.name for f in data.schema.fields if f.dataType.typeName() in
                ("integer", "long", "short", "byte", "double", "float", "decimal")]
        if not cols:
            return {}
        row = data.agg(*[F.sum(c).alias(c) for c in cols]).first()
        return {c: float(row[c] or 0) for c in cols}
    cols = [c for c in data.columns if pd.api.types.is_numeric_dtype(data[c]) and not pd.api.types.is_bool_dtype(data[c])]
    return {c: float(data[c].fillna(0).sum()) for c in cols}


def read_checkpoint(reader: FrameReader, data: Any, *, staging_dir: str, prev_state_dir: str | None,
                    keys: Sequence[str]) -> pd.DataFrame | None:
    """The checkpoint frame for ``keys`` (None when the data lacks a key column: the data suite fails)."""
    local = data.toPandas() if reader.engine == "spark" else data
    if not keys or not all(k in local.columns for k in keys):
        return None
    prev = reader.read_pandas(prev_state_dir)
    if prev_state_dir and prev is None:
        raise StorageError(f"previous checkpoint state {prev_state_dir} does not exist")
    state = reader.read_pandas(posixpath.join(staging_dir.rstrip("/"), STATE))
    return checkpoint_frame(local, prev, state, keys)
