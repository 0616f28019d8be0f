#!/usr/bin/env bash
# Record llama-server under load with and without a draft: -np 1, 2, 4, 8 slots, as many concurrent clients, each
# sending REQUESTS requests in turn; speculation on (the bundled pair: target with `lite` as its draft) and off
# (the target alone). Kept as fixtures for a view of speculation under load.
#
#   scripts/measure/record_llamacpp_load.sh   # env: LLAMA_CPP, GGUF, OUT, PORT, K, THREADS, REQUESTS, N_PREDICT,
#                                             #      SLOTS ("1 2 4 8"), TEMPERATURE
#
# Needs llama.cpp built and the GGUF files (scripts/measure/build_llamacpp.sh), curl and the project's venv.
# Writes OUT/np{N}-{on,off}/ (OUT=tests/engines/fixtures/llamacpp_load):
#   server.log          llama-server's log (slots, per-request timings and draft acceptance lines)
#   metrics-before.txt  /metrics before the first request
#   metrics-after.txt   /metrics after the last
#   completions.jsonl   one line per request: client, index, the request, start and end (seconds since the first
#                       request was sent, this machine's clock) and the response's timings and token counts
# and OUT/README.md: date, host, llama.cpp version, the exact commands.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/measure/llamacpp_server.sh"
LLAMA_CPP=${LLAMA_CPP:-$(ls -d /work/ext/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | tail -1)}
BIN=$LLAMA_CPP/build/bin
GGUF=${GGUF:-/work/ext/gguf}
OUT=${OUT:-$ROOT/tests/engines/fixtures/llamacpp_load}
PORT=${PORT:-18460}
K=${K:-4}
THREADS=${THREADS:-2}
REQUESTS=${REQUESTS:-3}
N_PREDICT=${N_PREDICT:-32}
SLOTS=${SLOTS:-"1 2 4 8"}
TEMPERATURE=${TEMPERATURE:-0}
PY=${PY:-$ROOT/.venv/bin/python}
TARGET=$GGUF/target-f32.gguf
DRAFT=$GGUF/lite-f32.gguf
for f in "$BIN/llama-server" "$TARGET" "$DRAFT"; do
  [ -e "$f" ] || { echo "missing $f (scripts/measure/build_llamacpp.sh builds and converts)" >&2; exit 1; }
done
mkdir -p "$OUT"
cd "$ROOT"
start=$(date +%s)
COMMANDS=()

for np in $SLOTS; do
  for spec in on off; do
    dir=$OUT/np$np-$spec
    mkdir -p "$dir"
    cmd=("$BIN/llama-server" -m "$TARGET" -t "$THREADS" -c $((512 * np)) -np "$np" --metrics --no-webui --port "$PORT")
    [ "$spec" = on ] && cmd+=(-md "$DRAFT" -td "$THREADS" --spec-type draft-simple --spec-draft-n-max "$K")
    COMMANDS+=("$(printf '%q ' "${cmd[@]}" | sed 's/ $//')")
    echo "np $np, speculation $spec: ${cmd[*]}"
    "${cmd[@]}" > "$dir/server.log" 2>&1 &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT
    wait_for_server "$PORT" "$server" "$dir/server.log" 240
    curl -sf "http://127.0.0.1:$PORT/metrics" > "$dir/metrics-before.txt"
    "$PY" - "$PORT" "$dir" "$np" "$REQUESTS" "$N_PREDICT" "$TEMPERATURE" <<'EOF'
import json, sys, threading, time, urllib.request
sys.path.insert(0, ".")
from specviz.config import EXAMPLE_PROMPTS

port, out, clients, requests, n, temperature = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), float(sys.argv[6])
lines, lock, t0 = [], threading.Lock(), time.time()


def client(c: int) -> None:
    for i in range(requests):
        body = {"prompt": EXAMPLE_PROMPTS[(c + i) % len(EXAMPLE_PROMPTS)], "n_predict": n, "temperature": temperature,
                "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 1000 * c + i, "ignore_eos": True,
                "cache_prompt": False}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        sent = time.time() - t0
        with urllib.request.urlopen(req, timeout=600) as r:
            answer = json.loads(r.read())
        done = time.time() - t0
        with lock:
            lines.append(dict(client=c, index=i, request=body, start=round(sent, 4), end=round(done, 4),
                              timings=answer.get("timings"), tokens_predicted=answer.get("tokens_predicted"),
                              tokens_evaluated=answer.get("tokens_evaluated"), id_slot=answer.get("id_slot")))


threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(f"{out}/completions.jsonl", "w") as f:
    for line in sorted(lines, key=lambda x: x["start"]):
        f.write(json.dumps(line) + "\n")
print(f"{clients} clients x {requests} requests in {time.time() - t0:.1f} s")
EOF
    curl -sf "http://127.0.0.1:$PORT/metrics" > "$dir/metrics-after.txt"
    kill "$server"; wait "$server" 2>/dev/null || true
    trap - EXIT
  done
done

VERSION=$("$BIN/llama-server" --version 2>&1 | grep -E 'version|built' | tr '\n' ' ' | sed 's/ *$//')
HOST=$(lscpu | grep 'Model name' | sed 's/Model name:[[:space:]]*//')
{
  echo "# llama-server under load, speculation on and off (fixtures)"
  echo
  echo "Recorded $(date -u +%Y-%m-%d) by \`scripts/measure/record_llamacpp_load.sh\` on $HOST ($(nproc) cores visible,"
  echo "shared with other work: timings are this machine's, not a benchmark), llama.cpp $VERSION."
  echo "Models: the bundled \`target\` and \`lite\` (its draft) as GGUF f32. Per configuration: -np N slots (context"
  echo "512 per slot), N concurrent clients, each sending $REQUESTS requests in turn: $N_PREDICT tokens, temperature"
  echo "$TEMPERATURE, EOS ignored, no prompt cache, prompts cycling through \`specviz.config.EXAMPLE_PROMPTS\`, seed"
  echo "1000 c + i. Speculation on: k = $K (draft-simple), $THREADS threads for target and draft."
  echo
  echo "Commands, one server per folder np{N}-{on,off} (started, /metrics read, the clients run, /metrics read, killed):"
  echo
  for c in "${COMMANDS[@]}"; do echo "    $c"; done
  echo
  echo "Each folder: server.log, metrics-before.txt, metrics-after.txt, completions.jsonl (one line per request: client,"
  echo "index, the request, start and end in seconds since the first request, the response's timings)."
} > "$OUT/README.md"
echo "wrote $OUT in $(( $(date +%s) - start )) s"
