"""nobroker in tools/bench/realistic/: ``Queue(fsync=True).enqueue`` and
``nobroker work --concurrency T``, one command per process, on one queue
directory.

A *variant* (``--variants base,checkpoints=0,prefetch=4``) runs the same
Worker with options `nobroker work` does not take: file engine options
(bool FileOptions fields, such as ``checkpoints``) and Worker options (such
as ``prefetch=K`` or ``ack_delay=0.02``), joined by ``+``.
Every variant, ``base`` (no options) included, runs through this module's
own small worker command, so that two variants differ in their options
alone.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from tools.bench.realistic.systems import RealisticSystem

APP = """\
import os

import nobroker

from tools.bench.realistic.jobs import run_job, timed_calls

STORE = "@DIR@"


def handler(job):
    run_job(job.payload["i"])


def enqueue(n):
    os.makedirs(STORE, exist_ok=True)
    with nobroker.Queue(STORE, fsync=True) as q:
        return timed_calls(lambda i: q.enqueue({"i": i}), n)
"""
# A variant's other options are FileOptions fields. Worker options take numbers
# (prefetch also "auto"): prefetch=16+ack_delay=0.02.
WORKER_OPTIONS = ("prefetch", "ack_delay")


class NobrokerRealistic(RealisticSystem):
    name = "nobroker"
    durability = ("enqueue: fsync before return; a lease, acked after the job: a crashed "
                  "worker's job comes back (at-least-once)")
    app_source = APP

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "nobroker", "work", "--dir", str(app / "store"),
                "--concurrency", str(threads), "-q", f"{self.app_module}:handler"]


class NobrokerVariant(NobrokerRealistic):
    """nobroker with options: `spec` is "base", or "option[=value]+..."."""

    def __init__(self, spec: str) -> None:
        super().__init__(None)
        parse_variant(spec)  # a bad spec fails before any drain
        self.spec = spec
        self.name = f"nobroker[{spec}]"

    def worker_command(self, app: Path, index: int, threads: int) -> list[str]:
        return [self.python(), "-m", "tools.bench.realistic.nobroker_system",
                str(app / "store"), str(threads), self.spec, f"{self.app_module}:handler"]


def parse_variant(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(FileOptions fields, Worker options) of a variant spec; ValueError if unknown."""
    from nobroker.file.options import FileOptions

    fields = {f.name: f for f in dataclasses.fields(FileOptions)}
    file_options: dict[str, Any] = {}
    worker_options: dict[str, Any] = {}
    for part in [] if spec == "base" else spec.split("+"):
        key, _, text = part.partition("=")
        if key in WORKER_OPTIONS:
            worker_options[key] = (text if text == "auto" else float(text) if "." in text
                                   else int(text))
        elif key in fields and fields[key].type in ("bool", bool):
            file_options[key] = text.lower() not in ("0", "false", "no", "off")
        else:
            raise ValueError(f"unknown nobroker variant option {part!r} in {spec!r}: "
                             f"{', '.join(WORKER_OPTIONS)} or a bool "
                             f"FileOptions field")
    return file_options, worker_options


def work(store: str, threads: int, spec: str, handler_spec: str) -> None:
    """A variant's worker process: `nobroker work`'s loop, with the variant's options."""
    import logging
    import os

    from nobroker import Queue, Worker
    from nobroker.cli.work import load_handler
    from nobroker.opener import open_backend

    logging.basicConfig(level=logging.WARNING)
    file_options, worker_options = parse_variant(spec)
    sys.path.insert(0, os.getcwd())
    handler = load_handler(handler_spec)
    queue = Queue.from_backend(open_backend(store, "default", **file_options))
    try:
        Worker(queue, handler, concurrency=threads, **worker_options).run()
    finally:
        queue.close()


if __name__ == "__main__":
    work(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
