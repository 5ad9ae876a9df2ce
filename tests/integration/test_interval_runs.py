"""IntervalRun over intervals of any length (exactly_once.protocol.pipeline): monthly state from the log, sources that
match nothing, re-freezing after an aborted attempt, partition ownership, stateless runs interleaved.

The write phase is a small pyarrow writer that uses the job API (JobSpec in, output dirs, state, counts
out), so no JVM is needed; every other phase (including the GX gate) is the real one.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from exactly_once.protocol.config import PipelineConfig
from exactly_once.contracts import Counts, JobSpec
from exactly_once.errors import (InputsShrankError, NoInputError, OrderingError, OwnershipError,
                                 TransactionStateError, ValidationFailedError)
from exactly_once.ids import Interval, TxnRef
from exactly_once.job import JobContext
from exactly_once.protocol.layout import Source
from exactly_once.protocol.pipeline import IntervalRun
from exactly_once.storage import storage_for
from exactly_once.records.txlog import State

UTC = timezone.utc


def month(m: int) -> Interval:
    return Interval(datetime(2013, m, 1, tzinfo=UTC), datetime(2013 + m // 12, m % 12 + 1, 1, tzinfo=UTC))


def config(root: Path, **kw: Any) -> PipelineConfig:
    base = dict(pipeline="p", sink="t", root=str(root), application="/job.py", reports=str(root / "reports"),
                sources=Source("s", format="csv", path="{start:%Y-%m}"), partitions="month={start:%Y-%m}")
    return PipelineConfig(**{**base, **kw})


def land(root: Path, folder: str, name: str, values: list[int]) -> None:
    path = root / "landing" / "s" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("v\n" + "".join(f"{v}\n" for v in values))


def write(spec_url: str, *, partition: str | None = None, reported: int = 1, files: int = 1,
          state_from: str | None = None) -> Counts:
    """The write phase: sum the CSV values per partition; state = running total (stateful pipelines), read
    from the spec's ``prev_state`` or from ``state_from`` (a batch's chained entry: the state the job just
    computed for the entry before it)."""
    store, key = storage_for(spec_url)
    ctx = JobContext(None, JobSpec.from_json(store.read_bytes(key)))
    values = [int(v) for i in ctx.source().inputs for v in Path(i.path).read_text().split()[1:]]
    prev = 0
    if state_from or ctx.spec.prev_state:
        prev = pq.read_table(state_from or ctx.spec.prev_state).column("total")[0].as_py()
    part = partition or ctx.partitions[0]
    out = Path(ctx.spec.data_dir) / part
    out.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        pq.write_table(pa.table({"n": [len(values)], "total": [prev + sum(values)]}), out / f"part-{i}.parquet")
    if ctx.spec.stateful:
        state = Path(ctx.spec.staging_dir) / "_state"
        state.mkdir(exist_ok=True)
        pq.write_table(pa.table({"total": [prev + sum(values)]}), state / "part-0.parquet")
    files, size = ctx.input_stats()
    return ctx.finish(Counts(records_in=len(values), records_out=len(values), rows_written={part: reported},
                             input_files=files, input_bytes=size))


def land_four(root: Path) -> None:
    for name, v in (("a.csv", 1), ("b.csv", 2), ("c.csv", 4), ("d.csv", 8)):
        land(root, "2013-01", name, [v])


def archive_three(root: Path) -> None:
    """An archiver moves three of the four files out of the landing zone."""
    (root / "archive").mkdir(exist_ok=True)
    for name in ("a.csv", "b.csv", "c.csv"):
        (root / "landing" / "s" / "2013-01" / name).rename(root / "archive" / name)


def unarchive_three(root: Path) -> None:
    """The archiver's move is undone: the very files are back (a move keeps their mtime)."""
    for name in ("a.csv", "b.csv", "c.csv"):
        (root / "archive" / name).rename(root / "landing" / "s" / "2013-01" / name)


def run_interval(cfg: PipelineConfig, iv: Interval, *, refresh: bool = False, allow_shrinking: bool = False,
                 run_id: str = "r") -> dict[str, Any]:
    run = IntervalRun(cfg, iv, storage_options={})
    began = run.begin(refresh_sources=refresh, allow_shrinking=allow_shrinking, run={"run_id": run_id})
    txn = TxnRef.from_dict(began["txn"])
    try:
        write(began["spec"])
        run.pre_commit(txn)
        run.validate(txn)
        run.commit(txn)
    finally:
        run.abort(txn)
    return {"txn": txn, "began": began, "sink": run.sink}


