#!/usr/bin/env bash
# Record real llama.cpp runs of the bundled pair (target, with `lite` as its draft) as test fixtures.
#
#   scripts/measure/record_llamacpp.sh            # env: LLAMA_CPP, GGUF, OUT, PORT, K, THREADS, N_PREDICT
#
# Needs: llama.cpp built (LLAMA_CPP/build/bin: llama-server, llama-speculative-simple, llama-bench; default: the
# one vendored in /work/ext/llama_cpp_python-*/vendor/llama.cpp), the GGUF files from
# scripts/measure/llamacpp_convert.py (GGUF=/work/ext/gguf: target-f32.gguf, lite-f32.gguf), curl, and the
# project's venv (.venv: it reads the prompts from specviz.config.EXAMPLE_PROMPTS).
# Takes about 20-30 seconds on 2 quiet CPU cores (llama-bench's 3 runs are most of it).
# Writes (OUT=tests/engines/fixtures/llamacpp, about 60 KB in all):
#   completion-t0-pN.json, completion-t0.8-pN.json   /completion responses (timings, generation_settings, tokens)
#                                                    for the 5 example prompts (N = 0..4) at temperature 0 and 0.8
#   metrics-before.txt, metrics-after-t0.txt, metrics-after.txt
#                                                    /metrics before any request, after the greedy ones, after all
#   server.log                                       llama-server's log (its "draft acceptance" line per request)
#   speculative-simple.txt                           llama-speculative-simple's stdout+stderr for prompt 0
#   bench.md, bench.json, bench.csv                  llama-bench of the target: -p 1,2,4,8,16 -n 64 -t THREADS
#   README.md                                        date, host, llama.cpp version, the exact commands
# Settings: greedy (temperature 0) and 0.8 with top-k, top-p and min-p off (plain temperature sampling, as
# specviz's DecodeConfig(temperature=0.8)); k = K = 6 drafted tokens a round (--spec-type draft-simple
# --spec-draft-n-max K; --spec-draft-p-min stays at its default 0: no early stop of a draft), THREADS = 2 for
# target and draft, N_PREDICT = 64 tokens, EOS ignored, one slot, context 512, no prompt cache between requests.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/measure/llamacpp_server.sh"
LLAMA_CPP=${LLAMA_CPP:-$(ls -d /work/ext/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | tail -1)}
BIN=$LLAMA_CPP/build/bin
GGUF=${GGUF:-/work/ext/gguf}
OUT=${OUT:-$ROOT/tests/engines/fixtures/llamacpp}
PORT=${PORT:-18432}
K=${K:-6}
THREADS=${THREADS:-2}
N_PREDICT=${N_PREDICT:-64}
PY=${PY:-$ROOT/.venv/bin/python}
TARGET=$GGUF/target-f32.gguf
DRAFT=$GGUF/lite-f32.gguf
for f in "$BIN/llama-server" "$BIN/llama-speculative-simple" "$BIN/llama-bench" "$TARGET" "$DRAFT"; do
  [ -e "$f" ] || { echo "missing $f (build llama.cpp; run scripts/measure/llamacpp_convert.py)" >&2; exit 1; }
done
mkdir -p "$OUT"
cd "$ROOT"
start=$(date +%s)

SPEC=(-md "$DRAFT" --spec-type draft-simple --spec-draft-n-max "$K")
SERVER_CMD=("$BIN/llama-server" -m "$TARGET" "${SPEC[@]}" -t "$THREADS" -td "$THREADS" -c 512 -np 1 --metrics
            --no-webui --port "$PORT")
echo "llama-server: ${SERVER_CMD[*]}"
"${SERVER_CMD[@]}" > "$OUT/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
wait_for_server "$PORT" "$server" "$OUT/server.log" 120

curl -sf "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics-before.txt"
"$PY" - "$PORT" "$OUT" "$N_PREDICT" <<'EOF'
import json, sys, urllib.request
sys.path.insert(0, ".")
from specviz.config import EXAMPLE_PROMPTS

port, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())

