"""The GPU suite's one summary line (scripts/device_suite.sh): the pytest shards' counts added
up and the longest shard's time, marked INCOMPLETE where LIMIT stopped a shard before its
last test (timeout's SIGINT: pytest reports a KeyboardInterrupt, then what ran so far).

Usage: python scripts/suite_summary.py JOBS LIMIT SHARD_LOG..."""
from __future__ import annotations

import re
import sys
from pathlib import Path

_SUMMARY = re.compile(r"\d+ (passed|failed|errors?|skipped)")  # a shard's last line starts so
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected)")
_TIME = re.compile(r" in ([\d.]+)s")


def summary(logs: list[str], jobs: int, limit: str = "") -> str:
    counts: dict[str, int] = {}
    secs, shards, cut = 0.0, 0, 0
    for text in logs:
        cut += "KeyboardInterrupt" in text
        for line in filter(_SUMMARY.match, text.splitlines()):
            shards += 1
            for n, what in _COUNT.findall(line):
                counts[what] = counts.get(what, 0) + int(n)
            t = _TIME.search(line)
            secs = max(secs, float(t.group(1))) if t else secs
    out = ", ".join(f"{v} {k}" for k, v in counts.items() if k != "deselected")
    out += f" in {secs:.2f}s ({shards} shards of {jobs})"
    if cut:
        out += f"; INCOMPLETE: {cut} shards stopped at LIMIT={limit} before their last test"
    return out


if __name__ == "__main__":
    jobs, limit, *paths = sys.argv[1:]
    print(summary([Path(p).read_text(errors="replace") for p in paths], int(jobs), limit))
