"""Where Celery's names land in nobroker: a URL's location, a Celery queue's name.

Stdlib only. `nobroker:///var/lib/jobs` is the directory /var/lib/jobs;
`nobroker://jobs` is ./jobs, relative to the process's working directory;
`nobroker+postgresql://user@host/db` is that PostgreSQL database (kombu and
Celery hand the part after the '+' on as the URL: `postgresql://...`).
A Celery queue name may hold any character ("celery.pidbox", "a@host"); a
nobroker queue name is letters, digits, '_' and '-': `queue_name_for` maps
one to the other one-to-one, escaping with '_' (see its docstring).
"""

from __future__ import annotations

import re
import string
from typing import Final

from ..errors import NobrokerError

__all__ = ["SCHEME", "directory_from_url", "location_from_url", "location_of_connection",
           "queue_name_for", "RESULTS_QUEUE", "REPLIES_PREFIX", "is_reply_queue"]

SCHEME: Final = "nobroker"
_POSTGRES: Final = ("postgresql", "postgres")
# The result backend's queue. Its '_' is escaped in every Celery queue name
# ("celery_results" becomes "celery__results"), so no Celery queue can land on it.
RESULTS_QUEUE: Final = "celery_results"
# A connection's store for the reply queues it declares ('_r' never occurs in an
# escaped Celery name either): see is_reply_queue.
REPLIES_PREFIX: Final = "celery_replies-"
# kombu's mailbox names a reply queue OID.reply.NAMESPACE.pidbox, with a fresh OID (a
# UUID) for each control call.
_REPLY_QUEUE: Final = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\.reply\..+\.pidbox")
_PLAIN: Final = frozenset(string.ascii_letters + string.digits + "-")
_MAX_NAME: Final = 100


def directory_from_url(url: str) -> str:
    """The queue directory a `nobroker://` URL names."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != SCHEME:
        raise NobrokerError(f"not a nobroker URL: {url!r} (use nobroker:///path/to/dir)")
    path = rest.split("?", 1)[0]
    if not path or path == "/":
        raise NobrokerError(f"the URL {url!r} names no directory "
                            f"(use nobroker:///absolute/path or nobroker://relative/path)")
    return path


def location_from_url(url: str) -> str:
    """What a Celery URL names, as `Queue(location, ...)` takes it: a directory, or a
    PostgreSQL URL (from `nobroker+postgresql://...`, or its `postgresql://...` part)."""
    scheme, sep, rest = url.partition("://")
    engine = scheme.lower().removeprefix(f"{SCHEME}+")
    if sep and engine in _POSTGRES:
        if not rest.strip("/"):
            raise NobrokerError(f"the URL {url!r} names no PostgreSQL server "
                                f"(use nobroker+postgresql://user@host/dbname)")
        return f"{engine}://{rest}"
    return directory_from_url(url)


def location_of_connection(hostname: str | None, virtual_host: str | None) -> str:
    """The location a kombu Connection names: kombu splits `nobroker:///a/b` into
    no host and the virtual host "a/b", and `nobroker://a/b` into host "a", "b";
    `nobroker+postgresql://...` leaves "postgresql://..." whole as the host."""
    if isinstance(hostname, str) and "://" in hostname:
        return location_from_url(hostname)
    host = hostname if hostname not in (None, "", "localhost") else None
    vhost = (virtual_host or "").lstrip("/")
    path = f"{host}/{vhost}" if host else f"/{vhost}"
    return directory_from_url(f"{SCHEME}://{path}")


def is_reply_queue(celery_queue: str) -> bool:
    """Whether a queue is one of kombu's mailbox reply queues. Each control call that
    waits for replies declares a new one, so a connection keeps them all in one nobroker
    queue it claims (REPLIES_PREFIX and a number: replies.py) rather than one each: kombu
    tells the replies of different calls apart by their ticket."""
    return _REPLY_QUEUE.fullmatch(celery_queue) is not None


def queue_name_for(celery_queue: str) -> str:
    """The nobroker queue holding the Celery queue `celery_queue`.

    Letters, digits and '-' stay; '_' becomes '__'; any other character
    becomes '_' and its code point in hex, two digits ('.' -> '_2e') or,
    above 0xff, 'u' and six ('_u01f600'). So "celery" is "celery",
    "my_queue" is "my__queue", "a.b" is "a_2eb", and no two Celery names share
    a nobroker queue. A name that does not start with a letter or digit, or
    is too long once escaped, is refused.
    """
    parts: list[str] = []
    for char in celery_queue:
        if char in _PLAIN:
            parts.append(char)
        elif char == "_":
            parts.append("__")
        elif ord(char) <= 0xFF:
            parts.append(f"_{ord(char):02x}")
        else:
            parts.append(f"_u{ord(char):06x}")
    name = "".join(parts)
    if not celery_queue or not celery_queue[0].isascii() or not celery_queue[0].isalnum():
        raise NobrokerError(f"Celery queue name {celery_queue!r} must start with a letter "
                            f"or a digit to be a nobroker queue")
    if len(name) > _MAX_NAME:
        raise NobrokerError(f"Celery queue name {celery_queue!r} is too long for a "
                            f"nobroker queue ({len(name)} > {_MAX_NAME} characters escaped)")
    return name
