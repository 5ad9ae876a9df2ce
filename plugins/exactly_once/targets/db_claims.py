"""Ownership at a database target: the claim row of a target table, and the owner of each marker.

The commit table holds, beside the interval markers, one *claim* row per target table (``interval_token``
``_owner``, which no interval token can be) naming the owner that publishes into it: ``pipeline``,
``sink``, ``owner`` (the owner id of the sink's owner record) and ``owner_home`` (where its log lives).
It is inserted at the sink's first begin - before anything is decided - and never changes, so a second
pipeline (or the same names with another log) is refused before it decides, and a publish refuses a
marker of another owner instead of taking it for "already published". Commit tables created before the
owner columns existed get them added (``ALTER TABLE``, once, in a transaction of its own).

That claim is keyed by the configured spelling and lives in the (configurable) commit table, so it alone
cannot see a second owner that spells the table otherwise (``t`` / ``public.t``) or uses another commit
table. Hence the *table claim*: one row per table in the fixed table ``_eo_claims`` of the table's own
schema (database), keyed by the table's identity as the database resolves it (:meth:`Dialect.identity`),
whatever the commit table. Both claims are made at bind and checked in every publish.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import ConfigError, OwnershipError, TargetSchemaError, TargetUnavailableError
from ..ids import Interval, TxnRef
from ..records.ownership import Owner, refuse_other_owner
from .base import StagedVersion, partition_values
from .sql_dialects import Dialect, Resolved, TableInfo

CLAIM = "_owner"
CLAIMS_TABLE = "_eo_claims"
RESERVED = "(epoch > 0 OR reserved IS NOT NULL)"  # a marker row that holds its partitions and range


BINDING_HINTS = {  # what to do when a binding's spec key differs (records.ownership.refuse_spec_change)
    "resolved": "The names resolve elsewhere now: did the search_path change? Restore the search_path the sink "
                "was bound with (ALTER ROLE/DATABASE ... SET search_path)",
    "database": "That is another database than the one the sink was bound to, though it holds this sink's claim: a "
                "copy (CREATE DATABASE ... TEMPLATE, a restored backup or dump, a clone of the server), whose rows "
                "and markers are not what the log published. Point the connection back at the bound database",
}


def whereabouts(target: Any, conn: Any) -> dict[str, str]:
    """What a binding records of where a database target publishes: ``resolved`` (the names as the database
    resolves them, :meth:`DatabaseTarget.resolved`) and ``database``, the database's own identity - the same
    under any host name and on a physical replica promoted by a failover, another in a copy of it
    (PostgreSQL: the cluster's system identifier, the database's oid and name; MySQL: ``@@server_uuid`` and
    the schema; MariaDB, which has no server identity: ``-`` and the schema)."""
    cur = conn.cursor()
    found = {"resolved": target.resolved(cur)}
    if target.dialect.name == "postgresql":
        cur.execute("SELECT (SELECT system_identifier FROM pg_control_system())::text, oid::text, datname "
                    "FROM pg_database WHERE datname = current_database()")
        found["database"] = "/".join(cur.fetchone())
        return found
    cur.execute("SHOW VARIABLES LIKE 'server_uuid'")  # no row on MariaDB
    server = (cur.fetchone() or (None, "-"))[1]
    cur.execute("SELECT DATABASE()")
    found["database"] = f"{server}/{cur.fetchone()[0]}"
    return found


@dataclass(frozen=True)
class Marker:
    """The commit table's row for (target table, interval): the live epoch (0: none yet) and its owner."""

    epoch: int
    pipeline: str | None
    sink: str | None
    partitions: tuple[str, ...]
    owner: str | None = None  # the owner id (None: written before owner ids)


def marker_row(epoch: Any, pipeline: Any, sink: Any, parts: Any, owner: Any) -> Marker:
    """A marker row's columns as a :class:`Marker`."""
    return Marker(int(epoch), pipeline, sink, tuple(json.loads(parts) if parts else ()), owner)


