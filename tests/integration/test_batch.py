"""Batched backfills (exactly_once.protocol.batch) with the real Spark jobs: one write job computes K intervals,
each interval stays its own transaction, and what a batch publishes equals an interval-by-interval run.

* pv_pipeline (stateful: cumulative_pv chains through the state): the same landing days run once
  interval by interval (begin -> the job's ``compute`` -> pre_commit -> validate -> commit) and once as
  one batch (``compute_batch``, one Spark job). Published rows, each interval's counts, its new state
  and its quarantine must be equal, row for row; every interval has its own epoch, manifest, verdict,
  report and run summary.
* A failing gate in the middle of a stateful batch costs that interval and the ones chained on it; the
  others publish; a second run of the batch (the limit raised) resumes and ends like a clean run.
* flights_hourly (stateless): the same equality over hours, an empty hour among them.

All in the shared Spark session (the ``spark`` fixture); the jobs are loaded from spark_jobs/.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import reference_pv as ref
from eo_testing import load_module
from fault_helpers import Setup, sink_of, visible_rows

from exactly_once.protocol.batch import BatchRun
from exactly_once.contracts import BatchSpec
from exactly_once.ids import Interval, TxnRef
from exactly_once.errors import ContractError
from exactly_once.job import execute_batch
from exactly_once.storage import storage_for
from exactly_once.records.txlog import State
from tools.flights_sample import write_landing
from tools.sample_data import generate

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
ROOT = Path(__file__).resolve().parents[2]
DAYS = [(date(2026, 1, 1) + timedelta(days=d)).isoformat() for d in range(4)]


@pytest.fixture(scope="module")
def pv():
    return load_module("pv_counts_batch_test", ROOT / "spark_jobs" / "pv_counts.py")


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    path = tmp_path_factory.mktemp("pv-landing")
    generate(str(path), DAYS, events_per_day=400, apps=6, malformed_rate=0.03)
    return path


def _setup(base: Path, landing: Path, name: str, **kw) -> Setup:
    root = base / name
    root.mkdir(parents=True)
    (root / "landing").symlink_to(landing)
    return Setup(root=str(root), start=DAYS[0], reports=str(root / "reports"), **kw)


def single_runs(spark, job, setup: Setup, days: list[str]) -> None:
    """Interval by interval, as the DAG's tasks run them (the job in-process on ``spark``)."""
    for day in days:
        run = setup.run(day)
        began = run.begin(run={"run_id": f"single__{day}"})
        txn = TxnRef.from_dict(began["txn"])
        job.run(spark, began["spec"])
        run.pre_commit(txn)
        run.validate(txn)
        run.commit(txn)
        run.abort(txn)


def batch_write(spark, compute_batch, args=(), compute=None):
    def write(url: str) -> None:
        store, key = storage_for(url)
        execute_batch(compute_batch, spark, BatchSpec.from_json(store.read_bytes(key)), args, compute=compute)
    return write


def checkpoint(setup: Setup, day: str, config=None) -> dict:
    """The committed version's counts, new state rows and quarantine records of ``day``."""
    sink = sink_of(setup) if config is None else config.sink_handle()
    txn, st = sink.committed(Interval.daily(day) if "T" not in day else Interval(day, _hour_end(day)))
    ck = Path(sink.checkpoint_dir(txn))
    state = sorted(r for p in sorted((ck / "_state").glob("*.parquet"))
                   for r in map(tuple, (d.values() for d in pq.read_table(p).to_pylist()))) \
        if (ck / "_state").exists() else []
    root = (config.root if config is not None else setup.root) + "/"
    quarantine = Counter(line.replace(root, "<root>/") for p in sorted((ck / "_quarantine").glob("*.json"))
                         for line in p.read_text().splitlines())
    return {"counts": st.records["pre_committed"]["counts"], "state": state, "quarantine": quarantine}


def oracle_rows(lake: Path, days: list[str]) -> dict[str, list[tuple]]:
    """The independent reference (tests/reference_pv.py) over the same landing files, day after day."""
    state: dict[str, int] = {}
    out = {}
    for day in days:
        files = sorted(str(p) for p in (lake / "app_logs" / f"dt={day}").rglob("*.jsonl"))
        rows, state, _ = ref.compute(files, state, f"dt={day}")
        out[day] = sorted((r["app_id"], r["pv"], r["uv"], r["cumulative_pv"]) for r in rows)
    return out


def _hour_end(start: str) -> datetime:
    return datetime.fromisoformat(start) + timedelta(hours=1)


