"""The rule each failure line states (``exactly_once.quality._expected``) says what the expectation asks."""
from __future__ import annotations

import pytest

from exactly_once.quality import _expected

CASES = [
    ("expect_column_values_to_be_in_set", {"column": "c", "value_set": ["a", "b"]}, "values in ['a', 'b']"),
    ("expect_column_values_to_not_be_in_set", {"column": "c", "value_set": ["x"]}, "values not in ['x']"),
    ("expect_column_distinct_values_to_be_in_set", {"column": "c", "value_set": [1, 2]}, "distinct values in [1, 2]"),
    ("expect_column_distinct_values_to_contain_set", {"column": "c", "value_set": [1]}, "distinct values include [1]"),
    ("expect_column_distinct_values_to_equal_set", {"column": "c", "value_set": [1]}, "distinct values exactly [1]"),
    ("expect_column_pair_values_a_to_be_greater_than_b", {"column_A": "pv", "column_B": "uv", "or_equal": True},
     "pv >= uv"),
    ("expect_column_pair_values_a_to_be_greater_than_b", {"column_A": "pv", "column_B": "uv"}, "pv > uv"),
    ("expect_column_pair_values_to_be_equal", {"column_A": "a", "column_B": "b"}, "a == b"),
    ("expect_column_pair_values_to_be_in_set", {"column_A": "a", "column_B": "b", "value_pairs_set": [(1, 2)]},
     "(a, b) in [[1, 2]]"),
    ("expect_column_values_to_be_between", {"column": "c", "min_value": 0, "max_value": 5.0}, ">= 0 and <= 5"),
    ("expect_column_values_to_not_be_null", {"column": "c"}, "no nulls"),
]


@pytest.mark.parametrize("kind,kwargs,rule", CASES, ids=[c[0] for c in CASES])
def test_a_failure_line_states_the_expectations_own_rule(kind, kwargs, rule):
    assert _expected(kind, kwargs) == rule
