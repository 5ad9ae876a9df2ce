"""`eo recover --stale-after 0` (a takeover by recover/gc/maintenance) DURING a batch's write job (after
the job read its specs): the batch's OPEN attempts are aborted and their staging removed; the job then
writes into them anyway (it cannot know); the batch's finish reports them failed - and leaves the
staging the job recreated (data, state, counts) behind: leftovers no finish/teardown removes."""
from _world import DAYS, batch_task, report, sink_of, world
import batch_helpers  # noqa: E402 (after _world set sys.path)

s = world()
assert batch_task(s, DAYS, "b1", "begin", child=False).ok
batch_helpers.failpoint = lambda name: print("recover mid-write:", len(sink_of(s).recover(stale_after=0)), "actions")
w = batch_task(s, DAYS, "b1", "write", child=False)
print("write ok:", w.ok)
fin = batch_task(s, DAYS, "b1", "finish", child=False)
print("finish:", [(o["status"], o["detail"][:50]) for o in fin.result])
td = batch_task(s, DAYS, "b1", "abort", child=False)
print("teardown:", td.result)
r = report(s, "recover during the write")
assert r["leftovers"] == [], f"LEFTOVERS after the batch's finish and teardown: {r['leftovers']}"
