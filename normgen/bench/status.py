"""What became of a case: a row's status, the limit past which a peer's outputs are flagged,
and an exception as one line (a failed row's note)."""
from __future__ import annotations

import re

# A row's status: measured, the implementation has no such operation, it raised, or the
# time budget was spent before the case.
OK, NO_OP, FAILED, SKIPPED = "ok", "no such op", "failed", "skipped"
ERR_LIMIT = 0.02  # a peer whose outputs differ from torch eager's by more is flagged

_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours some peers' messages carry


def reason(e: BaseException) -> str:
    """An exception as one line: its type and its message's first line, without colours."""
    lines = _ANSI.sub("", str(e)).strip().splitlines()
    text = f"{type(e).__name__}: {lines[0].strip()}" if lines else type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."
