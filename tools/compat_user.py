"""The compatibility matrix's user path (``make compat``; ``--smoke-only`` skips it): what a new user does with
the wheel alone, on a corner's venv, checked against a reference computed here.

A project that is not this repository's: a yearly, stateful pipeline from 1952 (before 1970) into PostgreSQL
(``DatabaseTarget``), its own Spark job, no ``spark_default`` connection (the write must default to
``local[*]``). A real deployment of that corner's Airflow: PostgreSQL metadata, ``airflow api-server``,
``scheduler``, ``dag-processor`` and ``triggerer`` (LocalExecutor), SimpleAuthManager users ``admin`` and ``editor`` (role
``user``: not an admin, may edit DAGs). Then, each step through the scheduler and checked on the database's
rows against the reference:

1. ``airflow backfill create --max-active-runs 3`` of 1952-1954, the first write killed mid-write (failpoint
   ``write.partial``, crash, once) and retried; the later years' ``begin`` wait for their predecessors without
   spending a try (each ``begin`` ends on its first try);
2. a late file for 1953: ``eo reprocess`` by ``editor`` (a REST-triggered run of a non-admin) and ``eo
   rerun-stale`` for 1954, whose state went stale;
3. the table page's *Roll back* of 1953 to its first version (confirmation page, token, same-origin POST),
   which makes 1954 stale again;
4. ``eo rollback`` of 1953 forward to its reprocessed version (nothing stale), then back to the first (1954
   stale): each time the stale list it prints is the page's, and the rows are the reference's.
"""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from tools.compat_dag import DAG_IMPORTS

DAG_ID, SINK = "yearly_totals", "station_totals"
YEARS = {1952: [("a", 5.0), ("b", 1.0)], 1953: [("a", 7.0)], 1954: [("b", 2.0), ("a", 1.0)]}
LATE = {1953: [("b", 10.0)]}
USERS = {"admin": ("admin", "compat-admin-pw"), "editor": ("user", "compat-editor-pw")}

DAG = "import os\n" + DAG_IMPORTS + '''\
from exactly_once.targets import DatabaseTarget

TOTALS = PipelineConfig(
    pipeline="yearly_totals", sink="station_totals", **settings.from_env(),
    sources=Source("readings", format="csv", options={"header": "true"}, path="{start:%Y}"),
    partitions="year={start:%Y}",
    application=str(Path(__file__).parents[1] / "spark_jobs" / "station_totals.py"),
    stateful=True, start="1952-01-01",
    target=DatabaseTarget(table="station_totals", url=os.environ["COMPAT_DB_URL"],
                          create_sql="CREATE TABLE station_totals (year int NOT NULL, station text NOT NULL, "
                                     "total double precision NOT NULL)"),
)

with DAG("yearly_totals", schedule=CronDataIntervalTimetable("0 0 1 1 *", timezone="UTC"),
         start_date=datetime(1952, 1, 1, tzinfo=timezone.utc), catchup=False, max_active_runs=1):
    exactly_once_group(TOTALS)
'''

JOB = '''\
from pyspark.sql import functions as F

from exactly_once.contracts import Counts
from exactly_once.failpoints import failpoint
from exactly_once.job import JobContext, run_job


def compute(ctx: JobContext) -> Counts:
    rows = ctx.read(schema="station string, value double")
    year = rows.groupBy("station").agg(F.sum("value").alias("total"))
    previous = ctx.read_prev_state("station string, total double")
    total = previous.unionByName(year).groupBy("station").agg(F.sum("total").alias("total"))
    (partition,) = ctx.partitions
    total.write.mode("overwrite").parquet(ctx.output_dir(partition))
    failpoint("write.partial")  # the harness's kill mid-write (EO_FAILPOINTS): the output staged, the state not
    total.write.mode("overwrite").parquet(ctx.state_dir)
    n, out = rows.count(), total.count()
    return Counts(records_in=n, records_out=n, rows_written={partition: out}, state_rows=out)


if __name__ == "__main__":
    raise SystemExit(run_job(compute))
'''


def reference(years: dict[int, list[tuple[str, float]]]) -> set[tuple[int, str, float]]:
    """The rows the table must hold: per year, each station's running total over the years up to it."""
    out, totals = set(), {}
    for y in sorted(years):
        totals = dict(totals)
        for station, value in years[y]:
            totals[station] = totals.get(station, 0.0) + value
        out |= {(y, s, t) for s, t in totals.items()}
    return out


