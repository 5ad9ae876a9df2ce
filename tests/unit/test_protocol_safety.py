"""Safety of everything that reaches a storage path or a log line: identifiers, interval tokens,
failpoint specs, credentials in URLs, and symlinks planted in a staging dir."""
from __future__ import annotations

import os

import pytest

from exactly_once import (ConfigError, FailpointError, Interval, State, TwoPhaseCommitSink, TxnRef,
                          UnsafeIdentifierError)
from exactly_once import failpoints as fp
from exactly_once.ids import check_partition, safe_join
from protocol_helpers import (assert_exact_version, commit_version, failpoints, leftovers, log_problems,
                              make_rows, open_sink, table_url, visible_rows, write_output,  # noqa: F401
                              write_parquet)

IV = Interval.daily("2026-01-01")
PART = "dt=2026-01-01"

BAD_NAMES = ["../x", "a/b", "%2e%2e", "", "/abs", "/etc/passwd", "ünï", "..", ".", ".hidden", "a..b",
             "-x", "a b", "a\x00b", "a\\b", "x" * 129, "名前", "e\u0301", None, 7]
BAD_PARTITIONS = ["../x", "dt=../x", "dt=a/../b", "dt=..", "%2e%2e", "dt=%2e%2e", "", "/dt=x", "dt=x/",
                  "dt=x//h=1", "=x", "dt=", "dt", "dt=ü", "dt=a b", "dt=a\x00", "d t=x", "dt=x/../../y",
                  "dt=\u0661\u0662", None]


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
@pytest.mark.parametrize("field", ["pipeline", "sink"])
def test_unsafe_pipeline_and_sink_names_are_refused(tmp_path, field, bad):
    kwargs = {"pipeline": "p", "sink": "t", field: bad}
    with pytest.raises(UnsafeIdentifierError):
        TwoPhaseCommitSink.at(str(tmp_path / "t"), **kwargs)
    with pytest.raises(UnsafeIdentifierError):
        TxnRef(kwargs["pipeline"], kwargs["sink"], IV, 1)
    assert not (tmp_path / "t").exists()  # nothing was created on the way


@pytest.mark.parametrize("bad", BAD_PARTITIONS, ids=repr)
def test_unsafe_partitions_are_refused(tmp_path, bad):
    with pytest.raises(UnsafeIdentifierError):
        check_partition(bad)
    with pytest.raises(UnsafeIdentifierError):
        open_sink(str(tmp_path / "t")).live_files(bad)


@pytest.mark.parametrize("bad_dir", ["dt=%2e%2e", "dt=ü", "dt=a b", "dt=", "x"], ids=repr)
def test_unsafe_staged_partition_dir_is_refused_at_pre_commit(table_url, bad_dir):
    sink = open_sink(table_url)
    txn = sink.begin(IV)
    write_parquet(sink, sink.storage.join(sink.data_dir(txn), bad_dir, "f.parquet"), make_rows("a", 2))
    with pytest.raises(UnsafeIdentifierError):
        sink.pre_commit(txn)
    assert sink.abort(txn) is State.ABORTED
    assert leftovers(sink) == [] and log_problems(sink, IV) == []


@pytest.mark.parametrize("part", ["..", "../x", "a/../../x", "/abs", "a\\b", "a\x00"], ids=repr)
def test_safe_join_never_escapes_the_root(part):
    with pytest.raises(UnsafeIdentifierError):
        safe_join("/data/table", part)
    assert safe_join("/data/table", "a/b=c") == "/data/table/a/b=c"


@pytest.mark.parametrize("token", [
    "", None, "x", "20260101T000000Z", "20260101T000000Z_", "20260101T000000Z_20260102T000000Z/..",
    "../20260101T000000Z_20260102T000000Z", " 20260101T000000Z_20260102T000000Z",
    "20260101T000000Z_20260102T000000Z\n", "20260102T000000Z_20260101T000000Z",  # reversed
    "20260101T000000Z_20260101T000000Z",  # empty
    "20261301T000000Z_20261302T000000Z",  # month 13
    "20260230T000000Z_20260301T000000Z",  # 30 February
    "20260101T250000Z_20260102T000000Z",  # hour 25
    "\uff12\uff10\uff12\uff16\uff10\uff11\uff10\uff11T000000Z_20260102T000000Z",  # full-width digits
    "20260101t000000z_20260102t000000z",
], ids=repr)
def test_interval_from_token_rejects_junk(token):
    with pytest.raises(UnsafeIdentifierError):
        Interval.from_token(token)
    with pytest.raises(UnsafeIdentifierError):
        TxnRef.from_dict({"pipeline": "p", "sink": "t", "interval": token, "epoch": 1})


def test_interval_token_round_trips():
    iv = Interval.daily("2026-02-28")
    assert iv.token == "20260228T000000Z_20260301T000000Z"
    assert Interval.from_token(iv.token) == iv
    txn = TxnRef("p", "t", iv, 3)
    assert TxnRef.from_dict(txn.to_dict()) == txn and txn.name == f"{iv.token}.e000003"


@pytest.mark.parametrize("spec", ["nope=crash", "begin.after", "begin.after=explode", "begin.after=crash:twice",
                                  "=crash", "begin.after=crash,commit.typo=error", "BEGIN.AFTER=crash",
                                  "begin.after=crash:once:once"])
