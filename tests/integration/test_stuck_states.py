"""Issue 25, class 7: no stuck states. An interval must never be refused for good because of an attempt
that ended long ago: a partition claim left by an aborted attempt of another interval, an attempt
stranded by a sink renamed between its tries. Each case ends with a clear message and a documented
command (docs/RELIABILITY.md, "No stuck states"). Races are forced at the exact point with a second
sink instance standing in for a second process. Also: run notes keep their advice, and (class 9) a
local input rewritten in place with the same size is a changed input (the Spark Connect cache test is
in test_spark_connect.py, beside the shared server's other tests)."""
from __future__ import annotations

import os

import pytest

from exactly_once import Interval, OwnershipError, State
from protocol_helpers import (commit_version, interleave, leftovers, make_rows, open_sink, table_url,  # noqa: F401
                              visible_rows, write_output)

H10 = Interval("2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z")
H11 = Interval("2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z")
P10, P11 = "dt=2026-01-01/hour=10", "dt=2026-01-01/hour=11"


def wrong_attempt(sink, *, abort: bool = True):
    """Hour 10's job has a bug: it writes hour 11's partition too; pre_commit claims both for hour 10,
    then the attempt fails (its gate, its commit) and is aborted."""
    txn = sink.begin(H10)
    write_output(sink, txn, {P10: [make_rows("bad10", 2)], P11: [make_rows("bad11", 2, start=20)]})
    sink.pre_commit(txn)
    if abort:
        sink.abort(txn)
    return txn


# ------------------------------------------------------------------ 7a. claims of aborted attempts
def test_a_claim_of_an_aborted_attempt_never_blocks_the_interval_that_owns_the_partition(table_url):
    """Before: hour 11 was refused at pre_commit for ever (``partition ... belongs to interval`` hour 10),
    though no attempt of hour 10 that wrote hour 11 ever got past its abort. Now the claim is released
    with the attempt: hour 11 takes it over, and it is hour 10 that is refused if its job writes there
    again."""
    sink = open_sink(table_url)
    wrong_attempt(sink)
    h11 = commit_version(sink, H11, {P11: [make_rows("h11", 3, start=50)]})
    assert visible_rows(sink, P11) == make_rows("h11", 3, start=50)
    assert sink.live_version(P11) == h11.name
    # the fixed hour-10 job publishes its own partition; hour 11's stays
    commit_version(sink, H10, {P10: [make_rows("h10", 2)]})
    # the buggy job again: hour 11 holds the partition now (committed), hour 10 is refused
    again = sink.begin(H10)
    write_output(sink, again, {P10: [make_rows("x", 1)], P11: [make_rows("x", 1, start=90)]})
    with pytest.raises(OwnershipError, match=rf"{P11} belongs to interval {H11.token}.*e1 COMMITTED"):
        sink.pre_commit(again)
    assert sink.abort(again) is State.ABORTED
    assert visible_rows(sink, P11) == make_rows("h11", 3, start=50)
    assert visible_rows(sink, P10) == make_rows("h10", 2)
    assert leftovers(sink) == []


def test_a_claim_is_held_while_its_attempt_may_still_commit(table_url):
    """A PRE_COMMITTED attempt of hour 10 (still to decide) holds hour 11's partition; the refusal names
    the attempt and the command that ends it. Once it is aborted, hour 11 publishes."""
    sink = open_sink(table_url)
    pending = wrong_attempt(sink, abort=False)
    txn = sink.begin(H11)
    write_output(sink, txn, {P11: [make_rows("h11", 3, start=50)]})
    with pytest.raises(OwnershipError, match=r"e1 PRE_COMMITTED.*`eo recover <table-url>`"):
        sink.pre_commit(txn)
    sink.abort(txn)
    sink.abort(pending, reason="the gate failed")
    commit_version(sink, H11, {P11: [make_rows("h11", 3, start=50)]})
    assert visible_rows(sink, P11) == make_rows("h11", 3, start=50)
    assert leftovers(sink) == []