def _psql(db: str, sql: str) -> None:
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-qc", sql],
                   check=True, capture_output=True, timeout=60)


def _rows(db: str) -> set[tuple[int, str, float]]:
    out = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", db, "-Atc",
                          "SELECT year, station, total FROM station_totals"], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return {(int(y), s, float(t)) for y, s, t in (line.split("|") for line in out.split())}


def _land(base: Path, year: int, name: str, rows: list[tuple[str, float]]) -> None:
    folder = base / "data" / "landing" / "readings" / str(year)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("station,value\n" + "".join(f"{s},{v}\n" for s, v in rows))


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def _databases() -> Iterator[tuple[str, str]]:
    tag = secrets.token_hex(4)
    meta, target = f"eo_compat_meta_{tag}", f"eo_compat_{tag}"
    for db in (meta, target):
        _psql("postgres", f"CREATE DATABASE {db}")
    try:
        yield meta, target
    finally:
        for db in (meta, target):
            try:  # best effort: a slow drop on a loaded server must not hide the path's own result
                subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-qc",
                                f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"], capture_output=True, timeout=300)
            except subprocess.TimeoutExpired:
                logging.getLogger("compat").warning("database %s not dropped (timed out): drop it by hand", db)


@contextmanager
def _service(venv: Path, args: list[str], env: dict[str, str], logs: Path) -> Iterator[subprocess.Popen]:
    log = open(logs / f"{args[0]}.log", "wb")
    proc = subprocess.Popen([str(venv / "bin" / "airflow"), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # this process group: the service and the workers it forked
            proc.wait(60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()


class Deployment:
    """The corner's Airflow, through its REST API as ``admin`` (``httpx`` of the driver's venv)."""

    def __init__(self, url: str, logs: Path) -> None:
        import httpx

        self.url, self.logs, self.client = url, logs, httpx.Client(base_url=url, timeout=60)
        deadline = time.time() + 300
        while True:
            try:
                if self.client.get("/api/v2/monitor/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            self._deadline(deadline, "the api-server did not start")
            time.sleep(1)
        self.tokens = {u: self.client.post("/auth/token", json={"username": u, "password": pw}).json()["access_token"]
                       for u, (_, pw) in USERS.items()}

    def _deadline(self, deadline: float, what: str) -> None:
        if time.time() > deadline:
            tails = {p.name: p.read_text(errors="replace")[-2000:] for p in self.logs.glob("*.log")}
            raise RuntimeError(f"{what}; logs: {json.dumps(tails)[-6000:]}")

    def api(self, method: str, path: str, user: str = "admin", **kw) -> object:
        got = self.client.request(method, path, headers={"Authorization": f"Bearer {self.tokens[user]}",
                                                          **kw.pop("headers", {})}, **kw)
        if got.status_code >= 400:
            raise RuntimeError(f"{method} {path}: {got.status_code} {got.text[:500]}")
        return got

    def wait_dag(self) -> None:
        deadline = time.time() + 300
        while self.client.get(f"/api/v2/dags/{DAG_ID}", headers={"Authorization": f"Bearer {self.tokens['admin']}"}
                              ).status_code != 200:
            self._deadline(deadline, f"{DAG_ID} was not parsed")
            time.sleep(2)
        self.api("PATCH", f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})

    def runs(self) -> dict[str, dict]:
        got = self.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns", params={"limit": 100}).json()["dag_runs"]
        return {r["dag_run_id"]: r for r in got}

    def wait_runs(self, pick, count: int, timeout: float = 1200) -> list[dict]:
        """Wait until ``count`` runs that ``pick`` selects have finished; all must have succeeded."""
        deadline = time.time() + timeout
        while True:
            mine = [r for r in self.runs().values() if pick(r)]
            done = [r for r in mine if r["state"] in ("success", "failed")]
            if len(mine) >= count and len(done) == len(mine):
                failed = [r["dag_run_id"] for r in done if r["state"] == "failed"]
                if failed:
                    self._deadline(0, f"runs failed: {failed}")
                return mine
            self._deadline(deadline, f"runs not finished: {[(r['dag_run_id'], r['state']) for r in mine]}")
            time.sleep(3)


def user_path(venv: Path, work: Path, *, clean_env, run, uv: str) -> str:
    """The user path on ``venv`` (a corner's, the wheel installed with ``[postgres]``); returns what it did.
    ``clean_env``, ``run`` and ``uv`` are tools.compat's (the environment without the repo, a checked run)."""
    base = work / "project"
    for sub in ("dags", "spark_jobs", "plugins", "airflow", "logs"):
        (base / sub).mkdir(parents=True)
    (base / "dags" / f"{DAG_ID}.py").write_text(DAG)
    (base / "spark_jobs" / f"{SINK}.py").write_text(JOB)
    for year, rows in YEARS.items():
        _land(base, year, "part-0.csv", rows)
    (base / "airflow" / "passwords.json").write_text(json.dumps({u: pw for u, (_, pw) in USERS.items()}))
    port = _port()
    url = f"http://127.0.0.1:{port}"
    # a deployment on a PostgreSQL metadata DB runs apache-airflow[postgres]: Airflow 3's async engine needs asyncpg
    if subprocess.run([str(venv / "bin" / "python"), "-c", "import asyncpg"], capture_output=True).returncode:
        run([uv, "pip", "install", "-q", "--python", venv / "bin" / "python", "asyncpg"])
    with ExitStack() as stack:
        meta, target = stack.enter_context(_databases())

        env = clean_env(venv, {
            "AIRFLOW_HOME": str(base / "airflow"), "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(base / "plugins"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{meta}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, (r, _) in USERS.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(base / "airflow" / "passwords.json"),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(24), "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            # others on this machine may run a scheduler or a triggerer (their log servers' default ports)
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5", "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "EO_DATA_ROOT": str(base / "data"), "EO_REPORTS_DIR": str(base / "reports"),
            "EO_RETRIES": "2", "EO_RETRY_DELAY_SECONDS": "2", "EO_PREDECESSOR_POKE_SECONDS": "5",
            "EO_FAILPOINTS": "write.partial=crash:once", "EO_FAILPOINTS_STATE": str(work / "failpoints"),
            "COMPAT_DB_URL": f"postgresql://postgres@127.0.0.1:5432/{target}"})
        airflow = str(venv / "bin" / "airflow")
        run([airflow, "db", "migrate"], env=env, cwd=base, timeout=900)
        logs = base / "logs"
        for service in (["api-server", "--port", str(port), "--host", "127.0.0.1"], ["scheduler"], ["dag-processor"],
                        ["triggerer"]):
            stack.enter_context(_service(venv, service, env, logs))
        af = Deployment(url, logs)
        af.wait_dag()
        # 1. a backfill of three years, the first write killed mid-write once
        # --max-active-runs 3: the runs start together, the later years' begins wait for their predecessors
        run([airflow, "backfill", "create", "--dag-id", DAG_ID, "--from-date", "1952-01-01", "--to-date", "1954-01-01",
             "--max-active-runs", "3"], env=env, cwd=base, timeout=300)
        backfill = af.wait_runs(lambda r: r["run_type"] == "backfill", 3)
        _check(_rows(target), reference(YEARS), "after the backfill")
        tries = {r["dag_run_id"]: af.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{r['dag_run_id']}/taskInstances/"
                                          f"{SINK}.begin").json()["try_number"] for r in backfill}
        if set(tries.values()) != {1}:
            raise RuntimeError(f"waiting for a predecessor spent tries of begin: {tries}")
        killed = sorted(p.name for p in (work / "failpoints").glob("*")) if (work / "failpoints").exists() else []
        if not killed:
            raise RuntimeError("the write.partial failpoint never fired: the kill mid-write was not exercised")
        # 2. a late file: eo reprocess by a non-admin (REST), then eo rerun-stale
        _land(base, 1953, "part-1-late.csv", LATE[1953])
        table = str(base / "data" / "warehouse" / SINK)
        eo_env = {**env, "EO_AIRFLOW_URL": url, "EO_AIRFLOW_USER": "editor", "EO_AIRFLOW_PASSWORD": USERS["editor"][1]}
        eo = [str(venv / "bin" / "eo")]
        said = run([*eo, "reprocess", table, "--interval", "1953-01-01T00:00:00Z"], env=eo_env, cwd=base, timeout=120)
        run_id = re.search(r"started (\S+) of", said).group(1)
        [started] = af.wait_runs(lambda r: r["dag_run_id"] == run_id, 1)
        if started["triggering_user_name"] != "editor":
            raise RuntimeError(f"eo reprocess as editor started a run triggered by someone else: {started}")
        late = {y: rows + LATE.get(y, []) for y, rows in YEARS.items()}
        stale = af.api("GET", f"/eo/api/dags/{DAG_ID}/tables/{SINK}").json()["stale"]
        if len(stale) != 1:
            raise RuntimeError(f"1954 read 1953's replaced state: one stale interval expected, the page says {stale}")
        said = run([*eo, "rerun-stale", table], env=eo_env, cwd=base, timeout=120)
        rerun = re.findall(r"started (\S+) of", said)
        af.wait_runs(lambda r: r["dag_run_id"] in rerun, 1)
        _check(_rows(target), reference(late), "after eo reprocess and eo rerun-stale")
        # 3. the table page's rollback of 1953 to e1 (confirmation page, token, same-origin POST), as editor
        token_iv = "19530101T000000Z_19540101T000000Z"
        page = f"/eo/dags/{DAG_ID}/tables/{SINK}/actions/rollback"
        confirm = af.api("GET", page, user="editor", params={"interval": token_iv, "to": "e1"}).text
        form = {"token": re.search(r'name="token" value="([0-9a-f]+)"', confirm).group(1), "interval": token_iv,
                "to": "e1", "confirm": "yes"}
        before = set(af.runs())
        af.api("POST", page, user="editor", data=form, headers={"Origin": url})
        af.wait_runs(lambda r: r["dag_run_id"] not in before and r["conf"].get("eo_action") == "rollback", 1)
        expected = {r for r in reference(late) if r[0] != 1953} | {r for r in reference(YEARS) if r[0] == 1953}
        _check(_rows(target), expected, "after the page's rollback of 1953 to e1")
        page_stale = af.api("GET", f"/eo/api/dags/{DAG_ID}/tables/{SINK}").json()["stale"]
        history = run([*eo, "history", table], env=eo_env, cwd=base, timeout=120)
        if page_stale != ["19540101T000000Z_19550101T000000Z"] or "rollback to e1 by editor" not in history:
            raise RuntimeError(f"after the rollback: page stale {page_stale}; eo history:\n{history}")
        # 4. eo rollback of 1953 forward to its reprocessed version (1954's live version read it: nothing stale),
        # then back to e1 (1954 stale again): each time the list eo rollback prints is the page's
        for to, want_rows in (("e2", reference(late)), ("e1", expected)):
            said = run([*eo, "rollback", table, "--interval", "1953-01-01T00:00:00Z", "--to", to], env=eo_env,
                       cwd=base, timeout=120)
            printed = _printed_stale(said)
            page_stale = af.api("GET", f"/eo/api/dags/{DAG_ID}/tables/{SINK}").json()["stale"]
            if printed != page_stale or printed != ([] if to == "e2" else ["19540101T000000Z_19550101T000000Z"]):
                raise RuntimeError(f"eo rollback --to {to} printed stale {printed}, the page says {page_stale}:\n{said}")
            _check(_rows(target), want_rows, f"after eo rollback of 1953 to {to}")
    return ("backfill (3 runs at once, killed mid-write once, no begin try spent waiting), eo reprocess by a "
            "non-admin, eo rerun-stale, the page's rollback, eo rollback forward and back (its stale list = the page's)")


def _printed_stale(said: str) -> list[str]:
    """The stale intervals ``eo rollback`` printed (its "re-run them in order: a, b - ..." line), [] if none."""
    if "no stale interval" in said:
        return []
    found = re.search(r"re-run them in order: (.+?) - `eo rerun-stale", said)
    if found is None:
        raise RuntimeError(f"eo rollback printed no stale list:\n{said}")
    return found.group(1).split(", ")


def _check(got: set, want: set, when: str) -> None:
    if got != want:
        raise RuntimeError(f"{when}: the table holds {sorted(got)}, the reference {sorted(want)}")
