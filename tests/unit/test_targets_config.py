"""Publish-target configuration without any server: endpoints, redaction, config checks, staged versions."""
from __future__ import annotations

import io

import pyarrow as pa
import pytest

from exactly_once import ConfigError, UnsafeIdentifierError
from exactly_once.targets import DatabaseTarget, RedisTarget, StagedFile, StagedVersion
from exactly_once.targets.endpoint import from_url, redact
from exactly_once.targets.csv_rows import prefetch
from exactly_once.targets.sql_dialects import DIALECTS

SECRET = "p@ss:w/rd#1"


def test_url_endpoint_parses_and_never_shows_the_password():
    ep = from_url("postgresql://loader:p%40ss%3Aw%2Frd%231@db.example:6543/dw?sslmode=require", ("postgresql",))
    assert (ep.dialect, ep.host, ep.port, ep.user, ep.password, ep.database) == \
        ("postgresql", "db.example", 6543, "loader", SECRET, "dw")
    assert ep.options == {"sslmode": "require"}
    assert SECRET not in repr(ep) and SECRET not in ep.describe()
    assert from_url("mariadb://root@h/test", ("mysql",)).port == 3306
    assert redact(f"failed for {SECRET}!", SECRET) == "failed for ***!"


@pytest.mark.parametrize("url,match", [("oracle://u@h/db", "scheme"), ("postgresql:///db", "no host"),
                                       ("postgresql://u:pw@h:99999999/db", "malformed"),
                                       ("postgresql://u@h/db?password_file=x", "unsupported option")])
def test_bad_urls_are_refused_without_quoting_them(url, match):
    with pytest.raises(ConfigError, match=match) as err:
        from_url(url, ("postgresql",))
    assert "pw" not in str(err.value)


def test_database_target_config_is_checked():
    url = f"postgresql://u:{SECRET}@h/db"
    t = DatabaseTarget("s.t", url=url)
    assert SECRET not in repr(t) and SECRET not in t.describe()
    with pytest.raises(ConfigError, match="exactly one"):
        DatabaseTarget("t")
    with pytest.raises(ConfigError, match="exactly one"):
        DatabaseTarget("t", url=url, conn_id="x")
    with pytest.raises(ConfigError, match="key_columns"):
        DatabaseTarget("t", url=url, mode="upsert")
    with pytest.raises(ConfigError, match="mode"):
        DatabaseTarget("t", url=url, mode="merge")
    with pytest.raises(ConfigError, match="interval_column or partition_columns"):
        DatabaseTarget("t", url=url, partition_columns=False)
    with pytest.raises(UnsafeIdentifierError):
        DatabaseTarget("t", url=url, interval_column="x; drop")
    with pytest.raises(ConfigError, match="exactly one"):
        RedisTarget("ns", ("k",))
    with pytest.raises(ConfigError, match="key_columns"):
        RedisTarget("ns", (), url="redis://h")


def test_quoting_is_per_dialect():
    assert DIALECTS["postgresql"].table("s.t") == '"s"."t"'
    assert DIALECTS["mysql"].table("t") == "`t`"
    with pytest.raises(UnsafeIdentifierError):
        DIALECTS["mysql"].quote("a`b")


def test_staged_version_from_manifest_and_refusals():
    manifest = {"partitions": {"dt=2026-01-01": [{"name": "a.parquet", "size": 3, "rows": 2, "sha256": "x"}],
                               "dt=2026-01-02": []}}
    v = StagedVersion.from_manifest(manifest, lambda p, n: io.BytesIO(b"abc"))
    assert v.rows == 2 and list(v.files()) == [("dt=2026-01-01", StagedFile("a.parquet", 3, 2))]
    assert v.open("dt=2026-01-01", "a.parquet").read() == b"abc"
    with pytest.raises(UnsafeIdentifierError):
        StagedVersion({"../x=1": ()}, lambda p, n: io.BytesIO())
    with pytest.raises(UnsafeIdentifierError):
        StagedVersion({"dt=1": (StagedFile("../../etc/passwd", 1),)}, lambda p, n: io.BytesIO())


def test_prefetch_keeps_order_raises_worker_errors_and_stops_early():
    assert list(prefetch(iter(range(100)), depth=2)) == list(range(100))

    def boom():
        yield 1
        raise ValueError("in the worker")

    with pytest.raises(ValueError, match="in the worker"):
        list(prefetch(boom()))
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    it = prefetch(endless(), depth=2)
    assert next(it) == 0
    it.close()  # the worker stops instead of running forever
    assert len(produced) < 10


@pytest.mark.parametrize("native", [True, False], ids=["null_string", "pyarrow<22"])
def test_csv_nulls_are_written_the_same_with_or_without_pyarrows_null_string(monkeypatch, native):
    """MariaDB's LOAD DATA reads an unquoted NULL as null; pyarrow < 22 (the range reaches 16.1) cannot write
    one, so the empty fields are filled after rendering: the bytes must equal pyarrow's own null_string
    (a comma, quote or newline inside a string is no field boundary; an empty string stays a value)."""
    import datetime as dt
    import decimal

    from exactly_once.targets import csv_rows

    if native and not csv_rows.NATIVE_NULL_STRING:
        pytest.skip("this pyarrow has no WriteOptions.null_string")
    monkeypatch.setattr(csv_rows, "NATIVE_NULL_STRING", native)
    batch = pa.record_batch([
        pa.array([None, "", 'a,"b"\n,', ",", None]),
        pa.array([1, None, 3, None, None], pa.int64()),
        pa.array([None, 2.5, None, 1.0, None]),
        pa.array([dt.date(1952, 1, 1), None, None, dt.date(9999, 12, 31), None]),
        pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.00"), None, None]),
        pa.array(["\n", None, "", None, None], pa.large_string()),
    ], names=list("abcdef"))
    single = pa.record_batch([pa.array([None, None, "x", None])], names=["a"])
    got = b"".join(csv_rows.csv_chunks(iter([batch, single]), "NULL"))
    assert got == (b'NULL,1,NULL,1952-01-01,1.50,"\n"\n'
                   b'"",NULL,2.5,NULL,NULL,NULL\n'
                   b'"a,""b""\n,",3,NULL,NULL,-2.00,""\n'
                   b'",",NULL,1,9999-12-31,NULL,NULL\n'
                   b'NULL,NULL,NULL,NULL,NULL,NULL\n'
                   b'NULL\nNULL\n"x"\nNULL\n')
    # PostgreSQL's COPY reads an unquoted empty field as null: nothing to fill
    assert b"".join(csv_rows.csv_chunks(iter([single]))) == b'\n\n"x"\n\n'
