"""`nobroker work`: a handler (MODULE:FUNCTION) or a module's registered tasks,
run by a Worker until it is stopped.

User code is imported like `python -m` would, the current directory first,
and every failure to import it is one line (exit 2); the handler is loaded
before the queue is opened, so a typo creates no queue. A worker stopped
by a second signal exits 128 + the signal's number. `--queues a,b:N,c`
works several queues of one directory (or PostgreSQL schema) by priority,
or by `--weights`; a module's tasks must be registered on each of them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from ..queue import Queue
from ..worker import Handler, Worker, describe_error
from .arguments import UsageError
from .location import open_queue, queue_location


def cmd_work(args: argparse.Namespace) -> int:
    options: dict[str, Any] = dict(
        concurrency=args.concurrency, poll_interval=args.poll_interval, max_jobs=args.max_jobs,
        idle_timeout=args.idle_timeout, shutdown_timeout=args.shutdown_timeout,
        visibility_timeout=args.visibility_timeout, timeout=args.timeout, pool=args.pool)
    if args.prefetch is not None:  # else the Worker's default
        options["prefetch"] = args.prefetch
    if args.ack_delay is not None:
        options["ack_delay"] = args.ack_delay
    if args.queues is not None:
        return _exit_code(_work_queues(args, options))
    if args.weights is not None:
        raise UsageError("--weights goes with --queues")
    if ":" not in args.handler:  # a module of tasks: its queue and its registered tasks
        with load_tasks_queue(args.handler, args) as queue:
            stats = _run_worker(queue, None, options)
    else:
        handler = load_handler(args.handler)  # before opening: a typo must not create a queue
        with open_queue(args, create=True) as queue:
            stats = _run_worker(queue, handler, options)
    return _exit_code(stats)


def _exit_code(stats: Any) -> int:
    if stats.forced:
        signum = getattr(signal, stats.stopped_by, None)
        return 128 + int(signum) if isinstance(signum, int) else 1
    return 0


def _work_queues(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """`work --queues`: one worker over several queues of one location."""
    if "queue" in args:
        raise UsageError("give either --queue or --queues")
    names = [name for name, _ in args.queues]
    options.update(weights=args.weights,
                   queue_concurrency={name: cap for name, cap in args.queues if cap})
    if ":" not in args.handler:
        with _tasks_queues(args.handler, args, names) as queues:
            return _run_worker(queues, None, options)
    handler = load_handler(args.handler)
    with contextlib.ExitStack() as stack:
        queues = [stack.enter_context(open_queue(args, create=True, name=name))
                  for name in names]
        return _run_worker(queues, handler, options)


@contextlib.contextmanager
def _tasks_queues(module_name: str, args: argparse.Namespace,
                  names: list[str]) -> Iterator[list[Queue]]:
    """The queues named by --queues among those a tasks module registered tasks on
    (in --dir/--url if given); closed afterwards."""
    from ..tasks import registered_queues

    _import_module(module_name, hint=" (work takes MODULE:FUNCTION, or a MODULE of tasks)")
    registered = registered_queues()
    if "dir" in args or "url" in args:
        location = queue_location(args)
        registered = [q for q in registered if q.directory == location]
    by_name = {q.name: q for q in registered}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise UsageError(f"module {module_name!r} registered no tasks on queue(s) "
                         f"{', '.join(map(repr, missing))} (decorate functions with "
                         f"@queue.task on each queue --queues names)")
    queues = [by_name[name] for name in names]
    try:
        yield queues
    finally:
        for queue in queues:
            queue.close()


def _run_worker(queue: Queue | list[Queue], handler: Handler | None,
                options: dict[str, Any]) -> Any:
    try:
        worker = Worker(queue, handler, **options)
    except ValueError as exc:  # e.g. pool="process" and a handler it cannot import
        raise UsageError(str(exc)) from None
    return worker.run()


def load_tasks_queue(module_name: str, args: argparse.Namespace) -> Queue:
    """Import a tasks module; the queue its tasks are registered on.

    `nobroker work myapp.tasks` runs on the queue the module opened; --dir
    and --queue, if given, must name that queue (they pick one if the module
    registered tasks on several).
    """
    from ..tasks import registered_queues

    _import_module(module_name, hint=" (work takes MODULE:FUNCTION, or a MODULE of tasks)")
    queues = registered_queues()
    if "dir" in args:
        queues = [q for q in queues if q.directory == os.path.abspath(args.dir)]
    if "queue" in args:
        queues = [q for q in queues if q.name == args.queue]
    if not queues:
        given = " matching --dir/--queue" if "dir" in args or "queue" in args else ""
        raise UsageError(f"module {module_name!r} registered no tasks on a queue{given} "
                         f"(decorate functions with @queue.task)")
    if len(queues) > 1:
        names = ", ".join(sorted(f"{q.name!r} in {q.directory}" for q in queues))
        raise UsageError(f"module {module_name!r} registered tasks on several queues "
                         f"({names}); choose one with --dir and --queue")
    return queues[0]


def _import_module(module_name: str, hint: str = "") -> Any:
    """Import a user's module like `python -m` would, the current directory first;
    every failure is a UsageError with one line of text."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UsageError(f"cannot import {module_name!r}: no such module in {here} "
                             f"or on sys.path{hint}") from None
        logging.getLogger("nobroker").debug("importing %r failed", module_name, exc_info=True)
        raise UsageError(f"importing {module_name!r} failed: {describe_error(exc)}") from None
    except Exception as exc:  # the handler's own module is broken: say how, in one line
        # ... and with `work -v`, where: the traceback goes to the debug log.
        logging.getLogger("nobroker").debug("importing %r failed", module_name, exc_info=True)
        raise UsageError(f"importing {module_name!r} failed: {describe_error(exc)}") from None


def load_handler(spec: str) -> Handler:
    """The callable named by MODULE:FUNCTION, imported like `python -m` would.

    The current directory is searched first, so `nobroker work tasks:handle`
    finds ./tasks.py. Every failure is a UsageError with one line of text.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"handler {spec!r} must look like MODULE:FUNCTION, "
                         f"e.g. myapp.tasks:handle")
    target = _import_module(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        kind = type(target).__name__
        article = "an" if kind[:1].lower() in "aeiou" else "a"
        raise UsageError(f"{spec} is {article} {kind}, not a function")
    handler: Handler = target
    return handler
