"""S3 as deployed, not only as moto answers: conditional writes judged by status, folder markers,
conditions that survive any size (issue 12's to-check items, issue 13 cases 5, 7 and 8)."""
from __future__ import annotations

import boto3
import pytest

from conftest import make_bucket
from exactly_once import Interval, State
from exactly_once.ops.maintenance import gc
from protocol_helpers import assert_exact_version, commit_version, leftovers, make_rows, open_sink, split, write_output
from s3_shapes import MinioShape

pytestmark = pytest.mark.s3
IV = Interval.daily("2026-01-01")
PART = f"dt={IV.day}"


def test_minio_shaped_412_is_a_lost_condition_not_an_error(s3_server, monkeypatch):
    """MinIO answers a failed If-None-Match / If-Match PUT with a 412 that names no condition: every
    "record exists" case (teardown after a success, a second verdict, a second finisher) must still read
    as "exists", and a whole run with its retries must end exact."""
    bucket = make_bucket(s3_server)
    shape = MinioShape(s3_server["endpoint_url"])
    with shape as endpoint:
        monkeypatch.setenv("EO_S3_ENDPOINT_URL", endpoint)
        sink = open_sink(f"s3://{bucket}/warehouse/t", require_validation=True)
        path = sink.storage.join(sink.home, "probe.json")
        assert sink.storage.create_exclusive(path, b"1") is True
        assert sink.storage.create_exclusive(path, b"2") is False  # 412, no condition named
        stale = sink.storage.etag(path)
        sink.storage.write_atomic(path, b"3")
        assert sink.storage.put_conditional(path, b"4", if_match=stale) is False
        rows = make_rows("a", 5)
        txn = sink.begin(IV)
        write_output(sink, txn, {PART: split(rows, 2)})
        sink.pre_commit(txn)
        assert sink.record_validation(txn, True, {}) is True
        assert sink.record_validation(txn, False, {}) is True  # the first verdict stays
        sink.commit(txn)
        assert sink.commit(txn).partitions == {PART: "already"}
        assert sink.abort(txn) is State.COMMITTED  # the teardown of a successful run
        again = commit_version(open_sink(f"s3://{bucket}/warehouse/t"), IV, {PART: [make_rows("b", 2, start=9)]})
        assert sink.status(IV)[again.epoch].state is State.COMMITTED
        assert_exact_version(sink, PART, make_rows("b", 2, start=9), again)
    assert shape.rewritten >= 4  # the 412s really came back in MinIO's shape


def test_folder_markers_in_staging_are_not_files(s3_server):
    """Zero-byte ``.../`` keys (Hadoop's S3A writes them) in the staging dir: not data files, not a
    partition named '', and nothing of them is left behind."""
    sink = open_sink(f"s3://{make_bucket(s3_server)}/warehouse/t")
    rows = make_rows("a", 4)
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: split(rows, 2)})
    client = boto3.client("s3", endpoint_url=s3_server["endpoint_url"], aws_access_key_id=s3_server["key"],
                          aws_secret_access_key=s3_server["secret"], region_name="us-east-1")
    bucket, prefix = sink.data_dir(txn).split("/", 1)
    for key in (f"{prefix}/", f"{prefix}/{PART}/", f"{prefix.rsplit('/', 1)[0]}/state/"):
        client.put_object(Bucket=bucket, Key=key, Body=b"")
    manifest = sink.pre_commit(txn)
    assert list(manifest.partitions) == [PART] and manifest.files == 2
    sink.commit(txn)
    assert_exact_version(sink, PART, rows, txn)
    gc(sink, min_age=0)
    left = client.list_objects_v2(Bucket=bucket, Prefix=sink.staging_dir(txn).split("/", 1)[1])
    assert left.get("KeyCount", 0) == 0 and leftovers(sink) == []


def test_conditional_put_keeps_its_condition_beyond_the_multipart_threshold(s3_server):
    """s3fs sends bodies over 100 MiB as a multipart upload, which drops If-Match / If-None-Match. A
    conditional write here is always one PutObject: a large manifest still loses a race instead of
    overwriting a newer one."""
    sink = open_sink(f"s3://{make_bucket(s3_server)}/warehouse/t")
    path = sink.storage.join(sink.table, PART, "_MANIFEST.json")
    sink.storage.write_atomic(path, b"v1")
    stale = sink.storage.etag(path)
    sink.storage.write_atomic(path, b"v2")  # another publisher switched it
    big = b" " * (101 * 2**20)
    assert sink.storage.put_conditional(path, big, if_match=stale) is False
    assert sink.storage.read_bytes(path) == b"v2"
    assert sink.storage.put_conditional(path, big, if_match=sink.storage.etag(path)) is True
