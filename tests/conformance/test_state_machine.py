"""A Hypothesis state machine run once per target (issue 25): random sequences of the owner's runs
(some left pre-committed, as a crash after pre_commit leaves them), each actor on its own clock (2 h slow
or fast), a second pipeline trying the same table, another writer's rows outside our intervals, rollbacks
to an earlier version, gc (with and without a grace period) and recovery.

The model is what readers must see: per interval the rows of the version that is live by the protocol's
rules (the last commit or rollback; a pre-committed attempt goes live when the next begin or a recovery
commits it), plus the other writer's rows. Invariants after every step: the target shows exactly that;
gc with a grace period never removes anything of a version replaced within it. At the end (recovery):
every epoch ended, the target holds the newest committed version, nothing left behind.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from exactly_once import State
from exactly_once.errors import ExactlyOnceError
from exactly_once.ops.maintenance import gc
from exactly_once.ops.rollback import rollback
from protocol_helpers import make_rows

from .conftest import IV, IV2, OUTSIDE, PART, PART2, World

SKEW, GRACE = 2 * 3600.0, 3600.0
INTERVALS = {IV: PART, IV2: PART2}
clocks = st.sampled_from([0.0, -SKEW, SKEW])  # an actor's clock: right, 2 h slow, 2 h fast
intervals = st.sampled_from(sorted(INTERVALS, key=lambda i: i.start))


class TargetMachine(RuleBasedStateMachine):
    """One fresh table of the test's target kind per example (``new_world`` is set by the test)."""

    new_world = staticmethod(lambda: None)  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.world: World = type(self).new_world()
        self.owner = self.world.sink()
        self.keys = itertools.count()
        self.live: dict = {}              # interval -> rows readers must see
        self.versions: dict = {}          # (interval, epoch) -> rows of each committed version
        self.pending: dict = {}           # interval -> (txn, rows): pre-committed, not decided (a crashed run)
        self.foreign: list = []           # the other writer's rows (OUTSIDE)
        self.collectable: set = set()     # versions a gc without grace period may have removed
        self.owner_runs(IV, 0.0, False)   # the first publish binds the table to its owner

    # ------------------------------------------------------------------ helpers
    def _rows(self, tag: str) -> list:
        start = next(self.keys) * 10
        return make_rows(tag, 1 + start % 3, start=start)

    def _settle_pending(self, iv) -> None:
        """A begin or a recovery commits the interval's pre-committed newest attempt (ungated)."""
        if iv in self.pending:
            txn, rows = self.pending.pop(iv)
            self.live[iv] = self.versions[(iv, txn.epoch)] = rows

    def _after_refusal(self, iv) -> None:
        """A refused rollback may have begun (and so committed a pending attempt) or not: the log says."""
        if iv in self.pending:
            txn, _ = self.pending[iv]
            state = self.owner.status(iv)[txn.epoch].state
            if state is State.COMMITTED:
                self._settle_pending(iv)
            elif state is State.ABORTED:
                raise AssertionError(f"a refused rollback aborted the validated newest attempt {txn.name}")

    # ------------------------------------------------------------------ actors
    @rule(iv=intervals, clock=clocks, crash_before_commit=st.booleans())
    def owner_runs(self, iv, clock, crash_before_commit):
        rows = self._rows("run")
        with self.world.clock(clock):
            txn = self.owner.begin(iv)
            self._settle_pending(iv)
            self.world.stage(self.owner, txn, {INTERVALS[iv]: [rows]})
            self.owner.pre_commit(txn)
            if crash_before_commit:
                self.pending[iv] = (txn, rows)
                return
            self.owner.commit(txn)
        self.live[iv] = self.versions[(iv, txn.epoch)] = rows

    @rule(iv=intervals, which=st.sampled_from([("q", "t"), ("p", "u")]))
    def second_pipeline_tries(self, iv, which):
        other = self.world.sink(*which)
        with pytest.raises(ExactlyOnceError):
            with other.transaction(iv) as txn:
                self.world.stage(other, txn, {INTERVALS[iv]: [self._rows("intruder")]})
        assert self.world.leftovers(other) == []

    @rule()
    def other_writer_writes(self):
        rows = self._rows("foreign")
        self.world.other_writer(OUTSIDE, rows)
        self.foreign += rows

    @precondition(lambda self: any(len([k for k in self.versions if k[0] == iv]) >= 2 for iv in INTERVALS))
    @rule(data=st.data(), clock=clocks)
    def rollback_to_an_earlier_version(self, data, clock):
        iv = data.draw(st.sampled_from([i for i in INTERVALS if len([k for k in self.versions if k[0] == i]) >= 2]))
        epochs = sorted(e for i, e in self.versions if i == iv)
        to = data.draw(st.sampled_from(epochs[:-1]))
        with self.world.clock(clock):
            try:
                result = rollback(self.owner, iv, to)
            except ExactlyOnceError:  # refused (e.g. gc without grace removed the version): nothing changed
                self._after_refusal(iv)
                return
        self._settle_pending(iv)
        self.live[iv] = self.versions[(iv, result.txn.epoch)] = self.versions[(iv, to)]

    @rule(clock=clocks, grace=st.booleans())
    def gc_runs(self, clock, grace):
        with self.world.clock(clock):
            gc(self.world.sink(), min_age=GRACE if grace else 0, stale_after=GRACE)
        for iv in list(self.pending):  # gc recovers first: it commits a pre-committed newest attempt
            self._settle_pending(iv)
        if not grace:  # every version not live may go
            newest = {iv: max(e for i, e in self.versions if i == iv) for iv, _ in self.versions}
            self.collectable |= {(iv, e) for iv, e in self.versions if e != newest[iv]}
            return
        for (iv, epoch) in set(self.versions) - self.collectable:  # replaced seconds ago (storage time)
            assert self.world.missing_of(self.owner, self.owner.ref(iv, epoch)) == [], (iv, epoch, clock)

    @rule(clock=clocks)
    def recovery_runs(self, clock):
        with self.world.clock(clock):
            self.owner.recover(abort_open=False)
        for iv in list(self.pending):
            self._settle_pending(iv)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def readers_see_the_live_versions(self):
        expected = {INTERVALS[iv]: [rows] for iv, rows in self.live.items()}
        if self.foreign:
            expected[OUTSIDE] = [self.foreign]
        assert self.world.read_rows() == self.world.rows(expected)

    def teardown(self) -> None:
        try:
            self.owner.recover()
            for iv in list(self.pending):
                self._settle_pending(iv)
            self.readers_see_the_live_versions()
            for iv in INTERVALS:
                assert self.world.log_problems(self.owner, iv) == [], iv
            assert self.world.leftovers(self.owner) == []
        finally:
            super().teardown()


def test_random_histories_keep_exactly_once_on_every_target(target_world):
    """Deterministic (derandomized) examples; fewer on the loopback S3 server, whose calls are slow."""
    TargetMachine.new_world = staticmethod(target_world.world)
    on_s3 = target_world.kind.endswith("-s3")
    run_state_machine_as_test(TargetMachine, settings=settings(
        max_examples=2 if on_s3 else 6, stateful_step_count=6 if on_s3 else 12, deadline=None,
        derandomize=True, suppress_health_check=list(HealthCheck)))
