"""The key-value target (Redis): the seeds' idempotent sink, made exactly-once.

Every staged row becomes one Redis string: key ``<namespace>:<partition>:<key values>`` (for example
``app_pv:dt=2026-01-01:app_1``; key values percent-encoded except letters, digits and ``-_.~=``), value the
row's other columns as a JSON object. Per interval, two bookkeeping keys sit beside the data:

* ``<namespace>:_eo:marker:<interval>`` - a hash: the live ``epoch``, its ``pipeline``/``sink``, ``rows``;
* ``<namespace>:_eo:keys:<interval>``   - a set: the data keys of the live version;

and two for the namespace: ``<namespace>:_eo:owner``, the owner (pipeline, sink, owner id, log location)
that claimed it at its first begin (``SET NX``, before anything was decided), and
``<namespace>:_eo:partitions``, a set of every partition published into it (a key's partition is told by
:meth:`RedisTarget.partition_of`). A publish refuses a claim or a marker of another owner (OwnershipError)
instead of taking its epoch for "already published".

A publish WATCHes both, reads the marker (equal epoch: ``already``; newer: ``superseded``), then in ONE
``MULTI``/``EXEC`` deletes the keys of the previous version that the new one no longer has, writes every
new value, replaces the key set and sets the marker. Redis runs EXEC as one step, so a reader sees, per
key, either the old or the new version, never a half-published interval; if another publisher changed
the marker after our WATCH, EXEC does nothing and we start over (and then see its epoch). A crash before
EXEC leaves nothing behind (the server drops an unfinished MULTI when the connection closes).
Single Redis node (or a primary behind Sentinel); Redis Cluster is not supported (keys of one interval
span slots).
"""
from __future__ import annotations

import json
import logging
import shlex
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator
from urllib.parse import quote

import pyarrow.parquet as pq

from ..errors import ConfigError, OwnershipError, TargetSchemaError, TargetUnavailableError
from ..failpoints import failpoint
from ..ids import Interval, TxnRef
from ..records.ownership import Owner, refuse_other_owner
from .base import ALREADY, PUBLISHED, SUPERSEDED, PublishTarget, StagedVersion, check_identifier, outcome
from .endpoint import Endpoint, redact, resolve, same_database, where, without_password

logger = logging.getLogger(__name__)
CHUNK = 10_000  # keys per MSET / SADD / DEL inside the transaction
SHOWN_KEYS = 20  # the keys a refusal names (and its advice deletes)


def key_part(value: Any) -> str:
    """One key column's value as it appears in a Redis key (percent-encoded; ``:`` never appears raw)."""
    if value is None:
        raise TargetSchemaError("a key column is null; Redis keys need every key column")
    return quote(str(value), safe="-_.~=")


