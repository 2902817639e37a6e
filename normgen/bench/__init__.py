"""The side-by-side benchmark: `python -m normgen.bench [--out docs] [--quick]` on a GPU
machine with torch. Measures, in one run and on the same inputs, a device-to-device copy
(the ceiling), normgen, torch eager, torch.compile, and the peers quack and Liger where
they import (their forward calls, no autograd); writes bench.json, bench.md and bench.png
(bench-h200.* on an H200). Effective bandwidth = bytes that must move / median time per
call, timed over back-to-back calls; small shapes by CUDA graph replay; the host cost of
an eager call. A case an implementation cannot run is recorded (no such op, failed with
the error's first line, or skipped by the time budget), never dropped. bench.json and
bench.md are rewritten after every case, so a run cut short keeps what it measured.

`import normgen.bench` imports neither torch nor matplotlib (they are imported inside the
functions that need them)."""
# The package, by what each module holds: status (a row's status, an exception as one line),
# timing (the timers and the copy), ops (the operations, their calls and sizes, the cases),
# peers (quack and Liger, a case's calls, the output checks), report (bench.md, the plot,
# the files), measure (the run), cli (the command line; __main__ runs it). The names below
# are the package's public ones, as in the single module it was; a test that patches one
# patches it in the module that looks it up.
from __future__ import annotations

from .status import ERR_LIMIT, FAILED, NO_OP, OK, SKIPPED, reason
from .timing import ELEMENTS, copy_gbps, host_cost_us, time_events, time_graph
from .ops import (BIG_N, CALLS, DTYPES, ODD_N, OPS, SMALL, SMALL_RMS, add_layernorm_impls,
                  call_spec, cases, layernorm_impls, prebuild, quant_layernorm_impls,
                  rmsnorm_impls, sizes)
from .peers import (IMPLS, PEER_BUILD, PEER_CALLS, PEER_DIST, PEER_MISSING, PEER_MODULES, PEERS,
                    Absent, case_impls, probe_peers)
from .report import (COLORS, MARKS, file_stem, geomean_ratios, markdown, plot, summary_lines,
                     write_outputs)
from .measure import DEFAULT_BUDGET_S, HOST_IMPLS, run, small_and_host
from .cli import main

__all__ = [
    "OK", "NO_OP", "FAILED", "SKIPPED", "ERR_LIMIT", "reason", "ELEMENTS", "time_events",
    "time_graph", "host_cost_us", "copy_gbps", "BIG_N", "ODD_N", "SMALL", "SMALL_RMS", "DTYPES",
    "layernorm_impls", "add_layernorm_impls", "quant_layernorm_impls", "rmsnorm_impls", "OPS",
    "CALLS", "call_spec", "sizes", "cases", "prebuild", "PEERS", "IMPLS", "PEER_MODULES",
    "PEER_DIST", "PEER_CALLS", "PEER_MISSING", "probe_peers", "PEER_BUILD", "Absent",
    "case_impls", "MARKS", "geomean_ratios", "summary_lines", "markdown", "COLORS", "plot",
    "file_stem", "write_outputs", "HOST_IMPLS", "DEFAULT_BUDGET_S", "run", "small_and_host",
    "main",
]
