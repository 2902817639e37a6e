#!/usr/bin/env bash
# The GPU suite, as run on the GPU machine: logs under $OUT, a short summary last.
# Usage: bash scripts/device_suite.sh [pytest args...]   (default: tests)
# JOBS pytest processes share the run (--shard k/JOBS), spread over the machine's GPUs
# (CUDA_VISIBLE_DEVICES, shard k on GPU k mod GPUS): the suite is bound by NVRTC and the
# NumPy reference on the CPU, not by the GPU, so JOBS defaults to 6 a GPU while the CPU cores
# allow it (one 16-core GPU machine: 6); more than 8 on one GPU can exhaust its memory (each
# process's CuPy pool keeps gigabytes). With EXTRA=1 (the default) it then runs
# test_gpu_instances.py over each selection in scripts/extra_selections.txt, generated into
# a folder of its own, all at once. LIMIT (seconds, default none) interrupts each pytest so
# that it still reports what failed so far. Then, with SANITIZE=1 (the default),
# scripts/sanitize.py (compute-sanitizer's four tools over one instance of each pipeline x
# epilogue; SANITIZE_ARGS adds its flags), and with SOAK_MINUTES set (default unset)
# scripts/soak.py for that many minutes (SOAK_ARGS adds flags). Each one's last line goes
# into the summary. Hypothesis keeps its examples in $OUT/hypothesis (HYPOTHESIS_DATABASE_DIR).
# tests/test_install.py is left to CI: its wheel builds fetch build dependencies, and the GPU
# machine has no network. A shard that LIMIT stops marks the summary line INCOMPLETE.
# SHARDS=K0-K1 runs only shards K0..K1 of JOBS: a suite longer than one call, split over
# calls on one machine (give each call the same JOBS; add up their summary lines; the extra
# selections and the sanitizer run in each call that leaves EXTRA and SANITIZE at 1).
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/normgen-out}"; mkdir -p "$OUT"
rm -f "$OUT"/extra*.log "$OUT"/sanitize.log "$OUT"/soak.log  # an earlier run's, which the summary would report as this one's
export HYPOTHESIS_DATABASE_DIR="$OUT/hypothesis"; mkdir -p "$HYPOTHESIS_DATABASE_DIR"
GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"; [ "$GPUS" -ge 1 ] || GPUS=1
CORES="$(nproc)"; PER_GPU=$(( CORES / GPUS * 6 / 16 )); [ "$PER_GPU" -ge 1 ] || PER_GPU=1
[ "$PER_GPU" -le 6 ] || PER_GPU=6
JOBS="${JOBS:-$(( PER_GPU * GPUS ))}"
SHARDS="${SHARDS:-0-$((JOBS - 1))}"; FIRST="${SHARDS%-*}"; LAST="${SHARDS#*-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1
run() { if [ -n "${LIMIT:-}" ]; then timeout -s INT "$LIMIT" "$@"; else "$@"; fi; }
for k in $(seq "$FIRST" "$LAST"); do
  CUDA_VISIBLE_DEVICES=$(( k % GPUS )) HYPOTHESIS_DATABASE_DIR="$OUT/hypothesis" \
    run python3 -m pytest -q -p no:cacheprovider --maxfail=30 -rfE --durations=5 --ignore=tests/test_install.py \
    --shard "$k/$JOBS" "${@:-tests}" \
    > "$OUT/pytest.$k.log" 2>&1 &
done
wait
# one line for the run: the shards' counts added up, the longest shard's time, INCOMPLETE
# where LIMIT stopped a shard
total="$(python3 scripts/suite_summary.py "$JOBS" "${LIMIT:-}" "$OUT"/pytest.[0-9]*.log)"
for k in $(seq "$FIRST" "$LAST"); do cat "$OUT/pytest.$k.log"; done > "$OUT/pytest.log"
rm -f "$OUT"/pytest.[0-9]*.log
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40
echo "$total" >> "$OUT/pytest.log"
echo "pytest: $total"  # now, in case a later stage outlives the call
i=0
if [ "${EXTRA:-1}" = 1 ]; then
  while IFS= read -r flags; do
    case "$flags" in ''|'#'*) continue;; esac
    i=$((i + 1)); dir="$(mktemp -d)"  # not under $OUT: an interrupted run leaves only logs there
    ( eval "python3 generate.py --out $dir $flags" > "$OUT/extra$i.log" 2>&1
      CUDA_VISIBLE_DEVICES=$(( i % GPUS )) NORMGEN_GENERATED_DIR="$dir" run python3 -m pytest -q -p no:cacheprovider --maxfail=10 -rfE \
        tests/test_gpu_instances.py --select "$flags" >> "$OUT/extra$i.log" 2>&1
      rm -rf "$dir" ) &
  done < scripts/extra_selections.txt
  wait
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  # shellcheck disable=SC2086  # SANITIZE_ARGS: flags, split on purpose
  python3 scripts/sanitize.py --out "$OUT/sanitize" ${SANITIZE_ARGS:-} > "$OUT/sanitize.log" 2>&1
  grep -E "^FAIL" "$OUT/sanitize.log" | head -20
fi
if [ -n "${SOAK_MINUTES:-}" ]; then
  # shellcheck disable=SC2086  # SOAK_ARGS: flags, split on purpose
  python3 scripts/soak.py --minutes "$SOAK_MINUTES" --out "$OUT/soak" ${SOAK_ARGS:-} > "$OUT/soak.log" 2>&1
fi
echo "== summary"; cat "$OUT/gpu.txt"; echo "suite: $total"
for f in "$OUT"/extra*.log; do [ -e "$f" ] && echo "$(basename "$f" .log): $(tail -1 "$f")"; done
for f in "$OUT"/sanitize.log "$OUT"/soak.log; do [ -e "$f" ] && echo "$(basename "$f" .log): $(tail -1 "$f")"; done
# the status: 1 where a shard failed, erred or was stopped, or the sanitizer failed a run
case "$total" in *failed*|*error*|*INCOMPLETE*) exit 1;; esac
! grep -qs "^FAIL" "$OUT/sanitize.log"