@pytest.mark.parametrize("race", ["takeover_loses", "old_owner_loses", "owner_between_claim_and_record"])
def test_a_takeover_racing_the_old_owner_lets_exactly_one_interval_publish(table_url, monkeypatch, race):
    """Two processes want hour 11's partition after hour 10's wrong attempt was aborted: hour 11 (the
    rightful owner, taking the claim over) and a new attempt of hour 10 whose job wrote it again.

    * takeover_loses: hour 11 judged the old claim released; right before it creates the next claim
      generation, hour 10's new attempt creates it (and pre-commits). Hour 11 looks again: refused.
    * old_owner_loses: hour 10's new attempt is about to create that generation when hour 11 takes the
      claim over first. Hour 10 looks again: refused.
    * owner_between_claim_and_record: hour 10's new attempt has claimed but not yet recorded
      PRE_COMMITTED when hour 11 looks: an OPEN attempt named by the claim holds it; hour 11 is refused.

    In every order exactly one interval pre-commits the partition and its rows alone go live."""
    sink, other = open_sink(table_url), open_sink(table_url)
    wrong_attempt(sink)
    h10 = sink.begin(H10)  # hour 10's job, still buggy
    write_output(sink, h10, {P10: [make_rows("h10", 2)], P11: [make_rows("h10bad", 2, start=30)]})
    h11 = other.begin(H11)
    write_output(other, h11, {P11: [make_rows("h11", 3, start=50)]})
    gen2 = lambda path, *a: path.endswith(f"hour=11~2.json")  # noqa: E731 - the next claim generation
    refused: dict[str, Exception] = {}

    def pre_commit(s, txn, who):
        def run():
            try:
                s.pre_commit(txn)
            except OwnershipError as exc:
                refused[who] = exc
        return run

    if race == "takeover_loses":
        fired = interleave(monkeypatch, other.storage, "create_exclusive", gen2, pre_commit(sink, h10, "h10"))
        pre_commit(other, h11, "h11")()
    elif race == "old_owner_loses":
        fired = interleave(monkeypatch, sink.storage, "create_exclusive", gen2, pre_commit(other, h11, "h11"))
        pre_commit(sink, h10, "h10")()
    else:
        fired = interleave(monkeypatch, sink.storage, "create_exclusive",
                           lambda path, *a: path.endswith("pre_committed.json"), pre_commit(other, h11, "h11"))
        pre_commit(sink, h10, "h10")()
    assert fired["fired"]
    winner, loser = ("h11", "h10") if race == "old_owner_loses" else ("h10", "h11")
    assert set(refused) == {loser}, refused
    assert "belongs to interval" in str(refused[loser])
    won, lost = (other, h11) if winner == "h11" else (sink, h10), (sink, h10) if winner == "h11" else (other, h11)
    lost[0].abort(lost[1])
    won[0].commit(won[1])
    expected = make_rows("h11", 3, start=50) if winner == "h11" else make_rows("h10bad", 2, start=30)
    assert visible_rows(sink, P11) == expected
    pre_committed_p11 = [(iv.token, e) for iv in (H10, H11) for e, st in sink.status(iv).items()
                         if st.state is not State.ABORTED and P11 in st.published_partitions]
    assert len({iv for iv, _ in pre_committed_p11}) == 1, pre_committed_p11
    assert leftovers(sink) == []


# ------------------------------------------------------------------ 7b. a sink renamed between attempts
def renamed_attempt(tmp_path):
    """Day 1's run began (and wrote) for sink ``t``; then the DAG's config renamed the sink to ``t2``
    (its table moves with it: ``<root>/warehouse/t2``), and the run's next tasks run with that config."""
    from test_interval_runs import config, land, month, write
    from exactly_once.ids import TxnRef
    from exactly_once.protocol.pipeline import IntervalRun

    land(tmp_path, "2013-01", "a.csv", [1, 2])
    old_cfg, new_cfg = config(tmp_path), config(tmp_path, sink="t2")
    began = IntervalRun(old_cfg, month(1), storage_options={}).begin(run={"run_id": "r1"})
    write(began["spec"])
    return old_cfg, IntervalRun(new_cfg, month(1), storage_options={}), began, TxnRef.from_dict(began["txn"])


