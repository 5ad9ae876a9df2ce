"""The deployment stack (docker-compose.yaml, docker/, docs/DEPLOYING.md), checked without a Docker engine.

- The compose file is parsed with PyYAML (anchors and ``<<`` merge keys resolved) and validated against the
  Compose specification JSON schema in ``tests/data/compose-spec.json``. That schema is the compose-spec
  project's ``schema/compose-spec.json`` (draft-07, ``$id`` ``compose_spec.json``, with ``name``, ``include``,
  ``models``, healthcheck ``start_interval``) as vendored by the npm package ``dclint@3.1.0``
  (``schemas/compose.schema.json``; fetched with ``npm pack dclint@3.1.0``), sha256
  46b7d35f19dd93a05f8fea530291bf84d881c1791ec167ecf0e6fb94e639d496. (The older copy in PyPI's
  ``docker-compose==1.29.2``, ``compose/config/compose_spec.json``, predates ``start_interval`` and
  ``depends_on.required``; the file validates against it too, but it is not kept.)
- ``docker compose config -q`` (or the standalone ``docker-compose``, e.g. Debian's 1.29.2) runs when a
  compose CLI is installed (it needs no engine); it is skipped when there is none (the docker client alone
  has no ``compose`` command); ``EO_REQUIRE_SERVICES=1`` (CI, whose .ci/run installs Debian's
  docker-compose) makes that a failure.
- docs/DEPLOYING.md's tables (services, mounts, connections) are parsed, so the page and the file can't
  drift; the Dockerfile, the ``.env`` example and the absence of literal secrets are checked too.
"""
from __future__ import annotations

import json
import tomllib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eo_testing import need
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ENV_EXAMPLE = ROOT / "docker" / ".env.example"
SPARK_DEFAULTS = ROOT / "docker" / "spark-defaults.conf"
DOC = ROOT / "docs" / "DEPLOYING.md"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"

AIRFLOW_SERVICES = ["airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer"]
CELERY_SERVICES = ["airflow-worker", "flower"]  # merge x-airflow-common too; the worker mounts no volume of state
MUST_HAVE_HEALTHCHECK = ["postgres", "redis", "airflow-apiserver", "airflow-scheduler", "airflow-worker",
                         "airflow-dag-processor", "airflow-triggerer", "flower", "spark-master", "spark-worker",
                         "minio"]
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|FERNET|ACCESS_KEY|PRIVATE", re.I)
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}; `$$` is a literal dollar.
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


# ---------------------------------------------------------------- helpers

@pytest.fixture(scope="module")
def raw() -> str:
    return COMPOSE.read_text()


@pytest.fixture(scope="module")
def compose(raw) -> dict:
    return yaml.safe_load(raw)


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose-style interpolation of one string (defaults unless ``env`` sets the variable)."""
    env = env or {}

    def sub(m: re.Match) -> str:
        name, op, default = m.group(1), m.group(2), m.group(3)
        if name in env and (env[name] != "" or not (op or "").startswith(":")):
            return env[name]
        if op in (":-", "-"):
            return default
        raise AssertionError(f"${{{name}}} has no default and is not set")

    return VAR.sub(sub, value.replace("$$", "\0")).replace("\0", "$")


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def host_ports(service: dict) -> set[int]:
    ports = set()
    for spec in service.get("ports", []):
        text = spec if isinstance(spec, str) else f"{spec.get('published')}:{spec.get('target')}"
        parts = text.split("/")[0].split(":")
        ports.add(int(parts[-2] if len(parts) >= 2 else parts[-1]))
    return ports


def doc_tables() -> list[list[dict[str, str]]]:
    """Every Markdown table of DEPLOYING.md as a list of {header: cell} rows (backticks stripped)."""
    tables, current, header = [], [], None
    for line in DOC.read_text().splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = [c.lower() for c in cells]
            elif not set("".join(cells)) <= set("-: "):
                current.append(dict(zip(header, cells)))
        elif header is not None:
            tables.append(current)
            current, header = [], None
    return tables


def doc_table(*columns: str) -> list[dict[str, str]]:
    for table in doc_tables():
        if table and all(c in table[0] for c in columns):
            return table
    raise AssertionError(f"docs/DEPLOYING.md has no table with columns {columns}")


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# ---------------------------------------------------------------- structure

def test_compose_validates_against_the_compose_spec(compose):
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    assert schema.get("title") == "Compose Specification"
    validator = jsonschema.Draft7Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:20])


def test_the_schema_rejects_a_broken_file(compose):
    """The validation is not vacuous: a typo'd key and a bad depends_on condition are caught."""
    import copy

    import jsonschema

    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    bad = copy.deepcopy(compose)
    bad["services"]["postgres"]["healtcheck"] = bad["services"]["postgres"].pop("healthcheck")
    bad["services"]["airflow-apiserver"]["depends_on"]["airflow-init"]["condition"] = "service_done"
    assert len(list(validator.iter_errors(bad))) >= 2