def ensure_marker_columns(d: Dialect, conn: Any, cur: Any, commit_table: str) -> None:
    """Add the columns a commit table created before them lacks - the owner's (owner ids) and ``reserved``
    (:func:`reserve`) -, in their own transaction (a concurrent adder may win)."""
    info = d.table_info(cur, commit_table)
    missing = [f"ADD COLUMN {c} {t}" for c, t in (("owner", "varchar(64)"), ("owner_home", d.text_type),
                                                  ("reserved", d.text_type))
               if info is not None and not info.column(c, d.case_insensitive_columns)]
    if not missing:
        return
    try:
        cur.execute(f"ALTER TABLE {d.table(commit_table)} " + ", ".join(missing))
        conn.commit()
    except Exception as exc:  # lost the race: duplicate column
        if d.classify(exc) != "schema":
            raise
        conn.rollback()
    conn.commit()


def reserve(d: Dialect, cur: Any, commit_table: str, table: str, iv: Interval, epoch: int, new: list[str]) -> None:
    """Record in the interval's marker row (locked by the caller, at epoch 0 if it never published) what its
    check found new to the table - ``new`` partitions, and (by the row's range) the interval itself - as
    reserved by ``epoch``; unless a newer epoch of the interval reserved already. Another interval's check and
    publish then count it as taken (:func:`refuse_same_partitions`, :func:`refuse_overlap`), so a commit
    decided after this check is never refused at its publish for what another interval brought meanwhile. The
    publish clears it; the interval's next check replaces it."""
    ct = d.table(commit_table)
    cur.execute(f"SELECT reserved FROM {ct} WHERE target = %s AND interval_token = %s", (table, iv.token))
    row = cur.fetchone()
    if row and row[0] and json.loads(row[0]).get("epoch", 0) > epoch:
        return
    cur.execute(f"UPDATE {ct} SET reserved = %s WHERE target = %s AND interval_token = %s",
                (json.dumps({"epoch": epoch, "partitions": sorted(new)}), table, iv.token))


def _taken(table: str, commit_table: str, token: str, epoch: int, published: str | None,
           reserved: str | None) -> list[tuple[str, str]]:
    """(who holds it, partition) of a marker row's partitions: the published ones by its interval, those its
    check reserved by its interval with how that came about."""
    held = [(token, p) for p in (json.loads(published) if epoch > 0 and published else ())]
    if reserved:
        who = f"{token} ({unpublished(table, commit_table, token)})"
        held += [(who, p) for p in json.loads(reserved).get("partitions", ())]
    return held


def lost_partitions(staged: StagedVersion, txn: TxnRef) -> set[str]:
    """Where the interval's marker row is gone (deleted by hand): the partitions ``staged`` drops that the
    interval's live version holds by the log - those with rows in the newest COMMITTED epoch before ``txn``
    (what its marker named). An earlier epoch's partition its live version had dropped already may be another
    interval's by now: never one of these."""
    for epoch in range(txn.epoch - 1, 0, -1) if staged.dropped and staged.committed_files else ():
        held = {p: staged.committed_files(epoch, p) for p in sorted(staged.dropped)}  # type: ignore[misc]
        if any(files is not None for files in held.values()):  # COMMITTED (its manifest kept)
            return {p for p, files in held.items() if files}
    return set()


def unpublished(table: str, commit_table: str, token: str) -> str:
    """How a reservation came about, and the way out that holds whether or not its commit was decided."""
    return ("reserved by its check, not published yet: if `eo status` shows that attempt COMMITTED, let it "
            "publish first - `eo recover`; if it was aborted, that interval's next run replaces the reservation, "
            f"or clear it: UPDATE {commit_table} SET reserved = NULL WHERE target = '{table}' AND "
            f"interval_token = '{token}'")


def _insert_ignore(d: Dialect) -> str:
    return ("ON CONFLICT (target, interval_token) DO NOTHING" if d.name == "postgresql"
            else "ON DUPLICATE KEY UPDATE epoch = epoch")


