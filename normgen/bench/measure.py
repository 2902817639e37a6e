"""The run: every case timed for every implementation asked for (a row each, whatever
happened), then the small shapes by graph replay and the host cost of an eager call."""
from __future__ import annotations

import datetime
import time
from typing import Optional

from .ops import OPS, SMALL, SMALL_RMS, cases, prebuild
from .peers import IMPLS, PEER_MISSING, PEERS, Absent, _check, _recover, _reference, case_impls, probe_peers
from .status import ERR_LIMIT, FAILED, NO_OP, OK, SKIPPED, reason
from .timing import ELEMENTS, _torch, copy_gbps, host_cost_us, time_events, time_graph

HOST_IMPLS = ("normgen", "torch", "quack", "liger")  # eager host cost of one call
DEFAULT_BUDGET_S = 480.0  # large-shape cases start only this long after the run began


def run(quick: bool, impls, ops, log, save=None, budget: Optional[float] = None, start: Optional[float] = None) -> dict:
    """Time every case of ops (see cases) for the implementations asked for, then the small
    shapes (graph replay) and the host cost. save(result) is called after every case;
    budget: seconds from `start` after which the remaining large-shape cases are recorded as
    skipped (None: no limit)."""
    torch = _torch()
    start = time.monotonic() if start is None else start
    save = save or (lambda result: None)
    torch.manual_seed(0)
    peers = probe_peers([p for p in PEERS if p in impls])
    for name, st in peers.items():
        log(f"{name}: {st.get('version') or '?'}" if st["available"] else f"{name}: not importable ({st['reason']})")
    result = dict(gpu=torch.cuda.get_device_name(), date=datetime.date.today().isoformat(),
                  torch=torch.__version__, copy_gbps=None, elements=ELEMENTS, quick=quick,
                  budget_s=budget, impls=[i for i in IMPLS if i in impls], peers=peers,
                  rows=[], host_us={}, host_notes={}, complete=False, elapsed_s=0.0)
    rows = result["rows"]

    def checkpoint():
        result["elapsed_s"] = round(time.monotonic() - start, 1)
        save(result)

    if "normgen" in impls:
        log(f"built {prebuild(quick, ops)} instances")
    ceiling = result["copy_gbps"] = copy_gbps()
    log(f"copy: {ceiling:.0f} GB/s")
    checkpoint()
    skipped = 0
    for op, dtype, n in cases(ops, quick):
        m = ELEMENTS // n
        base = dict(op=op, dtype=dtype, n=n, m=m, timing="events")
        if budget and time.monotonic() - start > budget:
            skipped += 1
            for impl in result["impls"]:
                if impl in PEERS and not peers[impl]["available"]:
                    continue
                missing = PEER_MISSING.get(impl, {}).get(op)
                rows.append(dict(base, impl=impl, ms=None, gbps=None, ratio=None,
                                 status=NO_OP if missing else SKIPPED,
                                 note=missing or f"not run: the time budget ({budget:.0f} s) was spent"))
            continue
        _, _, _, must_move = OPS[op]
        dt = getattr(torch, dtype)
        x = torch.randn(m, n, device="cuda", dtype=dt)
        r = torch.randn(m, n, device="cuda", dtype=dt) if op.startswith("add") else None
        g = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dt)
        b = torch.randn(n, device="cuda", dtype=dt)
        nbytes = must_move(m, n, x.element_size())
        fns = case_impls(op, x, r, g, b, impls, peers)
        ref = _reference(fns)
        for impl, fn in fns.items():
            row = dict(base, impl=impl, ms=None, gbps=None, ratio=None)
            if isinstance(fn, Absent):
                rows.append(dict(row, status=fn.status, note=fn.note))
                log(f"{op} {dtype:9s} N={n:6d} {impl:14s} {fn.status}: {fn.note}")
                continue
            try:
                err = _check(impl, fn, ref)
                ms = time_events(fn)
            except Exception as e:
                _recover()
                rows.append(dict(row, status=FAILED, note=reason(e)))
                log(f"{op} {dtype:9s} N={n:6d} {impl:14s} failed: {reason(e)}")
                continue
            gbps = nbytes / ms / 1e6
            rows.append(dict(row, ms=ms, gbps=gbps, ratio=gbps / ceiling, status=OK, note=None, err=err))
            log(f"{op} {dtype:9s} N={n:6d} {impl:14s} {ms * 1e3:8.1f} us {gbps:6.0f} GB/s {gbps / ceiling:6.3f}"
                + (f" (differs from torch by {err:.3g})" if err is not None and err > ERR_LIMIT else ""))
        del x, r, g, b, fns, ref
        torch.cuda.empty_cache()
        checkpoint()
    if skipped:
        log(f"time budget spent: {skipped} large-shape cases skipped")
    result["skipped_cases"] = skipped
    small_and_host(impls, ops, peers, result, log)
    result["complete"] = not skipped
    checkpoint()
    return result


def small_and_host(impls, ops, peers, result: dict, log) -> None:
    """LayerNorm and RMSNorm at small shapes (bf16, graph replay), appended to the rows; the
    host cost of one eager LayerNorm call (1 x 4096 bf16) per implementation."""
    torch = _torch()
    rows = result["rows"]
    for op, shapes in (("layernorm", SMALL), ("rmsnorm", SMALL_RMS)):
        if op not in ops:
            continue
        for m, n in shapes:
            dt = torch.bfloat16
            x = torch.randn(m, n, device="cuda", dtype=dt)
            g = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dt)
            b = torch.randn(n, device="cuda", dtype=dt)
            fns = case_impls(op, x, None, g, b, impls, peers)
            ref = _reference(fns)
            for impl, fn in fns.items():
                row = dict(op=op, dtype="bfloat16", n=n, m=m, impl=impl, us=None, timing="graph")
                if isinstance(fn, Absent):
                    rows.append(dict(row, status=fn.status, note=fn.note))
                    continue
                try:
                    err = _check(impl, fn, ref)
                    us = time_graph(fn) * 1e3
                except Exception as e:
                    _recover()
                    rows.append(dict(row, status=FAILED, note=reason(e)))
                    log(f"small {op} bf16 {m:4d} x {n:5d} {impl:14s} failed: {reason(e)}")
                    continue
                rows.append(dict(row, us=us, status=OK, note=None, err=err))
                log(f"small {op} bf16 {m:4d} x {n:5d} {impl:14s} {us:6.2f} us (graph replay)")
    if "layernorm" not in ops:
        return
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    g, b = (torch.randn(4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    fns = case_impls("layernorm", x, None, g, b, [i for i in HOST_IMPLS if i in impls], peers)
    for impl, fn in fns.items():
        if isinstance(fn, Absent):
            result["host_notes"][impl] = fn.note
            continue
        try:
            result["host_us"][impl] = host_cost_us(fn)
        except Exception as e:
            _recover()
            result["host_notes"][impl] = reason(e)
    log("host cost per call: " + ", ".join(f"{k} {v:.2f} us" for k, v in result["host_us"].items()))
