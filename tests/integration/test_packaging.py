"""The package users install (``make dist``): what the wheel holds and declares, the provider metadata
Airflow reads, and the repo's plugins/eo_plugin.py giving way to the installed entry point.

Installing the wheel into other Airflow and PySpark versions and running an interval there is
``tests/integration/test_compat.py`` (``make compat``).
"""
from __future__ import annotations

import configparser
import os
import json
import subprocess
import sys
import zipfile
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path

import jsonschema
import pytest

from tools.compat import build_wheel, wheel_requires

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = "exactly_once.airflow.plugin:ExactlyOncePlugin"
EXTRAS = {"delta": "deltalake", "postgres": "psycopg2-binary", "mysql": "pymysql", "redis": "redis", "s3": "s3fs",
          "celery": "apache-airflow-providers-celery", "openlineage": "apache-airflow-providers-openlineage"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


def dist_info(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(f".dist-info/{name}"))).decode()


def test_the_wheel_holds_the_library_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"exactly_once", wheel.name.split("-py3")[0] + ".dist-info"}
    assert {"exactly_once/job/__init__.py", "exactly_once/contracts.py", "exactly_once/airflow/plugin.py",
            "exactly_once/airflow/provider_info.py", "exactly_once/targets/__init__.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "tools/", "bench/", "dags/", "spark_jobs/"))
                or n.endswith("eo_plugin.py") or "__pycache__" in n]
    # the build left no metadata in plugins/ (on Airflow's sys.path: the plugin's entry point twice)
    assert not list((ROOT / "plugins").glob("*.egg-info"))
    # every module of the library is in it
    shipped = {n for n in names if n.endswith(".py")}
    assert shipped == {str(p.relative_to(ROOT / "plugins")) for p in (ROOT / "plugins" / "exactly_once").rglob("*.py")}


def test_the_wheel_declares_ranges_extras_and_entry_points(wheel):
    requires = wheel_requires(wheel)
    core = [r for r in requires if "extra ==" not in r]
    assert core and not [r for r in core if "==" in r], "the package pins nothing exactly: ranges"
    names = {r.split(">")[0].split("<")[0].split("[")[0].strip() for r in core}
    assert {"apache-airflow", "apache-airflow-providers-apache-spark", "pyspark", "pyspark-client",
            "great-expectations", "pyarrow", "fsspec"} <= names
    for extra, package in EXTRAS.items():
        assert any(r.startswith(package) and f'extra == "{extra}"' in r for r in requires), extra
    eps = configparser.ConfigParser()
    eps.read_string(dist_info(wheel, "entry_points.txt"))
    assert dict(eps["airflow.plugins"]) == {"exactly_once": "exactly_once.airflow.plugin:ExactlyOncePlugin"}
    assert dict(eps["apache_airflow_provider"]) == {
        "provider_info": "exactly_once.airflow.provider_info:get_provider_info"}
    assert dict(eps["console_scripts"]) == {"eo": "exactly_once.cli:main"}


def test_provider_info_is_what_airflow_validates_and_imports_no_airflow():
    """Airflow imports the provider metadata while it loads its own configuration: the module must not
    import Airflow (or the operators) then, and the data must pass Airflow's runtime schema."""
    code = ("import json, sys; from exactly_once.airflow.provider_info import get_provider_info; "
            "print(json.dumps({'info': get_provider_info(), "
            "'airflow': sorted(m for m in sys.modules if m.split('.')[0] == 'airflow')}))")
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=ROOT / "plugins").stdout)
    assert out["airflow"] == []
    info = out["info"]
    schema = json.loads(resources.files("airflow").joinpath("provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    assert info["package-name"] == "exactly-once-pipelines"
    assert "plugins" not in info, "the plugin comes from the airflow.plugins entry point only"
    from exactly_once.airflow import operators

    assert [getattr(operators, c.rsplit(".", 1)[1]).__module__ for c in info["extra-links"]] == [operators.__name__]


def plugin_names(*path: Path) -> list[str]:
    """The AirflowPlugin classes plugins/eo_plugin.py defines, with ``path`` first on sys.path."""
    code = ("import runpy, sys; from airflow.plugins_manager import AirflowPlugin; "
            f"g = runpy.run_path({str(ROOT / 'plugins' / 'eo_plugin.py')!r}); "
            "print(sorted(k for k, v in g.items() if isinstance(v, type) and issubclass(v, AirflowPlugin) "
            "and v is not AirflowPlugin))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, path), str(ROOT / "plugins")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own print of a list of names


def test_eo_plugin_gives_way_to_the_installed_entry_point(tmp_path):
    """A checkout's plugins folder beside the installed package would register the plugin twice (Airflow
    reports the second as an import error): eo_plugin.py defines it only without the entry point."""
    installed = any(ep.value == ENTRY_POINT for ep in entry_points(group="airflow.plugins"))
    assert plugin_names() == ([] if installed else ["ExactlyOncePlugin"])  # a checkout, or `make install`
    meta = tmp_path / "exactly_once_pipelines-0.3.0.dist-info"  # what installing the wheel writes
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: exactly-once-pipelines\nVersion: 0.3.0\n")
    (meta / "entry_points.txt").write_text(
        "[airflow.plugins]\nexactly_once = exactly_once.airflow.plugin:ExactlyOncePlugin\n")
    assert plugin_names(tmp_path) == []
