"""tools/bench/peers/run.py's report: each cell's text, the "nobroker vs it" ratio, the
text and Markdown tables, and the issue's peer targets judged on the run.
"""

from __future__ import annotations

from tools.bench.common import (
    fmt_rate,
    fmt_ratio,
    fmt_time,
    render_markdown_table,
    render_text_table,
)
from tools.bench.peers.runner import Cell, Workload


def cell_text(wl: Workload, c: Cell) -> str:
    if c.skipped:
        return c.skipped
    if wl.kind == "bytes":
        return f"{c.value:,.0f} B/job" if c.value is not None else "n/a"
    if c.seconds is None:
        return "n/a"
    if wl.kind == "time":
        return fmt_time(c.seconds)
    return f"{fmt_rate(c.ops / c.seconds)} ({fmt_time(c.seconds / c.ops)}/op)"


def nobroker_vs(wl: Workload, c: Cell) -> float | None:
    """How many times better nobroker did than `c` (above 1: nobroker ahead)."""
    me = wl.cells.get("nobroker")
    if me is None or me.skipped or c.skipped:
        return None
    if wl.kind == "bytes":
        if me.value is None or c.value is None or me.value <= 0:
            return None
        return c.value / me.value
    if me.seconds is None or c.seconds is None or me.seconds <= 0 or c.seconds <= 0:
        return None
    if wl.kind == "time":
        return c.seconds / me.seconds
    return (me.ops / me.seconds) / (c.ops / c.seconds)


def report_text(wls: list[Workload], durability: dict[str, str], takes: dict[str, str]) -> str:
    out: list[str] = []
    for wl in wls:
        out.append(f"\n== {wl.title} ==  ({wl.note})")
        rows = []
        for c in wl.baselines.values():
            rows.append([f"[baseline] {c.text}", cell_text(wl, c), fmt_ratio(nobroker_vs(wl, c))])
        for name, c in wl.cells.items():
            rows.append([name, cell_text(wl, c),
                         "—" if name == "nobroker" else fmt_ratio(nobroker_vs(wl, c))])
        out.append(render_text_table(["system", "result", "nobroker vs it"], rows))
    out.append("\n== durability each system gave in this run ==")
    out.append(render_text_table(["system", "durability", "a taken job if the consumer crashes"],
                                 [[n, d, takes.get(n, "")] for n, d in durability.items()]))
    return "\n".join(out)


def report_markdown(wls: list[Workload], durability: dict[str, str]) -> str:
    names = list(durability)
    headers = ["system", "durability", *[w.title for w in wls]]
    rows = []
    for name in names:
        row = [name, durability[name]]
        for wl in wls:
            c = wl.cells.get(name)
            if c is None:
                row.append("—")
                continue
            text = cell_text(wl, c)
            r = nobroker_vs(wl, c)
            if name != "nobroker" and r is not None:
                text += f" (nobroker {fmt_ratio(r)})"
            row.append(text)
        rows.append(row)
    base = ["baseline", "physical floor", *[
        "; ".join(f"{c.text}: {cell_text(wl, c)} (nobroker {fmt_ratio(nobroker_vs(wl, c))})"
                  for c in wl.baselines.values()) or "—" for wl in wls]]
    rows.insert(1, base)
    return render_markdown_table(headers, rows)


def target_checks(wls: list[Workload], durability: dict[str, str]) -> list[str]:
    """The two peer targets from the issue, judged on this run."""
    by = {w.key: w for w in wls}
    lines = []
    enq = by.get("enqueue")
    if enq is not None and "nobroker" in enq.cells and not enq.cells["nobroker"].skipped:
        sqlite_like = {n: c for n, c in enq.cells.items()
                       if not c.skipped and "SQLite WAL" in durability.get(n, "")}
        durable = {n: c for n, c in sqlite_like.items()
                   if any(f"synchronous={m}:" in durability.get(n, "") for m in ("FULL", "EXTRA"))}
        for label, group in (("the best SQLite-WAL peer that fsyncs per commit", durable),
                             ("the best SQLite-WAL peer of any durability (info)", sqlite_like)):
            if not group:
                continue
            best = max(group, key=lambda n: group[n].speed() or 0)
            r = nobroker_vs(enq, group[best])
            ok = r is not None and r > 1.0
            lines.append(f"durable single enqueue ahead of {label}, {best}: "
                         f"nobroker {fmt_ratio(r)} -> {'PASS' if ok else 'MISS'}")
    batch = by.get("batch")
    if batch is not None:
        for n, c in batch.cells.items():
            if n.startswith("litequeue") and not c.skipped:
                r = nobroker_vs(batch, c)
                ok = r is not None and r > 1.0
                lines.append(f"enqueue_many ahead of {n}'s one-transaction batch: "
                             f"nobroker {fmt_ratio(r)} -> {'PASS' if ok else 'MISS'}")
    return lines