def table(cfg: PipelineConfig) -> dict[str, tuple[int, int]]:
    t = ds.dataset(cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()
    return {r["month"]: (r["n"], r["total"]) for r in t}


def test_monthly_state_comes_from_the_committed_predecessor_in_the_log(tmp_path, capsys):
    cfg = config(tmp_path, stateful=True, start="2013-01-01")
    for m, values in ((1, [1, 2]), (2, [10]), (3, [100, 200])):
        land(tmp_path, f"2013-{m:02d}", "a.csv", values)
    with pytest.raises(OrderingError, match="ends at 2013-02-01T00:00:00"):
        IntervalRun(cfg, month(2), storage_options={}).begin()  # January is not committed yet
    jan = run_interval(cfg, month(1))
    feb = run_interval(cfg, month(2))  # 28 days: "start minus length" would be [Jan 4, Feb 1)
    mar = run_interval(cfg, month(3))
    assert table(cfg) == {"2013-01": (2, 3), "2013-02": (1, 13), "2013-03": (2, 313)}
    sink = jan["sink"]
    assert sink.status(month(2))[1].reads == jan["txn"] and sink.status(month(3))[1].reads == feb["txn"]
    assert sink.status(month(1))[1].reads is None  # the first interval reads no state
    assert mar["txn"].epoch == 1
    # eo addresses the table by its URL alone (the owner record names its pipeline)
    from exactly_once.cli import main

    assert main(["status", cfg.table_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"p/t: {cfg.table_url}") and out.count("e1:COMMITTED") == 3


def test_no_input_fails_before_anything_is_written_unless_empty_is_normal(tmp_path):
    cfg = config(tmp_path)
    run = IntervalRun(cfg, month(1), storage_options={})
    with pytest.raises(NoInputError, match=r"nothing under .*landing/s matches \['2013-01'\].*allow_empty=True"):
        run.begin()
    assert run.sink.log.intervals() == []
    (tmp_path / "landing" / "s" / "2013-01").mkdir(parents=True)
    (tmp_path / "landing" / "s" / "2013-01" / "a.json").write_text("{}")  # the wrong format: ignored
    with pytest.raises(NoInputError):
        run.begin()
    empty_ok = config(tmp_path, sources=Source("s", format="csv", path="{start:%Y-%m}", allow_empty=True))
    run_interval(empty_ok, month(1))
    assert table(empty_ok) == {"2013-01": (0, 0)}


def test_a_plain_rerun_refreezes_after_an_aborted_attempt_and_replays_a_committed_one(tmp_path):
    cfg = config(tmp_path)
    land(tmp_path, "2013-01", "a.csv", [1])
    run = IntervalRun(cfg, month(1), storage_options={})
    first = run.begin(run={"run_id": "r1"})  # froze a.csv, then aborted before its write
    assert run.abort(TxnRef.from_dict(first["txn"])) == "ABORTED"
    land(tmp_path, "2013-01", "b.csv", [2])  # the landing zone is fixed
    done = run_interval(cfg, month(1))
    assert not done["began"].get("replayed") and table(cfg) == {"2013-01": (2, 3)}
    assert done["sink"].status(month(1))[2].records["open"]["meta"]["replayed"] is False
    land(tmp_path, "2013-01", "c.csv", [4])  # late: a plain re-run replays the committed inputs ...
    again = run_interval(cfg, month(1))
    assert again["sink"].status(month(1))[3].records["open"]["meta"]["replayed"] is True
    assert table(cfg) == {"2013-01": (2, 3)}
    run_interval(cfg, month(1), refresh=True)  # ... a reprocess takes it in
    assert table(cfg) == {"2013-01": (3, 7)}


def test_a_reprocess_that_lost_inputs_is_refused_unless_shrinking_is_allowed(tmp_path):
    """Issue 13 case 1: 3 of the interval's 4 files were archived away; a reprocess must not silently
    publish the one left over the committed four."""
    cfg = config(tmp_path)
    land_four(tmp_path)
    run_interval(cfg, month(1))
    assert table(cfg) == {"2013-01": (4, 15)}
    archive_three(tmp_path)
    run = IntervalRun(cfg, month(1), storage_options={})
    with pytest.raises(InputsShrankError, match=r"3 input file\(s\).*s:2013-01/a.csv.*allow_shrinking"):
        run.begin(refresh_sources=True, run={"run_id": "reprocess"})
    assert sorted(run.sink.status(month(1))) == [1] and table(cfg) == {"2013-01": (4, 15)}  # nothing began
    done = run_interval(cfg, month(1), refresh=True, allow_shrinking=True)  # intended: it goes through
    meta = done["sink"].status(month(1))[2].records["open"]["meta"]
    assert meta["dropped_inputs"] == ["s:2013-01/a.csv", "s:2013-01/b.csv", "s:2013-01/c.csv"]
    assert table(cfg) == {"2013-01": (1, 8)}


def test_a_failed_shrunk_reprocess_never_poisons_the_next_plain_rerun(tmp_path):
    """Issue 13 case 1: a reprocess froze the one file left while three were moved away, its gate failed
    and its abort never ran (the worker was killed); the files are back, and the next plain re-run
    replays the committed version's four files, not the failed attempt's one."""
    cfg = config(tmp_path)
    land_four(tmp_path)
    run_interval(cfg, month(1))
    archive_three(tmp_path)
    run = IntervalRun(cfg, month(1), storage_options={})
    began = run.begin(refresh_sources=True, allow_shrinking=True, run={"run_id": "reprocess"})
    bad = TxnRef.from_dict(began["txn"])
    write(began["spec"])
    run.pre_commit(bad)
    run.sink.record_validation(bad, False, {"note": "the gate failed"})  # ... then the worker died
    unarchive_three(tmp_path)  # the archiver's move is undone
    again = run_interval(cfg, month(1))
    statuses = again["sink"].status(month(1))
    assert statuses[bad.epoch].state is State.ABORTED
    assert statuses[3].records["open"]["meta"]["replayed"] is True and again["began"]["inputs"] == 4
    assert table(cfg) == {"2013-01": (4, 15)}


def test_two_intervals_never_publish_one_partition(tmp_path):
    hourly = dict(sources=Source("s", format="csv", path="{start:%Y-%m}", allow_empty=True),
                  partitions="dt={start:%Y-%m-%d}/hour={start:%H}")
    cfg = config(tmp_path, **hourly)
    five = Interval(datetime(2013, 1, 1, 5, tzinfo=UTC), datetime(2013, 1, 1, 6, tzinfo=UTC))
    odd = Interval(datetime(2013, 1, 1, 5, 30, tzinfo=UTC), datetime(2013, 1, 1, 6, 30, tzinfo=UTC))
    run_interval(cfg, five)
    run = IntervalRun(cfg, odd, storage_options={})  # a manual run off the schedule: also hour=05
    with pytest.raises(OwnershipError, match="would publish dt=2013-01-01/hour=05, which interval"):
        run.begin()
    assert run.sink.status(odd) == {}
    # a job writing outside its own partitions is refused at pre_commit, before it claims anything
    six = Interval(datetime(2013, 1, 1, 6, tzinfo=UTC), datetime(2013, 1, 1, 7, tzinfo=UTC))
    run6 = IntervalRun(cfg, six, storage_options={})
    began6 = run6.begin()
    txn = TxnRef.from_dict(began6["txn"])
    with pytest.raises(Exception, match="does not own"):  # the job API refuses it ...
        write(began6["spec"], partition="dt=2013-01-01/hour=05")
    out = Path(run6.sink.data_dir(txn)) / "dt=2013-01-01" / "hour=05"  # ... a job writing there anyway
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"n": [9], "total": [9]}), out / "part-0.parquet")
    (Path(run6.sink.staging_dir(txn)) / "_counts.json").write_bytes(
        Counts(records_in=0, records_out=0, rows_written={"dt=2013-01-01/hour=05": 1}).to_json())
    with pytest.raises(OwnershipError, match="outside the partitions"):
        run6.pre_commit(txn)
    assert run6.abort(txn) == "ABORTED"
    run_interval(cfg, six)
    assert sorted(ds.dataset(cfg.table_url, format="parquet", partitioning="hive").to_table()
                  .column("hour").to_pylist()) == [5, 6]