for temperature, tag in ((0.0, "t0"), (0.8, "t0.8")):
    for i, prompt in enumerate(EXAMPLE_PROMPTS):
        body = {"prompt": prompt, "n_predict": n, "temperature": temperature, "top_k": 0, "top_p": 1.0,
                "min_p": 0.0, "seed": i, "ignore_eos": True, "cache_prompt": False, "return_tokens": True}
        r = post("/completion", body)
        r["request"] = body  # what was asked, beside what the server says it used (generation_settings)
        with open(f"{out}/completion-{tag}-p{i}.json", "w") as f:
            json.dump(r, f, indent=1, ensure_ascii=False)
        t = r["timings"]
        print(f"T={temperature} p{i}: {t['predicted_n']} tokens {t['predicted_per_second']:.1f} tok/s, "
              f"drafted {t.get('draft_n')} accepted {t.get('draft_n_accepted')}")
    if tag == "t0":
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r, open(f"{out}/metrics-after-t0.txt", "wb") as f:
            f.write(r.read())
EOF
curl -sf "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics-after.txt"
kill "$server"; wait "$server" 2>/dev/null || true
trap - EXIT

PROMPT0=$("$PY" -c 'import sys; sys.path.insert(0, "."); from specviz.config import EXAMPLE_PROMPTS; print(EXAMPLE_PROMPTS[0])')
SS_CMD=("$BIN/llama-speculative-simple" -m "$TARGET" "${SPEC[@]}" -t "$THREADS" -c 512 -n "$N_PREDICT" --temp 0
        -p "$PROMPT0")
echo "llama-speculative-simple: ${SS_CMD[*]}"
"${SS_CMD[@]}" > "$OUT/speculative-simple.txt" 2>&1

BENCH_CMD=("$BIN/llama-bench" -m "$TARGET" -p 1,2,4,8,16 -n "$N_PREDICT" -t "$THREADS")
echo "llama-bench: ${BENCH_CMD[*]} [-o md|json|csv]"
"${BENCH_CMD[@]}" -o md > "$OUT/bench.md"
"${BENCH_CMD[@]}" -o json > "$OUT/bench.json"
"${BENCH_CMD[@]}" -o csv > "$OUT/bench.csv"

VERSION=$("$BIN/llama-server" --version 2>&1 | grep -E 'version|built' | tr '\n' ' ' | sed 's/ *$//')
HOST=$(lscpu | grep 'Model name' | sed 's/Model name:[[:space:]]*//')
rel() { echo "${1//$ROOT\//}"; }
q() { printf '%q ' "$@" | sed 's/ $//'; }
cat > "$OUT/README.md" <<EOF
# llama.cpp runs of the bundled pair (fixtures)

Recorded $(date -u +%Y-%m-%d) by \`scripts/measure/record_llamacpp.sh\` on $HOST ($(nproc) cores visible),
llama.cpp $VERSION.
Models: the bundled \`target\` and \`lite\` (its draft), dequantized from their 8-bit storage
and converted to GGUF f32 by \`scripts/measure/llamacpp_convert.py\` (the family's tokenizer registered as
llama.cpp's \`gpt-2\` pre-tokenizer). k = $K, $THREADS threads, $N_PREDICT tokens, the 5 prompts of
\`specviz.config.EXAMPLE_PROMPTS\` (p0..p4).

Commands:

    $(q "${SERVER_CMD[@]}")
    # then for each prompt i and temperature T in (0, 0.8): POST /completion
    #   {"prompt": EXAMPLE_PROMPTS[i], "n_predict": $N_PREDICT, "temperature": T, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
    #    "seed": i, "ignore_eos": true, "cache_prompt": false, "return_tokens": true}  -> completion-tT-pi.json
    # GET /metrics before any request, after the T = 0 ones and after all -> metrics-before/-after-t0/-after.txt
    $(q "${SS_CMD[@]}")
    $(q "${BENCH_CMD[@]}") -o md   # and -o json, -o csv

Files: completion-t0-p*.json, completion-t0.8-p*.json (each response with the request added under "request"),
metrics-*.txt (Prometheus text: spec_decode_num_draft_tokens_total, _accepted_tokens_total, _drafts_total and
_accepted_tokens_per_pos_total{position=...}), server.log (one "draft acceptance = ..." line per request),
speculative-simple.txt, bench.md, bench.json, bench.csv.
EOF
echo "wrote $(ls "$OUT" | wc -l) files to $(rel "$OUT") in $(( $(date +%s) - start )) s"
