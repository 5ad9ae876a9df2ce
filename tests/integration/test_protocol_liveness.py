"""Takeovers judged by the write's heartbeat on the STORAGE's clock (issue 12: "``stale_after`` takeovers
use the writer's clock and have no heartbeat").

``recover(stale_after=...)``, ``gc`` and the UI's dry run must abort an unfinished attempt only when it
has shown no sign of life (heartbeat, own log records) for ``stale_after`` seconds of the storage's
clock. The writer's clock is skewed by +-10 days here (``time.time`` patched in the writer only: the
storage clock is real). Time passing on the storage is forced, not waited for: locally the heartbeat
and records are back-dated (``os.utime``); on S3 (which cannot back-date) the test polls the storage
clock until it is past the limit (a second or two). Beats are written by hand where the point matters,
so no test depends on a thread being scheduled in time.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from exactly_once import Interval, State
from exactly_once import liveness
from exactly_once.contracts import JobSpec
from exactly_once.ops.inspection import interval_view
from exactly_once.ops.maintenance import gc
from eo_testing import clock_off
from protocol_helpers import (PLUGINS, assert_exact_version, commit_version, is_local, leftovers, make_rows,
                              open_sink, refresh, split, table_url, write_output)  # noqa: F401

IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"
DAY = 24 * 3600.0
STALE = 1.0  # seconds of the storage clock; S3's LastModified has a 1 s resolution


def life_paths(sink, txn):
    """Everything that shows ``txn`` alive: its heartbeat and its own log records."""
    paths = [liveness.txn_heartbeat(sink, txn)]
    return paths + [sink.log.record_path(txn.interval, txn.epoch, k) for k in liveness.LIFE_RECORDS]


def let_storage_time_pass(sink, txn, seconds: float) -> None:
    """Make every sign of life of ``txn`` older than ``seconds`` on the storage's clock."""
    refresh(sink)
    stamps = {}
    for path in life_paths(sink, txn):
        try:
            stamps[path] = sink.storage.modified_at(path)
        except FileNotFoundError:
            continue
    if is_local(sink):
        for path, at in stamps.items():
            os.utime(path, (at - seconds - 1, at - seconds - 1), follow_symlinks=False)
        return
    newest = max(stamps.values())
    while liveness.storage_now(sink.storage, sink.home) - newest <= seconds:
        time.sleep(0.2)  # polling the storage clock itself: nothing here races


def dry_run(sink, stale_after=STALE):
    return list(interval_view(sink, IV, stale_after=stale_after).recover)


def still_open(sink, txn) -> None:
    refresh(sink)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    assert sink.storage.exists(sink.storage.join(sink.data_dir(txn), PART))


@pytest.mark.parametrize("skew", [-10 * DAY, 10 * DAY], ids=["writer-10d", "writer+10d"])
def test_a_slow_writer_with_a_fresh_heartbeat_is_never_taken_over(table_url, monkeypatch, skew):
    """The write has run far longer than ``stale_after`` (its begin record is old on the storage clock)
    but its heartbeat is fresh: recover, gc and the dry run all leave it alone; it then commits."""
    sink = open_sink(table_url)
    with clock_off(monkeypatch, skew):
        txn = sink.begin(IV)
    rows = make_rows("slow", 8)
    with liveness.heartbeat(sink, txn, every=3600) as beat:  # beats by hand below
        with clock_off(monkeypatch, skew):
            write_output(sink, txn, {PART: split(rows, 2)})
        let_storage_time_pass(sink, txn, STALE)
        with clock_off(monkeypatch, skew):
            beat.beat()  # the writer is alive
        other = open_sink(table_url)
        assert dry_run(other) == []
        assert other.recover(IV, stale_after=STALE) == []
        assert gc(other, min_age=0, stale_after=STALE)["recovered"] == []
        still_open(sink, txn)
    with clock_off(monkeypatch, skew):
        sink.pre_commit(txn)
        sink.commit(txn)
    assert_exact_version(sink, PART, rows, txn)


