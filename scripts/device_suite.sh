#!/usr/bin/env bash
# On the GPU machine: the whole GPU test suite (and, if present, the benchmark), logs under
# $OUT, a short summary last. Usage: bash scripts/device_suite.sh [pytest args...]
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/normgen-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
python3 -m pytest -q -p no:cacheprovider --maxfail=30 -rfE "${@:-tests}" 2>&1 | tee "$OUT/pytest.log" | tail -40
echo "== summary"; cat "$OUT/gpu.txt"; tail -1 "$OUT/pytest.log"