def claim(d: Dialect, cur: Any, commit_table: str, table: str, owner: Owner) -> None:
    """Insert ``table``'s claim row for ``owner`` unless it has one, inside the caller's transaction;
    OwnershipError if another owner holds it, or (first claim: the caller rolls it back) if markers of
    another owner exist (written before claims existed)."""
    ct = d.table(commit_table)
    cur.execute(f"INSERT INTO {ct} (target, interval_token, epoch, pipeline, sink, owner, owner_home) "
                f"VALUES (%s, %s, 0, %s, %s, %s, %s) {_insert_ignore(d)}",
                (table, CLAIM, owner.pipeline, owner.sink, owner.id, owner.home))
    created = cur.rowcount == 1
    cur.execute(f"SELECT pipeline, sink, owner, owner_home FROM {ct} WHERE target = %s AND interval_token = %s",
                (table, CLAIM))
    pipeline, sink, owner_id, home = cur.fetchone()
    where = f"the database table {table} (claim in {commit_table})"
    refuse_other_owner(where, Owner(owner_id or "?", pipeline, sink, home or "?"), owner)
    if not created:
        return
    cur.execute(f"SELECT interval_token, pipeline, sink, owner FROM {ct} WHERE target = %s AND interval_token <> %s "
                "AND epoch > 0", (table, CLAIM))
    for token, m_pipeline, m_sink, m_owner in cur.fetchall():
        if not same_owner(owner, m_owner, m_pipeline, m_sink):
            raise OwnershipError(f"{where}: interval {token} was published by pipeline {m_pipeline!r} (sink "
                                 f"{m_sink!r}{f', owner id {m_owner}' if m_owner else ''}), not by "
                                 f"{owner.describe()}: give each pipeline its own table; nothing was decided")


def check(d: Dialect, cur: Any, commit_table: str, table: str, owner: Owner) -> None:
    """Inside a publish: OwnershipError unless ``table``'s claim row names ``owner`` (read without a lock:
    a claim never changes; made now if the commit table lost it)."""
    cur.execute(f"SELECT pipeline, sink, owner, owner_home FROM {d.table(commit_table)} WHERE target = %s AND "
                "interval_token = %s", (table, CLAIM))
    row = cur.fetchone()
    if row is None:
        claim(d, cur, commit_table, table, owner)
        return
    pipeline, sink, owner_id, home = row
    refuse_other_owner(f"the database table {table} (claim in {commit_table})",
                       Owner(owner_id or "?", pipeline, sink, home or "?"), owner)


def same_owner(owner: Owner | None, m_owner: str | None, m_pipeline: str | None, m_sink: str | None,
               pipeline: str | None = None, sink: str | None = None) -> bool:
    """Is a marker (``m_*``) ours? By owner id where both are known; else (a marker written before owner
    ids, or a target used without a sink) by pipeline and sink names."""
    if owner is not None and m_owner:
        return m_owner == owner.id
    names = (owner.pipeline, owner.sink) if owner is not None else (pipeline, sink)
    return (m_pipeline, m_sink) == names


def holder(d: Dialect, conn: Any, target: Any) -> str | None:
    """The owner id of ``target.table``'s claim row in ``target.commit_table`` (None: no commit table, no
    claim, or one without an id)."""
    cur = conn.cursor()
    if d.table_info(cur, target.commit_table) is None:
        return None
    cur.execute(f"SELECT owner FROM {d.table(target.commit_table)} WHERE target = %s AND interval_token = %s",
                (target.table, CLAIM))
    row = cur.fetchone()
    return row[0] if row else None


def claims_table(d: Dialect, cur: Any, table: str) -> tuple[str, str]:
    """(``schema._eo_claims``, ``schema.table``): where ``table``'s table claim lives, and its key."""
    schema, name = d.identity(cur, table)
    return Resolved(schema, CLAIMS_TABLE), f"{schema}.{name}"


