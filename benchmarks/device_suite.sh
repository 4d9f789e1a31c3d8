#!/usr/bin/env bash
# The broad GPU correctness suite for the device machine: every model of the suite at its
# `medium` size (realistic widths and resolutions, few layers), bf16 autocast, inference and
# a training step (dropout and stochastic depth on, see benchmarks/dropout.py), under eager,
# torch.compile and ember's default backend, each model in its own worker process. Optionally
# (SANITIZE_MODELS) benchmarks/sanitize.py runs those models' ember kernels under
# compute-sanitizer memcheck at the same time (SANITIZE_SIZE, default small).
#
#   bash benchmarks/device_suite.sh [runner arguments...]
#
# Carry `.whl/` (the `bytecode` wheel) to a bare device image: the script installs it and puts
# the source tree on PYTHONPATH when ember is not installed.
#
# Environment: OUT (default benchmarks/results/suite), BENCH_BUDGET runner seconds (default
# 500), BENCH_JOBS workers (default 10), BENCH_CASE_TIMEOUT seconds a case (default 240, as
# run 7), BENCH_MODELS (default: all, in the order below),
# BENCH_BACKENDS (default eager,torch.compile,ember:inductor), SANITIZE_MODELS (comma list,
# default none), SANITIZE_JOBS (default 3), SANITIZE_MODES, SANITIZE_SIZE, SANITIZE_ONLY=1
# (no suite, only the sanitizer), PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/benchmarks/results/suite}"
BUDGET="${BENCH_BUDGET:-500}"
JOBS="${BENCH_JOBS:-10}"
BACKENDS="${BENCH_BACKENDS:-eager,torch.compile,ember:inductor}"
PYTHON="${PYTHON:-python3}"
SANITIZE_MODELS="${SANITIZE_MODELS:-}"
SANITIZE_JOBS="${SANITIZE_JOBS:-3}"
SANITIZE_MODES="${SANITIZE_MODES:-inference,training}"
# ember's Triton compile pools: one per worker process, capped so that 10+ workers fit in memory
export EMBER_COMPILE_THREADS="${EMBER_COMPILE_THREADS:-3}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

# A bare device image: `bytecode`, the source tree and its entry points (device_env.sh).
source benchmarks/device_env.sh
"$PYTHON" -c 'import ember.capture as c; print("ember backends:", c.list_backends())'

# The models the issue names first (their failures matter most), then the rest of the suite.
FIRST="hf_layoutlm,hf_deberta_v2,hf_opt,hf_bart,hf_albert,hf_efficientnet,timm_swin_tiny,hf_swin"
ALL="$("$PYTHON" -c 'from benchmarks.models import SUITE; print(",".join(s.name for s in SUITE))')"
MODELS="${BENCH_MODELS:-$("$PYTHON" - "$FIRST" "$ALL" <<'PY'
import sys
first, every = sys.argv[1].split(","), sys.argv[2].split(",")
print(",".join(first + [name for name in every if name not in first]))
PY
)}"

echo "== ember GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s, ${JOBS} jobs, $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
echo "models: $MODELS"

sanitizer_pid=""
if [[ -n "$SANITIZE_MODELS" ]]; then
    echo "== compute-sanitizer memcheck on $SANITIZE_MODELS (benchmarks/sanitize.py)"
    timeout --kill-after=15 $((BUDGET + 30)) "$PYTHON" -m benchmarks.sanitize \
        --models "$SANITIZE_MODELS" --jobs "$SANITIZE_JOBS" --modes "$SANITIZE_MODES" \
        --size "${SANITIZE_SIZE:-small}" --timeout "$BUDGET" --out "$OUT/sanitizer" \
        > "$OUT/sanitizer.log" 2>&1 &
    sanitizer_pid=$!
fi

if [[ -z "${SANITIZE_ONLY:-}" ]]; then
    timeout --kill-after=15 $((BUDGET + 40)) "$PYTHON" -m benchmarks.run \
        --device cuda --size medium --dtypes bf16 --backends "$BACKENDS" --out "$OUT" \
        --budget "$BUDGET" --jobs "$JOBS" --no-pause --models "$MODELS" --no-warm-compile \
        --case-timeout "${BENCH_CASE_TIMEOUT:-240}" --model-budget 300 --steps 5 --warmup 2 \
        --timing-allowance 2 "$@"
    echo "== runner exit status $?"
fi

if [[ -n "$sanitizer_pid" ]]; then
    wait "$sanitizer_pid"
    echo "== compute-sanitizer exit status $? (0: no errors)"
    cat "$OUT/sanitizer/summary.md" 2>/dev/null || tail -40 "$OUT/sanitizer.log"
fi

[[ -f "$OUT/results.jsonl" ]] && { "$PYTHON" -m benchmarks.report "$OUT/results.jsonl" --out "$OUT" || true; }
if [[ -f "$OUT/worker.log" ]]; then  # keep the returned log small
    tail -c 3000000 "$OUT/worker.log" > "$OUT/worker.log.tail" && mv "$OUT/worker.log.tail" "$OUT/worker.log"
fi
ls -la "$OUT"
