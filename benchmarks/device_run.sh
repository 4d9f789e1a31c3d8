#!/usr/bin/env bash
# GPU benchmark run for the device machine: installs the ember wheels found in dist/ (or falls
# back to the source tree), then runs the GPU-size suite under a total time budget with several
# worker processes at once (their compiles overlap; their measurements never do), writing
# results.jsonl, dashboard.md, speedup.png (when matplotlib imports) and logs into $OUT.
#
#   bash benchmarks/device_run.sh [runner arguments...]     e.g. --dtypes bf16 --models hf_gpt2
#
# Environment: OUT (default benchmarks/results/device), BENCH_BUDGET seconds for the runner
# (default 540, so that installs, start-up, the runner and the report fit a 10-minute call),
# BENCH_JOBS concurrent workers (default 5, for 16 cores and 80 GB), PYTHON (default python3).
# Models run heaviest compile first, so that the last ones to start are short. Every case is
# appended to results.jsonl as it finishes: a run cut short keeps what it measured.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/benchmarks/results/device}"
BUDGET="${BENCH_BUDGET:-540}"
JOBS="${BENCH_JOBS:-5}"
# Heaviest compile first (longest-first packing of models onto the workers); --models overrides.
MODELS="${BENCH_MODELS:-hf_t5,hf_resnet,hf_bert,hf_llama,hf_vit,hf_convnext,hf_gpt2,timm_efficientnet_b0,timm_resnet50,timm_vit_small,attention_block,small_cnn,mlp}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1

echo "== ember device benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET}s, ${JOBS} jobs, $(nproc) cores"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" - <<'PY' || true
import importlib.metadata as m, platform
names = ("torch", "triton", "transformers", "timm", "torchvision", "matplotlib", "bytecode", "sympy")
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print("python", platform.python_version(), {name: version(name) for name in names})
PY

# ember: wheels from dist/ into a private folder (no network, no dependencies: torch and the
# rest are already on the machine); without wheels, the runner adds packages/*/src itself.
shopt -s nullglob
wheels=(dist/ember*.whl)
if (( ${#wheels[@]} )); then
    target="$(mktemp -d /tmp/ember-wheels.XXXXXX)"
    if "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$target" "${wheels[@]}"; then
        export PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}"
        echo "ember: installed ${#wheels[@]} wheels: ${wheels[*]}"
    else
        echo "ember: wheel install failed; falling back to the source tree"
    fi
else
    echo "ember: no wheels in dist/; using the source tree (packages/*/src)"
fi

# The runner stops starting cases when its budget is spent; timeout is the backstop.
timeout --kill-after=15 $((BUDGET + 40)) "$PYTHON" -m benchmarks.run \
    --device cuda --size gpu --out "$OUT" --budget "$BUDGET" --jobs "$JOBS" --models "$MODELS" \
    --case-timeout 150 --model-budget 240 --steps 20 --warmup 5 --timing-allowance 10 "$@"
echo "== runner exit status $?"

# Rebuild the dashboard (and chart) from whatever was written, even after a timeout.
"$PYTHON" -m benchmarks.report "$OUT/results.jsonl" --out "$OUT" || true
if [[ -f "$OUT/worker.log" ]]; then  # keep the returned log small
    tail -c 2000000 "$OUT/worker.log" > "$OUT/worker.log.tail" && mv "$OUT/worker.log.tail" "$OUT/worker.log"
fi
ls -la "$OUT"
