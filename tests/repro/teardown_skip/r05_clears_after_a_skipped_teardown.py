"""r05: the Airflow operations of docs/PROTOCOL.md on a run that ended with its teardown skipped (held unless
a line says BROKEN): Clear commit; Clear write (no Downstream); Clear write with Downstream; Clear the whole
run; "Mark success" on write before it runs (no XCom) - each must end with one live version, its rows once,
nothing staged, no OPEN attempt, and a teardown that ran whenever there was an attempt to end."""
from _harness import month, new_pipeline, staging_left, verdict

JAN = [{"n": 2, "total": 3, "month": "2013-01"}]


def green(name):
    pipe = new_pipeline(name)
    dr = pipe.create_run(1)
    states = pipe.drive(dr)
    assert states["abort"] == "skipped" and pipe.run_state(dr) == "success", states
    return pipe, dr


def check(name, pipe, dr):
    states, left, epochs = pipe.states(dr), staging_left(pipe), pipe.epochs()
    bad = left or "OPEN" in epochs.values() or "PRE_COMMITTED" in epochs.values() or pipe.rows() != JAN \
        or pipe.run_state(dr) == "running"
    print(f"  {name}: states={states} run={pipe.run_state(dr)} epochs={epochs} staged={left} note={pipe.note(dr)!r}")
    verdict(bool(bad), name)


def clear(pipe, dr, tasks):
    pipe.sdag.clear(task_ids=tasks, run_id=dr.run_id, session=pipe.session)
    pipe.session.commit()
    pipe.drive(dr)


pipe, dr = green("r05_commit")
clear(pipe, dr, ["t.commit"])
check("clear commit", pipe, dr)

pipe, dr = green("r05_write")
clear(pipe, dr, ["t.write"])
check("clear write without Downstream", pipe, dr)

pipe, dr = green("r05_write_down")
clear(pipe, dr, list(pipe.sdag.partial_subset(task_ids=["t.write"], include_downstream=True,
                                              include_upstream=False).task_dict))
check("clear write with Downstream", pipe, dr)

pipe, dr = green("r05_run")
clear(pipe, dr, list(pipe.sdag.task_dict))
check("clear the whole run", pipe, dr)

from airflow.utils.state import TaskInstanceState
pipe, dr = green("r05_mark")
pipe.sdag.clear(run_id=dr.run_id, session=pipe.session)
pipe.session.commit()
pipe.drive(dr, until="t.write")
pipe.sdag.set_task_instance_state(task_id="t.write", run_id=dr.run_id, state=TaskInstanceState.SUCCESS,
                                  session=pipe.session)
pipe.session.commit()
pipe.drive(dr)
check("mark success on write (whole run cleared)", pipe, dr)