def test_stateless_intervals_interleaved_like_parallel_runs(tmp_path):
    """max_active_runs > 1: two intervals' phases interleave; each publishes its own partition once."""
    cfg = config(tmp_path)
    for m in (1, 2):
        land(tmp_path, f"2013-{m:02d}", "a.csv", [m] * m)
    runs = [IntervalRun(cfg, month(m), storage_options={}) for m in (1, 2)]
    began = [r.begin(run={"run_id": f"r{i}"}) for i, r in enumerate(runs)]
    txns = [TxnRef.from_dict(b["txn"]) for b in began]
    for b in reversed(began):
        write(b["spec"])
    for phase in ("pre_commit", "validate", "commit", "abort"):
        for r, t in zip(reversed(runs), reversed(txns)):
            getattr(r, phase)(t)
    assert table(cfg) == {"2013-01": (1, 1), "2013-02": (2, 4)}
    assert all(st.state is State.COMMITTED for r in runs for st in r.sink.status(r.interval).values())


def test_a_reprocess_that_finds_no_file_left_is_a_shrink_not_a_missing_input(tmp_path):
    """Every file the committed version read is gone: the reprocess is refused as a shrink (naming
    allow_shrinking), not as a missing input (which would suggest allow_empty); allowed, it publishes
    the now empty interval."""
    cfg = config(tmp_path)
    land_four(tmp_path)
    run_interval(cfg, month(1))
    for name in ("a.csv", "b.csv", "c.csv", "d.csv"):
        (tmp_path / "landing" / "s" / "2013-01" / name).unlink()
    run = IntervalRun(cfg, month(1), storage_options={})
    with pytest.raises(InputsShrankError, match=r"4 input file\(s\).*ALLOW_SHRINKING=1"):
        run.begin(refresh_sources=True, run={"run_id": "reprocess"})
    assert sorted(run.sink.status(month(1))) == [1] and table(cfg) == {"2013-01": (4, 15)}  # nothing began
    done = run_interval(cfg, month(1), refresh=True, allow_shrinking=True)
    assert len(done["sink"].status(month(1))[2].records["open"]["meta"]["dropped_inputs"]) == 4
    assert table(cfg) == {"2013-01": (0, 0)}
    with pytest.raises(NoInputError, match="allow_empty"):  # an interval never committed: a missing input
        IntervalRun(cfg, month(2), storage_options={}).begin(refresh_sources=True)