def test_a_sink_renamed_between_attempts_fails_at_once_and_its_teardown_ends_the_old_attempt(tmp_path):
    """Before: every phase refused the attempt with a retryable TransactionStateError (4 tries each), and
    the teardown failed the same way: the old attempt stayed OPEN with its staging, for good. Now the
    error is final (no retry) and says what to do; the teardown aborts the attempt in the table it was
    begun in; the new sink's table is untouched."""
    from exactly_once.airflow.operators import FINAL

    old_cfg, run, began, txn = renamed_attempt(tmp_path)
    for phase in (run.pre_commit, run.validate, run.commit, run.counts):
        with pytest.raises(FINAL, match=r"was begun for p/t, but the configuration now names p/t2.*renamed "
                                        r"between attempts.*Clear the whole run.*eo recover"):
            phase(txn)
    assert run.abort(txn, table=began["table"]) == "ABORTED"
    old = old_cfg.sink_handle()
    assert old.status_of(txn).state is State.ABORTED and leftovers(old) == []
    assert run.sink.log.intervals() == []  # nothing was begun in the renamed sink's table


@pytest.mark.parametrize("command", ["recover", "gc"])
def test_a_stranded_attempt_of_a_renamed_sink_is_ended_by_the_documented_command(tmp_path, capsys, command):
    """When the teardown cannot find the old table (begin's result from before it named its table), the
    error names the command; ``eo recover|gc <old table-url> --stale-after 0`` ends the attempt and
    removes its staging."""
    from exactly_once.airflow.operators import FINAL
    from exactly_once.cli import main

    old_cfg, run, began, txn = renamed_attempt(tmp_path)
    with pytest.raises(FINAL, match=r"eo recover <old table-url> --stale-after 0"):
        run.abort(txn)
    old = old_cfg.sink_handle()
    assert old.status_of(txn).state is State.OPEN and leftovers(old) != []  # stranded until the command
    assert main([command, old_cfg.table_url, "--stale-after", "0"]) == 0
    assert old.status_of(txn).state is State.ABORTED and leftovers(old) == []


# ------------------------------------------------------------------ run notes keep their advice
def test_run_notes_keep_the_advice_of_the_real_long_messages(tmp_path):
    """Before: a failed phase's note was cut at 300 characters - before "clear the write task with
    'Downstream'", before ``allow_shrinking``. Now what happened is shortened, never what to do."""
    from test_interval_runs import archive_three, config, land, land_four, month, run_interval
    from exactly_once.airflow.notes import PHASE_NOTE_CHARS, failed_note
    from exactly_once.ids import TxnRef
    from exactly_once.protocol.pipeline import IntervalRun

    cfg = config(tmp_path, pipeline="a_pipeline_with_a_long_descriptive_name", sink="its_output_table")
    land_four(tmp_path)
    run_interval(cfg, month(1))
    archive_three(tmp_path)
    land(tmp_path, "2013-02", "a.csv", [1])
    cases = []
    run = IntervalRun(cfg, month(1), storage_options={})
    with pytest.raises(Exception) as shrank:
        run.begin(refresh_sources=True)
    cases.append((run, None, shrank.value, f'reprocess with allow_shrinking: `eo reprocess {cfg.table_url} --interval '
                  "2013-01-01T00:00:00+00:00 --allow-shrinking` or the table page's Reprocess action; in a checkout: "
                  f"make run-interval DAG={cfg.pipeline} START=2013-01-01T00:00:00+00:00 REPROCESS=1 ALLOW_SHRINKING=1"))
    feb = IntervalRun(cfg, month(2), storage_options={})
    txn = TxnRef.from_dict(feb.begin()["txn"])
    with pytest.raises(Exception) as nothing:
        feb.commit(txn)
    cases.append((feb, txn, nothing.value, "clear the write task with 'Downstream' selected, or the whole run"))
    renamed = IntervalRun(config(tmp_path, pipeline=cfg.pipeline, sink="its_renamed_output_table"), month(2),
                          storage_options={})
    with pytest.raises(Exception) as moved:
        renamed.pre_commit(txn)
    cases.append((renamed, txn, moved.value, "eo recover <old table-url> --stale-after 0"))
    for run, txn, exc, advice in cases:
        assert advice in str(exc) and len(f"aborted: {type(exc).__name__}: {exc}") > 300  # cut before
        note = failed_note(run, txn, exc)
        said = "refused" if txn is None else "aborted"   # begin refused: nothing began (the table page: refused)
        assert note.startswith(f"{said}: {type(exc).__name__}: ") and len(note) <= PHASE_NOTE_CHARS, note
        assert advice in note, note


