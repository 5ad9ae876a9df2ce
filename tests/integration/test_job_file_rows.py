"""Row counts per data file from the job (``_file_rows.json``): a partition written as several Parquet files is
sealed by ``pre_commit`` without reading one footer; only counts that name exactly the staged files and add up
to the job's ``rows_written`` are taken, and the gate checks every file's rows as it reads them (review 33:
a job's own wrong split, or a rewrite after the count, fails the gate)."""
from __future__ import annotations

import glob
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exactly_once.contracts import FILE_ROWS, Counts, FrozenInput, JobSpec, SourceInputs
from exactly_once.ids import Interval, TxnRef
from exactly_once.job import JobContext, execute
from exactly_once.records import manifest as manifests
from exactly_once.storage import LocalStorage

DAY = "2026-01-01"
PARTS = ("dt=2026-01-01/kind=many", "dt=2026-01-01/kind=one")


def spec_for(tmp: Path) -> JobSpec:
    landing = tmp / "landing.csv"
    landing.write_text("x\n1\n")
    st = os.stat(landing)
    iv = Interval.daily(DAY)
    staging = str(tmp / "staging")
    return JobSpec(pipeline="p", sink="t", txn="t1", interval_start=iv.start.isoformat(),
                   interval_end=iv.end.isoformat(), partitions=PARTS,
                   sources=(SourceInputs("s", "csv", {}, (FrozenInput(str(landing), "landing.csv", st.st_size,
                                                                      st.st_mtime),)),),
                   staging_dir=staging, data_dir=os.path.join(staging, "data"))


def footer_rows(staging: str, part: str) -> dict[str, int]:
    return {os.path.basename(f): pq.ParquetFile(f).metadata.num_rows
            for f in glob.glob(os.path.join(staging, "data", part, "*.parquet"))}


def test_the_job_counts_the_rows_of_each_file_of_a_partition_of_several_files(spark, tmp_path):
    """One Spark action counts the files of the partition written as three files (a file with no rows
    included); the partition of one file needs none (its count is ``rows_written``)."""
    spec = spec_for(tmp_path)

    def compute(ctx: JobContext) -> Counts:
        many = spark.createDataFrame([(i,) for i in range(10)], "n long").repartition(3)
        many.write.mode("overwrite").parquet(ctx.output_dir(PARTS[0]))
        spark.createDataFrame([], "n long").coalesce(1).write.mode("append").parquet(ctx.output_dir(PARTS[0]))
        spark.createDataFrame([(1,), (2,)], "n long").coalesce(1).write.mode("overwrite").parquet(ctx.output_dir(PARTS[1]))
        return Counts(records_in=1, records_out=1, rows_written={PARTS[0]: 10, PARTS[1]: 2})

    counts = execute(compute, spark, spec)
    truth = footer_rows(spec.staging_dir, PARTS[0])
    assert len(truth) == 4 and sum(truth.values()) == 10 and 0 in truth.values()
    side = json.loads((Path(spec.staging_dir) / FILE_ROWS).read_text())
    assert side == {PARTS[0]: truth}  # the one-file partition is not listed
    # a side file, not a Counts field: the counts document is what an older release reads
    assert json.loads((Path(spec.staging_dir) / "_counts.json").read_text()) == counts.to_dict()
    assert "file_rows" not in counts.to_dict()

    def one_file_each(ctx: JobContext) -> Counts:
        for part in PARTS:
            spark.createDataFrame([(1,)], "n long").coalesce(1).write.mode("overwrite").parquet(ctx.output_dir(part))
        return Counts(records_in=1, records_out=1, rows_written={PARTS[0]: 1, PARTS[1]: 1})

    execute(one_file_each, spark, spec)  # the next attempt of the same staging: the earlier side file goes
    assert not (Path(spec.staging_dir) / FILE_ROWS).exists()


def staged(tmp: Path, files: dict[str, int]) -> tuple[LocalStorage, TxnRef, str]:
    storage, staging = LocalStorage(), str(tmp / "staging")
    os.makedirs(os.path.join(staging, "data", PARTS[0]))
    for name, n in files.items():
        pq.write_table(pa.table({"n": list(range(n))}), os.path.join(staging, "data", PARTS[0], name))
    return storage, TxnRef("p", "t", Interval.daily(DAY), 1), staging


@pytest.mark.parametrize("given, trusted", [
    ({"a.parquet": 3, "b.parquet": 4}, True),
    ({"a.parquet": 4, "b.parquet": 3}, True),       # the sum is what the gate checks; the job's split is believed
    ({"a.parquet": 3, "b.parquet": 5}, False),      # does not add up to rows_written
    ({"a.parquet": 7}, False),                      # does not name every staged file
    ({"a.parquet": 3, "b.parquet": 4, "c.parquet": 0}, False)])  # names a file that is not staged