def claims_table_ddl(d: Dialect, claims: str) -> str:
    return (f"CREATE TABLE IF NOT EXISTS {d.table(claims)} (target {d.name_type} NOT NULL PRIMARY KEY, "
            f"pipeline varchar(128), sink varchar(128), owner varchar(64), owner_home {d.text_type}, "
            f"commit_table varchar(255)){d.table_options}")


def claim_table(d: Dialect, cur: Any, claims: str, key: str, commit_table: str, owner: Owner) -> None:
    """Insert the table claim of ``key`` for ``owner`` unless it exists, in the caller's transaction;
    OwnershipError if another owner holds it (another spelling of the name, or another commit table)."""
    ignore = "ON CONFLICT (target) DO NOTHING" if d.name == "postgresql" else "ON DUPLICATE KEY UPDATE target = target"
    cur.execute(f"INSERT INTO {d.table(claims)} (target, pipeline, sink, owner, owner_home, commit_table) "
                f"VALUES (%s, %s, %s, %s, %s, %s) {ignore}",
                (key, owner.pipeline, owner.sink, owner.id, owner.home, commit_table))
    cur.execute(f"SELECT pipeline, sink, owner, owner_home, commit_table FROM {d.table(claims)} WHERE target = %s",
                (key,))
    pipeline, sink, owner_id, home, their_ct = cur.fetchone()
    refuse_other_owner(f"the database table {key} (claimed in {claims}, markers in {their_ct})",
                       Owner(owner_id or "?", pipeline, sink, home or "?"), owner)


def refuse_overlap(d: Dialect, cur: Any, commit_table: str, table: str, name: str, iv: Interval,
                   bounds: tuple[Any, Any], column: str, lock: bool) -> None:
    """replace by ``column``: TargetSchemaError if another interval published into ``table`` (a marker of
    epoch > 0), or reserved it at its check (:func:`reserve`), overlaps ``iv`` (an hour, then the day holding
    it): deleting ``iv``'s range would wipe its rows while its marker says published. Checked at an interval's
    check and first publish, so two overlapping
    intervals never both hold markers; ``lock``: under the table's lock (:func:`lock_table`), so two first
    publishes of overlapping intervals run one after the other (the second sees the first's marker) - also
    where no pipeline claimed the table (there was no claim row to lock)."""
    ct = d.table(commit_table)
    if lock:
        lock_table(d, cur, table, name)
    cur.execute(f"SELECT interval_token, epoch FROM {ct} WHERE target = %s AND interval_token <> %s AND "
                f"interval_token <> %s AND {RESERVED} AND interval_start < %s AND interval_end > %s",
                (table, iv.token, CLAIM, bounds[1], bounds[0]))
    clash = sorted(f"{token}" + (f" ({unpublished(table, commit_table, token)})" if not epoch else "")
                   for token, epoch in cur.fetchall())
    if clash:
        raise TargetSchemaError(
            f"{name}: interval {iv.token} overlaps interval(s) {clash[:3]} of {table}; replacing "
            f"[{iv.start.isoformat()}, {iv.end.isoformat()}) by {column} would delete their rows. Publish one "
            f"interval grid per table (e.g. always daily), or delete the published ones' rows and their markers "
            f"in {commit_table} first")


# one lock per table for publishes that bring an interval partitions new to it (held to the transaction's end;
# MariaDB's GET_LOCK to the session's, which ends with the attempt's connection)
TABLE_LOCK = {"postgresql": "SELECT 1, pg_advisory_xact_lock(hashtext(%s))", "mysql": "SELECT GET_LOCK(%s, 600)"}
PROBE = {"postgresql": "CREATE TEMPORARY TABLE {name} ON COMMIT DROP AS ", "mysql": "CREATE TEMPORARY TABLE {name} AS "}