# ------------------------------------------------------------------ 9. an input corrected in place
def test_a_landing_file_corrected_in_place_with_its_size_is_a_changed_input(tmp_path):
    """The frozen identity of a local input is its size AND mtime (S3: size and etag). Before, a file
    rewritten in place with the same size passed as unchanged: a replay read the new bytes as if they
    were the frozen ones, and the commit reported no changed file. Now the replay is refused with what to
    do (reprocess), and ``late_files`` lists the file as changed."""
    from test_interval_runs import config, land, month, run_interval, write
    from exactly_once.errors import StorageError
    from exactly_once.ids import TxnRef
    from exactly_once.protocol.pipeline import IntervalRun

    cfg = config(tmp_path)
    land(tmp_path, "2013-01", "a.csv", [1, 2])
    run_interval(cfg, month(1))
    landed = tmp_path / "landing" / "s" / "2013-01" / "a.csv"
    before = landed.stat()
    landed.write_text("v\n5\n6\n")
    os.utime(landed, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    assert landed.stat().st_size == before.st_size
    run = IntervalRun(cfg, month(1), storage_options={})
    assert run.late_files()["changed"] == ["2013-01/a.csv"]
    began = run.begin()  # a plain re-run replays the committed version's frozen inputs
    assert began["inputs"] == 1 and run.sink.status(month(1))[2].records["open"]["meta"]["replayed"] is True
    with pytest.raises(StorageError, match=r"a.csv changed since it was frozen \(mtime .*reprocess the interval"):
        write(began["spec"])
    assert run.abort(TxnRef.from_dict(began["txn"])) == "ABORTED"


def test_an_aborted_attempt_of_an_overlapping_interval_never_blocks_the_scheduled_one(tmp_path):
    """A manual run off the schedule ([05:30, 06:30): it declares hour=05) began and was aborted. Before,
    the scheduled hour 05 was refused at begin for good (``would publish dt=.../hour=05, which interval
    ... owns``); now only an attempt that is not aborted blocks it."""
    from datetime import datetime, timezone

    from test_interval_runs import config, run_interval
    from exactly_once.ids import TxnRef
    from exactly_once.protocol.layout import Source
    from exactly_once.protocol.pipeline import IntervalRun

    utc = timezone.utc
    cfg = config(tmp_path, sources=Source("s", format="csv", path="{start:%Y-%m}", allow_empty=True),
                 partitions="dt={start:%Y-%m-%d}/hour={start:%H}")
    five = Interval(datetime(2013, 1, 1, 5, tzinfo=utc), datetime(2013, 1, 1, 6, tzinfo=utc))
    odd = Interval(datetime(2013, 1, 1, 5, 30, tzinfo=utc), datetime(2013, 1, 1, 6, 30, tzinfo=utc))
    manual = IntervalRun(cfg, odd, storage_options={})
    began = manual.begin()
    with pytest.raises(OwnershipError, match=r"which interval .* owns \(its e1 is OPEN\).*eo recover"):
        IntervalRun(cfg, five, storage_options={}).begin()  # still unfinished: refused, and says why
    assert manual.abort(TxnRef.from_dict(began["txn"])) == "ABORTED"
    run_interval(cfg, five)
    assert IntervalRun(cfg, five, storage_options={}).sink.committed(five) is not None
