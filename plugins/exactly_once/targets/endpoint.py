"""Where a target lives: an Airflow connection id or a URL, resolved to host, port, login and options.

Credentials are read here and nowhere else; :class:`Endpoint` never shows its password (not in its
repr, not in :meth:`Endpoint.describe`), and :func:`redact` scrubs it out of any text a driver hands
back (an error message) before it reaches a log or an exception.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ..errors import ConfigError

# URL scheme / Airflow conn_type -> dialect
SCHEMES = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql", "mariadb": "mysql",
           "redis": "redis", "rediss": "redis"}
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "redis": 6379}
# connection options a target passes on to its driver (anything else in a URL / extra is refused)
OPTIONS = {
    "postgresql": {"sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name"},
    "mysql": {"connect_timeout", "ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "charset"},
    "redis": {"socket_timeout", "socket_connect_timeout", "ssl_cert_reqs", "ssl_ca_certs"},
}


@dataclass(frozen=True)
class Endpoint:
    """A resolved connection: dialect, host, port, user, password (never shown), database, options."""

    dialect: str
    host: str
    port: int
    user: str | None
    password: str | None = field(repr=False)
    database: str | None
    options: Mapping[str, str] = field(default_factory=dict)
    tls: bool = False

    def describe(self) -> str:
        """``postgresql://user@host:port/db`` - without the password."""
        user = f"{self.user}@" if self.user else ""
        return f"{self.dialect}://{user}{self.host}:{self.port}/{self.database or ''}"

    def secrets(self) -> tuple[str, ...]:
        return (self.password,) if self.password else ()


def redact(text: object, *secrets: str) -> str:
    """``str(text)`` with every secret replaced by ``***``."""
    out = str(text)
    for s in secrets:
        if s:
            out = out.replace(s, "***")
    return out


def _options(dialect: str, raw: Mapping[str, Any], where: str) -> dict[str, str]:
    unknown = sorted(set(raw) - OPTIONS[dialect])
    if unknown:
        raise ConfigError(f"{where}: unsupported option(s) {unknown} for {dialect}; "
                          f"supported: {sorted(OPTIONS[dialect])}")
    return {k: str(v) for k, v in raw.items()}


def from_url(url: str, expect: tuple[str, ...]) -> Endpoint:
    """Parse ``postgresql://user:pw@host:5432/db?sslmode=require`` (or mysql://, mariadb://, redis://)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except (ValueError, TypeError) as exc:  # the message of a bad port can quote the URL: not shown
        raise ConfigError(f"the target URL is malformed ({type(exc).__name__}); expected "
                          f"scheme://user@host:port/database") from None
    dialect = SCHEMES.get(parts.scheme.lower())
    if dialect not in expect:
        raise ConfigError(f"the target URL scheme {parts.scheme!r} is not one of "
                          f"{sorted(s for s, d in SCHEMES.items() if d in expect)}")
    if not parts.hostname:
        raise ConfigError(f"the {dialect} target URL has no host; expected {parts.scheme}://user@host:port/db")
    db = unquote(parts.path.lstrip("/")) or None
    return Endpoint(dialect, parts.hostname, port or DEFAULT_PORTS[dialect],
                    unquote(parts.username) if parts.username else None,
                    unquote(parts.password) if parts.password else None, db,
                    _options(dialect, dict(parse_qsl(parts.query)), "the target URL"),
                    tls=parts.scheme.lower() == "rediss")


def from_airflow(conn_id: str, expect: tuple[str, ...]) -> Endpoint:
    """The Airflow connection ``conn_id`` (any secrets backend Airflow is configured with)."""
    try:
        from airflow.sdk import BaseHook
    except ImportError as exc:  # pragma: no cover - Airflow is a dependency
        raise ConfigError("conn_id needs Apache Airflow; pass url= instead") from exc
    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException and friends
        raise ConfigError(f"Airflow connection {conn_id!r} is not defined ({type(exc).__name__}); create it "
                          f"(airflow connections add, or AIRFLOW_CONN_{conn_id.upper()})") from None
    dialect = SCHEMES.get((conn.conn_type or "").lower())
    if dialect not in expect:
        raise ConfigError(f"Airflow connection {conn_id!r} has type {conn.conn_type!r}; expected one of "
                          f"{sorted(s for s, d in SCHEMES.items() if d in expect)}")
    if not conn.host:
        raise ConfigError(f"Airflow connection {conn_id!r} has no host")
    extra = dict(conn.extra_dejson or {})
    db, tls = conn.schema or None, False
    if dialect == "redis":
        db, tls = str(extra.pop("db", db or 0)), bool(extra.pop("ssl", False))
    return Endpoint(dialect, conn.host, int(conn.port or DEFAULT_PORTS[dialect]), conn.login or None,
                    conn.password or None, db, _options(dialect, extra, f"Airflow connection {conn_id!r}"), tls)


def where(conn_id: str | None, url: str | None, expect: tuple[str, ...]) -> str:
    """Where a target points, for ``describe()``: the resolved endpoint without secrets, or its conn id."""
    try:
        return resolve(conn_id, url, expect).describe()
    except ConfigError:
        return f"conn_id={conn_id}" if conn_id else "<unresolvable url>"


def resolve(conn_id: str | None, url: str | None, expect: tuple[str, ...]) -> Endpoint:
    """Exactly one of ``conn_id`` / ``url``, resolved; ConfigError (without any secret) otherwise."""
    if bool(conn_id) == bool(url):
        raise ConfigError("give exactly one of conn_id (an Airflow connection) or url")
    return from_airflow(conn_id, expect) if conn_id else from_url(url or "", expect)


def without_password(url: str) -> str:
    """``url`` with the password removed (``postgresql://u:pw@h/db`` -> ``postgresql://u@h/db``): what an
    owner record may keep of a target URL."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, hostport = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{hostport}" if user else hostport))


def same_database(bound: str, given: str, expect: tuple[str, ...]) -> str:
    """``given`` (a URL with credentials, e.g. from ``EO_TARGET_URL``) if it points where the ``bound``
    URL (from an owner record, without password) does; ConfigError otherwise."""
    a, b = from_url(bound, expect), from_url(given, expect)
    if (a.dialect, a.host, a.port, a.database) != (b.dialect, b.host, b.port, b.database):
        raise ConfigError(f"the target URL given ({b.describe()}) is not the bound target ({a.describe()}); "
                          "give the URL of the bound target (EO_TARGET_URL), or none")
    return given