def _footers_read(monkeypatch) -> list[str]:
    """Record every Parquet footer the manifest reads."""
    import exactly_once.records.manifest as manifests
    read: list[str] = []
    real = manifests.describe

    def describe(storage, path, name, size, checksums=True, etag=None, rows=None):
        if rows is None and name.endswith(".parquet"):
            read.append(path)
        return real(storage, path, name, size, checksums, etag, rows)
    monkeypatch.setattr(manifests, "describe", describe)
    return read


def test_pre_commit_takes_a_one_file_partitions_rows_from_the_job_and_the_gate_holds_the_job_to_them(
        tmp_path, monkeypatch):
    land_four(tmp_path)
    cfg = config(tmp_path)
    read = _footers_read(monkeypatch)
    run = IntervalRun(cfg, month(1), storage_options={})
    txn = TxnRef.from_dict((began := run.begin())["txn"])
    write(began["spec"])
    assert run.pre_commit(txn)["rows"] == 1 and read == []  # no footer read: one GET less per file on S3
    run.validate(txn)
    run.commit(txn)
    assert table(cfg) == {"2013-01": (4, 15)}
    # a job that misreports: the manifest records its count, the gate finds the staged rows differ, and
    # nothing of the attempt is ever published (not by a retry of the commit, not by recover)
    run2 = IntervalRun(cfg, month(1), storage_options={})
    txn2 = TxnRef.from_dict((began2 := run2.begin(refresh_sources=True))["txn"])
    write(began2["spec"], reported=2)
    assert run2.pre_commit(txn2)["rows"] == 2
    with pytest.raises(ValidationFailedError, match=r"rows_written_gap.*job reported 2, staged 1"):
        run2.validate(txn2)
    with pytest.raises(TransactionStateError, match="commit refused, validation failed"):
        run2.commit(txn2)
    run2.sink.recover(month(1))
    assert run2.sink.status_of(txn2).state is not State.COMMITTED and table(cfg) == {"2013-01": (4, 15)}
    assert run2.abort(txn2) == "ABORTED"
    # several files in a partition: each file's count comes from its footer
    run3 = IntervalRun(cfg, month(1), storage_options={})
    txn3 = TxnRef.from_dict((began3 := run3.begin(refresh_sources=True))["txn"])
    write(began3["spec"], files=2, reported=2)
    assert run3.pre_commit(txn3)["rows"] == 2 and len(read) == 2


