"""The common path (every partition written as ONE Parquet file - what both demo jobs do, coalesce(1)) now
pays S3 requests in JobContext.finish that buy nothing: multi_file_partitions() lists every partition of
rows_written one by one (exists() = HEAD + LIST, then ls() = LIST) to find that none has several files. A
job of 24 hourly partitions on S3 pays ~72 requests more per interval than finish(count_files=False); a
single recursive listing of data_dir (1 LIST per 1,000 files) would answer the same question. Prints the
S3 calls of finish() with and without the count, against the loopback S3 server. Exit 1 when the common
path pays more than one listing request."""
import collections, io, os, sys, tempfile, time
from pathlib import Path

import _common  # noqa: F401
import pyarrow as pa
import pyarrow.parquet as pq
import s3fs

from bench.commit_files import s3_server, _bucket
from exactly_once.contracts import Counts, FrozenInput, JobSpec, SourceInputs
from exactly_once.ids import Interval
from exactly_once.job import JobContext

calls = collections.Counter()
real_call = s3fs.S3FileSystem._call_s3


async def counting(self, method, *args, **kwargs):
    calls[getattr(method, "__name__", method)] += 1
    return await real_call(self, method, *args, **kwargs)


s3fs.S3FileSystem._call_s3 = counting
HOURS = 24
tmp = Path(tempfile.mkdtemp())
landing = tmp / "in.csv"
landing.write_text("x\n1\n")
st = os.stat(landing)
buf = io.BytesIO()
pq.write_table(pa.table({"n": [1, 2]}), buf)
with s3_server() as srv:
    opts = {"key": srv["key"], "secret": srv["secret"], "endpoint_url": srv["endpoint_url"]}
    os.environ.update({"AWS_ACCESS_KEY_ID": srv["key"], "AWS_SECRET_ACCESS_KEY": srv["secret"],
                       "EO_S3_ENDPOINT_URL": srv["endpoint_url"], "AWS_DEFAULT_REGION": "us-east-1"})
    results = {}
    for count_files in (False, True):
        bucket = _bucket(srv)
        staging = f"s3://{bucket}/t/_staging/t1"
        parts = tuple(f"dt=2026-01-01/hour={h:02d}" for h in range(HOURS))
        spec = JobSpec(pipeline="p", sink="t", txn="t1", interval_start=Interval.daily("2026-01-01").start.isoformat(),
                       interval_end=Interval.daily("2026-01-01").end.isoformat(), partitions=parts,
                       sources=(SourceInputs("s", "csv", {}, (FrozenInput(str(landing), "in.csv", st.st_size,
                                                                          st.st_mtime),)),),
                       staging_dir=staging, data_dir=staging + "/data")
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": srv["endpoint_url"]}, key=srv["key"],
                               secret=srv["secret"], skip_instance_cache=True)
        fs.pipe({f"{bucket}/t/_staging/t1/data/{p}/part-00000-x.c000.snappy.parquet": buf.getvalue() for p in parts})
        ctx = JobContext(object(), spec, storage_options=opts, clear_cache=False)  # no Spark action is needed
        calls.clear()
        t0 = time.perf_counter()
        out = ctx.finish(Counts(records_in=1, records_out=1, rows_written={p: 2 for p in parts}),
                         count_files=count_files)
        results[count_files] = (sum(calls.values()), dict(calls), round(time.perf_counter() - t0, 3), fs.exists(f'{bucket}/t/_staging/t1/_file_rows.json'))
        print(f"finish(count_files={count_files}): {results[count_files][0]} S3 calls {results[count_files][1]} "
              f"in {results[count_files][2]} s; _file_rows.json written: {results[count_files][3]}")
extra = results[True][0] - results[False][0]
print(f"{extra} S3 requests more for {HOURS} one-file partitions, to learn that no partition has several files")
broken = extra > 1
print("BROKEN: the common path pays a per-partition listing" if broken else "OK")
sys.exit(1 if broken else 0)
