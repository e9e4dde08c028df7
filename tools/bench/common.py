"""Shared helpers for tools/bench/run.py and tools/bench/peers/run.py (standard library only).

tools/bench/postgres/run.py takes only the /proc reader (:func:`proc_stat_fields`).

What lives here, and why it is shared:

* The *physical baselines*: a raw ``O_APPEND`` ``os.write`` + ``os.fsync``
  loop (one record per call, the record as long as nobroker's framed record
  for the same job), the same loop run by N threads on N separate files, and
  the log reader used by the cold-open baseline (read the file, split it by
  the ``<I length><B type><I crc32>`` record header after the 16-byte file
  header, ``json.loads`` each record payload). Both benchmark scripts compare
  nobroker against the same code, so the two reports agree.
* Interleaving: :func:`interleave` runs the contenders of one workload
  A B C A B C ... for the given number of rounds, so that a noisy neighbour
  on this shared machine hurts every contender in the same round rather than
  one of them. Reports use the median of the rounds.
* Machine facts (cores, filesystem type from /proc/mounts, Python) printed in
  every report header, and the table renderers (plain text and Markdown).

Nothing here imports nobroker, so the baselines measure the machine alone.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import platform
import statistics
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # tools/bench/common.py
SRC = REPO / "src"

# The log framing as docs/FORMAT.md specifies it; kept here (not imported from
# nobroker) so that the baseline reader is independent of the code it judges.
FILE_HEADER_SIZE = 16
RECORD_HEADER = struct.Struct("<IBI")


# --------------------------------------------------------------------------
# statistics and formatting


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (0..100) of `values`."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * pct / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))


def fmt_rate(ops_per_s: float) -> str:
    if ops_per_s != ops_per_s:  # NaN
        return "n/a"
    if ops_per_s >= 100:
        return f"{ops_per_s:,.0f}/s"
    return f"{ops_per_s:,.1f}/s"


def fmt_time(seconds: float) -> str:
    """A duration with a unit that keeps 3 significant figures readable."""
    if seconds != seconds:
        return "n/a"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: float) -> str:
    if n != n:
        return "n/a"
    if abs(n) < 10 * 1024:
        return f"{n:,.0f} B"
    if abs(n) < 10 * 1024 * 1024:
        return f"{n / 1024:,.0f} KiB"
    return f"{n / (1024 * 1024):,.1f} MiB"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None or ratio != ratio:
        return "—"
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


def fmt_per_op(total_seconds: float, ops: int) -> str:
    """'12,345/s (81.0 us/op)' for `ops` operations done in `total_seconds`."""
    if ops <= 0 or total_seconds <= 0:
        return "n/a"
    return f"{fmt_rate(ops / total_seconds)} ({fmt_time(total_seconds / ops)}/op)"


def render_text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(), line]
    for row in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(out)


def render_markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    out = ["| " + " | ".join(esc(h) for h in headers) + " |"]
    out.append("|" + "|".join(" --- " for _ in headers) + "|")
    for row in rows:
        out.append("| " + " | ".join(esc(c) for c in row) + " |")
    return "\n".join(out)


# --------------------------------------------------------------------------
# machine facts


def fs_type(path: Path) -> str:
    """'ext4 (/dev/vda on /)' for the mount that holds `path`, from /proc/mounts."""
    target = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) < 3:
                    continue
                device, mount, kind = parts[0], parts[1].replace("\\040", " "), parts[2]
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and (best is None or len(mount) >= len(best[1])):
                    best = (device, mount, kind)
    except OSError:
        return "unknown (no /proc/mounts)"
    if best is None:
        return "unknown"
    device, mount, kind = best
    return f"{kind} ({device} on {mount})"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts(path: Path) -> dict[str, Any]:
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "cores": usable,
        "cpu": cpu_model(),
        "fs": fs_type(path),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "dir": str(path),
    }


def facts_line(facts: dict[str, Any]) -> str:
    return (
        f"{facts['cores']} cores ({facts['cpu']}), fs {facts['fs']}, "
        f"{facts['implementation']} {facts['python']}, Linux {facts['kernel']}"
    )


# --------------------------------------------------------------------------
# interleaving


def interleave(
    rounds: int, contenders: Sequence[tuple[str, Callable[[], float]]]
) -> dict[str, list[float]]:
    """Run each contender once per round, in order (A B C A B C ...).

    Each callable returns one measurement (seconds, usually). Returns the list
    of measurements per contender name, in round order.
    """
    results: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for _ in range(rounds):
        for name, fn in contenders:
            results[name].append(fn())
    return results


# --------------------------------------------------------------------------
# payloads


def small_payload(i: int) -> dict[str, Any]:
    """The standard small job: about 60 bytes of JSON."""
    return {"task": "resize_image", "user": i, "path": f"/img/{i:08d}.jpg"}


def small_payloads(start: int, count: int) -> list[dict[str, Any]]:
    return [small_payload(i) for i in range(start, start + count)]


# --------------------------------------------------------------------------
# raw write + fsync baselines


def raw_fsync_loop(path: Path, record_size: int, count: int) -> float:
    """Seconds for `count` appends of `record_size` bytes, each followed by fsync.

    The file is opened once with O_APPEND (not timed); every iteration is one
    ``os.write`` of the whole record and one ``os.fsync``: the least work any
    log that is durable per call must do.
    """
    record = b"r" * max(1, record_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        write, fsync = os.write, os.fsync
        start = time.perf_counter()
        for _ in range(count):
            write(fd, record)
            fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def raw_fsync_samples(path: Path, record_size: int, count: int) -> list[float]:
    """Per-call durations of `count` write+fsync calls (see raw_fsync_loop)."""
    record = b"r" * max(1, record_size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    out: list[float] = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, record)
            os.fsync(fd)
            out.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return out


def run_threads(targets: Sequence[Callable[[], object]]) -> float:
    """Start one thread per target, release them together, return wall seconds.

    The clock starts when every thread is waiting at the barrier and stops
    when the last one has finished. An exception in a thread is re-raised.
    """
    barrier = threading.Barrier(len(targets) + 1)
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], object]) -> None:
        try:
            barrier.wait()
            fn()
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def raw_fsync_threads(paths: Sequence[Path], record_size: int, count_each: int) -> float:
    """Wall seconds for len(paths) threads, each running raw_fsync_loop on its own file."""
    loops = [functools.partial(raw_fsync_loop, p, record_size, count_each) for p in paths]
    return run_threads(loops)


# --------------------------------------------------------------------------
# reading nobroker's log without nobroker


def log_files(directory: Path, name: str = "default") -> list[Path]:
    """The queue's log files (NAME.NNNNNN.log), oldest first."""
    return sorted(directory.glob(f"{name}.*.log"))


