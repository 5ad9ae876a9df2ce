"""The compatibility matrix (``make compat``): one smoke interval on each tested corner.

Each corner is a venv under ``EO_COMPAT_CACHE`` (default ``~/.cache/eo-compat``), one per corner and
requirements hash, filled by ``uv pip install`` from uv's cache; a later run only reinstalls the wheel.

* ``airflow`` corners: the deployment's packages first (``first``: an Airflow someone already runs),
  then the built wheel resolved into it, which must leave them as they were. The smoke is a user DAG
  (the README's stateless example) run for one interval by ``airflow dags test`` with an empty plugins
  folder (the plugin comes from the package's entry point), checked on the table's rows; then
  ``airflow plugins`` must list the plugin once, also with the repo's plugins/ as the plugins folder.
* ``job`` corners: a venv with only pyspark, pyarrow and fsspec (no Airflow, no GX, no s3fs), as on a
  Spark driver. The library comes as the wheel on ``--py-files``; begin, pre_commit, validate and
  commit run in this interpreter, the write is that venv's ``spark-submit``.

Usage: ``python -m tools.compat [--corner NAME ...] [--wheel PATH] [--fresh] [--prepare]``. ``--prepare`` only
builds (or reuses) the corners' venvs - downloads and unpacking, no smoke: CI runs it beside the test lanes, so
that ``make compat`` after them finds every venv ready and runs only the smokes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tools.compat_dag import DAG_IMPORTS

log = logging.getLogger("compat")
ROOT = Path(__file__).resolve().parents[1]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv") or "uv"


@dataclass(frozen=True)
class Corner:
    name: str
    kind: str                      # "airflow" or "job"
    first: tuple[str, ...]         # installed before the wheel (airflow) or instead of it (job)
    extras: str = ""

    def key(self, requires: list[str]) -> str:
        # a job venv holds no wheel requirement (the wheel rides on --py-files)
        text = json.dumps([self.kind, self.first, self.extras, sorted(requires) if self.kind == "airflow" else []])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# The ends of every range in pyproject.toml: README "Install into your Airflow" is this table.
CORNERS = (
    Corner("airflow-oldest", "airflow", (
        "apache-airflow==3.1.8", "apache-airflow-providers-apache-spark==6.0.0", "pyspark==4.0.0",
        "pyspark-client==4.0.0", "great-expectations==1.16.0", "pandas==2.2.3", "pyarrow==16.1.0",
        "s3fs==2025.3.0", "fsspec==2025.3.0"), extras="[s3,postgres]"),
    # nothing pinned: the wheel's own ranges resolved to the newest versions they allow
    Corner("airflow-newest", "airflow", (), extras="[s3,postgres]"),
    Corner("job-pyspark-3.5", "job", ("pyspark==3.5.8", "pyarrow", "fsspec")),
    Corner("job-pyspark-4.1", "job", ("pyspark==4.1.3", "pyarrow", "fsspec")),
)


DAG = DAG_IMPORTS + '''
ORDERS = PipelineConfig(
    pipeline="orders_daily", sink="store_revenue", **settings.from_env(),
    sources=Source("orders", format="csv", options={"header": "true"}, path="{start:%Y/%m/%d}"),
    partitions="dt={start:%Y-%m-%d}",
    application=str(Path(__file__).parents[1] / "spark_jobs" / "store_revenue.py"),
)

with DAG("orders_daily", schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False):
    exactly_once_group(ORDERS)
'''

JOB = '''\
from pyspark.sql import functions as F

from exactly_once.contracts import Counts
from exactly_once.job import JobContext, run_job


def compute(ctx: JobContext) -> Counts:
    orders = ctx.read(schema="order_id string, store string, amount double")
    valid = orders.filter(F.col("store").isNotNull() & F.col("amount").isNotNull())
    out = valid.groupBy("store").agg(F.count("*").alias("orders"), F.sum("amount").alias("revenue"))
    (partition,) = ctx.partitions
    out.write.mode("overwrite").parquet(ctx.output_dir(partition))
    n_in, n_out = orders.count(), valid.count()
    return Counts(records_in=n_in, records_out=n_out, records_rejected=n_in - n_out,
                  rows_written={partition: out.count()})


if __name__ == "__main__":
    raise SystemExit(run_job(compute))
'''

# what the job venv must import, and must not
JOB_IMPORTS = '''\
import sys
import exactly_once.job, exactly_once.contracts
assert exactly_once.job.__file__.startswith(sys.argv[1]), exactly_once.job.__file__
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"airflow", "great_expectations", "s3fs", "pandas"})
assert not heavy, heavy
try:
    import airflow
except ImportError:
    print("ok")
else:
    raise SystemExit("airflow is importable in the job venv")
'''

# the S3 primitives the protocol stands on, through this corner's s3fs/aiobotocore (argv: endpoint)
S3_PRIMITIVES = '''\
import sys
from exactly_once.storage import storage_for
creds = {"key": "testing", "secret": "testing"}
store, root = storage_for("s3://eo-compat/table", endpoint_url=sys.argv[1], **creds)
store.fs.call_s3("create_bucket", Bucket="eo-compat")
log = root + "/_txn/e000001.json"
assert store.create_exclusive(log, b"a") and not store.create_exclusive(log, b"b")
tag = store.etag(log)
assert store.put_conditional(log, b"c", if_match=tag) and not store.put_conditional(log, b"d", if_match=tag)
assert store.read_bytes(log) == b"c" and store.list_names(root + "/_txn") == ["e000001.json"]
store.remove_tree(root)
assert store.list_names(root + "/_txn") == []
print("ok")
'''

# the rows the smoke interval must publish: (store, orders, revenue)
EXPECTED = {("s1", 20, 20.0), ("s2", 4, 10.0)}

# plugins as Airflow loaded them, on 3.1 (module globals) and 3.3+ (_get_plugins)
PLUGINS = '''\
import json
from airflow import plugins_manager as pm
if hasattr(pm, "_get_plugins"):
    plugins, errors = pm._get_plugins()
else:
    pm.ensure_plugins_loaded()
    plugins, errors = pm.plugins, pm.import_errors
from airflow.providers_manager import ProvidersManager
provider = ProvidersManager().providers.get("exactly-once-pipelines")
print(json.dumps({"plugins": [p.name for p in plugins], "errors": {str(k): str(v) for k, v in errors.items()},
                  "provider": provider.version if provider else None}))
'''


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 1800) -> str:
    """Run ``cmd``; raise with its output's tail when it fails; return its stdout."""
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} ... exited {proc.returncode}:\n{tail}")
    return proc.stdout


