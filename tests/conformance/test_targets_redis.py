"""The Redis target against the real server on loopback: atomic values + marker, idempotent, fenced.

Every test works in its own namespace (a fresh key prefix) and deletes it afterwards.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from eo_testing import need
from target_helpers import REDIS_URL, gone, pv_rows, reachable, split, stage, txn

from exactly_once import Interval, UnsafeIdentifierError
from exactly_once.errors import OwnershipError, TargetSchemaError, TargetUnavailableError
from exactly_once.targets import RedisTarget
from exactly_once.targets import keyvalue as keyvalue_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAY = "2026-01-01"
IV = Interval.daily(DAY)
PART = f"dt={DAY}"


@pytest.fixture(params=["redis"])  # the id: `-k redis` (make mutants' redis row) selects these tests
def r():
    need(reachable(6379), "redis is not running on 127.0.0.1:6379")
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=0, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def ns(r):
    name = f"eo_t_{uuid.uuid4().hex[:10]}"
    yield name
    keys = list(r.scan_iter(f"{name}:*"))
    if keys:
        r.delete(*keys)


def target(ns, **kw) -> RedisTarget:
    return RedisTarget(ns, ("app_id",), url=REDIS_URL, **kw)


def live(r, ns) -> dict[str, dict]:
    """Every data key of the namespace with its decoded value (bookkeeping keys left out)."""
    keys = [k for k in r.scan_iter(f"{ns}:*") if ":_eo:" not in k]
    return {k: json.loads(r.get(k)) for k in sorted(keys)}


def expected(ns, rows, part=PART) -> dict[str, dict]:
    return {f"{ns}:{part}:{x['app_id']}": {"cumulative_pv": x["cumulative_pv"], "pv": x["pv"], "uv": x["uv"]}
            for x in rows}


def run_advice(refusal: BaseException, after: str, before: str) -> None:
    """Run, as a user pastes it into bash, the shell line a refusal gives between ``after`` and ``before``."""
    line = str(refusal).split(after, 1)[1].rsplit(before, 1)[0]
    subprocess.run(["bash", "-c", line], check=True, capture_output=True)


def test_publish_already_superseded_and_reprocess_drops_keys(r, ns, tmp_path):
    t = target(ns)
    v2 = pv_rows("a", 200)
    s2 = stage(tmp_path, {PART: split(v2, 2)})
    assert t.live_epoch(IV) is None
    assert t.publish(txn(epoch=2), s2) == {PART: "published"}
    assert live(r, ns) == expected(ns, v2) and t.live_epoch(IV) == 2
    assert t.publish(txn(epoch=2), s2) == {PART: "already"}  # the lost acknowledgement
    assert t.publish(txn(epoch=2), gone(s2)) == {PART: "already"}  # ... even after the staging was cleaned up
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("z", 5)]})) == {PART: "superseded"}
    assert live(r, ns) == expected(ns, v2)
    other = pv_rows("o", 3)
    t.publish(txn("2026-01-02", epoch=1), stage(tmp_path, {"dt=2026-01-02": [other]}))
    # the reprocess produces half of the keys with new values: the other half disappears with it
    v3 = [{**x, "pv": x["pv"] + 1} for x in v2[:100]]
    assert t.publish(txn(epoch=3), stage(tmp_path, {PART: [v3]})) == {PART: "published"}
    assert live(r, ns) == {**expected(ns, v3), **expected(ns, other, "dt=2026-01-02")}
    assert r.scard(t.keyset_key(IV)) == 100 and r.hget(t.marker_key(IV), "epoch") == "3"


def _other_publisher_after_the_watch(monkeypatch, other) -> list:
    """Run ``other()`` (a whole publish) the first time a publisher, having WATCHed and read the marker,
    is about to queue its MULTI; returns the list that receives its result."""
    import redis.client

    real = redis.client.Pipeline.multi
    fired: list = []
    started: list = []

    def multi(self):
        if not started:
            started.append(1)
            fired.append(other())
        return real(self)

    monkeypatch.setattr(redis.client.Pipeline, "multi", multi)
    return fired


@pytest.mark.parametrize("a_epoch,b_epoch,a_verdict", [(2, 3, "superseded"), (3, 2, "published")])
def test_two_publishers_race_after_the_watch(r, ns, tmp_path, monkeypatch, a_epoch, b_epoch, a_verdict):
    """A has WATCHed and read the marker; B publishes its whole version in between. A's EXEC must do
    nothing; A looks again: B newer -> superseded (the values stay B's); B older -> A publishes over it
    and B's keys go with B's version."""
    a_rows, b_rows = pv_rows("A", 50), pv_rows("B", 20, start=900)
    a, b = target(ns), target(ns)
    b_staged = stage(tmp_path, {PART: [b_rows]})
    fired = _other_publisher_after_the_watch(monkeypatch, lambda: b.publish(txn(epoch=b_epoch), b_staged))
    assert a.publish(txn(epoch=a_epoch), stage(tmp_path, {PART: [a_rows]})) == {PART: a_verdict}
    assert fired == [{PART: "published"}]
    winner = b_rows if a_verdict == "superseded" else a_rows
    assert live(r, ns) == expected(ns, winner) and a.live_epoch(IV) == max(a_epoch, b_epoch)


def _child(ns, staged, epoch, crash=None, failpoints=""):
    spec = {"target": "redis", "config": {"namespace": ns, "key_columns": ["app_id"], "url": REDIS_URL},
            "staged": staged.root, "txn": txn(epoch=epoch).to_dict(), "crash": crash}
    return subprocess.run([sys.executable, os.path.join(ROOT, "tests", "target_child.py"), json.dumps(spec)],
                          env={**os.environ, "EO_FAILPOINTS": failpoints}, capture_output=True, text=True, timeout=120)


def test_crash_after_exec_and_before_exec(r, ns, tmp_path):
    old = pv_rows("old", 4)
    target(ns).publish(txn(epoch=1), stage(tmp_path, {PART: [old]}))
    rows = pv_rows("c", 100)
    staged = stage(tmp_path, {PART: [rows]})
    proc = _child(ns, staged, 2, failpoints="commit.mid_publish=crash")  # queued, never sent
    assert proc.returncode == 137, proc.stderr
    assert live(r, ns) == expected(ns, old) and target(ns).live_epoch(IV) == 1
    proc = _child(ns, staged, 2, crash="after_target_commit")  # EXEC done, the caller never hears
    assert proc.returncode == 137, proc.stderr
    assert target(ns).live_epoch(IV) == 2
    assert target(ns).publish(txn(epoch=2), staged) == {PART: "already"}
    assert live(r, ns) == expected(ns, rows)


def test_bad_input_writes_nothing(r, ns, tmp_path):
    t = target(ns)
    with pytest.raises(TargetSchemaError, match="duplicate key"):
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 3), pv_rows("a", 1)]}))
    with pytest.raises(TargetSchemaError, match=r"no column\(s\) \['nope'\]"):
        RedisTarget(ns, ("nope",), url=REDIS_URL).publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 3)]}))
    assert list(r.scan_iter(f"{ns}:*")) == []
    for bad in ("a:b", "x y", "", "ns*", "a\nb"):
        with pytest.raises(UnsafeIdentifierError):
            RedisTarget(bad, ("app_id",), url=REDIS_URL)


def test_key_values_with_separators_cannot_collide(r, ns, tmp_path):
    rows = [{"app_id": "a:b", "x": "c", "v": 1}, {"app_id": "a", "x": "b:c", "v": 2},
            {"app_id": "%3A", "x": "", "v": 3}, {"app_id": "sp ace*?[", "x": "\n", "v": 4}]
    t = RedisTarget(ns, ("app_id", "x"), url=REDIS_URL)
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    got = live(r, ns)
    assert len(got) == 4 and sorted(v["v"] for v in got.values()) == [1, 2, 3, 4]
    assert got[t.data_key(PART, rows[0])] == {"v": 1}


def test_another_sink_may_not_take_over_a_namespace(r, ns, tmp_path):
    target(ns).publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
    with pytest.raises(OwnershipError, match="belongs to one sink"):
        target(ns).publish(txn(epoch=2, sink="other"), stage(tmp_path, {PART: [pv_rows("b", 2)]}))


def test_unreachable_redis_and_credentials(ns, tmp_path, caplog):
    secret = "r3dis-pw-" + uuid.uuid4().hex[:6]
    t = RedisTarget(ns, ("app_id",), url=f"redis://:{secret}@127.0.0.1:1/0")
    with pytest.raises(TargetUnavailableError, match="publishing again is safe") as err:
        t.publish(txn(epoch=1), stage(tmp_path, {PART: [pv_rows("a", 2)]}))
    texts = [str(err.value), repr(t), repr(t.endpoint()), t.describe(), *(x.getMessage() for x in caplog.records)]
    assert not [x for x in texts if secret in x]
    assert keyvalue_module.key_part("a:b") == "a%3Ab"


def test_a_driver_error_quoting_the_password_is_redacted(ns, tmp_path, monkeypatch):
    """A driver error that quotes the password (forced: redis-py's never does today, a proxy's may) reaches
    the error with the password replaced by ``***``."""
    import redis

    secret = "r3dis-pw-" + uuid.uuid4().hex[:6]
    t = RedisTarget(ns, ("app_id",), url=f"redis://:{secret}@127.0.0.1:6379/0")

    def leaky(self, *args, **kwargs):
        raise redis.exceptions.ConnectionError(f"AUTH {secret} was refused by the proxy")

    staged = stage(tmp_path, {PART: [pv_rows("a", 2)]})
    with monkeypatch.context() as patched, pytest.raises(TargetUnavailableError) as err:
        patched.setattr(redis.connection.AbstractConnection, "connect", leaky)
        t.publish(txn(epoch=1), staged)
    assert secret not in str(err.value) and "AUTH *** was refused" in str(err.value), err.value


def test_a_url_without_a_port_or_database_number_publishes_into_database_0_on_6379(r, ns, tmp_path):
    rows = pv_rows("a", 3)
    t = RedisTarget(ns, ("app_id",), url="redis://127.0.0.1")  # and no port: 6379
    assert t.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    assert live(r, ns) == expected(ns, rows)  # `r` is a client of database 0


@pytest.mark.parametrize("step", ["check", "publish"])
def test_another_owners_claim_of_the_namespace_is_refused_at_check_and_at_publish(r, ns, tmp_path, step):
    """The namespace's owner key names another owner (it claimed the namespace after ours was bound, or an
    operator copied another deployment's keys): the check before the decision refuses it, and so does the
    publish on its own (a claim that appears between the two)."""
    from exactly_once.records.ownership import Owner

    mine = target(ns).claim(Owner("a" * 32, "pv_to_db", "app_pv", "file:///mine/_exactly_once/app_pv"))
    theirs = Owner("b" * 32, "other", "app_pv", "file:///theirs/_exactly_once/app_pv")
    r.set(f"{ns}:_eo:owner", json.dumps(theirs.to_dict()))
    staged = stage(tmp_path, {PART: [pv_rows("a", 2)]})
    with pytest.raises(OwnershipError):
        mine.check(txn(epoch=1), staged) if step == "check" else mine.publish(txn(epoch=1), staged)
    assert live(r, ns) == {}


def test_keys_another_writer_sets_between_the_check_and_a_first_publish_are_refused(r, ns, tmp_path):
    """No version of the interval yet (no marker, no key set): keys another writer sets in its partition
    after the check (before the decision) are refused by the publish itself - never left beside ours."""
    t, staged = target(ns), stage(tmp_path, {PART: [pv_rows("a", 2)]})
    t.check(txn(epoch=1), staged)
    r.set(f"{ns}:{PART}:old_loader_key", json.dumps({"pv": 1}))
    with pytest.raises(TargetSchemaError):
        t.publish(txn(epoch=1), staged)
    assert sorted(r.scan_iter(f"{ns}:{PART}:*")) == [f"{ns}:{PART}:old_loader_key"]  # nothing of ours written


def test_a_target_rebuilt_from_its_spec_keeps_its_value_columns(r, ns, tmp_path):
    """A binding records the target's spec; the target rebuilt from it (``eo recover``, a child process)
    publishes the same values - only the value columns it names."""
    bound = target(ns, value_columns=("pv",))
    again = RedisTarget.from_spec(json.loads(json.dumps(bound.binding()["spec"])), url=REDIS_URL)
    rows = pv_rows("a", 2)
    assert again.publish(txn(epoch=1), stage(tmp_path, {PART: [rows]})) == {PART: "published"}
    assert live(r, ns) == {f"{ns}:{PART}:{x['app_id']}": {"pv": x["pv"]} for x in rows}


def test_a_partition_value_that_extends_anothers_by_a_colon_is_a_partition_of_its_own(r, ns, tmp_path):
    """Partition values may hold ':' (a time), so the keys of partition ``h=05:30`` (another interval's) start
    with ``<ns>:h=05:`` - the prefix of partition ``h=05``'s keys. A key part never holds a raw ':', and the
    namespace records the partitions published into it: ``h=05``'s first publish after the other's, and its
    reprocess, see only their own keys (neither refused as 'keys exactly-once did not write' nor stuck on 'key
    set gone') and leave the other's keys alone. An old loader's keys under ``h=05:`` - of more or fewer parts,
    with blanks and quotes - are refused, and the refusal's advice deletes exactly those: never a key of ours.
    With the key set gone, its advice deletes this interval's keys and marker, nothing of the other's."""
    t, short, longer = target(ns), "h=05", "h=05:30"
    day2 = "2026-01-02"
    assert t.publish(txn(day2, epoch=1), stage(tmp_path, {longer: [pv_rows("b", 2)]})) == {longer: "published"}
    for epoch, rows in ((1, pv_rows("a", 3)), (2, pv_rows("a", 1))):  # the first publish, then a reprocess
        version = stage(tmp_path, {short: [rows]})
        t.check(txn(epoch=epoch), version)
        assert t.publish(txn(epoch=epoch), version) == {short: "published"}
    ours = {**expected(ns, pv_rows("a", 1), short), **expected(ns, pv_rows("b", 2), longer)}
    assert live(r, ns) == ours
    foreign = [f"{ns}:{short}:app:US", f"{ns}:{short}:", f"{ns}:{short}:daily {ns}:{short}:a00000",
               f"{ns}:{short}:O'Brien"]
    for key in [*foreign, f"{ns}:{short}"]:  # the last: no key part, so no key of the partition (left alone)
        r.set(key, json.dumps({"pv": 1}))
    with pytest.raises(TargetSchemaError, match="did not write") as refused:
        t.check(txn(epoch=3), stage(tmp_path, {short: [pv_rows("a", 1)]}))
    assert "4 key(s)" in str(refused.value), refused.value
    run_advice(refused.value, "not needed (", "), or publish")
    assert not any(r.exists(k) for k in foreign)  # the loader's keys gone, and only they
    assert live(r, ns) == {**ours, f"{ns}:{short}": {"pv": 1}}
    r.delete(f"{ns}:{short}", t.keyset_key(IV))
    with pytest.raises(TargetSchemaError, match="is gone") as gone:
        t.check(txn(epoch=3), stage(tmp_path, {short: [pv_rows("a", 1)]}))
    run_advice(gone.value, "and its marker (", "; likewise")
    assert live(r, ns) == expected(ns, pv_rows("b", 2), longer) and not r.exists(t.marker_key(IV))
    assert t.publish(txn(epoch=3), stage(tmp_path, {short: [pv_rows("c", 1)]})) == {short: "published"}


@pytest.mark.parametrize("kind", ["redis"])
def test_the_advice_names_the_server_and_user_and_never_the_password(kind):
    """A refusal's redis-cli lines connect where the target does - host, port, database, user, TLS - and ask
    for the password to be exported first (REDISCLI_AUTH) instead of showing it."""
    t = RedisTarget("ns", ("app_id",), url="rediss://loader:s3cr%3At@cache.internal:6380/2")
    line = t.advice(t.unlink_command("h=05:30"))
    assert line.startswith("export REDISCLI_AUTH=<password>; redis-cli -h cache.internal -p 6380 -n 2 --user loader "
                           "--tls --scan --pattern 'ns:h=05:30:*' | awk -F: 'NF == 4' | xargs -r -d '\\n' redis-cli"), line
    assert "s3cr" not in line and "<password>" not in RedisTarget("ns", ("app_id",), url=REDIS_URL).advice("x")


def test_the_partitions_another_interval_publishes_meanwhile_or_before_the_set_existed_are_its_own(
        r, ns, tmp_path, monkeypatch):
    """Which partition a key under ``<ns>:h=05:`` belongs to is read after the SCAN that found it: a first
    publish of ``h=05:30`` (another interval) landing while a check of ``h=05`` scans writes its keys and its
    partition in one EXEC, so its keys are never taken for foreign ones (whose advice would delete them). A
    namespace without the partitions set (published before it existed, or the set deleted) tells them from the
    interval key sets, and its next publish saves the set. An old loader's key of another shape in a partition
    never published is refused by name before the first publish - not as a 'key set gone' it never had."""
    import redis as redis_lib

    t, short, longer = target(ns), "h=05", "h=05:30"
    assert t.publish(txn(epoch=1), stage(tmp_path, {short: [pv_rows("a", 2)]})) == {short: "published"}
    real_scan, fired = redis_lib.Redis.scan_iter, []

    def scan_iter(self, *args, **kw):  # the other interval's first publish lands inside our SCAN
        it = real_scan(self, *args, **kw)
        if not fired:
            fired.append("inside")
            fired.append(target(ns).publish(txn("2026-01-02", epoch=1), stage(tmp_path, {longer: [pv_rows("b", 3)]})))
        return it

    monkeypatch.setattr(redis_lib.Redis, "scan_iter", scan_iter)
    version = stage(tmp_path, {short: [pv_rows("a", 1)]})
    t.check(txn(epoch=2), version)
    monkeypatch.undo()
    assert fired == ["inside", {longer: "published"}]
    assert t.publish(txn(epoch=2), version) == {short: "published"}
    assert live(r, ns) == {**expected(ns, pv_rows("a", 1), short), **expected(ns, pv_rows("b", 3), longer)}
    r.delete(t.partitions_key())  # as published before the set existed
    t.check(txn(epoch=3), stage(tmp_path, {short: [pv_rows("a", 2)]}))
    assert t.publish(txn(epoch=3), stage(tmp_path, {short: [pv_rows("a", 2)]})) == {short: "published"}
    assert r.smembers(t.partitions_key()) == {short, longer}  # saved by that publish
    legacy = f"{ns}:h=07:legacy:app1"
    r.set(legacy, "1")
    with pytest.raises(TargetSchemaError, match="did not write") as refused:
        t.check(txn("2026-01-03", epoch=1), stage(tmp_path, {"h=07": [pv_rows("c", 1)]}))
    assert legacy in str(refused.value) and "is gone" not in str(refused.value)
    run_advice(refused.value, "not needed (", "), or publish")
    assert not r.exists(legacy)
    assert t.publish(txn("2026-01-03", epoch=1), stage(tmp_path, {"h=07": [pv_rows("c", 1)]})) == {"h=07": "published"}


def test_the_check_refuses_what_the_publish_would_refuse_after_the_decision(r, ns, tmp_path):
    """The check sees what the publish will: a key set gone while the marker says its version has keys is
    refused whatever partitions the new version writes (the publish refuses it, too late); a foreign key in a
    partition the live version has and the new one drops is refused (the publish empties the partition and
    would leave it); and a key that is not UTF-8 elsewhere in the namespace blocks nobody."""
    t = target(ns)
    assert t.publish(txn(epoch=1), stage(tmp_path, {"p=1": [pv_rows("a", 2)], "p=2": [pv_rows("b", 1)]})) == {
        "p=1": "published", "p=2": "published"}
    r.set(f"{ns}:p=2:legacy", "1")
    with pytest.raises(TargetSchemaError, match=f"did not write.*{ns}:p=2:legacy"):
        t.check(txn(epoch=2), stage(tmp_path, {"p=1": [pv_rows("a", 1)]}))  # p=2 dropped: emptied by the publish
    r.delete(f"{ns}:p=2:legacy")
    redis_bytes = __import__("redis").Redis(host="127.0.0.1", port=6379)
    redis_bytes.set(f"{ns}:p=9:".encode() + b"\xe9t\xe9", b"1")  # another writer's latin-1 key
    t.check(txn(epoch=2), stage(tmp_path, {"p=1": [pv_rows("a", 1)]}))
    r.delete(t.keyset_key(IV))
    with pytest.raises(TargetSchemaError, match="is gone"):
        t.check(txn(epoch=2), stage(tmp_path, {"p=3": [pv_rows("c", 1)]}))
    redis_bytes.delete(f"{ns}:p=9:".encode() + b"\xe9t\xe9")
    redis_bytes.close()


@pytest.mark.parametrize("kind", ["redis"])
def test_an_owner_record_keeps_no_password_even_one_holding_an_at_sign(kind):
    """What an owner record keeps of a target URL: the user, host, port and database - never the password, also
    one written with a raw '@' (the netloc's last '@' ends the credentials)."""
    from exactly_once.targets.endpoint import without_password

    assert without_password("redis://loader:p@ss@cache:6380/2") == "redis://loader@cache:6380/2"
    assert without_password("redis://:p@ss@cache/0") == "redis://cache/0"
