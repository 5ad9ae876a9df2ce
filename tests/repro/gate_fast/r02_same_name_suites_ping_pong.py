"""r02: validation definitions keyed by the suite's raw JSON (``SuiteRun.source``) instead of GX's
normalized ``to_json_dict``: two suite files that declare the same suite name with the same content in
GX's eyes but different JSON (here one expectation spells out ``"meta": {}, "severity": "critical"``, GX's
defaults) get two definitions that invalidate each other. Every validation in the process then hits GX's
ResourceFreshnessAggregateError twice, saves the suite twice, adds two more data assets (never removed:
unbounded growth in a long-lived batch process), re-renders the suite page, and stores its results under
a new batch id each time. HEAD~1 kept one definition (one asset; the two results shared one id).

Verdicts and failure lines are unchanged. Exit 1 when the data assets keep growing (the break), else 0.
Run against HEAD~1 with EO_REPRO_PLUGINS=<a checkout of HEAD~1>/plugins.
"""
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLUGINS = os.environ.get("EO_REPRO_PLUGINS", ROOT + "/plugins")
sys.path[:0] = [PLUGINS]
import exactly_once.quality  # noqa: E402,F401  (bound before conftest puts the worktree's plugins first)
from exactly_once.quality.gx import _CONTEXTS  # noqa: E402

sys.path[:0] = [ROOT + "/tests", ROOT + "/tests/integration"]
import test_quality as tq  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="r02-"))
sd = work / "suites"
sd.mkdir()
for f in ("app_pv.json", "app_pv.counts.json", "app_pv.checkpoint.json"):
    (sd / f).write_text(Path(ROOT, "expectations", f).read_text())
one = {"name": "app_pv.extra", "expectations": [
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "pv", "max_value": 10}}]}
two = json.loads(json.dumps(one))
two["expectations"][0].update({"meta": {}, "severity": "critical"})  # GX's defaults, spelled out
(sd / "app_pv.extra.json").write_text(json.dumps(one))
(sd / "app_pv.extra2.json").write_text(json.dumps(two))

reports = work / "reports"
assets, batch_ids, verdicts = [], [], []
for i in range(4):
    o = tq.run(work, None, name=f"v{i}", report_root=reports, suite_path=str(sd / "app_pv.json"))
    verdicts.append(o.passed)
    ctx = _CONTEXTS[str(reports)]
    assets.append(len(ctx.__dict__["_eo_definitions"]["pandas"].assets))
    batch_ids.append(sorted(p.name for p in (reports / "_gx" / "validations" / "app_pv" / "extra").rglob("*.json")
                            if f"pv_pipeline.v{i}" in str(p)))
shutil.rmtree(work, ignore_errors=True)
print("code:", exactly_once.quality.__file__)
print("verdicts:", verdicts)
print("data assets after each validation:", assets)
print("stored app_pv.extra results per validation:", batch_ids)
if assets[-1] > assets[0]:
    print("BREAK: every validation adds data assets / re-saves the suite (the two definitions invalidate each other)")
    sys.exit(1)
sys.exit(0)
