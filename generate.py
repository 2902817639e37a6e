#!/usr/bin/env python3
"""Generate normgen kernel instances: `python generate.py --help`."""
from normgen.cli import main

if __name__ == "__main__":
    main()
