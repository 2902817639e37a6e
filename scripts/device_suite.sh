#!/usr/bin/env bash
# On the GPU machine: the GPU test suite, logs under $OUT, a short summary last.
# Usage: bash scripts/device_suite.sh [pytest args...]   (default: tests)
# With EXTRA=1 (the default) it also runs test_gpu_instances.py over each selection in
# scripts/extra_selections.txt, generated into a folder of its own. LIMIT (seconds, default
# none) interrupts pytest so that it still reports what failed so far.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/normgen-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
run() { if [ -n "${LIMIT:-}" ]; then timeout -s INT "$LIMIT" "$@"; else "$@"; fi; }
run python3 -m pytest -q -p no:cacheprovider --maxfail=30 -rfE "${@:-tests}" > "$OUT/pytest.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -40
i=0
if [ "${EXTRA:-1}" = 1 ]; then
  while IFS= read -r flags; do
    case "$flags" in ''|'#'*) continue;; esac
    i=$((i + 1)); dir="$OUT/extra$i"
    eval "python3 generate.py --out $dir $flags" > "$OUT/extra$i.log" 2>&1
    NORMGEN_GENERATED_DIR="$dir" run python3 -m pytest -q -p no:cacheprovider --maxfail=10 -rfE \
      tests/test_gpu_instances.py --select "$flags" >> "$OUT/extra$i.log" 2>&1
    echo "extra $i ($flags): $(tail -1 "$OUT/extra$i.log")"; rm -rf "$dir"
  done < scripts/extra_selections.txt
fi
echo "== summary"; cat "$OUT/gpu.txt"; tail -1 "$OUT/pytest.log"
for f in "$OUT"/extra*.log; do [ -e "$f" ] && echo "$(basename "$f"): $(tail -1 "$f")"; done
