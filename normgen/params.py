"""The kernel's one argument, a Params struct passed by value. Its fields are listed here
once: the C++ struct is rendered from this list and the host packs it with PACKER."""
from __future__ import annotations

import struct

# (name, C++ type, struct format). 8-byte fields first, so neither side inserts padding.
FIELDS: tuple[tuple[str, str, str], ...] = (
    # inputs
    ("x", "const void*", "Q"),
    ("residual", "const void*", "Q"),
    ("x_bias", "const void*", "Q"),
    ("gamma", "const void*", "Q"),
    ("beta", "const void*", "Q"),
    ("smooth", "const void*", "Q"),
    ("qscale", "const void*", "Q"),
    # outputs
    ("y", "void*", "Q"),
    ("res_out", "void*", "Q"),
    ("yscale", "void*", "Q"),
    ("mean", "void*", "Q"),
    ("rstd", "void*", "Q"),
    # row r of x starts at (r / inner) * x_so + (r % inner) * x_si elements
    ("rows", "long long", "q"),
    ("inner", "long long", "q"),
    ("x_so", "long long", "q"),
    ("x_si", "long long", "q"),
    ("r_so", "long long", "q"),
    ("r_si", "long long", "q"),
    # scalars
    ("n", "int", "i"),
    ("eps", "float", "f"),
    ("weight_offset", "float", "f"),
    ("pad_", "int", "i"),
)

NAMES = tuple(f[0] for f in FIELDS)
PACKER = struct.Struct("=" + "".join(f[2] for f in FIELDS))
assert PACKER.size % 8 == 0
