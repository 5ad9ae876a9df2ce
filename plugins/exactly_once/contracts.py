"""The typed contracts that cross process boundaries between the library and a write job.

* :class:`JobSpec` - what ``begin`` hands the write job (as ``_job.json`` in the staging dir): the
  transaction, the interval, the partitions it owns, the frozen inputs of every source and where to
  write. The job reads it with :func:`exactly_once.job.JobContext.from_spec_url`.
* :class:`Counts` - what the write job hands the completeness check (``_counts.json``, written last):
  one schema for every pipeline, documented in ``docs/JOB_API.md``.
* :class:`BatchSpec` - what a batched backfill hands ONE write job that computes several intervals
  (``_batch.json``): one job spec per interval, in interval order, and how their state chains.

Both are frozen dataclasses with ``to_dict``/``from_dict``; ``from_dict`` refuses anything malformed
with a :class:`ContractError` naming the field. Paths inside the staging dir are fixed here
(:data:`STATE`, :data:`QUARANTINE`, :data:`COUNTS`, :data:`SPEC`) so that the library and the job agree.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

from .errors import ContractError
from .ids import Interval, check_name, check_partition

SPEC = "_job.json"            # the job spec, in the staging dir
BATCH_SPEC = "_batch.json"    # a batch's spec, in its batch dir
COUNTS = "_counts.json"       # the job's counts, in the staging dir; written last
FILE_ROWS = "_file_rows.json"  # {partition: {file: rows}} of partitions of several data files (JobContext.finish)
STATE = "_state"              # the job's new keyed state (stateful pipelines), in the staging dir
QUARANTINE = "_quarantine"    # rejected input records, in the staging dir
CONTRACT_VERSION = 1
# column names of the gate's counts frame besides the Counts fields (a metric may not take one)
DERIVED = ("staged_rows", "completeness_gap", "rejected_ratio", "rows_written_gap", "unowned_partitions")


def _int(d: Mapping[str, Any], key: str, what: str, default: Any = ...) -> Any:
    value = d.get(key, default)
    if value is ...:
        raise ContractError(f"{what}: {key} is missing")
    if value is None and default is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ContractError(f"{what}: {key} must be a non-negative integer, not {value!r}")
    return value


def _int_map(d: Mapping[str, Any], key: str, what: str, *, partitions: bool = False) -> dict[str, int]:
    value = d.get(key, {})
    if not isinstance(value, Mapping):
        raise ContractError(f"{what}: {key} must be an object, not {type(value).__name__}")
    out = {}
    for k, v in value.items():
        if partitions:
            check_partition(k)
        out[str(k)] = _int(value, k, f"{what} {key}")
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class FrozenInput:
    """One input file as frozen at ``begin``: where it is and what it was (size, mtime, etag)."""

    path: str                      # local path or URL (s3://...) as the library stores it
    rel: str                       # path relative to the source's landing root
    size: int
    mtime: float | None = None
    etag: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rel": self.rel, "size": self.size, "mtime": self.mtime, "etag": self.etag}

    def changed_from(self, now: "FrozenInput") -> str | None:
        """How the file ``now`` differs from this frozen one (``"size 4 -> 5"``), None if it is the same:
        the size, then the etag (S3: the content) or, without etags, the mtime (local files: a file
        rewritten in place with the same size)."""
        for what, was, is_ in (("size", self.size, now.size), ("etag", self.etag, now.etag)):
            if was is not None and is_ is not None and was != is_:
                return f"{what} {was} -> {is_}"
        if not (self.etag and now.etag) and self.mtime is not None and now.mtime is not None \
                and self.mtime != now.mtime:
            return f"mtime {self.mtime} -> {now.mtime}"
        return None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FrozenInput":
        if not isinstance(d, Mapping) or not isinstance(d.get("path"), str):
            raise ContractError(f"frozen input: expected an object with a path, not {d!r}")
        return cls(d["path"], str(d.get("rel", d["path"])), _int(d, "size", f"input {d['path']}"),
                   d.get("mtime"), d.get("etag"))


@dataclass(frozen=True)
class SourceInputs:
    """A source as the job reads it: its Spark format and reader options, and its frozen files."""

    name: str
    format: str
    options: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[FrozenInput, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "format": self.format, "options": dict(self.options),
                "inputs": [i.to_dict() for i in self.inputs]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SourceInputs":
        if not isinstance(d, Mapping) or not isinstance(d.get("format"), str):
            raise ContractError(f"source: expected an object with name, format, inputs, not {d!r}")
        options = d.get("options") or {}
        return cls(check_name(d.get("name", ""), "source name"), d["format"],
                   {str(k): str(v) for k, v in options.items()},
                   tuple(FrozenInput.from_dict(i) for i in d.get("inputs") or []))


@dataclass(frozen=True)
class JobSpec:
    """Everything the write job of one transaction needs; see ``docs/JOB_API.md``.

    ``partitions`` are the partitions this interval owns: the job writes each under
    ``<data_dir>/<partition>/`` and nothing else under ``data_dir``. ``prev_state`` is the committed
    predecessor's state dir (stateful pipelines; None for the first interval or a stateless one).
    """

    pipeline: str
    sink: str
    txn: str
    interval_start: str            # ISO-8601 UTC
    interval_end: str
    partitions: tuple[str, ...]
    sources: tuple[SourceInputs, ...]
    staging_dir: str
    data_dir: str
    prev_state: str | None = None
    stateful: bool = False
    spark_remote: str | None = None
    begin_id: str | None = None    # unique per begin (uuid4 hex): tells a re-created table's txns apart
    heartbeat: str | None = None   # the object the write task keeps fresh while it runs (liveness)
    version: int = CONTRACT_VERSION

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline id")
        check_name(self.sink, "sink name")
        for p in self.partitions:
            check_partition(p)
        self.interval  # noqa: B018 - refuses bad bounds
        if self.prev_state and self.prev_state.rstrip("/").startswith(self.staging_dir.rstrip("/") + "/"):
            raise ContractError(f"prev_state {self.prev_state} lies inside the staging dir it would overwrite")

    @property
    def interval(self) -> Interval:
        return Interval(self.interval_start, self.interval_end)

    @property
    def session_scope(self) -> str:
        """What identifies this transaction attempt on a shared Spark Connect server: the staging dir
        (table location and transaction name) and the begin's unique id (a re-created table reuses both
        location and transaction names)."""
        return f"{self.staging_dir}#{self.begin_id or ''}"

    def source(self, name: str | None = None) -> SourceInputs:
        """The source called ``name`` (the only one when ``name`` is None)."""
        if name is None:
            if len(self.sources) != 1:
                raise ContractError(f"the spec has {len(self.sources)} sources; name one of "
                                    f"{[s.name for s in self.sources]}")
            return self.sources[0]
        for s in self.sources:
            if s.name == name:
                return s
        raise ContractError(f"no source {name!r} in the spec (sources: {[s.name for s in self.sources]})")

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "pipeline": self.pipeline, "sink": self.sink, "txn": self.txn,
                "interval_start": self.interval_start, "interval_end": self.interval_end,
                "partitions": list(self.partitions), "sources": [s.to_dict() for s in self.sources],
                "staging_dir": self.staging_dir, "data_dir": self.data_dir, "prev_state": self.prev_state,
                "stateful": self.stateful, "spark_remote": self.spark_remote, "begin_id": self.begin_id,
                "heartbeat": self.heartbeat}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True).encode()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobSpec":
        if not isinstance(d, Mapping):
            raise ContractError("job spec: expected a JSON object")
        if d.get("version") != CONTRACT_VERSION:
            raise ContractError(f"job spec version {d.get('version')!r}: this library reads version "
                                f"{CONTRACT_VERSION}; use the same exactly_once version for the DAG and the job")
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in d]
        if missing:
            raise ContractError(f"job spec lacks {missing}")
        return cls(d["pipeline"], d["sink"], d["txn"], d["interval_start"], d["interval_end"],
                   tuple(d["partitions"]), tuple(SourceInputs.from_dict(s) for s in d["sources"]),
                   d["staging_dir"], d["data_dir"], d.get("prev_state"), bool(d.get("stateful")),
                   d.get("spark_remote"), d.get("begin_id"), d.get("heartbeat"))

    @classmethod
    def from_json(cls, data: bytes | str) -> "JobSpec":
        try:
            return cls.from_dict(json.loads(data))
        except (ValueError, TypeError) as exc:
            raise ContractError(f"job spec is not valid JSON: {exc}") from None


@dataclass(frozen=True)
class Counts:
    """What the write job counted; the completeness check every pipeline gets reads it.

    Records are the units a job reads (lines, rows, events). Every record read is accounted for
    exactly once: ``records_in == records_out + records_rejected + records_deduplicated +
    records_filtered``. ``rows_written`` maps each partition written to its output row count (it must
    equal the staged rows). ``rejected_by_reason`` breaks ``records_rejected`` down; ``metrics`` holds a
    job's own numbers (for its own suite, e.g. ``flights``).
    """

    records_in: int
    records_out: int
    records_rejected: int = 0
    records_deduplicated: int = 0
    records_filtered: int = 0
    rows_written: Mapping[str, int] = field(default_factory=dict)
    state_rows: int | None = None
    input_files: int = 0
    input_bytes: int = 0
    rejected_by_reason: Mapping[str, int] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    version: int = CONTRACT_VERSION

    def __post_init__(self) -> None:
        Counts.from_dict(self.to_dict())  # the same checks as for a document read back

    @property
    def rows_total(self) -> int:
        return sum(self.rows_written.values())

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "records_in": self.records_in, "records_out": self.records_out,
                "records_rejected": self.records_rejected, "records_deduplicated": self.records_deduplicated,
                "records_filtered": self.records_filtered, "rows_written": dict(sorted(self.rows_written.items())),
                "state_rows": self.state_rows, "input_files": self.input_files, "input_bytes": self.input_bytes,
                "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
                "metrics": dict(sorted(self.metrics.items()))}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True).encode()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Counts":
        """Parse and check a counts document (types only: whether it adds up is the gate's call)."""
        what = "counts"
        if not isinstance(d, Mapping):
            raise ContractError("counts: expected a JSON object")
        if d.get("version", CONTRACT_VERSION) != CONTRACT_VERSION:
            raise ContractError(f"counts version {d.get('version')!r}; expected {CONTRACT_VERSION}")
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ContractError(f"counts: unknown fields {sorted(unknown)} (job-specific numbers go in metrics)")
        metrics = d.get("metrics") or {}
        if not isinstance(metrics, Mapping) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in metrics.values()):
            raise ContractError(f"counts: metrics must map names to finite numbers, not {metrics!r}")
        clash = sorted(k for k in metrics if k in RESERVED or str(k).startswith("sum_"))
        if clash:
            raise ContractError(f"counts: metric names {clash} are taken by the counts frame; rename them")
        obj = object.__new__(cls)
        values = {
            "records_in": _int(d, "records_in", what), "records_out": _int(d, "records_out", what),
            "records_rejected": _int(d, "records_rejected", what, 0),
            "records_deduplicated": _int(d, "records_deduplicated", what, 0),
            "records_filtered": _int(d, "records_filtered", what, 0),
            "rows_written": _int_map(d, "rows_written", what, partitions=True),
            "state_rows": _int(d, "state_rows", what, None), "input_files": _int(d, "input_files", what, 0),
            "input_bytes": _int(d, "input_bytes", what, 0),
            "rejected_by_reason": _int_map(d, "rejected_by_reason", what),
            "metrics": dict(sorted((str(k), v) for k, v in metrics.items())), "version": CONTRACT_VERSION}
        for k, v in values.items():
            object.__setattr__(obj, k, v)
        return obj


