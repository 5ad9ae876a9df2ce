"""r02: "Clear" of begin (Downstream not selected) while the commit task is running.

Airflow resets begin and its teardown (abort). Commit publishes e1 (the write's first try wrote it), finds
the write's XCom ``attempt: 1`` and skips the teardown (None -> SKIPPED). begin then opens e2 (a new
attempt: frozen sources, a job spec in its staging dir) that no task of the run ever ends: after the run
ends "success", e2 stays OPEN with its staging dir. Control (CONTROL=1, before 9843cca): the teardown
aborts e2.
"""
from _harness import clear_while_commit_runs, verdict

out = clear_while_commit_runs("r02", ["t.begin"])
left = out["epochs"].get(2) == "OPEN" or bool(out["staged"])
verdict(left and out["run"] != "running", f"run ended {out['run']}, abort={out['states']['abort']}, "
        f"e2={out['epochs'].get(2)}, {len(out['staged'])} staged file(s) left")
