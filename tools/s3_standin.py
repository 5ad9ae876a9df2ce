"""A ``spark-submit`` stand-in for a worker whose Spark cannot reach S3 (test deployments only).

pip's PySpark has no s3a jars (``docker/Dockerfile`` adds them), so on this machine a Spark job cannot
read or write ``s3://``. :mod:`tools.celery_stack` puts this first on each worker's PATH as
``spark-submit``. Called by the write task's ``SparkSubmitOperator`` as
``spark-submit [options] <app.py> --spec s3://.../_job.json [args]``, it

1. reads the job spec from S3 with the storage options the write task handed it (``EO_JOB_STORAGE_OPTIONS``,
   else the ``AWS_*`` environment), as the job itself would,
2. mirrors the frozen inputs and the predecessor's state into a new dir in the worker's private
   ``TMPDIR``, and writes a local copy of the spec pointing there (staging dir included),
3. runs the real ``spark-submit`` with the same options on the same job: Spark computes for real,
4. on success uploads what the job staged to the transaction's S3 staging dir the way an s3a write with
   ``mode("overwrite")`` replaces it: the job's outputs (data dir, ``_state``, ``_quarantine``) are
   deleted first, hidden files (``.crc``) and ``_SUCCESS`` markers are not uploaded, the quarantine's
   ``file`` fields name the S3 inputs, and ``_counts.json`` - the job's "I finished" - goes last.

A spec that is not on S3 goes to the real ``spark-submit`` unchanged. The exit code is spark-submit's.

``EO_STANDIN_COMPUTE=oracle`` skips the JVM (~20-60 s per write on a loaded 2-core machine, which a
100-interval chaos run cannot afford): the write is then the test suite's pure-Python stand-in
(``tests/pv_standin.stage_write``: the job's output contract computed by the independent oracle
``tests/reference_pv.py``, reading and writing S3 directly), as the fault matrix and the S3 pipeline test
use it. Only pv_pipeline's job has such a stand-in.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from exactly_once.contracts import COUNTS, QUARANTINE, SPEC, STATE, FrozenInput, JobSpec
from exactly_once.job import spark_path
from exactly_once.job.options import job_storage_options
from exactly_once.storage import Storage, storage_for

REAL = Path(sys.executable).parent / "spark-submit"


def _split(argv: list[str]) -> tuple[list[str], str, str, list[str]] | None:
    """``(spark options, application, spec URL, job args)``, or None when there is no ``--spec``."""
    if "--spec" not in argv:
        return None
    i = argv.index("--spec")
    if i < 1 or i + 1 >= len(argv):
        return None
    return argv[:i - 1], argv[i - 1], argv[i + 1], argv[i + 2:]


def _mirror(store: Storage, spec: JobSpec, tmp: Path) -> tuple[JobSpec, dict[str, str]]:
    """Copy inputs and previous state below ``tmp``; the local spec and ``{local path: S3 path}``."""
    originals, sources = {}, []
    for s, source in enumerate(spec.sources):
        inputs = []
        for n, item in enumerate(source.inputs):
            local = tmp / "inputs" / f"{s}" / f"{n:05d}-{Path(item.rel).name}"
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(store.read_bytes(_key(item.path)))
            originals[str(local)] = item.path
            inputs.append(FrozenInput(str(local), item.rel, local.stat().st_size, local.stat().st_mtime))
        sources.append(replace(source, inputs=tuple(inputs)))
    prev = None
    if spec.prev_state:
        prev = tmp / "prev_state"
        for entry in store.walk_files(_key(spec.prev_state)):
            target = prev / entry.rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(store.read_bytes(store.join(_key(spec.prev_state), entry.rel)))
        prev.mkdir(exist_ok=True)
    staging = tmp / "staging"
    data_rel = _relative(spec.data_dir, spec.staging_dir)
    local = replace(spec, sources=tuple(sources), staging_dir=str(staging), data_dir=str(staging / data_rel),
                    prev_state=str(prev) if prev else None, heartbeat=None)
    staging.mkdir(parents=True)
    (staging / SPEC).write_bytes(local.to_json())
    return local, originals


def _key(url: str) -> str:
    """The storage path of a URL the spec holds (``s3://bucket/key`` -> ``bucket/key``)."""
    return storage_for(url)[1]


def _relative(path: str, base: str) -> str:
    base = base.rstrip("/") + "/"
    if not path.startswith(base):
        raise SystemExit(f"the spec's data dir {path} is not inside its staging dir {base}")
    return path[len(base):].strip("/")


def _upload(store: Storage, spec: JobSpec, staging: Path, originals: dict[str, str]) -> None:
    """The staged output to the S3 staging dir, replacing an earlier attempt's; ``_counts.json`` last."""
    names = {local: s3 for path, s3 in originals.items() for local in (path, spark_path(path))}
    remote = _key(spec.staging_dir)
    for out in (_relative(spec.data_dir, spec.staging_dir), STATE, QUARANTINE, COUNTS):
        store.remove_tree(store.join(remote, out))
    files = sorted(p for p in staging.rglob("*") if p.is_file() and p.name not in (SPEC, COUNTS)
                   and not any(part.startswith(".") or part == "_SUCCESS" for part in p.relative_to(staging).parts))
    for path in files:
        data = path.read_bytes()
        if QUARANTINE in path.relative_to(staging).parts[:1]:
            data = b"".join(_rename_file(line, names) for line in data.splitlines(keepends=True))
        store.write_atomic(store.join(remote, path.relative_to(staging).as_posix()), data)
    if (staging / COUNTS).is_file():
        store.write_atomic(store.join(remote, COUNTS), (staging / COUNTS).read_bytes())


def _rename_file(line: bytes, names: dict[str, str]) -> bytes:
    try:
        record = json.loads(line)
    except ValueError:
        return line
    if isinstance(record, dict) and record.get("file") in names:
        record["file"] = names[record["file"]]
        return (json.dumps(record, ensure_ascii=False) + "\n").encode()
    return line


def main(argv: list[str]) -> int:
    parts = _split(argv)
    if parts is None or not parts[2].startswith("s3://"):
        os.execv(str(REAL), [str(REAL), *argv])
    options, application, spec_url, args = parts  # type: ignore[misc]
    if os.environ.get("EO_STANDIN_COMPUTE") == "oracle":
        return _oracle(application, spec_url)
    store, key = storage_for(spec_url, **job_storage_options())
    spec = JobSpec.from_json(store.read_bytes(key))
    tmp = Path(tempfile.mkdtemp(prefix="eo-standin-"))
    try:
        local, originals = _mirror(store, spec, tmp)
        code = subprocess.call([str(REAL), *options, application, "--spec", str(tmp / "staging" / SPEC), *args])
        if code == 0:
            _upload(store, spec, tmp / "staging", originals)
        return code
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _oracle(application: str, spec_url: str) -> int:
    if Path(application).name != "pv_counts.py":
        raise SystemExit(f"EO_STANDIN_COMPUTE=oracle has a stand-in for pv_counts.py only, not {application}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pv_standin import stage_write  # noqa: PLC0415 - the tests' stand-in, on demand

    print(json.dumps({"standin": "oracle", "counts": stage_write(spec_url, job_storage_options())}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
