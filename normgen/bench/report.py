"""The report of a run: bench.md (tables with marks and footnotes, the summary of
geometric-mean ratios), the plot bench.png, the output files' names, and their writing."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional

from .ops import DTYPES, OPS
from .peers import IMPLS, PEER_CALLS, PEER_MISSING
from .status import ERR_LIMIT, FAILED, NO_OP, OK, SKIPPED, reason

MARKS = {NO_OP: "—", FAILED: "×", SKIPPED: "…"}
_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _status(r: dict) -> str:
    """A row's status (rows of older runs have none: measured)."""
    if r.get("status"):
        return r["status"]
    return OK if r.get("ratio") is not None or r.get("us") is not None else FAILED


class _Notes:
    """The footnotes of one table: each distinct text gets a number."""

    def __init__(self):
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return str(self.texts.index(text) + 1).translate(_SUP)

    def lines(self) -> list[str]:
        return [f"{str(i + 1).translate(_SUP)} {t}  " for i, t in enumerate(self.texts)] + ([""] if self.texts else [])


def _cell(r: Optional[dict], notes: _Notes, value) -> str:
    """A table cell: value(r) where measured (flagged where a peer's outputs differ from
    torch's), else the mark of its status with a footnote."""
    if r is None:
        return ""
    status = _status(r)
    if status == OK:
        err = r.get("err")
        if err is not None and err > ERR_LIMIT:
            impl = r["impl"]
            return value(r) + "!" + notes.mark(f"{impl}: outputs differ from torch eager's by {err:.3g} "
                                               f"of the largest output")
        return value(r)
    if status == SKIPPED:  # one footnote for every implementation
        return MARKS[SKIPPED] + notes.mark(r.get("note") or "not run: the time budget was spent")
    return MARKS.get(status, "×") + notes.mark(f"{r['impl']}: {status}: {r.get('note') or '?'}")


def geomean_ratios(result: dict, op: str) -> dict:
    """impl -> (geometric-mean ratio to copy over its measured rows of op or None, rows
    measured, rows it has the op for)."""
    big = [r for r in result["rows"] if r["timing"] == "events" and r["op"] == op]
    out = {}
    for impl in [i for i in IMPLS if any(r["impl"] == i for r in big)]:
        mine = [r for r in big if r["impl"] == impl and _status(r) != NO_OP]
        ok = [r["ratio"] for r in mine if _status(r) == OK and r.get("ratio")]
        out[impl] = (math.exp(sum(map(math.log, ok)) / len(ok)) if ok else None, len(ok), len(mine))
    return out


def _mean_cell(mean, k: int, total: int, all_skipped: bool = False) -> str:
    if total == 0:
        return "—"
    if mean is None:
        return f"{MARKS[SKIPPED] if all_skipped else MARKS[FAILED]} (0/{total})"
    return f"{mean:.3f} ({k}/{total})"


def _all_skipped(result: dict, op: str, impl: str) -> bool:
    mine = [r for r in result["rows"] if (r["timing"], r["op"], r["impl"]) == ("events", op, impl)
            and _status(r) != NO_OP]
    return bool(mine) and all(_status(r) == SKIPPED for r in mine)


def summary_lines(result: dict) -> list[str]:
    """One line per op: each implementation's geometric-mean ratio to copy (measured rows /
    rows it has the op for; '—' where it has no such op)."""
    lines = []
    for op in [o for o in OPS if any(r["op"] == o and r["timing"] == "events" for r in result["rows"])]:
        parts = [f"{impl} {_mean_cell(mean, k, total, _all_skipped(result, op, impl))}"
                 for impl, (mean, k, total) in geomean_ratios(result, op).items()]
        lines.append(f"{op}: " + ", ".join(parts))
    return lines


