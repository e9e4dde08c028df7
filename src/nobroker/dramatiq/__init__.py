"""Dramatiq on nobroker: a Dramatiq broker and result backend over `Queue`.

    import dramatiq
    from nobroker.dramatiq import NobrokerBroker

    dramatiq.set_broker(NobrokerBroker("/var/lib/myapp/jobs"))

That line is the whole change to a Dramatiq application; `dramatiq myapp`
then runs its workers on the directory (or on PostgreSQL, with a
postgresql:// URL). Results: `Results(backend=NobrokerResultBackend(...))`.
See docs/DRAMATIQ.md.

This subpackage imports Dramatiq (at its top: only a Dramatiq application
imports it), and nothing in nobroker's core imports this subpackage. It
stands on the public `Queue` API only.

Layers, top first: broker, results -> consumer -> leases, messages -> names
-> nobroker's Queue.
"""

from .broker import DEFAULT_MAX_DELIVERIES, DEFAULT_VISIBILITY_TIMEOUT, NobrokerBroker
from .messages import EncoderRefusedError
from .names import queue_name_for
from .results import NobrokerResultBackend

__all__ = ["NobrokerBroker", "NobrokerResultBackend", "EncoderRefusedError",
           "DEFAULT_VISIBILITY_TIMEOUT", "DEFAULT_MAX_DELIVERIES", "queue_name_for"]
