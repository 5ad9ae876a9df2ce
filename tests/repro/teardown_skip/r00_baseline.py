"""Baseline: a green run with the write's first try -> commit skips the teardown; the DAG run succeeds, the
note says what was published, nothing is left staged. (Checks the harness sees the skip at all.)"""
from _harness import new_pipeline, staging_left, verdict

pipe = new_pipeline("r00_baseline")
dr = pipe.create_run(1)
states = pipe.drive(dr)
print("states:", states, "| run:", pipe.run_state(dr), "| note:", pipe.note(dr))
print("write XCom:", pipe.write_xcom(dr), "| epochs:", pipe.epochs(), "| staged:", staging_left(pipe))
ok = states["abort"] == "skipped" and pipe.run_state(dr) == "success" and staging_left(pipe) == [] \
    and pipe.epochs() == {1: "COMMITTED"}
verdict(not ok, "green run, teardown skipped, nothing left" if ok else "unexpected baseline")
