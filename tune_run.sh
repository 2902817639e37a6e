#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
timeout 400 python3 scripts/tune_tiles.py "$@" 2>&1 | tee "$OUT/tune.log" | grep -v Warning