def test_a_stateful_batch_publishes_what_interval_by_interval_runs_publish(spark, pv, landing, tmp_path):
    single, batched = _setup(tmp_path, landing, "single"), _setup(tmp_path, landing, "batched")
    single_runs(spark, pv, single, DAYS)
    batch = BatchRun(batched.config(), [Interval.daily(d) for d in DAYS], batch_id="t-equal",
                     run={"run_id": "test"})
    outcomes = batch.run_all(batch_write(spark, pv.compute_batch))
    assert [(o.status, o.detail) for o in outcomes] == [("committed", "")] * len(DAYS)

    assert visible_rows(batched) == visible_rows(single)
    assert sum(len(r) for r in visible_rows(single).values()) >= 4 * len(DAYS)
    for day in DAYS:
        assert checkpoint(batched, day) == checkpoint(single, day), day
    sink = sink_of(batched)
    versions = []
    for day in DAYS:  # each interval its own transaction: epoch, manifest, verdict, report, summary
        iv = Interval.daily(day)
        (epoch, st), = sink.status(iv).items()
        assert st.state is State.COMMITTED and st.published and st.manifest is not None
        assert st.validation["passed"] is True and os.path.exists(st.validation["summary"]["report"])
        assert (st.records["open"]["meta"]["run"]["batch"], st.records["open"]["meta"]["run"]["run_id"]) == \
            ("t-equal", "test")
        versions.append(sink.ref(iv, epoch))
        assert os.path.exists(Path(batched.reports) / "runs" / "pv_pipeline" / f"{versions[-1].name}.json")
    assert [sink.status(v.interval)[v.epoch].reads for v in versions[1:]] == versions[:-1]  # chained
    assert not os.listdir(Path(sink.home) / "_staging")
    assert not (Path(sink.home) / "_batches" / "t-equal" / "scratch").exists()

    # a second batch over the same range: everything skipped, nothing written
    again = BatchRun(batched.config(), [Interval.daily(d) for d in DAYS], batch_id="t-equal-2")
    begun = again.begin()
    assert begun["batch"] is None and [o["status"] for o in begun["outcomes"]] == ["skipped"] * len(DAYS)
    assert [o.status for o in again.finish()] == ["skipped"] * len(DAYS)


def test_a_batch_of_one_runs_the_jobs_own_compute_and_publishes_what_its_single_run_does(spark, pv, landing, tmp_path):
    """A batch of one interval (a run's ``one_task``) runs the job's single-interval ``compute`` straight into
    the interval's staging: day by day, each its own batch, the same checkpoints (counts, state, quarantine) and
    rows as the single runs, and no scratch left; without ``compute``, a batch of one runs ``compute_batch`` as
    before, and a job with neither for it is refused."""
    single, one = _setup(tmp_path, landing, "single"), _setup(tmp_path, landing, "one")
    days = DAYS[:2]
    single_runs(spark, pv, single, days)
    for day in days:
        outcomes = BatchRun(one.config(), [Interval.daily(day)], batch_id=f"t-one-{day}").run_all(
            batch_write(spark, None, compute=pv.compute))
        assert [(o.status, o.detail) for o in outcomes] == [("committed", "")], outcomes
        assert checkpoint(one, day) == checkpoint(single, day), day
        assert not (Path(sink_of(one).home) / "_batches" / f"t-one-{day}" / "scratch").exists()
    assert visible_rows(one) == visible_rows(single)
    staged = []
    with pytest.raises(ContractError, match="has no compute_batch"):
        BatchRun(one.config(), [Interval.daily(DAYS[2])], batch_id="t-none").run_all(
            lambda url: staged.append(url) or batch_write(spark, None)(url))
    assert staged