def test_pre_commit_takes_the_jobs_file_rows_only_when_they_name_the_staged_files_and_add_up(
        tmp_path, monkeypatch, given, trusted):
    storage, txn, staging = staged(tmp_path, {"a.parquet": 3, "b.parquet": 4})
    read: list[str] = []
    real = pq.ParquetFile

    def spy(source, *args, **kwargs):
        read.append(getattr(source, "path", str(source)))
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", spy)
    manifest = manifests.build(storage, txn, staging, ("data",), checksums=False,
                               partition_rows={PARTS[0]: 7}, file_rows={PARTS[0]: given})
    rows = {f.name: f.rows for f in manifest.partitions[PARTS[0]]}
    assert rows == (given if trusted else {"a.parquet": 3, "b.parquet": 4})
    assert (read == []) is trusted, read


@pytest.mark.parametrize("claimed, passes", [({"a.parquet": 3, "b.parquet": 7}, True),
                                             ({"a.parquet": 7, "b.parquet": 3}, False),   # a wrong split (r01)
                                             ({"a.parquet": 3, "b.parquet": 6, "c.parquet": 1}, False)])
def test_the_gate_checks_each_files_rows_against_the_jobs_counts(tmp_path, claimed, passes):
    """pre_commit takes the job's split when it adds up; the gate reads every file and fails a split that does
    not describe the bytes (a job's own wrong numbers, or a file rewritten after the job counted it: r02)."""
    from exactly_once.quality import validate_staged

    part, staging = PARTS[0], tmp_path / "staging"
    for name, n in {"a.parquet": 3, "b.parquet": 7}.items():
        (staging / "data" / part).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"n": list(range(n))}), staging / "data" / part / name)
    counts = Counts(records_in=10, records_out=10, rows_written={part: 10}).to_dict()
    outcome = validate_staged(suite_path=None, staging_dir=str(staging), partitions=[part], counts=counts,
                              prev_state_dir=None, report_root=str(tmp_path / "reports"), run_name="p.t1",
                              file_rows={part: claimed})
    assert outcome.passed is passes, outcome.failures
    if not passes:
        [line] = outcome.failures
        assert line.startswith("expect_column_values_to_be_between(rows_written_gap)") and "_file_rows.json" in line
        staged = {"a.parquet": 3, "b.parquet": 7}
        for name in set(claimed) | set(staged):
            said = f"{part}/{name}: job counted {claimed.get(name)}, staged {staged.get(name, 0)}"
            assert (said in line) is (claimed.get(name) != staged.get(name, 0)), (said, line)


def test_the_gate_checks_the_rows_pre_commit_sealed_not_a_side_file_rewritten_after_it(tmp_path):
    """pre_commit sealed the job's wrong split; a late writer then rewrites ``_file_rows.json`` to match the
    files. The gate compares the files with what the manifest sealed (what a Delta commit would publish as
    numRecords), so it still refuses: nothing is published."""
    from test_interval_runs import config, land, month

    from exactly_once.errors import ValidationFailedError
    from exactly_once.protocol.pipeline import IntervalRun
    from exactly_once.storage import storage_for

    land(tmp_path, "2013-01", "a.csv", [1, 2, 3])
    run = IntervalRun(config(tmp_path), month(1), storage_options={})
    began = run.begin()
    txn = TxnRef.from_dict(began["txn"])
    store, key = storage_for(began["spec"])
    ctx = JobContext(None, JobSpec.from_json(store.read_bytes(key)))
    (part,) = ctx.partitions
    out, side = Path(ctx.spec.data_dir) / part, Path(ctx.spec.staging_dir) / FILE_ROWS
    out.mkdir(parents=True)
    pq.write_table(pa.table({"n": [1, 2, 3]}), out / "a.parquet")
    pq.write_table(pa.table({"n": list(range(7))}), out / "b.parquet")
    side.write_text(json.dumps({part: {"a.parquet": 7, "b.parquet": 3}}))  # right names and sum, wrong split
    files, size = ctx.input_stats()
    ctx.finish(Counts(records_in=3, records_out=3, rows_written={part: 10}, input_files=files, input_bytes=size))
    run.pre_commit(txn)
    assert {f.name: f.rows for f in run.sink.status_of(txn).manifest.partitions[part]} == {"a.parquet": 7, "b.parquet": 3}
    side.write_text(json.dumps({part: {"a.parquet": 3, "b.parquet": 7}}))  # the late writer's "fix"
    with pytest.raises(ValidationFailedError, match=r"rows_written_gap.*a\.parquet: job counted 7, staged 3"):
        run.validate(txn)
    run.abort(txn)
    assert run.sink.live_version(part) is None
