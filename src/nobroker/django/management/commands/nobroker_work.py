"""`python manage.py nobroker_work`: run the Django tasks of a nobroker backend.

Without --queue it serves every queue of the backend's QUEUES, one nobroker
Worker per queue, each with --concurrency slots, each in a thread of this one
process (a worker over several queues by priority is not built yet). SIGINT/SIGTERM stop
every worker gracefully: leasing stops, running tasks finish and are settled. With
OPTIONS "database", `atomic=True` tasks run in `transaction.atomic()` on Django's
connection, their ack written in it (database.py). `--registered` serves nobroker's
own `@q.task` tasks instead, found in each installed app's `tasks` module.
"""

from __future__ import annotations

import functools
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, task_backends

from ....queue import Queue
from ....tasks import registered_queues, registry_of
from ....transactions import atomic_in
from ....worker import Worker
from ...backend import NobrokerBackend
from ...database import atomic_transaction
from ...running import resolver


class Command(BaseCommand):
    help = ("Run the Django tasks enqueued on a nobroker backend. Without --queue, every "
            "queue of its QUEUES, one worker per queue in this process.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default=DEFAULT_TASK_BACKEND_ALIAS,
                            help="the TASKS alias to serve (default: %(default)s)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="NAME",
                            help="a queue to serve (repeatable; default: all of QUEUES)")
        parser.add_argument("--concurrency", type=int, default=1,
                            help="tasks run at once per queue (default: %(default)s)")
        parser.add_argument("--pool", choices=("thread", "process"), default="thread",
                            help="run tasks in threads or in child processes")
        parser.add_argument("--max-jobs", type=int, default=None,
                            help="stop after this many jobs (per queue), exit 0")
        parser.add_argument("--idle-timeout", type=float, default=None,
                            help="stop after this many seconds without a job, exit 0")
        parser.add_argument("--registered", action="store_true",
                            help="serve nobroker's own @q.task tasks instead: every queue "
                                 "the installed apps' tasks modules registered them on")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["registered"]:
            self._registered(options)
            return
        alias = options["backend"]
        try:
            backend = task_backends[alias]
        except Exception as exc:
            raise CommandError(f"no task backend {alias!r}: {exc}") from None
        if not isinstance(backend, NobrokerBackend):
            raise CommandError(f"TASKS[{alias!r}] is {type(backend).__name__}, not "
                               f"nobroker.django.NobrokerBackend")
        names = options["queues"] or backend.queue_names
        unknown = [n for n in names if n not in backend.queue_names]
        if unknown:
            raise CommandError(f"not in TASKS[{alias!r}]['QUEUES']: {', '.join(unknown)}")
        workers = []
        try:
            for name in names:
                queue = backend.queue(name)
                registry_of(queue).resolver = resolver(queue, alias)
                if backend.database is not None:  # atomic tasks: in Django's transaction
                    atomic_in(queue, functools.partial(atomic_transaction, backend.database))
                workers.append(self._worker(queue, options))
        except (TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self._run_together(workers, f"nobroker_work: serving {', '.join(names)} of "
                                    f"TASKS[{alias!r}]")

    def _registered(self, options: dict[str, Any]) -> None:
        """--registered: the queues @q.task tasks of the installed apps' tasks modules
        (imported by the app's ready()) are registered on, one worker each."""
        if options["queues"]:
            raise CommandError("--registered serves every queue with tasks; no --queue")
        queues = sorted(registered_queues(), key=lambda q: q.name)
        if not queues:
            raise CommandError("no @q.task tasks are registered: declare them in a tasks "
                               "module of an installed app")
        try:
            workers = []
            for queue in queues:
                # As Django's request cycle does, around each job's run in its thread.
                queue.on("started", lambda job: close_old_connections())
                workers.append(self._worker(queue, options))
        except (TypeError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self._run_together(workers, f"nobroker_work: serving "
                                    f"{', '.join(q.name for q in queues)} (registered tasks)")

    @staticmethod
    def _worker(queue: Queue, options: dict[str, Any]) -> Worker:
        return Worker(queue, concurrency=options["concurrency"], pool=options["pool"],
                      max_jobs=options["max_jobs"], idle_timeout=options["idle_timeout"],
                      handle_signals=False)

    def _run_together(self, workers: list[Worker], ready: str) -> None:
        """One thread per worker; a signal asks every one to stop (a second: at once).
        `ready` is printed once the signals are ours, so a supervisor may send them."""
        asked = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            immediate = asked.is_set()
            asked.set()
            for worker in workers:
                worker.stop(immediate=immediate)

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        threads = [threading.Thread(target=w.run, name=f"nobroker-{w.queue.name}")
                   for w in workers]
        try:
            self.stdout.write(ready)
            self.stdout.flush()
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)  # wakes for signals
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