def markdown(result: dict) -> str:
    rows = result["rows"]
    big = [r for r in rows if r["timing"] == "events"]
    small = [r for r in rows if r["timing"] == "graph"]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in rows)]
    copy = f"{result['copy_gbps']:.0f} GB/s" if result.get("copy_gbps") else "not measured yet"
    out = [f"# normgen benchmark: {result['gpu']}, {result['date']}", "",
           f"M x N = 2^27 elements; ratio = effective bandwidth / device-to-device copy ({copy}, read + "
           f"write, same run); torch {result['torch']}. Marks: — no such op, × failed, … not run "
           f"(time budget), ! a peer's outputs differ from torch eager's; footnotes below each table.", ""]
    mode = "quick (every other power of two, and every N that is not one)" if result.get("quick") else "full"
    state = "" if result.get("complete", True) else " **Incomplete**: still running, or cut short."
    if result.get("skipped_cases"):
        state = f" **Incomplete**: the time budget ({result['budget_s']:.0f} s) skipped {result['skipped_cases']} cases."
    if "elapsed_s" in result:
        out += [f"Run: {mode}, {result['elapsed_s']:.0f} s.{state}", ""]
    peers = result.get("peers", {})
    if peers:
        out += ["Peers:", ""]
        for name, st in peers.items():
            out.append(f"- {name} {st.get('version') or ''}: measured (calls listed at the end)".replace(" :", ":")
                       if st["available"] else f"- {name}: not measured, not importable ({st['reason']})")
        out.append("")
    ops = [o for o in OPS if any(r["op"] == o for r in big)]
    if ops:
        cols = [i for i in impls if any(r["impl"] == i for r in big)]
        out += ["## Summary: geometric-mean ratio to copy (rows measured / rows run)", "",
                "| op | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for op in ops:
            means = geomean_ratios(result, op)
            cells = []
            for impl in cols:
                mean, k, total = means.get(impl, (None, 0, 0))
                cells.append(_mean_cell(mean, k, total, _all_skipped(result, op, impl)))
            out.append(f"| {op} | " + " | ".join(cells) + " |")
        out.append("")
    for op in ops:
        mine = [r for r in big if r["op"] == op]
        cols = [i for i in impls if any(r["impl"] == i for r in mine)]
        for dtype in [d for d in DTYPES if any(r["dtype"] == d for r in mine)]:
            notes = _Notes()
            out += [f"## {op}, {dtype}", "", "| N | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
            for n in sorted({r["n"] for r in mine if r["dtype"] == dtype}):
                at = {r["impl"]: r for r in mine if (r["dtype"], r["n"]) == (dtype, n)}
                out.append(f"| {n} | " + " | ".join(_cell(at.get(i), notes, lambda r: f"{r['ratio']:.3f}")
                                                   for i in cols) + " |")
            out += [""] + notes.lines()
    if small:
        notes = _Notes()
        cols = [i for i in impls if any(r["impl"] == i for r in small)]
        out += ["## Small shapes, bf16 (µs per call, CUDA graph replay)", "",
                "| op | M x N | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for op, m, n in sorted({(r["op"], r["m"], r["n"]) for r in small},
                               key=lambda k: (list(OPS).index(k[0]) if k[0] in OPS else 99, k[2], k[1])):
            at = {r["impl"]: r for r in small if (r["op"], r["m"], r["n"]) == (op, m, n)}
            out.append(f"| {op} | {m} x {n} | " + " | ".join(_cell(at.get(i), notes, lambda r: f"{r['us']:.2f}")
                                                           for i in cols) + " |")
        out += [""] + notes.lines()
    host, host_notes = result.get("host_us") or {}, result.get("host_notes") or {}
    if host or host_notes:
        out += ["## Host cost of one eager call (LayerNorm 1 x 4096 bf16, no sync)", ""]
        out += [f"- {k}: {host[k]:.2f} µs" if k in host else f"- {k}: × {host_notes[k]}"
                for k in IMPLS if k in host or k in host_notes]
        out.append("")
    measured = [p for p, st in peers.items() if st["available"]]
    if measured:
        out += ["## Peer calls (forward only, no autograd)", ""]
        for name in measured:
            out += [f"- {name}, {op}: {PEER_CALLS[name].get(op) or 'no such op (' + PEER_MISSING[name][op] + ')'}"
                    for op in OPS if op in ops]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


COLORS = {"normgen": "C3", "torch": "C0", "torch.compile": "C1", "quack": "C2", "liger": "C4"}


def plot(result: dict, path: Path) -> None:
    """One panel per op and dtype: ratio to copy against N, a line through the powers of two
    per implementation, N that are not powers of two as open markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    big = [r for r in result["rows"] if r["timing"] == "events" and _status(r) == OK]
    panels = sorted({(r["op"], r["dtype"]) for r in big},
                    key=lambda k: (list(OPS).index(k[0]), DTYPES.index(k[1])))
    if not panels:
        return
    cols = min(len(panels), 3)
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), sharey=True, squeeze=False)
    handles = {}
    for ax, (op, dtype) in zip(axes.flat, panels):
        for impl in IMPLS:
            pts = sorted((r["n"], r["ratio"]) for r in big if (r["op"], r["dtype"], r["impl"]) == (op, dtype, impl))
            pow2 = [p for p in pts if p[0] & (p[0] - 1) == 0]
            odd = [p for p in pts if p[0] & (p[0] - 1)]
            if pow2:
                (handles[impl],) = ax.plot(*zip(*pow2), marker="o", ms=4, color=COLORS[impl], label=impl)
            if odd:
                ax.plot(*zip(*odd), ls="none", marker="D", ms=5, mfc="none", color=COLORS[impl])
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{op} {dtype}")
        ax.set_xlabel("N (M x N = 2^27; open: not a power of two)")
        ax.set_ylim(0, 1.1)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("bandwidth / copy")
    order = [i for i in IMPLS if i in handles]
    fig.legend([handles[i] for i in order], order, loc="lower center", ncol=len(order), frameon=False)
    copy = f"copy {result['copy_gbps']:.0f} GB/s" if result.get("copy_gbps") else ""
    fig.suptitle(f"{result['gpu']}, {result['date']} ({copy})")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def file_stem(gpu: str) -> str:
    """The output files' name: bench-h200.* on an H200 (the committed H100 table stays)."""
    return "bench-h200" if "H200" in gpu.upper() else "bench"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a reader (or a kill) never sees half a file


def write_outputs(result: dict, out: Path, final: bool = False, log=None) -> list:
    """Write <stem>.json and <stem>.md under out (stem: file_stem of the GPU's name), and
    with final the plot <stem>.png (skipped, with a log line, without matplotlib)."""
    stem = file_stem(result.get("gpu") or "")
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    _write(paths[0], json.dumps(result, indent=1) + "\n")
    _write(paths[1], markdown(result))
    if final:
        try:
            plot(result, out / f"{stem}.png")
            paths.append(out / f"{stem}.png")
        except ImportError as e:
            (log or print)(f"no plot: {reason(e)}")
    return paths
