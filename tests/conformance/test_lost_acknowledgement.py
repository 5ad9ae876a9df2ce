"""A lost acknowledgement: the target has the version, the log never heard (the publisher died between
the target's commit and the ``published`` record). Recovery reads the target and does not republish."""
from __future__ import annotations

import pytest

from exactly_once.errors import FailpointError
from protocol_helpers import failpoints, make_rows

from .conftest import IV, PART


def test_recovery_reads_the_target_and_does_not_republish(world):
    sink = world.sink()
    old, rows = make_rows("old", 3), make_rows("a", 5, start=20)
    world.commit(sink, IV, {PART: [old]})
    txn = sink.begin(IV)
    world.stage(sink, txn, {PART: [rows[:2], rows[2:]]})
    manifest = sink.pre_commit(txn)
    with failpoints("commit.after_publish=error"), pytest.raises(FailpointError):
        sink.commit(txn)
    st = sink.status(IV)[txn.epoch]
    assert not st.published and world.read_rows() == world.rows({PART: [rows]})  # live, unacknowledged
    recovered = world.sink()  # another process: the next begin, `eo recover`, the teardown
    recovered.recover(IV)
    published = recovered.status(IV)[txn.epoch].records["published"]["partitions"]
    assert set(published.values()) == {"already"}, published  # read from the target, not applied again
    assert world.read_rows() == world.rows({PART: [rows]})
    again = recovered.commit(txn)  # a retried commit task: its report names what is published
    assert again.partitions == {PART: "already"} and (again.files, again.rows) == (manifest.files, 5)
    assert world.log_problems(recovered, IV) == [] and world.leftovers() == []