def test_a_failing_gate_costs_its_interval_and_those_chained_on_it(spark, pv, landing, tmp_path):
    """Day 3 gets a file of malformed lines (over the 5% limit): days 1-2 publish, day 3 fails its gate,
    day 4 (whose state would come from day 3) is aborted; running the batch again with the limit raised
    publishes days 3-4 on top of the committed 1-2 (resumed: 1-2 are not recomputed)."""
    lake = tmp_path / "landing"
    shutil.copytree(landing, lake)
    bad = lake / "app_logs" / f"dt={DAYS[2]}" / "hour=23" / "bad.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text("not json\n" * 200)
    strict = _setup(tmp_path, lake, "strict")
    ivs = [Interval.daily(d) for d in DAYS]
    outcomes = BatchRun(strict.config(), ivs, batch_id="t-gate").run_all(batch_write(spark, pv.compute_batch))
    status = {o.interval.day: (o.status, o.detail) for o in outcomes}
    assert [status[d][0] for d in DAYS] == ["committed", "committed", "failed", "failed"], status
    assert "ValidationFailedError" in status[DAYS[2]][1] and "rejected_ratio" in status[DAYS[2]][1]
    assert "was aborted" in status[DAYS[3]][1]
    assert sorted(visible_rows(strict)) == DAYS[:2]
    sink = sink_of(strict)
    assert not os.listdir(Path(sink.home) / "_staging")

    lenient = strict.replace(max_malformed_ratio=0.5)
    again = BatchRun(lenient.config(), ivs, batch_id="t-gate")
    outcomes = again.run_all(batch_write(spark, pv.compute_batch))
    assert [o.status for o in outcomes] == ["committed"] * len(DAYS)  # the batch's own, across its runs
    assert {iv.day: {e: s.state for e, s in sink.status(iv).items()} for iv in ivs} == {
        DAYS[0]: {1: State.COMMITTED}, DAYS[1]: {1: State.COMMITTED},  # resumed, not recomputed
        DAYS[2]: {1: State.ABORTED, 2: State.COMMITTED}, DAYS[3]: {1: State.ABORTED, 2: State.COMMITTED}}
    assert visible_rows(lenient) == oracle_rows(lake, DAYS)


def test_a_stateless_batch_of_hours_equals_hour_by_hour_runs(spark, tmp_path):
    job = load_module("flights_batch_test", ROOT / "spark_jobs" / "flights_hourly.py")
    config = load_module("flights_batch_dag", ROOT / "dags" / "flights_hourly.py").FLIGHTS
    write_landing(str(tmp_path / "landing"), start="2013-01-01", days=1)
    first = datetime(2013, 1, 1, 9, tzinfo=timezone.utc)  # 09Z: no departures yet (05:00 in New York)
    hours = [Interval(first + timedelta(hours=h), first + timedelta(hours=h + 1)) for h in range(5)]
    cfgs = {}
    for name in ("single", "batched"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "landing").symlink_to(tmp_path / "landing")
        cfgs[name] = dataclasses.replace(config, root=str(tmp_path / name), reports=str(tmp_path / name / "reports"))
    from exactly_once.protocol.pipeline import IntervalRun

    for iv in hours:
        run = IntervalRun(cfgs["single"], iv)
        began = run.begin()
        txn = TxnRef.from_dict(began["txn"])
        job.run(spark, began["spec"], list(config.application_args))
        run.pre_commit(txn), run.validate(txn), run.commit(txn), run.abort(txn)
    outcomes = BatchRun(cfgs["batched"], hours, batch_id="t-flights").run_all(
        batch_write(spark, job.compute_batch, list(config.application_args)))
    assert [o.status for o in outcomes] == ["committed"] * len(hours)
    for iv in hours:
        a = checkpoint(None, iv.start.isoformat(), cfgs["single"])
        b = checkpoint(None, iv.start.isoformat(), cfgs["batched"])
        assert a["counts"] == b["counts"], iv
    rows = {}
    for name, cfg in cfgs.items():
        table = Path(cfg.table_url)
        rows[name] = sorted((str(p.parent.relative_to(table)), json.dumps(r, sort_keys=True))
                            for p in table.glob("dt=*/hour=*/*.parquet") for r in pq.read_table(p).to_pylist())
    assert rows["batched"] == rows["single"] and len(rows["single"]) > 20


def test_a_batch_of_intervals_without_any_input_file_equals_single_runs(spark, pv, landing, tmp_path):
    """pv_pipeline allows empty days (``allow_empty``): a quiet stretch - days 2-4 without any file - as
    one batch publishes what single runs publish (empty days, the state carried on). Before, the batch
    job failed on every try (``BatchContext.tag`` of an empty frame with no file metadata)."""
    lake = tmp_path / "landing"
    (lake / "app_logs").mkdir(parents=True)
    shutil.copytree(landing / "app_logs" / f"dt={DAYS[0]}", lake / "app_logs" / f"dt={DAYS[0]}")
    single, batched = _setup(tmp_path, lake, "single"), _setup(tmp_path, lake, "batched")
    single_runs(spark, pv, single, DAYS)
    single_runs(spark, pv, batched, DAYS[:1])
    outcomes = BatchRun(batched.config(), [Interval.daily(d) for d in DAYS[1:]], batch_id="t-empty").run_all(
        batch_write(spark, pv.compute_batch))
    assert [(o.status, o.detail) for o in outcomes] == [("committed", "")] * 3
    assert visible_rows(batched) == visible_rows(single)
    for day in DAYS:
        assert checkpoint(batched, day) == checkpoint(single, day), day
    assert checkpoint(batched, DAYS[-1])["state"] and checkpoint(batched, DAYS[-1])["counts"]["input_files"] == 0


