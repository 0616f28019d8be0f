#!/usr/bin/env bash
# Checks specviz on a CUDA machine and writes gpu_report.md: the hub/GPU tests, the benchmark of the
# bundled pair in bfloat16 on CUDA, and forward-pass costs of larger random targets (scripts/gpu_cost.py).
# The test suite itself runs on the CPU (it has no SPECVIZ_TEST_DEVICE switch yet).
# Usage: scripts/gpu_check.sh [report path]    (from anywhere; exits 2 without CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
REPORT="${1:-gpu_report.md}"
PY="${PYTHON:-python}"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
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

section "Tests (CPU; hub, cache and ZeroGPU wrapper)" "$PY" -m pytest -q tests/test_hub.py tests/test_gpu.py
section "Benchmark: bundled target with draft $DRAFT, bfloat16 on CUDA" \
    "$PY" -m specviz.bench --device cuda --draft "$DRAFT" --k 4 --temperature 0 --repeats 3
section "Forward costs of random GPT-2-shaped targets (bfloat16)" "$PY" scripts/gpu_cost.py --device cuda
echo "gpu_check: report in $REPORT" >&2
