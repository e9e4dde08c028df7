"""SIGINT and SIGTERM: the first asks for a graceful stop, a second forces it.

The handlers only set flags and wake the dispatcher, which does the logging
and the work. They are installed only from the main thread (Python runs
signal handlers there alone) and restored when `run()` returns.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from .shared import Shared


class SignalHandling(Shared):
    """The signal handlers' part of the Worker."""

    def _install_signal_handlers(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for name in ("SIGINT", "SIGTERM"):
            signum = getattr(signal, name, None)
            if signum is not None:
                previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only flags: the dispatcher, woken here, does the logging and the work.
        with self._cond:
            self._signals += 1
            if self._signals == 1:
                self._request_stop(signal.Signals(signum).name, deadline=True)
            else:
                self._forced = True
            self._cond.notify_all()


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