def test_a_write_whose_scratch_vanishes_mid_hand_over_fails_instead_of_staging_empty_state(
        spark, pv, landing, tmp_path, monkeypatch):
    """Two writes of ONE batch can run at once (an Airflow retry of the host task while the old try is
    a zombie: the same batch id, the same scratch dir): one's cleanup removes the other's scratch output
    between its Spark write and its hand-over. The hand-over took a missing interval dir for "no rows"
    and staged an EMPTY state (and data) file, then wrote the counts: for a stateful job without a
    checkpoint suite, the next interval silently restarts from nothing. Now what vanished fails the job,
    nothing of it looks written (no counts), and the batch run again publishes what single runs do."""
    from exactly_once.errors import StorageError
    from exactly_once.job import BatchContext

    setup = _setup(tmp_path, landing, "vanish")
    single_runs(spark, pv, setup, DAYS[:1])
    ivs = [Interval.daily(d) for d in DAYS[1:]]
    batch = BatchRun(setup.config(), ivs, batch_id="t-vanish")
    real = BatchContext._hand_over

    def racing(self, job, kind, src, *rest):
        if kind == "state":  # the other write's cleanup: the whole scratch state output is gone
            self._store.remove_tree(src.rsplit("/", 1)[0])
        return real(self, job, kind, src, *rest)

    monkeypatch.setattr(BatchContext, "_hand_over", racing)
    with pytest.raises(StorageError, match="vanished"):
        batch.run_all(batch_write(spark, pv.compute_batch))
    monkeypatch.undo()
    sink = sink_of(setup)
    for iv in ivs:
        assert not os.path.exists(os.path.join(sink.staging_dir(batch.attempt(iv)[0]), "_counts.json"))
    outcomes = BatchRun(setup.config(), ivs, batch_id="t-vanish").run_all(batch_write(spark, pv.compute_batch))
    assert [o.status for o in outcomes] == ["committed"] * len(ivs)
    assert visible_rows(setup) == oracle_rows(landing, DAYS)


HOSTILE_DAYS = ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]


def _ev(eid: str, app: str, user: str, event: str = "page_view", ts: str = "2026-03-01T10:00:00Z", **extra) -> str:
    return json.dumps({"event_id": eid, "app_id": app, "user_id": user, "event": event, "ts": ts, **extra},
                      separators=(",", ":"), ensure_ascii=False)


