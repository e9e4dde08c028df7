"""Reply stores reused across connections, so that they do not pile up. Stdlib only.

kombu's mailbox declares a new reply queue for each control call that waits for
replies; a connection keeps them all in one nobroker queue, its reply store
(locations.is_reply_queue), and kombu tells the replies of different calls
apart by their ticket. A nobroker queue cannot be deleted through its API, and
deleting a queue's files under other processes is not safe (one may be
writing a late reply into it), so a store is never deleted: it is reused.
A connection claims the first free store of `celery_replies-0`, `-1`, ...:
free means that nobody holds its named lock (`Queue.lock`), which the
connection holds until it closes and which dies with its process. The
directory then holds as many stores as connections ever waited for replies
at the same time, not one per connection that ever did. A store is purged
when claimed: what is left in it was for a connection that is gone (a late
reply landing afterwards is told apart by its ticket, and expires).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Final

from ..errors import TaskLockedError
from ..queue import Queue
from .locations import REPLIES_PREFIX

__all__ = ["ReplyStore", "CLAIM_KEY"]

CLAIM_KEY: Final = "celery-reply-store"  # the named lock its holder keeps on a store


class ReplyStore:
    """The reply store of one connection, claimed on first use."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._name: str | None = None
        self._held = contextlib.ExitStack()

    def claim(self) -> str:
        """The name of this connection's store: the first one nobody holds."""
        if self._name is not None:
            return self._name
        for index in itertools.count():
            name = f"{REPLIES_PREFIX}{index}"
            queue = Queue(self._directory, name)
            held = contextlib.ExitStack()
            held.callback(queue.close)
            try:
                held.enter_context(queue.lock(CLAIM_KEY))
            except TaskLockedError:
                held.close()
                continue
            queue.purge()
            self._held, self._name = held, name
            return name
        raise AssertionError("unreachable")  # itertools.count() never ends

    def release(self) -> None:
        """Let another connection claim the store (the connection closes)."""
        self._held.close()
        self._name = None
