"""Zombie batch hosts: (a) another batch takes the intervals over while the first one (written, not
finished) is a zombie that then finishes; (b) a retry with the SAME batch id (Airflow retry of the host
task) runs whole while the zombie try is between its write and its finish, then the zombie finishes and
its write job runs again late."""
from _world import DAYS, batch_task, report, world

s = world()
assert batch_task(s, DAYS, "bA", "begin", child=False).ok
assert batch_task(s, DAYS, "bA", "write", child=False).ok
b = batch_task(s, DAYS, "bB", child=False)
print("B:", [o["status"] for o in b.result])
a = batch_task(s, DAYS, "bA", "finish", child=False)
print("zombie A finish:", [(o["status"], o["detail"][:60]) for o in a.result])
r = report(s, "different batch id")
assert all(r["rows_equal_oracle"].values()) and not r["leftovers"] and not r["epoch_problems"]

s = world()
assert batch_task(s, DAYS, "b1", "begin", child=False).ok
assert batch_task(s, DAYS, "b1", "write", child=False).ok
b = batch_task(s, DAYS, "b1", child=False)
print("retry:", [o["status"] for o in b.result])
a = batch_task(s, DAYS, "b1", "finish", child=False)
print("zombie finish:", [(o["status"], o["detail"][:60]) for o in a.result])
late = batch_task(s, DAYS, "b1", "write", child=False)   # the zombie's write job, late
print("late zombie write:", late.ok, (late.message or "")[-200:])
r = report(s, "same batch id")