def test_failpoint_spec_errors(spec):
    with pytest.raises(ConfigError):
        fp.parse(spec)
    with failpoints(spec), pytest.raises(ConfigError):
        fp.failpoint("begin.after")  # a typo never silently disables a fault test


def test_failpoint_spec_parses_and_error_action_raises(tmp_path):
    assert fp.parse(" begin.after=crash , abort.mid=error:once,") == {
        "begin.after": ("crash", False), "abort.mid": ("error", True)}
    assert fp.parse("") == {}
    sink = open_sink(str(tmp_path / "t"))
    with failpoints("begin.after=error"):
        fp.failpoint("commit.mid_publish")  # not named: no effect
        with pytest.raises(FailpointError):
            sink.begin(IV)
    assert sink.status(IV)[1].state is State.OPEN  # it failed after allocating: the next begin fences it
    txn = sink.begin(IV)
    assert txn.epoch == 2 and sink.status(IV)[1].state is State.ABORTED
    sink.abort(txn)
    assert leftovers(sink) == []


def test_failpoint_once_fires_only_the_first_time(tmp_path, monkeypatch):
    monkeypatch.setenv("EO_FAILPOINTS_STATE", str(tmp_path / "fp-state"))
    with failpoints("abort.mid=error:once"):
        with pytest.raises(FailpointError):
            fp.failpoint("abort.mid")
        fp.failpoint("abort.mid")
        fp.failpoint("abort.mid")


# ------------------------------------------------------------------------------------- credentials
@pytest.mark.parametrize("key,secret", [
    ("AKIAEXAMPLEKEY01", "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"),
    ("AKIAEXAMPLEKEY02", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),  # real AWS secrets contain '/'
    ("AKIAEXAMPLEKEY03", "/leadingSlashSecret"),
    ("", "onlyASecretValue99"),
])
@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_credentials_in_storage_url_are_refused_and_never_echoed(scheme, key, secret):
    url = f"{scheme}://{key}:{secret}@my-bucket/warehouse/t"
    with pytest.raises(ConfigError) as info:
        TwoPhaseCommitSink.at(url, pipeline="p", sink="t")
    message = str(info.value)
    pieces = [p for p in [key, secret, *secret.split("/"), *secret.split("+")] if len(p) >= 4]
    for piece in pieces:
        assert piece.lower() not in message.lower(), f"credential fragment {piece!r} leaked: {message}"


def test_credentials_in_unsupported_url_are_not_echoed():
    with pytest.raises(ConfigError) as info:
        TwoPhaseCommitSink.at("gs://KEYID1234:sup3rs3cret@b/t", pipeline="p", sink="t")
    assert "sup3rs3cret" not in str(info.value) and "KEYID1234" not in str(info.value)


# ---------------------------------------------------------------------------------------- symlinks
@pytest.fixture
def outside(tmp_path):
    """A directory outside the table with a precious file in it."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.parquet").write_bytes(b"do not delete")
    return d


def _plant(sink, txn, outside, where):
    """Plant a symlink to ``outside`` in the staging dir of ``txn``."""
    if where == "partition_dir":
        os.symlink(outside, os.path.join(sink.data_dir(txn), "dt=2026-01-02"))
    elif where == "file":
        os.symlink(outside / "precious.parquet", os.path.join(sink.data_dir(txn), PART, "link.parquet"))
    elif where == "state_dir":
        os.symlink(outside, os.path.join(sink.staging_dir(txn), "state", "more"))
    elif where == "data_dir":  # the whole data dir replaced by a link
        import shutil

        shutil.rmtree(sink.data_dir(txn))
        os.symlink(outside, sink.data_dir(txn))


WHERE = ["partition_dir", "file", "state_dir", "data_dir"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("pre_commit_first", [False, True])
def test_abort_never_follows_a_symlink_out_of_staging(tmp_path, outside, where, pre_commit_first):
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    prior = commit_version(sink, IV, {PART: [make_rows("old", 2)]})
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("new", 3)]})
    if pre_commit_first:
        sink.pre_commit(txn)
    _plant(sink, txn, outside, where)
    assert sink.abort(txn) is State.ABORTED
    assert (outside / "precious.parquet").read_bytes() == b"do not delete"
    assert not os.path.lexists(sink.staging_dir(txn))
    assert_exact_version(sink, PART, make_rows("old", 2), prior)
    assert leftovers(sink) == [] and log_problems(sink, IV) == []


@pytest.mark.parametrize("where", WHERE)
def test_pre_commit_refuses_staged_output_with_a_symlink(tmp_path, outside, where):
    sink = open_sink(str(tmp_path / "warehouse" / "t"))
    txn = sink.begin(IV)
    write_output(sink, txn, {PART: [make_rows("new", 3)]})
    _plant(sink, txn, outside, where)
    with pytest.raises(UnsafeIdentifierError, match="symlink"):
        sink.pre_commit(txn)
    assert sink.status(IV)[txn.epoch].state is State.OPEN
    sink.abort(txn)
    assert (outside / "precious.parquet").read_bytes() == b"do not delete"
    assert visible_rows(sink, PART) == [] and visible_rows(sink, "dt=2026-01-02") == []
    assert leftovers(sink) == []
