"""Does the state machine find the races of issue 12? Each test puts one race's bug back into the library
(a mutant: the mechanism that closed it switched off, the way 09a84e9 behaved) and runs the Hypothesis
protocol machine of test_protocol_stateful.py on it, generation only (no shrinking), until an invariant
breaks. The test fails if the machine does not find the bug within its budget, so a machine that has
gone blind to a race shows up here. The steps each mutant took are printed and reported in
docs/RELIABILITY.md.

Case 3 (the gc grace starting at the wrong time) is driven by the machine's own clock (``time_passes``:
the log's timestamps and gc's "now") and its slow readers (``slow_reader_resolves``).
"""
from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from exactly_once import maintenance, ordering
from exactly_once.targets import files as files_target
from exactly_once.records.txlog import EpochStatus, State
from test_protocol_stateful import ProtocolMachine


def _no_lock(path, timeout=0.0):
    """Case 1 (stalled older publisher): publishers of a partition are not ordered."""
    return contextlib.nullcontext()


def _sweep_anything(sink, min_age, now):
    """Case 2 (gc sweep racing a commit): any version that is not live is garbage, as when mtimes judged."""
    return lambda version: True


def _grace_from_own_publish(statuses, epoch, stamp):
    """Case 3 (gc grace starting at the wrong time): a version's grace counts from its own publish, not
    from when a newer version replaced it."""
    return stamp(epoch, "published")


def _same_names(version, name):
    """Case 4 (plain readers see a mix): every version uses the writer's own file names."""
    return name


def _compact_once_newer_committed(statuses, epoch, current, min_age, clock, interval):
    """Case 6 (compaction racing a publish): an older epoch's manifest goes as soon as a newer epoch
    committed, before that one published."""
    return not current and any(e > epoch and s.state is State.COMMITTED for e, s in statuses.items())


@property
def _partitions_from_manifest_only(self):
    """Case 6, second layer: a publish learns the interval's older partitions from manifests only (the
    ``published`` tombstones that survive compaction are not consulted)."""
    rec = self.records.get("pre_committed")
    return sorted(rec["manifest"]["partitions"]) if rec else []


MUTANTS = {
    "1 stalled older publisher": [(files_target, "partition_lock", _no_lock)],
    "2 gc sweep racing a commit": [(maintenance, "garbage_judge", _sweep_anything)],
    "3 gc grace starts at publish": [(maintenance, "retired_at", _grace_from_own_publish)],
    "4 plain reader sees a mix": [(files_target, "published_name", _same_names)],
    "5 dependent commits on replaced state": [(ordering, "newer_than", lambda sink, reads: None),
                                              (ordering, "fence_successors", lambda sink, txn, decide: [])],
    "6 compaction racing a publish": [(maintenance, "compactable", _compact_once_newer_committed),
                                      (EpochStatus, "published_partitions", _partitions_from_manifest_only)],
}
BUDGET = 100  # examples; each mutant was found in far fewer (docs/RELIABILITY.md)


@pytest.mark.parametrize("case", sorted(MUTANTS))
def test_state_machine_finds_the_race_when_its_fix_is_removed(case, tmp_path, monkeypatch):
    for module, name, mutant in MUTANTS[case]:
        monkeypatch.setattr(module, name, mutant)
    counter = itertools.count()
    ProtocolMachine.new_url = staticmethod(lambda: str(tmp_path / f"ex{next(counter)}" / "t"))
    ProtocolMachine.steps = 0
    ProtocolMachine.fired.clear()
    with pytest.raises(Exception) as found:  # noqa: PT011 - any broken invariant or protocol error
        run_state_machine_as_test(ProtocolMachine, settings=settings(
            max_examples=BUDGET, stateful_step_count=30, deadline=None, database=None, derandomize=True,
            phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    print(f"\ncase {case}: found after {ProtocolMachine.steps} protocol steps, "
          f"{next(counter)} examples: {type(found.value).__name__}: {str(found.value).splitlines()[0][:160]}")