def test_expected_services_exist(services):
    for name in ["postgres", "redis", *AIRFLOW_SERVICES, *CELERY_SERVICES, "spark-master", "spark-worker", "minio",
                 "minio-init"]:
        assert name in services, name
    assert services["postgres"]["image"].startswith("postgres:16")
    assert interpolate(services["redis"]["image"]).startswith("redis:7")
    assert services["flower"]["profiles"] == ["flower"], "Flower is optional: only with --profile flower"


def test_the_celery_executor_as_the_official_compose_file_runs_it(compose, services):
    """Redis broker, PostgreSQL result backend, workers that wait for the api-server (task execution API),
    two replicas that share no volume of state: only the code is mounted, the data root is on MinIO."""
    env = {k: interpolate(v) for k, v in env_of(compose["x-airflow-common"]).items()}
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://:@redis:6379/0"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://")
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].endswith("@postgres:5432/airflow")
    assert env["EO_DATA_ROOT"].startswith("s3://")
    worker = services["airflow-worker"]
    assert worker["command"] == "celery worker" and worker["deploy"]["replicas"] >= 2
    assert "inspect ping" in " ".join(worker["healthcheck"]["test"])
    assert env_of(worker)["DUMB_INIT_SETSID"] == "0"
    assert worker["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    assert "hostname" not in worker and "container_name" not in worker, "replicas need their own hostnames"
    assert not worker.get("ports"), "replicas cannot share a host port"
    code_mounts = {"./dags:/opt/airflow/dags",  # the library is the image's installed package, not mounted
                   "./spark_jobs:/opt/airflow/spark_jobs", "./expectations:/opt/airflow/expectations"}
    assert set(worker["volumes"]) == code_mounts, "a worker mounts code only: no shared disk of state"
    assert services["flower"]["command"] == "celery flower" and host_ports(services["flower"]) == {5555}
    for name in AIRFLOW_SERVICES + CELERY_SERVICES:  # every Airflow service reaches the broker
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name


def test_every_airflow_service_uses_the_common_anchor(raw, compose, services):
    common = compose["x-airflow-common"]
    assert common["build"]["dockerfile"] == "docker/Dockerfile"
    assert common["environment"]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    blocks = re.split(r"\n  (?=[a-z][\w-]*:\n)", raw.split("\nservices:\n", 1)[1])
    for name in AIRFLOW_SERVICES + CELERY_SERVICES:
        block = next(b for b in blocks if b.startswith(f"{name}:"))
        assert "<<: *airflow-common\n" in block, f"{name} does not merge x-airflow-common"
        svc = services[name]
        assert svc["image"] == common["image"] and svc["build"] == common["build"], name
        env = env_of(svc)
        for key, value in env_of(common).items():
            assert env.get(key) == value, f"{name}: {key} differs from x-airflow-common"
        if name != "airflow-worker":
            assert svc["volumes"] == common["volumes"], name
    # The Spark services run the same image (same Python/PySpark as the driver in the scheduler).
    for name in ("spark-master", "spark-worker"):
        assert services[name]["image"] == common["image"], name


def test_airflow_3_components_and_commands(services):
    assert services["airflow-apiserver"]["command"] == "api-server"
    assert services["airflow-scheduler"]["command"] == "scheduler"
    assert services["airflow-dag-processor"]["command"] == "dag-processor"
    assert services["airflow-triggerer"]["command"] == "triggerer"
    init = "\n".join(services["airflow-init"]["command"])
    assert "airflow db migrate" in init
    assert "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in init
    assert services["airflow-init"].get("restart") == "no"
    assert env_of(services["airflow-apiserver"])["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == \
        "http://airflow-apiserver:8080/execution/"
    master = " ".join(services["spark-master"]["command"])
    worker = " ".join(services["spark-worker"]["command"])
    assert "spark-class org.apache.spark.deploy.master.Master" in master and "--port 7077" in master
    assert "spark-class org.apache.spark.deploy.worker.Worker" in worker
    assert worker.endswith("spark://spark-master:7077")
    assert "mc mb --ignore-existing" in "\n".join(services["minio-init"]["command"])


def test_healthchecks_and_start_order(services):
    for name in MUST_HAVE_HEALTHCHECK:
        hc = services[name].get("healthcheck")
        assert hc and hc.get("test") and not hc.get("disable"), f"{name} has no healthcheck"
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    assert "http://localhost:8080/api/v2/version" in services["airflow-apiserver"]["healthcheck"]["test"]
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        if name != "airflow-init":
            assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"
    assert services["spark-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    worker = services["airflow-worker"]["depends_on"]  # the tasks (and the Spark driver) run on the workers
    assert worker["minio-init"]["condition"] == "service_completed_successfully"
    assert worker["spark-master"]["condition"] == "service_healthy"
    # Every dependency exists; waiting for health needs a healthcheck; waiting for completion a one-shot.
    for name, svc in services.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if spec["condition"] == "service_healthy":
                assert services[dep].get("healthcheck"), f"{name} waits for {dep}'s health, it has none"
            if spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart") == "no", f"{dep} must be one-shot"


# ---------------------------------------------------------------- the doc and the file agree

def test_doc_services_table_matches(services):
    rows = doc_table("service", "purpose", "ports", "healthcheck")
    documented = set()
    for row in rows:
        (name,) = code(row["service"])
        documented.add(name)
        assert name in services, f"DEPLOYING.md lists {name}, the compose file has no such service"
        ports = {int(p) for p in re.findall(r"\d+", row["ports"])}
        assert ports == host_ports(services[name]), f"{name}: doc ports {ports} != {host_ports(services[name])}"
        has_hc = bool(services[name].get("healthcheck"))
        assert has_hc == (not row["healthcheck"].startswith("—")), f"{name}: healthcheck column is wrong"
        if has_hc:
            test = " ".join(services[name]["healthcheck"]["test"])
            for word in code(row["healthcheck"])[0].split():
                word = word.lstrip(":")
                assert word in test, f"{name}: doc healthcheck {word!r} not in {test!r}"
    assert documented == set(services), f"undocumented services: {set(services) - documented}"


def test_doc_mounts_are_in_every_airflow_service(services):
    rows = doc_table("host path", "container path")
    assert {code(r["host path"])[0] for r in rows} >= {"./dags", "./spark_jobs", "./expectations"}
    for name, svc in services.items():  # the library comes from the image's installed wheel
        assert not [v for v in svc.get("volumes") or [] if str(v).startswith("./plugins")], name
    for row in rows:
        mount = f"{code(row['host path'])[0]}:{code(row['container path'])[0]}"
        for name in AIRFLOW_SERVICES + ["airflow-worker"]:
            assert mount in services[name]["volumes"], f"{name} lacks mount {mount}"


def test_doc_connections_match_the_environment(services):
    rows = doc_table("connection id", "environment variable", "type")
    env = {k: interpolate(v) for k, v in env_of(services["airflow-scheduler"]).items()}
    assert {code(r["connection id"])[0] for r in rows} == {"spark_default", "eo_s3"}
    for row in rows:
        conn_id, var, ctype = code(row["connection id"])[0], code(row["environment variable"])[0], \
            code(row["type"])[0]
        assert var == f"AIRFLOW_CONN_{conn_id.upper()}"
        conn = json.loads(env[var])
        assert conn["conn_type"] == ctype, conn_id
        for literal in code(row["points at"]):
            if literal.startswith(("spark://", "http://")):
                assert literal in json.dumps(conn) or literal == f"{conn['host']}:{conn.get('port')}", literal
    assert env["EO_STORAGE_CONN_ID"] == "eo_s3"
    assert env["EO_DATA_ROOT"] == "s3://eo-data"
    s3 = json.loads(env["AIRFLOW_CONN_EO_S3"])
    assert s3["extra"]["endpoint_url"] == "http://minio:9000"


def test_the_scheduler_settings_fit_the_celery_executor(services):
    """The LocalExecutor's forkserver settings are gone with it (a Celery scheduler runs no task; the test
    fleet preloads in the worker instead, and every preloaded module exists here - a misspelt one would be
    skipped silently); hand-offs still wait for the scheduler's idle sleep (docs/DEPLOYING.md)."""
    import importlib.util

    from tools.localrun import SCHEDULER_PRELOAD, scheduler_env

    env = env_of(services["airflow-scheduler"])
    assert not set(scheduler_env()) & set(env)
    assert "great_expectations" in SCHEDULER_PRELOAD
    for module in SCHEDULER_PRELOAD:
        assert importlib.util.find_spec(module) is not None, module
    assert float(env["AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME"]) <= 0.2


def test_spark_connection_resolves_to_the_cluster(services, monkeypatch):
    """The provider's own parser turns AIRFLOW_CONN_SPARK_DEFAULT into master spark://spark-master:7077."""
    pytest.importorskip("airflow.providers.apache.spark")
    from airflow.models.connection import Connection

    value = interpolate(env_of(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"])
    conn = Connection.from_json(value, conn_id="spark_default")
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setattr(SparkSubmitHook, "get_connection", classmethod(lambda cls, conn_id: conn))
    resolved = SparkSubmitHook(conn_id="spark_default")._resolve_connection()
    assert resolved["master"] == "spark://spark-master:7077"
    assert resolved["deploy_mode"] == "client"
    assert resolved["spark_binary"] == "spark-submit"


def test_doc_mentions_what_was_not_run_and_the_backfill_cli():
    text = DOC.read_text()
    assert "http://localhost:8080" in text
    assert "airflow backfill create --dag-id pv_pipeline" in text
    assert "--from-date" in text and "--to-date" in text
    assert "not been started" in text


# ---------------------------------------------------------------- image, variables, secrets

def test_dockerfile_installs_the_lock_a_jre_and_matching_s3a_jars():
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM (python:3\.11|apache/airflow:3\.3\.2-python3\.11)", text, re.M)
    assert "openjdk-17-jre-headless" in text
    assert re.search(r"-r\s+\S*requirements\.lock", text) and "COPY requirements.lock" in text
    # the library is the package's wheel, built in a first stage and installed with its extras under the
    # lock's versions - not the repository's copy (neither copied nor mounted)
    assert re.search(r"^FROM \S+ AS dist$", text, re.M) and re.search(r"uv build --wheel", text)
    assert "COPY --from=dist" in text
    assert re.search(r"pip install .*-c /tmp/requirements/requirements\.lock", text)
    assert re.search(r'"exactly-once-pipelines\[\$\{EO_EXTRAS\}\] @ file://', text)
    extras = set(re.search(r"ARG EO_EXTRAS=(\S+)", text).group(1).split(","))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras == declared.keys() - {"test"}, "the image installs every extra the package declares"
    assert not re.search(r"^COPY (\.|plugins)\s", text, re.M) and " -e " not in text
    hadoop = re.search(r"ARG HADOOP_AWS_VERSION=(\S+)", text).group(1)
    sdk = re.search(r"ARG AWS_SDK_V2_VERSION=(\S+)", text).group(1)
    assert "hadoop-aws-${HADOOP_AWS_VERSION}.jar" in text and "bundle-${AWS_SDK_V2_VERSION}.jar" in text
    assert re.fullmatch(r"2\.\d+\.\d+", sdk)
    # hadoop-aws must equal the Hadoop that the pinned PySpark bundles (the build checks it as well).
    pyspark = pytest.importorskip("pyspark")
    jars = Path(pyspark.__file__).parent / "jars"
    bundled = sorted(p.name for p in jars.glob("hadoop-client-api-*.jar"))
    assert bundled == [f"hadoop-client-api-{hadoop}.jar"], bundled
    conf = SPARK_DEFAULTS.read_text()
    assert re.search(r"^spark\.hadoop\.fs\.s3a\.endpoint\s+http://minio:9000$", conf, re.M)
    assert re.search(r"^spark\.hadoop\.fs\.s3a\.path\.style\.access\s+true$", conf, re.M)


def _without_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_every_variable_is_defaulted_or_in_the_env_example(raw):
    example = env_example()
    raw = _without_comments(raw)
    for m in VAR.finditer(raw.replace("$$", "")):
        name, op = m.group(1), m.group(2)
        assert op in (":-", "-") or name in example, f"${{{name}}} has no default and is not in .env.example"
    used = {m.group(1) for m in VAR.finditer(raw.replace("$$", ""))}
    missing = used - set(example) - {"EO_IMAGE", "MINIO_IMAGE", "MC_IMAGE", "REDIS_IMAGE"}
    assert not missing, f"variables not documented in docker/.env.example: {missing}"
    # The file interpolates with the example values as well as with the defaults.
    yaml.safe_load(interpolate(raw, example))
    yaml.safe_load(interpolate(raw))


def _literal_secrets(value: str) -> bool:
    """True if ``value`` still holds text after removing ${VAR...} placeholders (a hard-coded secret)."""
    return bool(VAR.sub("", value).strip())


def test_no_secret_is_hard_coded(raw, compose, services):
    assert not re.search(r"AKIA[0-9A-Z]{16}", raw), "an AWS access key id is hard-coded"
    envs = {"x-airflow-common": env_of(compose["x-airflow-common"])}
    envs.update({name: env_of(svc) for name, svc in services.items()})
    for owner, env in envs.items():
        for key, value in env.items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):  # *_FILE hold paths
                assert not _literal_secrets(value), f"{owner}: {key} is hard-coded"
            if value.lstrip().startswith("{"):  # a JSON connection: its login/password are placeholders
                conn = json.loads(VAR.sub("X", value))
                for field in ("password", "login"):
                    if field in conn:
                        assert "${" in value and conn[field] == "X", f"{owner}: {key}.{field} is hard-coded"
            for m in re.finditer(r"://([^:/@\s]+):([^@/\s]+)@", VAR.sub("<var>", value)):  # user:pw@
                assert m.group(2) == "<var>", f"{owner}: {key} has a literal password in a URL"
    # Defaults of secret variables are placeholders, not real values; so are the .env example's.
    for m in VAR.finditer(_without_comments(raw)):
        if SECRET_NAME.search(m.group(1)) and m.group(3):
            assert m.group(3).startswith("change-me"), f"${{{m.group(1)}}} default is not a placeholder"
    for key, value in env_example().items():
        if SECRET_NAME.search(key):
            assert value == "" or value.startswith("change-me"), f".env.example {key} is not a placeholder"


# ---------------------------------------------------------------- docker compose config (no engine)

def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_config_accepts_the_file(tmp_path):
    cli = _compose_cli()
    if cli is None:
        reason = "no `docker compose` plugin or docker-compose binary (the docker CLI alone can't parse it)"
        need(False, reason)
    env_file = tmp_path / ".env"
    env_file.write_text(ENV_EXAMPLE.read_text())
    for extra in ([], ["--env-file", str(env_file)]):
        proc = subprocess.run([*cli, "-f", str(COMPOSE), "--project-directory", str(ROOT), *extra,
                               "config", "-q"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