def hostile_landing(landing: Path) -> None:
    """Lines that tell apart a dedup or a quarantine done wrongly (from the review of the one-pass batch
    job): identical malformed lines within and across files and days, malformed lines carrying a valid
    line's event_id, long lines equal in their first 10,000 chars (valid duplicates whose order, and
    malformed ones whose quarantine records, depend on what follows), equal instants spelled apart, lone
    surrogates, a BOM, invalid UTF-8, a day of one empty file, a day of malformed lines only."""
    d = {day: landing / "app_logs" / f"dt={day}" for day in HOSTILE_DAYS}
    for p in d.values():
        p.mkdir(parents=True, exist_ok=True)
    pad = "x" * 10_050
    bad1, bad2 = '{"event_id":"Q","pad":"' + "y" * 10_050 + '1"', '{"event_id":"Q","pad":"' + "y" * 10_050 + '2"'
    lone = '{"event_id":"\\u%s","app_id":"appS","user_id":"u","event":"page_view","ts":"2026-03-01T00:00:00Z"}'
    f1 = [_ev("E1", "appA", "u1"), _ev("E1", "appA", "u1"), _ev("E1", "appA", "u1"),
          _ev("E2", "appA", "u2"), json.dumps({"event_id": "E2", "app_id": "appB", "user_id": "u2",
                                               "event": "page_view", "ts": "2026-03-01T10:00:00Z"}),
          _ev("E3", "appB", "u3", ts="2026-03-01T12:00:00+02:00"), _ev("E3", "appC", "u3", ts="2026-03-01T10:00:00.0000001Z"),
          "not json", "not json", "not json", "", "", "   ", '{"event_id":"E1","app_id":"appA"}',
          '{"event_id":"E1","app_id":"appA"}', _ev("E1", "appA", "u1", ts="bad"),
          _ev("L1", "appA", "u1", pad=pad + "A"), _ev("L1", "appA", "u1", pad=pad + "B"),
          _ev("L2", "appZ", "u9", pad=pad + "B"), _ev("L2", "appY", "u8", pad=pad + "A"),
          bad1, bad2, bad1, "[1,2]", "null", '"s"', lone % "d800", lone % "dfff"]
    f2 = ["not json", "not json", _ev("E1", "appA", "u1"), '{"event_id":"E1","app_id":"appA"}', bad1,
          _ev("E4", "appD", "u4", event="click")]
    (d[HOSTILE_DAYS[0]] / "a.jsonl").write_bytes(("\ufeff" + "\n".join(f1) + "\n").encode())
    (d[HOSTILE_DAYS[0]] / "b.jsonl").write_bytes(("\n".join(f2) + "\n").encode() + b"\xff\xfe bad utf8\n" * 2)
    (d[HOSTILE_DAYS[1]] / "b.jsonl").write_bytes((d[HOSTILE_DAYS[0]] / "b.jsonl").read_bytes())
    (d[HOSTILE_DAYS[1]] / "c.jsonl").write_text("\n".join([_ev("E1", "appA", "u1"), _ev("E2", "appB", "u5"),
                                                          "not json", "not json"]) + "\n")
    (d[HOSTILE_DAYS[2]] / "empty.jsonl").write_text("")
    (d[HOSTILE_DAYS[3]] / "m.jsonl").write_text("\n".join(["{bad"] * 50 + ['{"a":1}'] * 20 + [""] * 5) + "\n")
    (d[HOSTILE_DAYS[3]] / "n.jsonl").write_text("\n".join(["{bad"] * 50) + "\n")


def test_a_batch_over_hostile_lines_equals_single_runs_and_the_oracle(spark, pv, tmp_path):
    """The batch job's one aggregation (each distinct valid event once, each malformed line alone) against
    the single-interval job and the oracle: rows, counts, state and quarantine (as a multiset), every day."""
    lake = tmp_path / "landing"
    hostile_landing(lake)
    setups = []
    for name in ("single", "batched"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "landing").symlink_to(lake)
        setups.append(Setup(root=str(tmp_path / name), start=HOSTILE_DAYS[0], reports=str(tmp_path / name / "reports"),
                            suite=None, max_malformed_ratio=1.0))
    single, batched = setups
    single_runs(spark, pv, single, HOSTILE_DAYS)
    outcomes = BatchRun(batched.config(), [Interval.daily(d) for d in HOSTILE_DAYS], batch_id="t-hostile",
                        run={"run_id": "test"}).run_all(batch_write(spark, pv.compute_batch))
    assert [o.status for o in outcomes] == ["committed"] * len(HOSTILE_DAYS), outcomes
    oracle = oracle_rows(lake, HOSTILE_DAYS)
    seen = visible_rows(batched)
    assert seen == visible_rows(single)
    for day in HOSTILE_DAYS:
        assert checkpoint(batched, day) == checkpoint(single, day), day
        assert sorted(seen.get(day, [])) == oracle[day], day
    quarantined = checkpoint(batched, HOSTILE_DAYS[3])
    assert sum(quarantined["quarantine"].values()) == 125 and quarantined["counts"]["records_rejected"] == 125


def test_a_batch_lists_local_inputs_on_the_driver_and_never_lowers_the_threshold(spark, landing, tmp_path):
    """Past ``parallelPartitionDiscovery.threshold`` paths Spark starts a listing job with one task per path:
    a batch of local files raises it above its number of files; an operator's higher value stays."""
    from exactly_once.job import BatchContext

    setup = _setup(tmp_path, landing, "listing")
    batch = BatchRun(setup.config(), [Interval.daily(d) for d in DAYS], batch_id="t-listing", run={"run_id": "t"})
    store, key = storage_for(batch.begin()["batch"])
    spec, name = BatchSpec.from_json(store.read_bytes(key)), "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(name)
    try:
        spark.conf.set(name, "2")
        files = len(BatchContext(spark, spec).inputs())
        assert files > 2 and spark.conf.get(name) == str(files + 1)
        spark.conf.set(name, "100000")
        BatchContext(spark, spec)
        assert spark.conf.get(name) == "100000"
    finally:
        spark.conf.set(name, before)
        batch.abort()
