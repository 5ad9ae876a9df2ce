"""Suite files are checked without Great Expectations (DAG parse time): every problem names the file
and the field, and the project's own suites pass."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from exactly_once.errors import ConfigError
from exactly_once.quality.suites import check_suites, read_suite


def write(path: Path, doc: object) -> str:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


NULL = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "x"}}


@pytest.mark.parametrize("doc, message", [
    ('{"name": "t", "expectations": [', r"t\.json: not valid JSON: .*line 1 column"),
    ({"name": "t", "expectations": [{**NULL, "type": "expect_column_to_be_nice"}]},
     r"t\.json: .*expectations\[0\]\.type: 'expect_column_to_be_nice' is not a Great Expectations core"),
    ({"name": "t", "expectations": [{"type": NULL["type"], "kwargs": ["x"]}]},
     r"expectations\[0\]\.kwargs: must be an object, not list"),
    ({"name": "t", "expectations": [NULL], "meta": {"eo": {"frame": "state"}}},
     r"meta\.eo\.frame: must be one of data, counts, checkpoint, not 'state'"),
    ({"name": "t", "expectations": [NULL], "meta": {"eo": {"derive": {"y": "x + 1"}}}},
     r"meta\.eo\.fill/derive: apply to the counts and checkpoint frames only"),
    ({"expectations": [NULL], "data_asset_type": None}, r"data_asset_type: unknown field; name: a non-empty string"),
    ({"name": "t", "expectations": [{**NULL, "severity": "fatal"}]}, r"expectations\[0\]\.severity: must be one of"),
    # GX stores suite a.b at a/b: "dq..orders" would share dq.orders' page, ".x" would land outside the site
    ({"name": "dq..orders", "expectations": [NULL]}, r"name: 'dq\.\.orders' must not start or end with '\.', hold '\.\.'"),
    ({"name": ".lead", "expectations": [NULL]}, r"name: '\.lead' must not start or end"),
    ({"name": "tail.", "expectations": [NULL]}, r"name: 'tail\.' must not start or end"),
    ({"name": "a/b", "expectations": [NULL]}, r"name: 'a/b' must not"),
])
def test_a_broken_suite_names_the_file_and_the_field(tmp_path, doc, message):
    path = write(tmp_path / "t.json", doc)
    with pytest.raises(ConfigError, match=message):
        read_suite(path)


def test_a_companion_is_checked_too_and_a_missing_suite_is_named(tmp_path):
    main = write(tmp_path / "t.json", {"name": "t", "expectations": [NULL]})
    write(tmp_path / "t.counts.json", {"name": "t.counts", "expectations": [{"type": NULL["type"]}],
                                       "meta": {"eo": {"frame": "counts"}}})
    with pytest.raises(ConfigError, match=r"t\.counts\.json: .*expectations\[0\]\.kwargs: an object"):
        check_suites(main)
    with pytest.raises(ConfigError, match=r"expectation suite .*nope\.json does not exist"):
        check_suites(str(tmp_path / "nope.json"))


def test_the_projects_suites_pass():
    for suite in sorted((ROOT / "expectations").glob("*.json")):
        frame, data = read_suite(str(suite))
        assert frame in ("data", "counts", "checkpoint") and data["expectations"]