def iter_records(data: bytes) -> Iterator[tuple[int, memoryview]]:
    """(type byte, payload) of each framed record after the file header.

    Stops at the first zero header (preallocated or unwritten space) or at a
    record that runs past the end; checks no CRC (this is the baseline).
    """
    view = memoryview(data)
    pos = FILE_HEADER_SIZE
    end = len(data)
    unpack = RECORD_HEADER.unpack_from
    head = RECORD_HEADER.size
    while pos + head <= end:
        length, rtype, crc = unpack(view, pos)
        if length == 0 and rtype == 0 and crc == 0:
            break
        stop = pos + head + length
        if stop > end:
            break
        yield rtype, view[pos + head : stop]
        pos = stop


def framed_sizes(directory: Path, name: str = "default") -> dict[int, list[int]]:
    """Framed size (header + payload) of every record, grouped by type (MORE bit cleared)."""
    sizes: dict[int, list[int]] = {}
    for path in log_files(directory, name):
        for rtype, payload in iter_records(path.read_bytes()):
            sizes.setdefault(rtype & 0x7F, []).append(RECORD_HEADER.size + len(payload))
    return sizes


def log_record_bytes(directory: Path, name: str = "default") -> int:
    """Bytes of valid records in all log files (excludes headers and zero tails)."""
    return sum(sum(v) for v in framed_sizes(directory, name).values())


def json_loads_log(directory: Path, name: str = "default") -> int:
    """Cold-open baseline: read every log file, split records, json.loads each payload.

    Returns the number of records decoded (so the work cannot be skipped).
    """
    loads = json.loads
    count = 0
    for path in log_files(directory, name):
        with open(path, "rb") as fh:
            data = fh.read()
        for _rtype, payload in iter_records(data):
            loads(bytes(payload))
            count += 1
    return count


# --------------------------------------------------------------------------
# process helpers


def proc_stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/PID/stat after the command name, so field k of proc(5) is
    [k - 3]: [0] the state, [1] the ppid, [11:15] utime, stime, cutime, cstime (clock
    ticks). OSError when the process is gone."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        data = fh.read()
    # The command name is in parentheses and may hold spaces, ")" and bytes of any
    # encoding; what follows its last ")" is ASCII.
    return data[data.rindex(b")") + 2 :].decode("ascii").split()


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat, in seconds."""
    fields = proc_stat_fields(pid)
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def rss_bytes() -> int:
    """Current resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        resident_pages = int(fh.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def child_error(exc: BaseException) -> str:
    """An exception in a child process, with where it was raised, for the parent to report."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def spawn() -> Any:
    return multiprocessing.get_context("spawn")


def reap(proc: Any, timeout: float) -> None:
    """Wait up to `timeout` seconds for a child process to end, then kill it."""
    proc.join(timeout=timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()


def gather_at_barrier(
    children: Sequence[tuple[Callable[..., None], tuple[Any, ...]]], timeout: float = 300
) -> tuple[float, list[Any]]:
    """Start one spawned process per (target, args), release them together at a barrier.

    Process i runs target(*args, barrier, out) and puts ("ok", value) or
    ("error", text) on `out`. Returns the parent's time.monotonic() at the
    release and the values in the order they arrived; a child's error is
    raised here. Every child is reaped (killed if it hangs) before returning.
    """
    mp = spawn()
    barrier = mp.Barrier(len(children) + 1)
    out = mp.Queue()
    procs = [mp.Process(target=target, args=(*args, barrier, out)) for target, args in children]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)
        start = time.monotonic()
        values: list[Any] = []
        for _ in procs:
            status, value = out.get(timeout=timeout)
            if status != "ok":
                raise RuntimeError(f"benchmark process failed: {value}")
            values.append(value)
        return start, values
    finally:
        for p in procs:
            reap(p, 30)


def noop(*args: Any, **kwargs: Any) -> None:
    """A job function that does nothing (RQ imports it as tools.bench.common.noop)."""
    return None