def _glob(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _chunks(items: list[Any], n: int = CHUNK) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


@dataclass(frozen=True)
class RedisTarget(PublishTarget):
    """Publish a sink's interval as one Redis string per row, atomically with the interval's marker.

    ``namespace`` prefixes every key (letters, digits, ``_``); ``key_columns`` name the row's key
    (unique within a partition); ``value_columns`` the JSON value (default: every other column).
    Exactly one of ``conn_id`` (an Airflow connection of type redis) or ``url`` (``redis://[:pw@]host:6379/0``).
    Keys a reprocess no longer produces are deleted in the same EXEC that writes the new version.
    """

    namespace: str
    key_columns: tuple[str, ...]
    conn_id: str | None = None
    url: str | None = field(default=None, repr=False)
    value_columns: tuple[str, ...] = ()
    max_conflicts: int = 20
    owner: Owner | None = field(default=None, repr=False, compare=False)  # set by claim()
    keeps_staged_copies = True  # keys are replaced in place: rollback republishes the kept staged files

    def __post_init__(self) -> None:
        check_identifier(self.namespace, "namespace")
        object.__setattr__(self, "key_columns", tuple(check_identifier(k, "key column") for k in self.key_columns))
        object.__setattr__(self, "value_columns", tuple(check_identifier(v, "value column") for v in self.value_columns))
        if not self.key_columns:
            raise ConfigError("RedisTarget needs key_columns")
        if bool(self.conn_id) == bool(self.url):
            raise ConfigError("give exactly one of conn_id (an Airflow connection) or url")

    def endpoint(self) -> Endpoint:
        return resolve(self.conn_id, self.url, ("redis",))

    def describe(self) -> str:
        return f"redis target {where(self.conn_id, self.url, ('redis',))} namespace {self.namespace}"

    # ------------------------------------------------------------------ ownership
    SPEC = ("namespace", "conn_id", "max_conflicts")

    def binding(self) -> dict[str, Any]:
        """``{kind: redis, location, spec}``; the spec's URL has no password (see :meth:`from_spec`)."""
        ep = self.endpoint()
        spec: dict[str, Any] = {k: getattr(self, k) for k in self.SPEC}
        spec.update(key_columns=list(self.key_columns), value_columns=list(self.value_columns))
        if self.url:
            spec["url"] = without_password(self.url)
        return {"kind": "redis", "spec": spec, "tunable": ["conn_id", "url", "max_conflicts"],
                "location": f"redis://{ep.host}:{ep.port}/{ep.database or 0} namespace {self.namespace}"}

    @classmethod
    def from_spec(cls, spec: dict[str, Any], url: str | None = None) -> "RedisTarget":
        """The target a binding's ``spec`` describes; credentials as for :meth:`DatabaseTarget.from_spec`
        (the Airflow connection, or ``url`` pointing at the same server)."""
        kwargs = {k: v for k, v in spec.items() if k in cls.SPEC or k == "url"}
        kwargs.update(key_columns=tuple(spec.get("key_columns") or ()),
                      value_columns=tuple(spec.get("value_columns") or ()))
        if url and kwargs.get("url"):
            kwargs["url"] = same_database(kwargs["url"], url, ("redis",))
        return cls(**kwargs)

    def owner_key(self) -> str:
        return f"{self.namespace}:_eo:owner"

    def claim(self, owner: Owner) -> "RedisTarget":
        """Claim the namespace for ``owner`` (``SET NX``); OwnershipError if another owner holds it, or if
        markers of another owner are in it (written before claims existed)."""
        import redis

        ep = self.endpoint()
        try:
            client = self._client(ep)
            try:
                self._refuse_evicting(client, [])
                if not client.exists(self.owner_key()):
                    for key in client.scan_iter(match=f"{self.namespace}:_eo:marker:*", count=1000):
                        self._refuse_foreign(client.hgetall(key), owner, None)
                client.set(self.owner_key(), json.dumps(owner.to_dict()), nx=True)
                self._refuse_foreign_claim(client.get(self.owner_key()), owner)
            finally:
                client.close()
        except redis.RedisError as exc:
            raise TargetUnavailableError(f"claim {self.describe()}: {redact(exc, *ep.secrets())[:500]}; "
                                         "nothing was decided, retry") from None
        return replace(self, owner=owner)

    def claimed_by(self, owner_id: str) -> bool:
        """The namespace's owner key names ``owner_id`` (see :meth:`PublishTarget.claimed_by`)."""
        import redis

        ep = self.endpoint()
        try:
            client = self._client(ep)
            try:
                raw = client.get(self.owner_key())
            finally:
                client.close()
        except redis.RedisError as exc:
            raise TargetUnavailableError(f"read the claim of {self.describe()}: {redact(exc, *ep.secrets())[:500]}; "
                                         "nothing was decided, retry") from None
        return bool(raw) and json.loads(raw).get("owner_id") == owner_id

    def _refuse_foreign_claim(self, raw: Any, owner: Owner) -> None:
        if raw:
            holder = json.loads(raw)
            refuse_other_owner(f"the redis namespace {self.namespace}", Owner.of(holder, holder.get("home", "?")),
                               owner)

    def _refuse_foreign(self, marker: dict[bytes, bytes], owner: Owner | None, txn: TxnRef | None) -> None:
        """OwnershipError if ``marker`` (a marker hash) was set by another owner than ours."""
        if not marker or int(marker.get(b"epoch", 0)) <= 0:
            return
        got = {k: marker.get(k.encode(), b"").decode() or None for k in ("owner", "pipeline", "sink")}
        if owner is not None and got["owner"]:
            ours = got["owner"] == owner.id
        else:
            ours = (got["pipeline"], got["sink"]) == ((owner.pipeline, owner.sink) if owner else
                                                      (txn.pipeline, txn.sink) if txn else (None, None))
        if not ours:
            raise OwnershipError(f"namespace {self.namespace} is published by pipeline {got['pipeline']!r} (sink "
                                 f"{got['sink']!r}, owner id {got['owner'] or 'unknown'}), not "
                                 f"{owner.describe() if owner else f'{txn.pipeline}/{txn.sink}' if txn else '?'}: "
                                 "a namespace belongs to one sink; give each pipeline its own namespace")

    def marker_key(self, interval: Interval) -> str:
        return f"{self.namespace}:_eo:marker:{interval.token}"

    def keyset_key(self, interval: Interval) -> str:
        return f"{self.namespace}:_eo:keys:{interval.token}"

    def partitions_key(self) -> str:
        """The set of every partition published into the namespace (by any interval of its sink)."""
        return f"{self.namespace}:_eo:partitions"

    def data_key(self, partition: str, row: dict[str, Any]) -> str:
        """The Redis key of ``row`` of ``partition`` (what a reader GETs)."""
        return ":".join([self.namespace, partition, *(key_part(row.get(k)) for k in self.key_columns)])

    def partition_of(self, key: str) -> str | None:
        """The partition of data key ``key`` of this namespace, or None: what lies between the namespace and
        the key's last ``len(key_columns)`` parts. A key part never holds a raw ``:`` (:func:`key_part`) but a
        partition value may (a time), so a key of ``p=a:b`` starts with ``<namespace>:p=a:`` yet is not p=a's."""
        head, n = f"{self.namespace}:", len(self.key_columns)
        parts = key[len(head):].rsplit(":", n) if key.startswith(head) else []
        return parts[0] if len(parts) == n + 1 else None

    def cli(self) -> str:
        """``redis-cli`` with the target's server (a password as a placeholder to export first: never shown)."""
        ep = self.endpoint()
        return f"redis-cli -h {ep.host} -p {ep.port} -n {ep.database or 0}" + (
            f" --user {shlex.quote(ep.user)}" if ep.user else "") + (" --tls" if ep.tls else "")

    def advice(self, command: str) -> str:
        """``command`` (of :meth:`cli`) to paste, after exporting the password if the server has one."""
        return ("export REDISCLI_AUTH=<password>; " if self.endpoint().password else "") + command

    def unlink_command(self, partition: str) -> str:
        """A shell line that deletes this namespace's keys of ``partition``, and only those: the glob
        ``<namespace>:<partition>:*`` matches partition ``<partition>:x`` too, so awk keeps the keys of
        exactly this partition's number of ``:``-separated fields (one key per line to xargs)."""
        fields, cli = 2 + partition.count(":") + len(self.key_columns), self.cli()
        return (f"{cli} --scan --pattern {shlex.quote(f'{_glob(self.namespace)}:{_glob(partition)}:*')} | awk -F: "
                f"'NF == {fields}' | xargs -r -d '\\n' {cli} unlink")

    # ------------------------------------------------------------------ the contract
    def publish(self, txn: TxnRef, staged: StagedVersion) -> dict[str, str]:
        """Write ``staged`` as the live version of ``txn.interval`` in one MULTI/EXEC with its marker.

        Returns per partition ``published`` / ``already`` / ``superseded``. Raises TargetSchemaError
        (a missing key column, duplicate keys: nothing written), OwnershipError (the namespace or its
        marker belongs to another owner) or TargetUnavailableError (Redis unreachable or the publish kept losing the race;
        publishing again is safe).
        """
        import redis

        ep = self.endpoint()
        try:
            client = self._client(ep)
            try:
                verdict = self._publish(client, txn, staged)
            finally:
                client.close()
        except redis.RedisError as exc:
            raise TargetUnavailableError(f"publish {txn.name} into {self.describe()}: "
                                         f"{redact(exc, *ep.secrets())[:500]}; nothing or everything of it was "
                                         "applied (MULTI/EXEC); publishing again is safe") from None
        return outcome(staged.partitions, verdict)

    def check(self, txn: TxnRef, staged: StagedVersion) -> None:
        """Before the decision: every staged row must make a key (key and value columns present, no NULL
        key column, no duplicate key); TargetSchemaError otherwise. Redis stores any value, so nothing
        about the server can refuse a publish that passed this check. OwnershipError if the namespace's
        claim or the interval's marker belongs to another owner (the publish would refuse it)."""
        import redis

        ep = self.endpoint()
        try:
            client = self._client(ep)
            try:
                self._refuse_evicting(client, [self.owner_key(), self.marker_key(txn.interval),
                                               self.keyset_key(txn.interval), self.partitions_key()])
                if self.owner is not None:
                    self._refuse_foreign_claim(client.get(self.owner_key()), self.owner)
                marker = client.hgetall(self.marker_key(txn.interval))
                self._refuse_foreign(marker, self.owner, txn)
                self._refuse_unknown_keys(client, txn, staged, marker)
            finally:
                client.close()
        except redis.RedisError as exc:
            raise TargetUnavailableError(f"check {txn.name} against {self.describe()}: "
                                         f"{redact(exc, *ep.secrets())[:500]}; nothing was decided, retry") from None
        self._values(staged)

    def _refuse_evicting(self, client: Any, keys: list[str]) -> None:
        """ConfigError if the server may drop our bookkeeping keys by itself: a ``maxmemory-policy`` that
        evicts any key (``allkeys-*``), or a TTL on one of ``keys`` (a ``volatile-*`` policy evicts those,
        and they expire anyway). Without its marker and key set a publish cannot tell the live version."""
        policy = str(client.info("memory").get("maxmemory_policy", "noeviction"))
        if policy.startswith("allkeys"):
            raise ConfigError(f"{self.describe()}: the server's maxmemory-policy is {policy}: when full it evicts "
                              "any key, the markers and key sets of exactly-once included, and then could not tell "
                              "which version is live. Set `redis-cli config set maxmemory-policy noeviction` (and in "
                              "redis.conf), or a volatile-* policy, or publish to a server that is not a cache; "
                              "nothing was decided")
        expiring = [k for k in keys if client.ttl(k) >= 0]
        if expiring:
            raise ConfigError(f"{self.describe()}: key(s) {expiring} have a TTL (EXPIRE): exactly-once's bookkeeping "
                              "must not expire. Remove it (`redis-cli persist <key>`) and whatever sets it; nothing "
                              "was decided")

    def _gone(self, keyset: str, marker_epoch: int, partitions: Iterable[str]) -> str:
        """Why a publish cannot go on when the interval's key set is gone while it holds data."""
        unlink = [*map(self.unlink_command, sorted(partitions)), f"{self.cli()} unlink "
                  f"{shlex.quote(keyset.replace(':_eo:keys:', ':_eo:marker:'))}"]
        return (f"the key set {keyset!r} of this interval is gone (evicted or deleted; marker at epoch "
                f"{marker_epoch or 'gone too'}) while the namespace holds the interval's keys: exactly-once can no "
                "longer tell the live version's keys from others', and a new version could leave stale keys "
                f"beside it. Delete the interval's keys and its marker ({self.advice('; '.join(unlink))}; likewise "
                "for a partition only an earlier version wrote), then reprocess the interval (eo reprocess "
                "<table-url> --interval <start>)")

    def _published_partitions(self, client: Any) -> set[str]:
        """Every partition published into the namespace: its set (:meth:`partitions_key`) or, where there is
        none (a namespace published before the set existed, or its set deleted), the partitions of the keys in
        every interval's key set - O(keys published), which the next publish saves as the set."""
        found = {p.decode() for p in client.smembers(self.partitions_key())}
        if not found:
            for keyset in client.scan_iter(match=f"{_glob(self.namespace)}:_eo:keys:*", count=1000):
                found.update(self.partition_of(k.decode()) for k in client.sscan_iter(keyset, count=1000))
            found.discard(None)
        return found

    def _interval_keys(self, client: Any, staged: StagedVersion, also: Iterable[str] = ()) -> list[str]:
        """The namespace's keys in the partitions of ``staged`` (and ``also``): one SCAN per partition, matching
        its prefix on the server. A key under a partition's prefix is that partition's unless it is a key of
        another partition published here (:meth:`partition_of`, :meth:`_published_partitions`: ``h=05:30``'s
        keys start with ``h=05:``); one of an old loader with more or fewer key parts counts as the partition's,
        never as another's. The published partitions are read after the SCANs: a publish writes its keys and
        its partitions in one EXEC, so the partition of any key a SCAN saw is known by then. A key that is not
        UTF-8 is shown with its bytes escaped."""
        parts = set(staged.partitions) | set(also)
        under = sorted({raw.decode(errors="backslashreplace") for p in sorted(parts) for raw in client.scan_iter(
            match=f"{_glob(self.namespace)}:{_glob(p)}:*", count=1000)})
        if not under:
            return []
        others = self._published_partitions(client) - parts
        return [k for k in under if self.partition_of(k) not in others]

    def _refuse_unknown_keys(self, client: Any, txn: TxnRef, staged: StagedVersion, marker: dict[bytes, bytes]
                             ) -> None:
        """TargetSchemaError if the key set is gone (evicted or deleted) while the marker says the live version
        has keys - the publish refuses that too - or if a partition of ``staged`` or of the live version holds
        keys this interval's versions never wrote (an old loader's, a manual SET): a publish replaces only the
        keys it knows (the interval's key set), so they would stay beside every new version."""
        keyset = self.keyset_key(txn.interval)
        ours = {k.decode() for k in client.smembers(keyset)}
        if not ours and int(marker.get(b"rows", 0)):
            raise TargetSchemaError(self._gone(keyset, int(marker.get(b"epoch", 0)), staged.partitions)
                                    + "; nothing was decided")
        live = {self.partition_of(k) for k in ours} - {None}  # a partition the new version drops included
        unknown = [k for k in self._interval_keys(client, staged, live) if k not in ours]
        if unknown:
            raise TargetSchemaError(self._foreign(unknown) + "; nothing was decided")

    def _foreign(self, unknown: list[str]) -> str:
        """Why a publish cannot go on beside ``unknown`` keys in its partitions, and the line deleting them."""
        shown = unknown[:SHOWN_KEYS]
        return (f"the redis namespace {self.namespace} holds {len(unknown)} key(s) in this interval's partitions "
                f"that exactly-once did not write (e.g. {unknown[0]!r}: an old loader's?). A publish replaces only "
                "its own keys, so they would stay beside the new version. Delete them once you know they are not "
                f"needed ({self.advice(self.cli() + ' unlink ' + ' '.join(map(shlex.quote, shown)))}"
                + (f"; the next check names the other {len(unknown) - len(shown)}" if len(unknown) > len(shown) else "")
                + "), or publish into another namespace")

    def live_epoch(self, interval: Interval) -> int | None:
        """The marker's epoch of ``interval`` (None: none, or - once claimed - another owner's marker)."""
        marker = self._marker(interval)
        if self.owner is not None:
            try:
                self._refuse_foreign(marker, self.owner, None)
            except OwnershipError:
                return None  # another owner's marker: our version of the interval is not live
        return int(marker[b"epoch"]) if marker.get(b"epoch") else None

    def is_live(self, txn: TxnRef, partitions: list[str]) -> bool:
        """The marker is at ``txn``'s epoch and ours (by owner id once claimed, else by ``txn``'s names)."""
        marker = self._marker(txn.interval)
        try:
            self._refuse_foreign(marker, self.owner, txn)
        except OwnershipError:
            return False
        return int(marker.get(b"epoch", 0)) == txn.epoch

    def _marker(self, interval: Interval) -> dict[bytes, bytes]:
        import redis

        ep = self.endpoint()
        try:
            client = self._client(ep)
            try:
                return client.hgetall(self.marker_key(interval))
            finally:
                client.close()
        except redis.RedisError as exc:
            raise TargetUnavailableError(f"read the marker of {interval.token} from {self.describe()}: "
                                         f"{redact(exc, *ep.secrets())[:500]}") from None

    # ------------------------------------------------------------------ internals
    def _client(self, ep: Endpoint) -> Any:
        import redis

        opts = {k: float(v) for k, v in ep.options.items() if k.endswith("timeout")}
        opts.setdefault("socket_timeout", 30.0)
        opts.setdefault("socket_connect_timeout", 10.0)
        return redis.Redis(host=ep.host, port=ep.port, db=int(ep.database or 0), username=ep.user,
                           password=ep.password, ssl=ep.tls, **opts)

    def _publish(self, client: Any, txn: TxnRef, staged: StagedVersion) -> str:
        import redis

        values: dict[str, str] | None = None  # read only when the marker says we publish: a repeated
        # publish of a live version must not need the staged files (they may be cleaned up already)
        marker, keyset = self.marker_key(txn.interval), self.keyset_key(txn.interval)
        for _ in range(self.max_conflicts):
            with client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(marker, keyset, self.owner_key())
                    if self.owner is not None:
                        self._refuse_foreign_claim(pipe.get(self.owner_key()), self.owner)
                    live = pipe.hgetall(marker)
                    self._refuse_foreign(live, self.owner, txn)  # never "already" on another owner's epoch
                    epoch = int(live.get(b"epoch", 0))
                    if not epoch and staged.newest_committed and (newest := staged.newest_committed()) > txn.epoch:
                        logger.warning("%s: the marker of %s is gone, but epoch %d is committed: superseded (an "
                                       "older version is never published over it)", txn.name, txn.interval.token,
                                       newest)
                        return SUPERSEDED
                    if epoch >= txn.epoch:
                        verdict = ALREADY if epoch == txn.epoch else SUPERSEDED
                        logger.info("%s: %s (marker at epoch %d) in %s", txn.name, verdict, epoch, self.describe())
                        return verdict
                    keyless = not pipe.exists(keyset)
                    if keyless and int(live.get(b"rows", 0)):
                        raise TargetSchemaError(self._gone(keyset, epoch, staged.partitions))  # stale keys untold
                    if not epoch and keyless and (unknown := self._interval_keys(pipe, staged)):
                        raise TargetSchemaError(self._foreign(unknown))  # set between the check and the decision
                    fill = set(staged.partitions) | (set() if pipe.exists(self.partitions_key()) else
                                                     self._published_partitions(pipe))  # the set, made once
                    if values is None:
                        values = self._values(staged)
                    stale = sorted({k.decode() for k in pipe.smembers(keyset)} - values.keys())
                    pipe.multi()
                    for chunk in _chunks(stale):
                        pipe.delete(*chunk)
                    for chunk in _chunks(list(values.items())):
                        pipe.mset(dict(chunk))
                    pipe.delete(keyset)
                    for chunk in _chunks(sorted(values)):
                        pipe.sadd(keyset, *chunk)
                    if fill:
                        pipe.sadd(self.partitions_key(), *fill)
                    pipe.hset(marker, mapping={"epoch": txn.epoch, "pipeline": txn.pipeline, "sink": txn.sink,
                                               **({"owner": self.owner.id} if self.owner else {}),
                                               "rows": len(values),
                                               "committed_at": datetime.now(timezone.utc).isoformat()})
                    failpoint("commit.mid_publish")  # queued, not sent: a crash here writes nothing
                    pipe.execute()
                except redis.WatchError:
                    continue  # another publisher moved the marker after our WATCH: look again
            logger.info("%s: published %d keys (%d stale deleted) into %s", txn.name, len(values or ()),
                        len(stale), self.describe())
            return PUBLISHED
        raise TargetUnavailableError(f"publish {txn.name} into {self.describe()}: lost the race for the marker "
                                     f"{self.max_conflicts} times; publishing again is safe")

    def _values(self, staged: StagedVersion) -> dict[str, str]:
        """Every staged row as ``{redis key: JSON value}``; refuses duplicate keys and missing columns."""
        out: dict[str, str] = {}
        for part, f in staged.files():
            with staged.open(part, f.name) as fh:
                table = pq.read_table(fh)
            missing = [c for c in (*self.key_columns, *self.value_columns) if c not in table.column_names]
            if missing:
                raise TargetSchemaError(f"staged file {part}/{f.name} has no column(s) {missing} (it has "
                                        f"{table.column_names}); fix key_columns/value_columns or the job")
            cols = list(self.value_columns) or [c for c in table.column_names if c not in self.key_columns]
            for row in table.to_pylist():
                key = self.data_key(part, row)
                if key in out:
                    raise TargetSchemaError(f"duplicate key {key!r} in the staged rows: key_columns "
                                            f"{list(self.key_columns)} must be unique within a partition")
                out[key] = json.dumps({c: row[c] for c in cols}, sort_keys=True, separators=(",", ":"),
                                      default=str)
        return out
