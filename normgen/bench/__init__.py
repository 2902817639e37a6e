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
# are what scripts/tune.py and the tests read through the package; a test that patches a
# name patches it in the module that looks it up.
from __future__ import annotations

from .status import reason  # noqa: F401
from .timing import ELEMENTS, copy_gbps, time_events  # noqa: F401
from .ops import OPS, OTHER_N, SMALL_RMS, call_spec, cases, sizes  # noqa: F401
from .peers import IMPLS, PEER_CALLS, PEER_MISSING, PEERS  # noqa: F401
from .report import markdown, summary_lines, write_outputs  # noqa: F401
from .measure import run  # noqa: F401
from .cli import main  # noqa: F401