def test_a_waiting_pre_committed_attempt_is_judged_by_its_last_record(table_url, monkeypatch):
    """Validation is running (PRE_COMMITTED, no verdict yet, validation required): its pre_committed
    record is its latest sign of life, not its begin record."""
    sink = open_sink(table_url, require_validation=True)
    with clock_off(monkeypatch, -10 * DAY):
        txn = sink.begin(IV)
        write_output(sink, txn, {PART: [make_rows("v", 3)]})
    let_storage_time_pass(sink, txn, STALE)  # begin and the heartbeat-less write: long ago
    with clock_off(monkeypatch, -10 * DAY):
        sink.pre_commit(txn)  # a fresh record
    assert dry_run(sink) == [] and sink.recover(IV, stale_after=STALE) == []
    let_storage_time_pass(sink, txn, STALE)
    assert dry_run(sink) == [f"e{txn.epoch}: would abort it (pre-committed but superseded or not validated)"]
    assert sink.recover(IV, stale_after=STALE) == [
        f"{txn.name}: aborted (pre-committed but superseded or not validated)"]


CHILD = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{plugins!r}, {tests!r}]
    real = time.time
    time.time = lambda: real() + {skew!r}   # this writer's clock only
    from exactly_once import Interval, liveness
    from protocol_helpers import make_rows, open_sink, write_output
    sink = open_sink({url!r})
    txn = sink.begin(Interval.daily("2026-01-01"))
    with liveness.heartbeat(sink, txn, every=0.05):
        write_output(sink, txn, {{"dt=2026-01-01": [make_rows("dead", 5)]}})
        print(txn.name, flush=True)
        sys.stdin.read()   # "still writing" until killed
""")


@pytest.mark.parametrize("skew", [-10 * DAY, 10 * DAY], ids=["writer-10d", "writer+10d"])
def test_a_dead_writer_is_taken_over_after_stale_after(table_url, skew):
    """A writer process (clock 10 days off) dies mid-write (kill -9): its heartbeat stops. It is not
    taken over while its last beat is recent; once ``stale_after`` passed on the storage clock, the
    dry run says so, recover aborts it and its staging is gone; gc drops its heartbeat."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(plugins=str(PLUGINS), tests=os.path.dirname(
        os.path.dirname(__file__)), skew=skew, url=table_url)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(PLUGINS)})
    try:
        name = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert name.endswith(".e000001"), name
    sink = open_sink(table_url)
    txn = sink.ref(IV, 1)
    assert txn.name == name
    # its last beat was a moment ago (and its begin record ten days ago by its own clock)
    assert dry_run(sink, stale_after=60.0) == [] and sink.recover(IV, stale_after=60.0) == []
    still_open(sink, txn)
    let_storage_time_pass(sink, txn, STALE)
    assert dry_run(sink) == [f"e1: would abort it (open, no sign of life for longer than the stale limit)"]
    assert sink.recover(IV, stale_after=STALE) == [f"{txn.name}: aborted (open, older attempt)"]
    assert sink.status(IV)[1].state is State.ABORTED
    beats = sink.storage.join(sink.home, liveness.HEARTBEATS)
    if is_local(sink):  # killed between a beat's temp file and its rename (it may really have been)
        open(os.path.join(beats, ".tmp-" + "d" * 32), "wb").close()
    assert txn.name in gc(sink, min_age=0, stale_after=STALE)["heartbeats"]
    assert sink.storage.list_names(beats) == [liveness.CLOCK]
    assert leftovers(sink) == []
    new = commit_version(sink, IV, {PART: [make_rows("after", 4)]})  # the interval goes on
    assert_exact_version(sink, PART, make_rows("after", 4), new)


def test_gc_beside_a_live_heartbeat_leaves_it_alone(table_url, monkeypatch):
    """gc with a tiny ``stale_after`` runs while a write beats (its thread really running): nothing of
    the write is touched; once it committed, the next gc removes its heartbeat."""
    sink = open_sink(table_url)
    commit_version(sink, IV, {PART: [make_rows("old", 2)]})
    with clock_off(monkeypatch, -10 * DAY):
        txn = sink.begin(IV)
    rows = make_rows("new", 6, start=50)
    with liveness.heartbeat(sink, txn, every=3600) as beat:
        write_output(sink, txn, {PART: split(rows, 3)})
        let_storage_time_pass(sink, txn, STALE)
        beat.beat()
        report = gc(open_sink(table_url), min_age=0, stale_after=STALE)
        assert report["recovered"] == [] and report["heartbeats"] == [] and report["staging"] == []
        still_open(sink, txn)
        assert sink.storage.exists(liveness.txn_heartbeat(sink, txn))
    sink.pre_commit(txn)
    sink.commit(txn)
    assert gc(sink, min_age=0, stale_after=STALE)["heartbeats"] == [txn.name]
    assert_exact_version(sink, PART, rows, txn)
    assert leftovers(sink) == []