def test_an_ungated_sink_reads_every_footer_whatever_the_writer_says(tmp_path, monkeypatch):
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    read = _footers_read(monkeypatch)
    sink = TwoPhaseCommitSink.at(str(tmp_path / "table"), pipeline="p", sink="t")
    assert not sink.require_validation
    iv = month(1)
    txn = sink.begin(iv)
    out = Path(sink.data_dir(txn)) / "month=2013-01"
    out.mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2, 3]}), out / "part-0.parquet")
    assert sink.pre_commit(txn, rows={"month=2013-01": 7}).rows == 3 and len(read) == 1


def test_counts_trusted_at_pre_commit_make_the_attempt_gated_for_any_recoverer(tmp_path):
    # review: the job's rows_written were trusted because the pipeline's sink requires a verdict, but the log
    # did not say so - a maintenance process recovering through a default (ungated) handle committed the
    # unvalidated attempt, and the Delta add action carried the job's wrong count as numRecords
    land_four(tmp_path)
    cfg = config(tmp_path, table_format="delta")
    run = IntervalRun(cfg, month(1), storage_options={})
    txn = TxnRef.from_dict((began := run.begin())["txn"])
    write(began["spec"], reported=999)  # 1 row staged
    run.pre_commit(txn)  # ... and the worker dies before validate
    assert run.sink.status_of(txn).records["pre_committed"].get("gated") is True
    from exactly_once.protocol.transaction import TwoPhaseCommitSink
    other = TwoPhaseCommitSink.open(cfg.table_url)
    assert not other.require_validation
    other.recover(month(1))
    st = run.sink.status_of(txn)
    assert st.state is State.PRE_COMMITTED and st.validation is None  # waits for its gate
    with pytest.raises(ValidationFailedError, match="job reported 999, staged 1"):
        run.validate(txn)
    assert run.abort(txn) == "ABORTED" and not list((tmp_path / "warehouse").rglob("*.parquet"))


def test_historical_and_far_future_intervals_run_and_keep_their_order(tmp_path):
    """Intervals before 1970 (a user's data from 1952) and in the last year a datetime has run through the
    protocol like any other: a stateful chain across them reads the right state, the log lists them in time
    order, ``eo history`` shows them; before the year 1000 an interval is refused with the reason."""
    from exactly_once.cli import main as eo
    from exactly_once.errors import UnsafeIdentifierError

    def year(y: int) -> Interval:
        return Interval(datetime(y, 1, 1, tzinfo=UTC), datetime(y + 1, 1, 1, tzinfo=UTC))

    cfg = config(tmp_path, stateful=True, start=datetime(1952, 1, 1, tzinfo=UTC),
                 sources=Source("s", format="csv", path="{start:%Y}"), partitions="year={start:%Y}")
    for y, v in ((1952, 5), (1953, 7)):
        land(tmp_path, str(y), "a.csv", [v])
        run_interval(cfg, year(y))
    assert table_rows(cfg) == {"1952": (1, 5), "1953": (1, 12)}               # 1953 read 1952's state
    far = Interval(datetime(9999, 12, 30, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))
    free = config(tmp_path, sink="t2", sources=Source("s", format="csv", path="{start:%Y-%m-%d}"),
                  partitions="dt={start:%Y-%m-%d}")
    land(tmp_path, "9999-12-30", "a.csv", [1])
    run_interval(free, far)
    sink = IntervalRun(cfg, year(1953), storage_options={}).sink
    assert sink.log.intervals() == [year(1952), year(1953)] and year(1952).token.startswith("19520101T")
    assert IntervalRun(free, far, storage_options={}).sink.committed(far) is not None
    assert eo(["history", cfg.table_url]) == 0
    for bad in (lambda: Interval(datetime(999, 1, 1, tzinfo=UTC), datetime(1000, 1, 1, tzinfo=UTC)),
                lambda: Interval.daily("9999-12-31")):
        with pytest.raises(UnsafeIdentifierError, match="interval out of range: .*(year 1000|year 9999)"):
            bad()


def table_rows(cfg: PipelineConfig) -> dict[str, tuple[int, int]]:
    rows = ds.dataset(cfg.table_url, format="parquet", partitioning="hive").to_table().to_pylist()
    return {str(r["year"]): (r["n"], r["total"]) for r in rows}
