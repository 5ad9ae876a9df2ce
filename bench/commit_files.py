"""Section 2: the cost of ``commit()`` alone vs the number of staged files, local FS and loopback S3,
for the files target (copy-based publish on S3) and a Delta table (``table_format="delta"``), in one run.

Files are pre-staged directly with the storage adapter (tiny opaque ``.bin`` files for the files target:
the commit only moves them; one tiny Parquet file repeated for Delta, whose commit reads a schema),
sealed with ``pre_commit(checksums=False)`` (Delta: with the row counts a job hands over, ``Counts.file_rows``;
the manifest read from the footers instead is timed beside it), then only ``commit()`` is timed. The S3 server is a
``moto_server`` this module starts on 127.0.0.1.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Iterator

from bench.common import clock, loadavg, say, stats

from exactly_once import Interval, TwoPhaseCommitSink
from exactly_once.records import manifest as manifests

PAYLOAD = b"x" * 256
FORMATS = ("files", "delta")


def _parquet_payload() -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.table({"k": pa.array([1], pa.int64()), "v": ["x"]}), buf)
    return buf.getvalue()
CREDS = {"key": "eo-bench-key", "secret": "eo-bench-secret"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def s3_server() -> Iterator[dict[str, str]]:
    """A moto_server on loopback for the duration of the block; yields endpoint + credentials."""
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if not exe:
        raise SystemExit("moto_server is not installed (pip install 'moto[server]')")
    port = _free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.time() > deadline or proc.poll() is not None:
                raise SystemExit("moto_server did not start")
            time.sleep(0.1)
        yield {"endpoint_url": f"http://127.0.0.1:{port}", **CREDS}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # a loaded moto_server can take long to exit: never lose the results
            proc.kill()
            proc.wait()


def _bucket(s3: dict[str, str]) -> str:
    import boto3

    name = f"eo-bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3["endpoint_url"], aws_access_key_id=s3["key"],
                 aws_secret_access_key=s3["secret"], region_name="us-east-1").create_bucket(Bucket=name)
    return name


def _stage(sink: TwoPhaseCommitSink, data_dir: str, n: int) -> None:
    delta = sink.table_format == "delta"
    payload = _parquet_payload() if delta else PAYLOAD
    paths = [sink.storage.join(data_dir, f"part-{i:05d}.{'parquet' if delta else 'bin'}") for i in range(n)]
    fs = getattr(sink.storage, "fs", None)
    if fs is not None:
        fs.pipe({p: payload for p in paths})  # batched, concurrent PUTs
    else:
        os.makedirs(data_dir, exist_ok=True)
        for p in paths:
            with open(p, "wb") as f:
                f.write(payload)


def _one(sink: TwoPhaseCommitSink, day: str, n: int) -> dict[str, float]:
    iv = Interval.daily(day)
    t: dict[str, float] = {}
    t["begin"], txn = clock(lambda: sink.begin(iv))
    part = f"dt={day}"
    t["stage"], _ = clock(lambda: _stage(sink, sink.storage.join(sink.data_dir(txn), part), n))
    if sink.table_format == "delta":  # Parquet: a pipeline's pre_commit takes the job's rows (Counts.file_rows)
        names = [f"part-{i:05d}.parquet" for i in range(n)]
        # what sealing these files cost before the job counted them: the manifest from their footers
        t["footers"], read = clock(lambda: manifests.build(sink.storage, txn, sink.staging_dir(txn), ("data",),
                                                            checksums=False))
        assert read.rows == n, read.rows
        t["pre_commit"], manifest = clock(lambda: sink.pre_commit(
            txn, gated=True, rows={part: n}, file_rows={part: dict.fromkeys(names, 1)}))
        sink.record_validation(txn, True, {})  # (gated: the pipeline's gate would run here)
        assert manifest.rows == n, manifest.rows
    else:
        t["pre_commit"], manifest = clock(lambda: sink.pre_commit(txn))
    assert manifest.files == n, manifest.files
    t["commit"], result = clock(lambda: sink.commit(txn))
    assert result.partitions == {f"dt={day}": "published"}, result.partitions
    assert len(sink.live_files(f"dt={day}")) == n
    return t


def run_backend(name: str, table_for: Any, counts: list[int], reps: int, warmup: int,
                storage_options: dict[str, Any] | None = None, table_format: str = "files") -> dict[str, Any]:
    res: dict[str, Any] = {}
    day0 = date(2030, 1, 1)
    k = 0

    def sink_for(n: int) -> TwoPhaseCommitSink:
        return TwoPhaseCommitSink.at(table_for(n), pipeline="bench", sink="t", checksums=False,
                                     storage_options=dict(storage_options or {}), table_format=table_format)

    for _ in range(warmup):  # connection pools, imports, first-touch: once per backend, smallest count
        _one(sink_for(0), (day0 - timedelta(days=1 + _)).isoformat(), counts[0])
    for n in counts:
        sink = sink_for(n)
        runs = []
        for _ in range(reps):
            runs.append(_one(sink, (day0 + timedelta(days=k)).isoformat(), n))
            k += 1
        res[str(n)] = {phase: stats([r[phase] for r in runs]) for phase in runs[0]}
        res[str(n)]["loadavg"] = loadavg()
        say(f"  {name} {n:>6} files: commit {res[str(n)]['commit']['median']:.3f}s "
            f"(stage {res[str(n)]['stage']['median']:.2f}s, pre_commit {res[str(n)]['pre_commit']['median']:.2f}s)")
    return res


def _name(storage: str, table_format: str) -> str:
    return storage if table_format == "files" else f"{storage}-{table_format}"


def commit_vs_files(work: Path, counts: list[int], reps: int, warmup: int, s3: bool = True,
                    s3_counts: list[int] | None = None, formats: tuple[str, ...] = FORMATS) -> dict[str, Any]:
    """Backends ``local``, ``s3`` (files target) and ``local-delta``, ``s3-delta`` (a Delta table)."""
    out: dict[str, Any] = {"counts": counts, "reps": reps, "file_bytes": len(PAYLOAD), "backends": {}}
    say(f"commit vs files: {counts}")
    base = work / "commit_files"
    shutil.rmtree(base, ignore_errors=True)
    for fmt in formats:
        out["backends"][_name("local", fmt)] = run_backend(_name("local", fmt), lambda n, f=fmt: str(base / f"{f}{n}"),
                                                           counts, reps, warmup, table_format=fmt)
    if s3:
        with s3_server() as srv:
            counts_s3 = s3_counts or counts
            opts = {"key": srv["key"], "secret": srv["secret"], "endpoint_url": srv["endpoint_url"]}
            for fmt in formats:
                buckets = {n: _bucket(srv) for n in [0, *counts_s3]}  # one per count: moto lists per bucket
                out["backends"][_name("s3", fmt)] = run_backend(
                    _name("s3", fmt), lambda n, b=buckets: f"s3://{b[n]}/warehouse/t", counts_s3, reps, warmup,
                    opts, table_format=fmt)
            import s3fs

            out["s3_client"] = {"s3fs": s3fs.__version__, "server": "moto_server on 127.0.0.1"}
    return out