def wheel_requires(wheel: Path) -> list[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]


def freeze(python: Path) -> dict[str, str]:
    out = run([UV, "pip", "freeze", "--python", python])
    return {name.lower(): ver for name, _, ver in (line.partition("==") for line in out.splitlines()) if ver}


def venv_for(corner: Corner, wheel: Path | None, cache: Path, *, fresh: bool = False) -> Path:
    """The corner's venv with the wheel installed (built once per requirements hash); a job corner's
    holds no wheel (it rides on --py-files) and needs none."""
    venv = cache / f"{corner.name}-{corner.key(wheel_requires(wheel) if corner.kind == 'airflow' else [])}"
    python = venv / "bin" / "python"
    ready = venv / ".eo-ready"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if not ready.exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([UV, "venv", "-q", "--python", sys._base_executable, venv])
        if corner.first:
            run([UV, "pip", "install", "-q", "--python", python, *corner.first])
        if corner.kind == "airflow":
            before = freeze(python)
            run([UV, "pip", "install", "-q", "--python", python,
                 f"exactly-once-pipelines{corner.extras} @ {wheel.resolve().as_uri()}"])
            after = freeze(python)
            pinned = {p.split("==")[0].lower() for p in corner.first}
            moved = {n: (before[n], after.get(n)) for n in pinned if before.get(n) != after.get(n)}
            if moved:
                raise RuntimeError(f"installing the wheel changed what the deployment runs: {moved}")
            if after.get("pyspark") != after.get("pyspark-client"):  # the client overwrote pyspark's files
                raise RuntimeError(f"pyspark {after.get('pyspark')} beside pyspark-client "
                                   f"{after.get('pyspark-client')}: they must be the same version")
        ready.write_text(json.dumps(freeze(python), indent=1, sort_keys=True))
    elif corner.kind == "airflow":
        run([UV, "pip", "install", "-q", "--python", python, "--no-deps", "--reinstall", wheel])
    return venv