def lock_table(d: Dialect, cur: Any, table: str, name: str) -> None:
    """Take ``table``'s lock for a publish that brings it what is new (an interval's first marker, partitions
    new to it): PostgreSQL's advisory lock, to the transaction's end; MariaDB's ``GET_LOCK``, to the session's
    (the attempt's connection). Named by where the table resolves, so two spellings of one table share it."""
    key = "eo-parts-" + hashlib.sha1(".".join(d.identity(cur, table)).encode()).hexdigest()[:40]
    cur.execute(TABLE_LOCK[d.name], (key,))
    if cur.fetchone()[0] != 1:
        raise TargetUnavailableError(f"{name}: waited 10 minutes for {table}'s lock; publish again")


def refuse_same_partitions(d: Dialect, cur: Any, commit_table: str, table: str, name: str, iv: Interval,
                           info: TableInfo, new: list[str]) -> None:
    """replace by partition columns, for the partitions ``new`` to the interval (not in its marker):
    TargetSchemaError if one of them is, for the database, a partition another interval's marker names
    (:func:`same_partitions`)."""
    same = next(same_partitions(d, cur, commit_table, table, name, iv, info, new), None)
    if same is not None:
        part, token, other = same
        raise TargetSchemaError(
            f"{name}: partition {part!r} is, for the database, partition {other!r} that interval {token} "
            f"holds in {table} (its column values are equal: hour=3 and hour=03 in an int column, EU "
            "and eu under a case-insensitive collation); replacing it would delete that interval's rows. "
            "One of the two jobs writes a partition outside its own interval: fix it (each interval's "
            "partitions with its own values, in one spelling) and run that interval again")


def same_partitions(d: Dialect, cur: Any, commit_table: str, table: str, name: str, iv: Interval,
                    info: TableInfo, new: list[str], reserved: bool = True) -> Iterator[tuple[str, str, str]]:
    """(ours, the other interval, its partition) for each partition of ``new`` that is, for the database, a
    partition another interval's marker names - its values compared as values of the table's columns (their
    types and collations), not as text: ``hour=3`` is ``hour=03`` in an int column, ``EU`` is ``eu`` under a
    case-insensitive collation, and ``hour=3/dt=..`` is ``dt=../hour=3``; a key one of the two lacks does not
    tell them apart. Replacing it would delete the other interval's rows while its marker says published (the
    text claims see two partitions). Empty partitions count: a marker claims its partitions whether or not
    they hold rows. Under a lock per table, so two first publishes of one partition in two spellings run one
    after the other and the second sees the first's marker; the interval's own partitions were checked when
    they were new. ``reserved=False``: only what the markers name as published (a reservation holds no rows)."""
    if not new or d.table_info(cur, commit_table) is None:  # a check before the first publish: no markers yet
        return
    lock_table(d, cur, table, name)

    def columns(part: str) -> dict[str, str] | None:  # {table column: value}; None: a key is no column
        values = partition_values(part)
        cols = {info.column(k, d.case_insensitive_columns): v for k, v in values.items()}
        return None if None in cols else cols

    cur.execute(f"SELECT interval_token, epoch, partitions, reserved FROM {d.table(commit_table)} WHERE target = %s "
                f"AND interval_token <> %s AND interval_token <> %s AND {RESERVED}", (table, iv.token, CLAIM))
    theirs = [(who, part, cols) for token, epoch, published, held in cur.fetchall()
              for who, part in _taken(table, commit_table, token, epoch, published, held if reserved else None)
              if (cols := columns(part)) is not None]
    ours = [(part, cols) for part in new if (cols := columns(part)) is not None]
    if theirs and ours:
        yield from _same_partitions(_equal_values(d, cur, table, ours, theirs), ours, theirs)


