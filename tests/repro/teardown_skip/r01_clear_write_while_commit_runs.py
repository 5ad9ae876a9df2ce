"""r01: "Clear" of the write task (Downstream not selected) while the commit task is running.

Airflow adds the setup and the teardown to the clear: begin, write and abort are reset; the running commit
is not touched. Commit goes on with the attempt it read (e1, written by the write's FIRST try), publishes it
and then reads the write's XCom - still ``{"attempt": 1}``: a cleared task's XCom is only deleted when its
next try starts - so it raises DownstreamTasksSkipped for the teardown, whose state is now None -> SKIPPED
(the skip-downstream API only spares running/success/failed tasks). Then begin opens e2 and the write's
second try writes e2 - and no teardown ever runs: after the DAG run ends "success", e2 stays OPEN with its
staged files, and the run's note says nothing about it.

Control (CONTROL=1: the skip disabled, i.e. the behaviour before 9843cca): the teardown runs after begin,
aborts e2 and removes its staging; the note says e2 was not published.
"""
import os

from _harness import new_pipeline, staging_left, verdict
from exactly_once.protocol.pipeline import IntervalRun

control = bool(os.environ.get("CONTROL"))
if control:
    from exactly_once.airflow import operators
    operators.CommitOperator.teardown_idle = lambda self, context: []

pipe = new_pipeline("r01_control" if control else "r01")
dr = pipe.create_run(1)
pipe.drive(dr, until="t.commit")  # begin, write (try 1), pre_commit, validate done; commit next
print("before commit:", pipe.states(dr), "write XCom:", pipe.write_xcom(dr))

real_commit = IntervalRun.commit


def commit_while_the_user_clears_write(self, txn):
    # the user clicks Clear on the write task (Downstream not selected) while commit is running
    from airflow import settings

    ui = settings.NonScopedSession()  # the API server's own session
    print("  [commit running] Clear of write resets:", sorted(ti.task_id for ti in pipe.sdag.clear(
        task_ids=["t.write"], run_id=dr.run_id, session=ui, dry_run=True)))
    pipe.sdag.clear(task_ids=["t.write"], run_id=dr.run_id, session=ui)
    ui.commit()
    ui.close()
    return real_commit(self, txn)


IntervalRun.commit = commit_while_the_user_clears_write
print("commit ->", pipe.run_one(dr, "commit"), "| abort now:", pipe.states(dr)["abort"])
IntervalRun.commit = real_commit

states = pipe.drive(dr)  # begin (e2), write try 2, (the teardown?) - until the run ends
left = staging_left(pipe)
print("final states:", states, "| run:", pipe.run_state(dr), "| write tries:", pipe.tries(dr, "write"))
print("epochs:", pipe.epochs(), "| live:", pipe.live(), "| rows:", pipe.rows())
print("staged files left:", left)
print("note:", pipe.note(dr))
e2_left = pipe.epochs().get(2) == "OPEN" or bool(left)
verdict(e2_left and pipe.run_state(dr) != "running",
        f"DAG run ended {pipe.run_state(dr)} with abort={states['abort']}, e2={pipe.epochs().get(2)}, "
        f"{len(left)} staged file(s) left")