@dataclass(frozen=True)
class BatchEntry:
    """One interval of a batch: the URL of its job spec, and where its previous state comes from -
    ``chained``: the new state the job computes for the entry before it (same batch); else
    ``prev_state`` (a committed checkpoint's state, or the staged state of a predecessor attempt not
    committed yet; None for the first interval or a stateless pipeline)."""

    spec: str
    prev_state: str | None = None
    chained: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "prev_state": self.prev_state, "chained": self.chained}


@dataclass(frozen=True)
class BatchSpec:
    """What a batched write job gets (``--batch <url>``): its intervals' job specs in interval order
    (each one its own transaction) and ``scratch_dir``, where the job's combined writes land before the
    library moves each interval's files into that interval's staging dir. See ``docs/JOB_API.md``."""

    pipeline: str
    sink: str
    batch_id: str
    entries: tuple[BatchEntry, ...]
    scratch_dir: str
    spark_remote: str | None = None
    version: int = CONTRACT_VERSION

    def __post_init__(self) -> None:
        check_name(self.pipeline, "pipeline id")
        check_name(self.sink, "sink name")
        check_name(self.batch_id, "batch id")
        if not self.entries:
            raise ContractError("batch spec: no entries")
        if self.entries[0].chained:
            raise ContractError("batch spec: the first entry cannot be chained (it has no entry before it)")

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "pipeline": self.pipeline, "sink": self.sink, "batch_id": self.batch_id,
                "entries": [e.to_dict() for e in self.entries], "scratch_dir": self.scratch_dir,
                "spark_remote": self.spark_remote}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "BatchSpec":
        try:
            d = json.loads(data)
            if not isinstance(d, Mapping) or d.get("version") != CONTRACT_VERSION:
                raise ContractError(f"batch spec version {d.get('version') if isinstance(d, Mapping) else d!r}: "
                                    f"this library reads version {CONTRACT_VERSION}")
            entries = tuple(BatchEntry(str(e["spec"]), e.get("prev_state"), bool(e.get("chained")))
                            for e in d["entries"])
            return cls(d["pipeline"], d["sink"], d["batch_id"], entries, d["scratch_dir"], d.get("spark_remote"))
        except (ValueError, TypeError, KeyError) as exc:
            raise ContractError(f"batch spec is not valid: {exc}") from None


RESERVED = frozenset({f.name for f in fields(Counts)} | set(DERIVED))
