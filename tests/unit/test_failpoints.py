"""Failpoints the fleet tests rely on: ``hang`` (stop at the point until killed, so a harness can kill the
process - or the worker running it - exactly there) and ``:once`` shared by processes that share no disk."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import make_bucket
from exactly_once.errors import ConfigError
from exactly_once.failpoints import parse

ROOT = Path(__file__).resolve().parents[2]
FIRE = ("import sys; sys.path.insert(0, {plugins!r}); from exactly_once.failpoints import failpoint; "
        "failpoint('commit.mid_publish'); print('passed', flush=True)")


def child(env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", FIRE.format(plugins=str(ROOT / "plugins"))], cwd=cwd,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_hang_is_a_known_action_with_or_without_once():
    assert parse("commit.mid_publish=hang,abort.mid=hang:once") == {
        "commit.mid_publish": ("hang", False), "abort.mid": ("hang", True)}
    with pytest.raises(ConfigError, match="crash\\|error\\|hang"):
        parse("commit.mid_publish=sleep")


def test_hang_stops_the_process_at_the_point_until_it_is_killed(tmp_path):
    proc = child({"EO_FAILPOINTS": "commit.mid_publish=hang"}, tmp_path)
    try:
        line = proc.stderr.readline()  # blocks until the failpoint announces itself
        assert "[failpoint] commit.mid_publish: hanging until killed" in line
        assert proc.poll() is None  # it did not go past the point, nor exit
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and "passed" not in out


def test_once_fires_once_across_processes_with_private_temp_and_working_dirs(tmp_path):
    """Two "workers" - each its own TMPDIR and working directory - share only the state location given
    by EO_FAILPOINTS_STATE: the failpoint fires in exactly one of them. (With the default state under each
    process's own temp dir it would fire once per worker.)"""
    state = tmp_path / "shared-state"
    codes = []
    for name in ("a", "b"):
        private = tmp_path / name
        (private / "tmp").mkdir(parents=True)
        proc = child({"EO_FAILPOINTS": "commit.mid_publish=error:once", "EO_FAILPOINTS_STATE": str(state),
                      "TMPDIR": str(private / "tmp")}, private)
        out, err = proc.communicate(timeout=60)
        codes.append((proc.returncode, "FailpointError" in err, "passed" in out))
    assert sorted(codes) == [(0, False, True), (1, True, False)], codes


@pytest.mark.s3
def test_once_with_the_state_on_s3_fires_in_one_of_two_workers(s3_server, tmp_path):
    """Issue 29: Celery workers share no disk. ``EO_FAILPOINTS_STATE=s3://...`` claims the marker with
    put-if-absent, so "crash the first commit, let the retry succeed" holds when the retry runs on the
    other worker (a URL state used to be taken for a local path relative to each worker's cwd)."""
    state = f"s3://{make_bucket(s3_server)}/failpoints/{uuid.uuid4().hex}"
    results = []
    for name in ("worker-a", "worker-b", "worker-a-again"):
        private = tmp_path / name
        (private / "tmp").mkdir(parents=True)
        proc = child({"EO_FAILPOINTS": "commit.mid_publish=error:once", "EO_FAILPOINTS_STATE": state,
                      "TMPDIR": str(private / "tmp")}, private)
        out, err = proc.communicate(timeout=120)
        results.append("fired" if "FailpointError" in err else "passed" if "passed" in out else err[-500:])
    assert results == ["fired", "passed", "passed"], results
    assert not list(tmp_path.rglob("s3:*")), "the state URL was taken for a local path"
