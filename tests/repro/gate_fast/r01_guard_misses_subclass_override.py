"""r01: gx_fast's digest guard checks only the base ``Expectation`` methods; its copies call ``_domain`` /
``_success`` / ``_success_kwarg`` directly instead of ``self._get_domain_kwargs()`` /
``self._get_success_kwargs()`` / ``self._get_success_kwarg()``. A GX release whose base methods are
byte-identical (digests match, so the patch is applied) but where a core expectation *overrides* one of
those methods has the override silently dropped on the metric path (``registry.get_metric_kwargs`` ->
``_get_runtime_kwargs``).

Simulated release change (installed before the gate runs): ``ExpectColumnValuesToBeBetween`` overrides
``_get_success_kwargs`` to default a missing ``min_value`` to 0. With EO_GX_FAST=0 the override is
honoured and a negative value fails the gate; with the patch (EO_GX_FAST=1, the default) the gate PASSES.

Exit 1 when the verdicts differ (the break), 0 otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

CHILD = r"""
import json, sys
from pathlib import Path
sys.path[:0] = [ROOT + "/plugins", ROOT + "/tests", ROOT + "/tests/integration", ROOT]
import exactly_once.quality as q
import test_quality as tq
from great_expectations.expectations.expectation import Expectation
from great_expectations.expectations.core.expect_column_values_to_be_between import ExpectColumnValuesToBeBetween as C

# --- the simulated next GX release: same base methods, one subclass override -------------------------
def _get_success_kwargs(self):
    kwargs = super(C, self)._get_success_kwargs()
    if kwargs.get("min_value") is None:
        kwargs["min_value"] = 0  # this release: values are non-negative unless min_value says otherwise
    return kwargs
C._get_success_kwargs = _get_success_kwargs
# -------------------------------------------------------------------------------------------------------

base = Path(sys.argv[1])
suite = base / "suites" / "neg.json"
suite.parent.mkdir(parents=True)
suite.write_text(json.dumps({"name": "neg", "expectations": [
    {"type": "expect_column_values_to_be_between", "kwargs": {"column": "pv", "max_value": 10}}]}))
def mutate(spec):
    spec["data"]["pv"] = [5, 3, -1]
o = tq.run(base, mutate, name="neg", report_root=base / "reports", suite_path=str(suite), table="neg")
from exactly_once.quality import gx_fast
print("@@" + json.dumps({"fast": gx_fast._state.get("on"), "passed": o.passed, "failures": o.failures}))
""".replace("ROOT", repr(ROOT))


def child(fast: str) -> dict:
    work = tempfile.mkdtemp(prefix=f"r01-{fast}-")
    env = {**os.environ, "EO_GX_FAST": fast, "PYTHONPATH": f"{ROOT}/plugins:{ROOT}"}
    out = subprocess.run([sys.executable, "-c", CHILD, work], env=env, capture_output=True, text=True, cwd=ROOT)
    shutil.rmtree(work, ignore_errors=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("@@")]
    if not line:
        print(out.stderr[-3000:])
        sys.exit(2)
    return json.loads(line[0][2:])


fast, plain = child("1"), child("0")
print("EO_GX_FAST=1:", fast)
print("EO_GX_FAST=0:", plain)
if fast["passed"] != plain["passed"] or fast["failures"] != plain["failures"]:
    print("BREAK: with the patch applied (digests matched) the subclass override is dropped and the verdict differs")
    sys.exit(1)
print("same verdict")
sys.exit(0)
