"""Concurrency: real processes racing on one interval, zombies of older epochs, two processes finishing
the same commit. Exactly one complete version may be visible, it is the newest committed one, and the
losers leave nothing behind. (Interleavings that real races hit only sometimes are forced
deterministically in test_protocol_interleavings.py.)"""
from __future__ import annotations

import pytest

from exactly_once import FencedError, Interval, State, TransactionAbortedError
from protocol_helpers import (assert_exact_version, commit_version, finish_child, leftovers, log_problems,
                              make_rows, open_sink, refresh, run_child, split, table_url,  # noqa: F401
                              visible_rows, write_output)

IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"
LOSER_ERRORS = {"FencedError", "TransactionAbortedError"}


def race(url, tmp_path, scripts):
    """Start one child per script at once; return ``[(rc, results, stderr)]`` in script order."""
    procs = [run_child(url, IV, ops, wait=False) for ops in scripts]
    return [finish_child(p) for p in procs]


def barrier(tmp_path, name, n):
    return {"op": "barrier", "dir": str(tmp_path / "barriers"), "name": name, "n": n}


@pytest.mark.parametrize("n,sync", [(3, "begun"), (2, "sealed")])
def test_racing_attempts_publish_exactly_one_complete_version(table_url, tmp_path, n, sync):
    """All attempts start together and begin concurrently (epoch allocation and fencing race); they write
    once every attempt has begun (the fully overlapped race, where a begin aborts an attempt that is
    still writing, is pinned down deterministically in test_protocol_interleavings.py); with ``sealed``
    they also pre-commit and commit together."""
    sink = open_sink(table_url)
    for rnd in range(2):  # the second round races over a committed previous version
        candidates = {i: make_rows(f"r{rnd}c{i}", 6 + i, start=100 * i) for i in range(n)}
        scripts = []
        for i, rows in candidates.items():
            ops = [barrier(tmp_path, f"r{rnd}-start", n), {"op": "begin"}, barrier(tmp_path, f"r{rnd}-begun", n),
                   {"op": "write", "files": {PART: split(rows, 4)}}]
            if sync == "sealed":
                ops.append(barrier(tmp_path, f"r{rnd}-sealed", n))
            scripts.append(ops + [{"op": "pre_commit"}, {"op": "commit"}, {"op": "abort"}])
        outcomes = race(table_url, tmp_path, scripts)

        committed, epochs = {}, {}
        for i, (rc, results, err) in enumerate(outcomes):
            assert rc == 0, f"child {i} died: {err}"
            by_op = {r["op"]: r for r in results}
            epochs[i] = by_op["begin"]["epoch"]
            failure = next((r for r in results if r.get("ok") is False), None)
            if failure is None:
                committed[i] = epochs[i]
            else:
                assert failure["error"] in LOSER_ERRORS, f"child {i}: {failure}"
                assert by_op["abort"]["result"] == "ABORTED", f"child {i}: loser teardown {by_op['abort']}"
        assert committed, f"no attempt committed: {outcomes}"
        refresh(sink)
        states = {e: s.state for e, s in sink.status(IV).items()}
        for i, epoch in epochs.items():
            assert states[epoch] is (State.COMMITTED if i in committed else State.ABORTED)
        winner = max(committed, key=committed.get)  # the newest committed epoch is the live version
        assert_exact_version(sink, PART, candidates[winner], sink.ref(IV, epochs[winner]))
        assert leftovers(sink) == []
        assert log_problems(sink, IV) == []


# ------------------------------------------------------------------------------------------ zombies
def _newer_begins_while_zombie(sink, stage):
    """Put a zombie attempt at ``stage``, then let a newer attempt begin; return (zombie, newer)."""
    zombie = sink.begin(IV)
    write_output(sink, zombie, {PART: split(make_rows("zombie", 8), 4)})
    if stage == "open":
        return zombie, sink.begin(IV)
    sink.pre_commit(zombie)
    if stage == "pre_committed_unvalidated":  # the gate has not run: the newer begin takes over
        newer = sink.begin(IV)
        sink.record_validation(zombie, True, {})  # the zombie's gate finishes late
        return zombie, newer
    sink.record_validation(zombie, True, {})
    # a concurrent begin whose recovery ran before the zombie pre-committed: its epoch appears now
    assert sink.log.append(IV, zombie.epoch + 1, "open", {"pipeline": "p", "sink": "t", "sources": []})
    return zombie, sink.ref(IV, zombie.epoch + 1)


@pytest.mark.parametrize("stage,error", [("open", TransactionAbortedError),
                                         ("pre_committed_unvalidated", TransactionAbortedError),
                                         ("pre_committed_racing", FencedError)])
def test_zombie_of_an_older_epoch_never_publishes(table_url, stage, error):
    sink = open_sink(table_url, require_validation=True)
    zombie, newer = _newer_begins_while_zombie(sink, stage)
    with pytest.raises(error):
        if stage == "open":
            sink.pre_commit(zombie)
        sink.commit(zombie)
    with pytest.raises((FencedError, TransactionAbortedError)):
        sink.commit(zombie)  # and again: it stays refused
    assert sink.status(IV)[zombie.epoch].state is State.ABORTED
    assert visible_rows(sink, PART) == []
    rows = make_rows("newer", 5, start=500)
    write_output(sink, newer, {PART: split(rows, 2)})
    sink.pre_commit(newer)
    sink.record_validation(newer, True, {})
    sink.commit(newer)
    assert sink.abort(zombie) is State.ABORTED  # the zombie's teardown
    assert_exact_version(sink, PART, rows, newer)
    assert leftovers(sink) == []
    assert log_problems(sink, IV) == []


# ------------------------------------------------------------------------ one commit, two finishers
def test_same_pre_committed_txn_finished_by_two_processes_publishes_once(table_url, tmp_path):
    sink = open_sink(table_url)
    commit_version(sink, IV, {PART: [make_rows("prior", 3)]})
    for rnd in range(2):
        rows = make_rows(f"v{rnd}", 12, start=1000 * rnd)
        txn = sink.begin(IV)
        write_output(sink, txn, {PART: split(rows, 6)})
        sink.pre_commit(txn)
        go = barrier(tmp_path, f"go{rnd}", 2)
        outcomes = race(table_url, tmp_path, [[{"op": "use", "epoch": txn.epoch}, go, {"op": "commit"}],
                                              [go, {"op": "recover"}]])
        for rc, results, err in outcomes:
            assert rc == 0 and all(r.get("ok") for r in results), f"{results}\n{err}"
        refresh(sink)
        assert sink.status(IV)[txn.epoch].state is State.COMMITTED
        assert_exact_version(sink, PART, rows, txn)
        assert leftovers(sink) == []
        assert log_problems(sink, IV) == []
