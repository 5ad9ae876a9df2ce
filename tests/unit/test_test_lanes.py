"""``make test`` runs the suite in lanes (tools/test_lanes.py): every test file must be in exactly one."""
from __future__ import annotations

from pathlib import Path

from tools.test_lanes import LANES, ROOT, lanes


def _files(paths: list[str]) -> set[Path]:
    out: set[Path] = set()
    for p in paths:
        path = ROOT / p
        out |= {path} if path.is_file() else set(path.rglob("test_*.py"))
    return out


def test_every_test_file_runs_in_exactly_one_lane(monkeypatch):
    monkeypatch.delenv("EO_TEST_LANES", raising=False)
    every = set((ROOT / "tests").rglob("test_*.py"))
    claimed = [f for paths in LANES.values() for f in _files(paths)]
    assert len(claimed) == len(set(claimed)), "a file is in two lanes"
    assert set(claimed) <= every, "a lane names a path that holds no test file"
    main = [cmd for name, cmd in lanes([]) if name == "main"][0]
    ignored = _files([a.split("=", 1)[1] for a in main if a.startswith("--ignore=")])
    assert ignored == set(claimed)  # main runs exactly the files no other lane runs
    assert {name for name, _ in lanes(["-q"])} == {*LANES, "main"}
    assert all(cmd[-1] == "-q" for _, cmd in lanes(["-q"]))


def test_one_lane_on_request(monkeypatch):
    monkeypatch.setenv("EO_TEST_LANES", "1")
    assert [name for name, _ in lanes([])] == ["all"]