def _same_partitions(equal: set[tuple[str, str, str]], ours: list, theirs: list) -> Iterator[tuple[str, str, str]]:
    """(our partition, their interval, their partition) of each of ours equal to one of theirs: every column both
    have holds equal values (``equal``: the database's pairs). Indexed - their partitions by their values over the
    columns shared with ours, looked up by the spellings equal to ours -, not every pair: a year of hourly
    partitions against a publish of a thousand is not 10^7 comparisons."""
    same: dict[tuple[str, str], list[str]] = {}  # (column, our spelling) -> their spellings the database finds equal
    for c, v, w in sorted(equal):
        same.setdefault((c, v), []).append(w)
    by_keys: dict[tuple[str, ...], list[tuple[str, str, dict[str, str]]]] = {}  # theirs by key set, in order
    for token, other, cols in theirs:
        by_keys.setdefault(tuple(sorted(cols)), []).append((token, other, cols))
    index: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[str, ...], tuple[str, str]]] = {}
    for part, mine in ours:
        for keys, group in by_keys.items():
            shared = tuple(sorted(mine.keys() & set(keys)))
            if (shared, keys) not in index:  # the first of the group by its values over `shared`
                index[shared, keys] = {}
                for token, other, cols in group:
                    index[shared, keys].setdefault(tuple(cols[c] for c in shared), (token, other))
            found = index[shared, keys]
            for values in itertools.product(*(same.get((c, mine[c]), ()) for c in shared)):
                if values in found:
                    yield part, *found[values]
                    break


def _equal_values(d: Dialect, cur: Any, table: str, ours: list, theirs: list) -> set[tuple[str, str, str]]:
    """(column, our spelling, their spelling) of every pair of spellings the database finds equal as values of
    ``table``'s column: each distinct spelling once, in two temporary tables typed like the table's columns
    (made nullable by an outer join), compared column by column in one join."""
    cols = sorted({c for _, mine in ours for c in mine} | {c for *_, cs in theirs for c in cs})
    spelled = {"eo_ours": sorted({(c, v) for _, mine in ours for c, v in mine.items()}),
               "eo_theirs": sorted({(c, v) for *_, cs in theirs for c, v in cs.items()})}
    at = d.temp_at(cur, table)
    for side, values in spelled.items():
        try:
            cur.execute(PROBE[d.name].format(name=at + side) + "SELECT 0 AS eo_col, 0 AS eo_id, " + ", ".join(
                f"t.{d.quote(c)}" for c in cols) + f" FROM (SELECT 1 AS one) x LEFT JOIN {d.table(table)} t ON 1 = 0 "
                "WHERE 1 = 0")
        except Exception as exc:
            if d.classify(exc) != "permission":
                raise
            if d.name == "mysql":
                grant = f"GRANT CREATE TEMPORARY TABLES ON {at}* TO <user>"
            else:
                cur.connection.rollback()  # (the failed statement ended the transaction)
                cur.execute("SELECT current_database()")
                grant = f"GRANT TEMPORARY ON DATABASE {d.quote(cur.fetchone()[0])} TO <user>"
            raise ConfigError(f"{table}: a publish that brings partitions new to its interval compares them with the "
                              "other intervals' partitions in two temporary tables, and the database user may not "
                              f"create them ({' '.join(str(exc).split())}). {grant}, then publish again") from None
        rows = [(cols.index(c), i, *(v if c == other else None for other in cols)) for i, (c, v) in enumerate(values)]
        for i in range(0, len(rows), 500):
            chunk = rows[i:i + 500]
            cur.execute(f"INSERT INTO {at}{side} VALUES " + ", ".join(
                "(" + ", ".join(["%s"] * (len(cols) + 2)) + ")" for _ in chunk), tuple(x for r in chunk for x in r))
    cur.execute(f"SELECT a.eo_id, b.eo_id FROM {at}eo_ours a JOIN {at}eo_theirs b ON a.eo_col = b.eo_col AND (" +
                " OR ".join(f"a.{d.quote(c)} = b.{d.quote(c)}" for c in cols) + ")")
    found = cur.fetchall()
    cur.execute(("DROP TABLE" if d.name == "postgresql" else "DROP TEMPORARY TABLE") + f" {at}eo_ours, {at}eo_theirs")
    return {(c, v, spelled["eo_theirs"][b][1]) for a, b in found for c, v in [spelled["eo_ours"][a]]}
