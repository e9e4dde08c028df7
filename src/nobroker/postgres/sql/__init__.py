"""The PostgreSQL backend's SQL: `.sql` files in this package, read with importlib.resources.

What is here:
- `queries/NAME.sql`: one statement each, named as statements.py names it;
- `parts/NAME.sql`: a piece several queries share (CTEs, the job columns),
  written into a query where it says `{NAME}`;
- `migrations/NNNN_what.sql`: the step from schema version NNNN - 1 to NNNN
  (schema.py). A released migration has run on databases as it was written:
  it is never edited, a change is a new file (a test pins their checksums).

Substitution, done once per handle when it loads its statements: bound
values are psycopg's (`%(name)s`, filled at each call, never written into
the text); in braces, only these names are replaced:
- `{schema}`: the queue set's schema as a quoted identifier (`"nobroker"`),
  checked here to be 1-63 of [a-z0-9_] (url.parse allows no other), so it
  cannot leave its quotes, inside a string literal either;
- `{schema_literal}`: the same name as a string literal (`'nobroker'`);
- `{PART}`: parts/PART.sql, in queries (a part may name parts in turn).
Any other `{lowercase_name}` left after that is an error when the file is
loaded, so a misspelt placeholder never reaches the server; braces around
digits (a regex's `{12}`) are not placeholders.

A query is sent with its comments taken out and each whitespace run made
one space, so no literal in a query may hold `--` or a whitespace run:
psycopg (its _queries.MAX_CACHED_STATEMENT_LENGTH) caches the conversion of
a statement of MAX_STATEMENT bytes at most and converts a longer one anew
on every call (ack_and_lease's indentation took it over once, and the
worker's CPU per job from 137 to 231 us); a test keeps every query within
it. A migration is sent as written: its function bodies are stored so.

This module imports only the standard library (it runs inside the zipapp
too, where importlib.resources reads the files from the archive).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Final

__all__ = ["MAX_STATEMENT", "quoted", "render", "query", "query_names", "migrations",
           "migration_sql"]

MAX_STATEMENT: Final = 4096
_SCHEMA_NAME: Final = re.compile(r"[a-z0-9_]{1,63}")
_PLACEHOLDER: Final = re.compile(r"\{([a-z_]+)\}")
_COMMENT: Final = re.compile(r"--[^\n]*")


def quoted(schema: str) -> str:
    """The schema as an SQL identifier; ValueError for a name url.parse would refuse."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema {schema!r} must be 1-63 lowercase letters, digits or '_'")
    return f'"{schema}"'


@functools.cache
def _text(folder: str, name: str) -> str:
    return resources.files(__name__).joinpath(folder, f"{name}.sql").read_text("utf-8")


@functools.cache
def _names(folder: str) -> tuple[str, ...]:
    return tuple(sorted(entry.name.removesuffix(".sql")
                        for entry in resources.files(__name__).joinpath(folder).iterdir()
                        if entry.name.endswith(".sql")))


def query_names() -> tuple[str, ...]:
    """The name of every query in queries/."""
    return _names("queries")


def _substitute(text: str, where: str, values: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"{where}: unknown placeholder {{{name}}}")
        return values[name]

    return _PLACEHOLDER.sub(fill, text)


def _with_parts(text: str, where: str, depth: int = 0) -> str:
    """`text` with each `{PART}` replaced by parts/PART.sql (itself expanded)."""
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "schema":
            return match.group(0)
        if name not in _names("parts"):
            raise ValueError(f"{where}: unknown placeholder {{{name}}}")
        if depth > 3:
            raise ValueError(f"{where}: parts nested too deep at {{{name}}}")
        text = _COMMENT.sub("", _text("parts", name)).strip()  # a comma may follow
        return _with_parts(text, f"parts/{name}.sql", depth + 1)

    return _PLACEHOLDER.sub(fill, text)


def render(text: str, schema: str, where: str = "query") -> bytes:
    """A query's text for `schema`: its parts and the schema written in, collapsed;
    ValueError (naming `where`) for a placeholder that is none of these."""
    text = _with_parts(_COMMENT.sub("", text), where)  # a comment may name anything
    return " ".join(_substitute(text, where, {"schema": quoted(schema)}).split()).encode()


def query(name: str, schema: str) -> bytes:
    """queries/NAME.sql, rendered for `schema`."""
    return render(_text("queries", name), schema, f"queries/{name}.sql")


def migrations() -> tuple[str, ...]:
    """The migrations' file names (0001_..., 0002_...), in order: the nth takes a
    schema from version n - 1 to n."""
    names = _names("migrations")
    for number, name in enumerate(names, start=1):
        if not name.startswith(f"{number:04d}_"):
            raise ValueError(f"migrations/{name}.sql: expected number {number:04d}")
    return names


def migration_sql(name: str, schema: str) -> str:
    """migrations/NAME.sql for `schema`, as written otherwise."""
    return _substitute(_text("migrations", name), f"migrations/{name}.sql",
                       {"schema": quoted(schema), "schema_literal": f"'{schema}'"})
