"""The partition guard's matcher (``db_claims._same_partitions``) against its definition, on random inputs: one of
our new partitions is refused iff some partition another interval's marker names holds, on every column both
have, a value the database found equal (``equal``: the (column, ours, theirs) pairs its probe returned). The
matcher is indexed (a year of marked partitions against a thousand new ones is not a pairwise loop); this
checks it finds exactly the partitions the pairwise definition finds, key sets differing between markers
included."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exactly_once.targets.db_claims import _same_partitions

COLS = ["dt", "hour", "region"]
VALUES = ["1", "01", "2", "eu", "EU"]
partition = st.dictionaries(st.sampled_from(COLS), st.sampled_from(VALUES), max_size=3)


def pairwise(equal, ours, theirs) -> set[str]:
    return {part for part, mine in ours for _, _, cols in theirs
            if all((c, mine[c], cols[c]) in equal for c in mine.keys() & cols.keys())}


@settings(max_examples=300, deadline=None)
@given(st.lists(partition, max_size=6), st.lists(partition, max_size=8),
       st.sets(st.tuples(st.sampled_from(COLS), st.sampled_from(VALUES), st.sampled_from(VALUES)), max_size=20))
def test_the_indexed_match_finds_what_the_pairwise_definition_finds(mine, others, equal):
    ours = [(f"p{i}", cols) for i, cols in enumerate(mine)]
    theirs = [(f"iv{i}", f"q{i}", cols) for i, cols in enumerate(others)]
    found = list(_same_partitions(equal, ours, theirs))
    assert {part for part, _, _ in found} == pairwise(equal, ours, theirs)
    named = {q: cols for _, q, cols in theirs}
    for part, token, other in found:  # each names a partition of theirs that is equal to it
        mine_cols = dict(ours)[part]
        assert token == "iv" + other[1:]
        assert all((c, mine_cols[c], named[other][c]) in equal for c in mine_cols.keys() & named[other].keys())
