"""A run's note when it ends (``airflow.notes._apply``, what the plugin's listener does): what the run did
replaces a note this product wrote - the phase tasks' and the one ``eo reprocess`` / ``eo rerun-stale`` start
their runs with - and never one a person wrote."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from exactly_once.airflow import notes


@pytest.mark.parametrize("current, kept", [
    (None, False),
    ("eo reprocess of app_pv", False),           # the CLI's, at the run's start (it said so forever before)
    ("eo rerun-stale of app_pv", False),
    ("published e1: 2 rows, 1 file", False),     # an earlier try's
    ("checking the late files - alice", True),   # a person's
    ("eo reprocess of app_pv: asked by finance (FIN-123)", True),   # a person's, begun as ours
])
def test_what_the_run_did_replaces_our_notes_and_never_a_persons(monkeypatch, current, kept):
    said = "published e2: 3 rows, 1 file (reprocess)"
    monkeypatch.setattr(notes, "run_note", lambda dag_run, session: said)
    run = SimpleNamespace(note=current, run_id="manual__eo_reprocess_x")
    notes._apply(run, session=None, failed=False)
    assert run.note == (current if kept else said)