def _spec_of(sink, txn) -> str:
    """Write ``txn``'s job spec the way begin does; returns its path (the write task's ``--spec``)."""
    spec = JobSpec(pipeline=sink.pipeline, sink=sink.sink, txn=txn.name, interval_start=IV.start.isoformat(),
                   interval_end=IV.end.isoformat(), partitions=(PART,), sources=(),
                   staging_dir=sink.storage.url(sink.staging_dir(txn)),
                   data_dir=sink.storage.url(sink.data_dir(txn)),
                   heartbeat=sink.storage.url(liveness.txn_heartbeat(sink, txn)))
    path = sink.storage.join(sink.staging_dir(txn), "_spec.json")
    sink.storage.write_atomic(path, spec.to_json())
    return path


def test_the_heartbeat_thread_beats_until_stopped(tmp_path, monkeypatch):
    """The write task's heartbeat (``write_heartbeat`` from its ``--spec`` argument) writes the object the
    takeover rule reads, again and again while the job runs, and never after it ended."""
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    txn = sink.begin(IV)
    spec_path = _spec_of(sink, txn)
    path = liveness.txn_heartbeat(sink, txn)
    monkeypatch.setenv("EO_HEARTBEAT_SECONDS", "0.01")
    with liveness.write_heartbeat(["--spec", spec_path, "--x"]) as beat:
        assert beat.beats >= 1 and os.path.exists(path)
        while beat.beats < 3:  # the thread's own beats
            time.sleep(0.01)
    assert not beat._thread.is_alive()  # stopped with the job: no beat after it
    with liveness.write_heartbeat(["--no-spec"]) as nothing:
        assert nothing is None


def test_the_write_operator_beats_while_its_job_runs(tmp_path, monkeypatch):
    """``WriteOperator.execute`` keeps the heartbeat fresh around the job (spark-submit or Spark Connect:
    the job itself is replaced here by a function that watches the heartbeat) and stops it after."""
    from exactly_once.airflow.write import WriteOperator

    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    txn = sink.begin(IV)
    path = liveness.txn_heartbeat(sink, txn)
    monkeypatch.setenv("EO_HEARTBEAT_SECONDS", "0.01")
    monkeypatch.delenv("EO_STORAGE_CONN_ID", raising=False)

    def job(self, args, context, options):
        beats = [sink.storage.read_json(path)["beat"]]
        while beats[-1] < beats[0] + 2:  # the heartbeat moves while the job runs
            beats.append(sink.storage.read_json(path)["beat"])
        return beats[-1]

    monkeypatch.setattr(WriteOperator, "_run", job)
    op = WriteOperator(task_id="write", application=str(tmp_path / "job.py"),
                       application_args=["--spec", _spec_of(sink, txn)])
    last = op.execute({})
    assert sink.storage.read_json(path)["beat"] >= last >= 3
    assert not [t for t in threading.enumerate() if t.name.startswith("eo-heartbeat")]  # stopped after the job


def test_a_delta_tables_writer_beats_and_is_judged_like_any_other(tmp_path, monkeypatch):
    """A Delta table stages inside the table (``<table>/<txn>``), not under ``<home>/_staging``: the
    heartbeat still lives at ``<home>/_heartbeats/<txn>`` (named by the job spec), the write task beats
    it, and recover leaves a fresh attempt alone while it takes over a stale one."""
    sink = open_sink(str(tmp_path / "warehouse" / "t"), table_format="delta")
    txn = sink.begin(IV)
    assert not sink.staging_dir(txn).startswith(sink.storage.join(sink.home, "_staging"))
    spec_path = _spec_of(sink, txn)
    path = liveness.txn_heartbeat(sink, txn)
    monkeypatch.setenv("EO_HEARTBEAT_SECONDS", "3600")
    with liveness.write_heartbeat(["--spec", spec_path]) as beat:
        assert beat is not None and os.path.exists(path)
        let_storage_time_pass(sink, txn, STALE)
        beat.beat()
        assert open_sink(str(tmp_path / "warehouse" / "t")).recover(IV, stale_after=STALE) == []
    refresh(sink)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    let_storage_time_pass(sink, txn, STALE)
    assert open_sink(str(tmp_path / "warehouse" / "t")).recover(IV, stale_after=STALE) != []
    refresh(sink)
    assert sink.status(IV)[txn.epoch].state is State.ABORTED
