#!/usr/bin/env bash
# Checks specviz on a CUDA machine and writes gpu_report.md: the decoder's tests with their models on CUDA
# (SPECVIZ_TEST_DEVICE=cuda: greedy == the target's own greedy, exact laws, caches == recompute, batches),
# the hub/GPU tests, the benchmark of the bundled pair in bfloat16 on CUDA, the tree lab (chains against token
# trees) and forward-pass costs of larger random targets (scripts/measure/gpu_cost.py). The app and browser tests are
# the CPU suite's (CI's) job.
# Usage: scripts/measure/gpu_check.sh [report path]    (from anywhere; exits 2 without CUDA)
#        GPU_CHECK_DEVICE=cpu scripts/measure/gpu_check.sh dry.md   a dry run of the same steps on the CPU
#                                                          (float32, small sizes: checks the script)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPORT="${1:-gpu_report.md}"
PY="${PYTHON:-python}"
DEV="${GPU_CHECK_DEVICE:-cuda}"
if [ "$DEV" = cpu ]; then
    BENCH_ARGS=(--repeats 1 --max-new-tokens 16); COST_ARGS=(--sizes 2x64,2x128 --dtype float32 --reps 3)
    TREE_ARGS=(--repeats 1 --max-new-tokens 16)
else
    BENCH_ARGS=(--repeats 3); COST_ARGS=(); TREE_ARGS=(--repeats 2)
fi

if [ "$DEV" != cpu ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check: no CUDA device visible to torch ($("$PY" -c 'import torch; print(torch.__version__)')); nothing to check" >&2
    exit 2
fi

DRAFT=$("$PY" -c 'from specviz import models as m; d = [x for x in m.list_drafters() if x in m.list_models()]
print(m.DEFAULT_DRAFT if m.DEFAULT_DRAFT in d else (d[0] if d else m.PROMPT_LOOKUP))')

section() {  # section TITLE COMMAND...: run it, put its output in the report as a code block
    local title="$1"; shift
    echo "== $title" >&2
    { echo "## $title"; echo; echo '```'; echo "\$ $*"; } >> "$REPORT"
    local rc=0
    "$@" >> "$REPORT" 2>&1 || rc=$?
    { echo '```'; echo; [ "$rc" = 0 ] || echo "**exit status $rc**"; echo; } >> "$REPORT"
}

{
    echo "# specviz GPU check, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
    "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "bf16", torch.cuda.is_bf16_supported())'
    echo '```'
    echo
} > "$REPORT"

section "Decoder tests with their models on $DEV (float64)" env SPECVIZ_TEST_DEVICE="$DEV" "$PY" -m pytest -q \
    tests/test_sampling.py tests/test_decoder.py tests/test_batch.py tests/test_trace.py tests/labs/test_bench.py \
    tests/trees/test_tree.py tests/trees/test_tree_chain.py
section "Tests (CPU; hub, cache and ZeroGPU wrapper)" "$PY" -m pytest -q tests/app/test_hub.py tests/app/test_gpu.py
section "Benchmark: bundled target with draft $DRAFT on $DEV" \
    "$PY" -m specviz.labs.bench --device "$DEV" --draft "$DRAFT" --k 4 --temperature 0 "${BENCH_ARGS[@]}"
# where verified rows are nearly free a tree should beat the best chain (on the 2-core CPU it ties: docs/TREES.md)
section "Tree lab: chains against token trees on $DEV (greedy)" "$PY" -m specviz.labs.trees --device "$DEV" \
    --chains 8,11,12 --trees chain:12,3,0.08 chain:12,6,0.02 3,2,2,1 dynamic:16,10,3,0.1 "${TREE_ARGS[@]}"
section "Forward costs of random GPT-2-shaped targets on $DEV" "$PY" scripts/measure/gpu_cost.py --device "$DEV" "${COST_ARGS[@]}"
echo "gpu_check: report in $REPORT" >&2
