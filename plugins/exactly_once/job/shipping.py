"""The job side shipped to Spark: this library as a zip for ``spark-submit --py-files``.

A Spark job imports :mod:`exactly_once.job` and :mod:`exactly_once.contracts` on the driver. Where the
driver runs in the Airflow task with the task's own Python (``local[*]``), the library is there already.
Everywhere else - a cluster master in client mode (the driver's Python may be a job-only environment,
executors run on other hosts) or cluster deploy mode (YARN, Kubernetes: the driver runs on the cluster,
which has no Airflow) - the write task ships the library: spark-submit puts each ``--py-files`` zip on the
driver's and the executors' ``sys.path`` ahead of what their Python has installed, so the job runs exactly
the library version the Airflow side that wrote its spec runs.

``EO_SPARK_SHIP_LIBRARY`` chooses: ``auto`` (default: ship unless the master is ``local``), ``always`` or
``never`` (the cluster's Python has the package installed, or a deployment ships it otherwise, e.g. a
packed environment in ``spark.archives``).

The zip holds the package without its Airflow layer (``exactly_once/airflow``: Airflow-only code the job
side never imports), byte-for-byte deterministic, named after a hash of its content and built once per
content into a per-user cache directory (``EO_SPARK_SHIP_CACHE``, default under the temp dir): atomic
(written aside, then renamed), so concurrent tasks share one file.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from pathlib import Path

from ..errors import ConfigError

log = logging.getLogger(__name__)
MODE_ENV = "EO_SPARK_SHIP_LIBRARY"
CACHE_ENV = "EO_SPARK_SHIP_CACHE"
MODES = ("auto", "always", "never")
PACKAGE = Path(__file__).resolve().parents[1]  # exactly_once/ (this module is exactly_once/job/shipping.py)
SKIPPED = ("airflow",)  # subpackages the job side never imports
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed member timestamps: the same sources give the same bytes


def ship_mode() -> str:
    """``EO_SPARK_SHIP_LIBRARY`` (``auto``, ``always`` or ``never``; default ``auto``); ConfigError otherwise."""
    mode = (os.environ.get(MODE_ENV) or "auto").strip().lower()
    if mode not in MODES:
        raise ConfigError(f"{MODE_ENV}={mode!r}: use one of {', '.join(MODES)}")
    return mode


def needs_shipping(master: str, deploy_mode: str | None, mode: str | None = None) -> bool:
    """Whether a spark-submit to ``master`` in ``deploy_mode`` gets the library on ``--py-files``:
    ``auto`` ships to every master but ``local``/``local[n]`` (whose driver and executors are the task's
    own Python), and always in cluster deploy mode."""
    mode = mode or ship_mode()
    if mode != "auto":
        return mode == "always"
    local = master.startswith("local") and not master.startswith("local-cluster")
    return deploy_mode == "cluster" or not local


def _members(package: Path) -> list[tuple[str, Path]]:
    found = []
    for path in package.rglob("*"):
        rel = path.relative_to(package)
        if (not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo")
                or rel.parts[0] in SKIPPED):
            continue
        found.append((f"{package.name}/{rel.as_posix()}", path))
    return sorted(found)


def library_zip(cache_dir: str | os.PathLike[str] | None = None, package: Path = PACKAGE) -> Path:
    """The zip of ``package`` (this library) for ``--py-files``: built once per content, then reused."""
    members = [(name, path.read_bytes()) for name, path in _members(package)]
    digest = hashlib.sha256()
    for name, data in members:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    cache = Path(cache_dir or os.environ.get(CACHE_ENV)
                 or Path(tempfile.gettempdir()) / f"exactly-once-py-files-{os.getuid()}")
    target = cache / f"{package.name}-{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    log.info("built %s (%d files) for --py-files", target, len(members))
    return target
