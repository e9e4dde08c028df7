"""PostgreSQL URLs: what nobroker reads from them, and how they are shown.

`postgresql://user:password@host:port/db?schema=NAME` (also `postgres://`).
`schema` is nobroker's own parameter, the schema that holds this queue set
(default `nobroker`); it is taken out before the rest goes to libpq, which
reads every other parameter itself (`sslmode`, `connect_timeout`, ...).

Rule: a password never leaves this module in clear. `redact` is what every
error, log line and repr shows; `scrub` takes it out of a driver's message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ..backend import is_postgres_url

__all__ = ["Target", "parse", "is_postgres_url", "DEFAULT_SCHEMA"]

DEFAULT_SCHEMA = "nobroker"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SECRET_PARAMS = frozenset({"password", "sslpassword"})


@dataclass(frozen=True)
class Target:
    """Where a queue set lives: the libpq URL (secret inside), the schema, the shown form."""

    conninfo: str = field(repr=False)
    schema: str
    shown: str  # the URL with its password replaced by ***
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def scrub(self, text: str) -> str:
        """`text` with every secret of the URL replaced by ***."""
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def parse(url: str, schema: str | None = None) -> Target:
    """The Target a URL names; ValueError (which never shows the password) if it is bad."""
    if not is_postgres_url(url):
        raise ValueError("a PostgreSQL URL starts with postgresql:// or postgres://")
    parts = urlsplit(url)
    secrets = [unquote(parts.password)] if parts.password else []
    params = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = schema or value
        else:
            if key in _SECRET_PARAMS:
                secrets.append(value)
            params.append((key, value))
    schema = schema or DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema {schema!r} must be 1-63 lowercase letters, digits or '_', "
                         "not starting with a digit")
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(params),
                           parts.fragment))
    netloc = parts.netloc
    if parts.password is not None:
        user = parts.username or ""
        netloc = f"{quote(user, safe='')}:***@{netloc.rpartition('@')[2]}"
    shown_params = [(k, "***" if k in _SECRET_PARAMS else v) for k, v in params]
    if schema != DEFAULT_SCHEMA:
        shown_params.append(("schema", schema))
    shown = urlunsplit((parts.scheme, netloc, parts.path, urlencode(shown_params, safe="*"),
                        ""))
    return Target(conninfo, schema, shown, tuple(secrets))