def write_project(base: Path) -> Path:
    """The user project: the DAG, its Spark job and one day of landed orders (4% rejected)."""
    (base / "dags").mkdir(parents=True)
    (base / "spark_jobs").mkdir()
    (base / "plugins").mkdir()
    (base / "dags" / "orders_daily.py").write_text(DAG)
    (base / "spark_jobs" / "store_revenue.py").write_text(JOB)
    rows = [f"o{i},s1,1.0" for i in range(20)] + [f"p{i},s2,2.5" for i in range(4)] + ["q0,,1.0"]
    day = base / "data" / "landing" / "orders" / "2026" / "01" / "01"
    day.mkdir(parents=True)
    (day / "part-0.csv").write_text("order_id,store,amount\n" + "\n".join(rows) + "\n")
    return base


def published(table: Path) -> set[tuple]:
    import pyarrow.dataset as ds

    rows = ds.dataset(str(table), format="parquet", partitioning="hive").to_table().to_pylist()
    return {(r["store"], r["orders"], r["revenue"]) for r in rows if str(r["dt"]) == "2026-01-01"}


def clean_env(venv: Path, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without anything that would put the repo's code on the path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME") and not k.startswith(("AIRFLOW", "EO_"))}
    env.update({"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "GX_ANALYTICS_ENABLED": "false",
                "PYSPARK_PYTHON": str(venv / "bin" / "python"),
                "PYSPARK_DRIVER_PYTHON": str(venv / "bin" / "python")})
    env.update(extra)
    return env


@contextmanager
def moto_server() -> Iterator[str]:
    """A loopback S3 server (this interpreter's moto_server) for the corner's s3fs; yields its URL."""
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def plugins_loaded(venv: Path, env: dict[str, str], folder: Path, cwd: Path) -> dict:
    out = run([venv / "bin" / "python", "-c", PLUGINS],
              env={**env, "AIRFLOW__CORE__PLUGINS_FOLDER": str(folder)}, cwd=cwd)
    return json.loads(out.strip().splitlines()[-1])


def smoke_airflow(venv: Path, work: Path) -> str:
    """One interval of the user DAG through ``airflow dags test``; the plugin loaded exactly once."""
    base = write_project(work)
    env = clean_env(venv, {
        "AIRFLOW_HOME": str(base / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(base / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__LAZY_LOAD_PLUGINS": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        "EO_DATA_ROOT": str(base / "data"), "EO_REPORTS_DIR": str(base / "reports"), "EO_RETRIES": "0"})
    airflow = venv / "bin" / "airflow"
    version = run([airflow, "version"], env=env, cwd=base).strip().splitlines()[-1]
    template = venv / ".eo-airflow.db"  # migrated once per venv: each smoke starts from a copy
    (base / "airflow").mkdir(exist_ok=True)
    if not template.exists():
        run([airflow, "db", "migrate"], env=env, cwd=base)
        shutil.copy(base / "airflow" / "airflow.db", template)
    shutil.copy(template, base / "airflow" / "airflow.db")
    # a manual run at logical date T gets the interval ending at T: [2026-01-01, 2026-01-02)
    run([airflow, "dags", "test", "orders_daily", "2026-01-02"], env=env, cwd=base)
    rows = published(base / "data" / "warehouse" / "store_revenue")
    if rows != EXPECTED:
        raise RuntimeError(f"airflow {version}: published {sorted(rows)}, expected {sorted(EXPECTED)}")
    for folder in (base / "plugins", ROOT / "plugins"):  # the entry point alone; beside eo_plugin.py
        loaded = plugins_loaded(venv, env, folder, base)
        if loaded["plugins"].count("exactly_once") != 1 or loaded["errors"] or not loaded["provider"]:
            raise RuntimeError(f"plugins folder {folder}: {loaded}")
    with moto_server() as endpoint:
        run([venv / "bin" / "python", "-c", S3_PRIMITIVES, endpoint], env=env, cwd=base)
    history = run([venv / "bin" / "eo", "history", base / "data" / "warehouse" / "store_revenue"], env=env, cwd=base)
    if "COMMITTED" not in history:
        raise RuntimeError(f"eo history shows no committed version:\n{history}")
    return f"airflow {version}"


def smoke_job(venv: Path, wheel: Path, work: Path) -> str:
    """The job side without Airflow: imports, then one interval whose write is that venv's spark-submit."""
    from exactly_once.protocol.config import PipelineConfig
    from exactly_once.ids import Interval, TxnRef
    from exactly_once.protocol.layout import Source
    from exactly_once.protocol.pipeline import IntervalRun

    base = write_project(work)
    shipped = base / "exactly_once.zip"  # a wheel is a zip; Spark puts .zip --py-files on the path
    shutil.copy(wheel, shipped)
    python = venv / "bin" / "python"
    env = clean_env(venv, {})
    run([python, "-c", f"import sys; sys.path.insert(0, {str(shipped)!r}); exec({JOB_IMPORTS!r})",
         str(shipped)], env=env, cwd=base)
    cfg = PipelineConfig(pipeline="orders_daily", sink="store_revenue", root=str(base / "data"),
                         reports=str(base / "reports"),
                         sources=Source("orders", format="csv", options={"header": "true"},
                                        path="{start:%Y/%m/%d}"),
                         partitions="dt={start:%Y-%m-%d}", application=str(base / "spark_jobs" / "store_revenue.py"))
    interval = IntervalRun(cfg, Interval.daily("2026-01-01"), storage_options={})
    began = interval.begin()
    txn = TxnRef.from_dict(began["txn"])
    try:
        run([venv / "bin" / "spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false",
             "--py-files", shipped, cfg.application, "--spec", began["spec"]], env=env, cwd=base)
        interval.pre_commit(txn)
        interval.validate(txn)
        interval.commit(txn)
    finally:
        interval.abort(txn)
    rows = published(base / "data" / "warehouse" / "store_revenue")
    if rows != EXPECTED:
        raise RuntimeError(f"published {sorted(rows)}, expected {sorted(EXPECTED)}")
    return "pyspark " + run([python, "-c", "import pyspark; print(pyspark.__version__)"], env=env).strip()


def build_wheel(out: Path) -> Path:
    run([UV, "build", "-q", "--wheel", "--out-dir", out, ROOT])
    # setuptools leaves its metadata in plugins/, which Airflow puts on sys.path: a second copy of the
    # entry points there makes Airflow load the plugin twice
    for leftover in (ROOT / "plugins").glob("*.egg-info"):
        shutil.rmtree(leftover)
    return max(out.glob("exactly_once_pipelines-*.whl"), key=lambda p: p.stat().st_mtime)


def check_corner(corner: Corner, wheel: Path, cache: Path, *, fresh: bool = False, user: bool = True) -> dict:
    """Build (or reuse) the corner's venv and run its smoke, then (``user``, an Airflow corner) the user path
    (tools/compat_user.py); returns what ran and how long it took."""
    t0 = time.monotonic()
    venv = venv_for(corner, wheel, cache, fresh=fresh)
    t1 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"eo-compat-{corner.name}-") as tmp:
        what = smoke_airflow(venv, Path(tmp)) if corner.kind == "airflow" else smoke_job(venv, wheel, Path(tmp))
    t2 = time.monotonic()
    out = {"corner": corner.name, "ran": what, "venv_s": round(t1 - t0, 1), "smoke_s": round(t2 - t1, 1)}
    if user and corner.kind == "airflow":
        from tools.compat_user import user_path

        with tempfile.TemporaryDirectory(prefix=f"eo-compat-user-{corner.name}-") as tmp:
            out["user_path"] = user_path(venv, Path(tmp), clean_env=clean_env, run=run, uv=UV)
        out["user_path_s"] = round(time.monotonic() - t2, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corner", action="append", choices=[c.name for c in CORNERS])
    parser.add_argument("--wheel", type=Path, help="default: build one from this checkout")
    parser.add_argument("--fresh", action="store_true", help="rebuild the corners' venvs")
    parser.add_argument("--prepare", action="store_true", help="only build the corners' venvs, run no smoke")
    parser.add_argument("--smoke-only", action="store_true",
                        help="the fast half (CI): the smokes, not the user path of tools/compat_user.py")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    cache = Path(os.environ.get("EO_COMPAT_CACHE") or "~/.cache/eo-compat").expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="eo-dist-") as dist:
        wheel = args.wheel or build_wheel(Path(dist))
        failed = 0
        for corner in (c for c in CORNERS if not args.corner or c.name in args.corner):
            try:
                if args.prepare:
                    t0 = time.monotonic()
                    venv = venv_for(corner, wheel, cache, fresh=args.fresh)
                    log.info("ready %s: %s in %.0f s", corner.name, venv, time.monotonic() - t0)
                    continue
                log.info("ok %s", json.dumps(check_corner(corner, wheel, cache, fresh=args.fresh,
                                                          user=not args.smoke_only)))
            except Exception as exc:  # noqa: BLE001 - report every corner, fail at the end
                failed += 1
                log.error("FAILED %s: %s", corner.name, exc)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
