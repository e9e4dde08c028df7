"""Where Dramatiq's names land in nobroker: a Dramatiq queue's nobroker queue. Stdlib only.

A Dramatiq queue name is a letter or '_', then letters, digits, '.', '_' and
'-' (dramatiq's own rule); a nobroker queue name is 1-100 letters, digits, '_'
and '-', not starting with '_' or '-'. Most Dramatiq names ("default",
"emails", "high_priority") are nobroker names already and are used as they
are, so `nobroker stats DIR default` shows the queue of that name. The others
(a '.' in them, a leading '_', or the results queue's own name) are escaped,
one to one, into names that start with "0", which no Dramatiq name does.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import NobrokerError

__all__ = ["RESULTS_QUEUE", "queue_name_for"]

# The result backend's queue (NobrokerResultBackend). A Dramatiq queue of this name
# is escaped like any name that is not a nobroker name, so the two never meet.
RESULTS_QUEUE: Final = "dramatiq-results"
_DRAMATIQ_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9._-]*")
_NOBROKER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_ESCAPES: Final = {".": "-2e", "-": "-2d"}  # '-' is escaped too: each '-' starts an escape


def queue_name_for(dramatiq_queue: str) -> str:
    """The nobroker queue holding the Dramatiq queue `dramatiq_queue`.

    "default" is "default"; "a.b" is "0a-2eb", "_low" is "0_low", "x-y.z" is
    "0x-2dy-2ez". A name Dramatiq would refuse, or one too long once escaped,
    raises NobrokerError.
    """
    if not _DRAMATIQ_NAME.fullmatch(dramatiq_queue):
        raise NobrokerError(f"{dramatiq_queue!r} is not a Dramatiq queue name (a letter or "
                            f"'_', then letters, digits, '.', '_' or '-')")
    if _NOBROKER_NAME.fullmatch(dramatiq_queue) and dramatiq_queue != RESULTS_QUEUE:
        return dramatiq_queue
    name = "0" + "".join(_ESCAPES.get(char, char) for char in dramatiq_queue)
    if len(name) > 100:
        raise NobrokerError(f"Dramatiq queue name {dramatiq_queue!r} is too long for a "
                            f"nobroker queue ({len(name)} > 100 characters escaped)")
    return name
