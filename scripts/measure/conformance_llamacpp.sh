#!/usr/bin/env bash
# The conformance kit (python -m specviz.conformance) against llama.cpp's own server on the bundled pair: the target
# with `lite` as its draft (speculation on) against the target alone (off), at the sampled settings below and at
# greedy decoding; the card and the samples kept as test fixtures.
#
#   scripts/measure/conformance_llamacpp.sh       # env: LLAMA_CPP, GGUF, OUT, RAW, PORT, K, THREADS, N, TOKENS,
#                                                 #      SETTINGS, PROMPTS, SEED
#
# Needs: llama.cpp built (scripts/measure/build_llamacpp.sh: LLAMA_CPP/build/bin/llama-server), the GGUF files
# (GGUF=/work/ext/gguf: target-f32.gguf, lite-f32.gguf), curl, and the project's venv (.venv).
# Two servers, not one: this build reads no per-request speculative settings (tools/server/server-schema.cpp keeps
# speculative.n_max and the rest under `#if 0`), so a request's "speculative.n_max": 0 would not turn drafting off;
# the off samples come from a server started without -md (their draft counts say so: the card's drafted_off is 0).
# Writes (OUT=tests/conformance/fixtures/llamacpp):
#   card.json, card.md          the kit's report card (verdict, per-position tests, power, greedy divergences)
#   samples-on.jsonl.gz         the samples, as the kit wrote them (gzip: the tests unpack them)
#   samples-off.jsonl.gz
#   README.md                   date, host, llama.cpp version, the exact commands, the wall time
# and the servers' logs to RAW (default /work/ext/conformance-llamacpp), not kept in the repository.
# Settings: N = 500 samples per mode, prompt and setting (the kit's default), 4 tokens each (token 1 from the prefill
# pass, 2..4 from speculation), k = K = 4 drafted tokens a round, seeds 0.., EOS ignored, one slot, context 512,
# no prompt cache; SETTINGS (T,top_k,top_p,min_p) "0.8,0,1,0 1.0,40,0.9,0": plain T = 0.8, and T = 1.0 with top-k
# 40 and top-p 0.9; the greedy check: 16 tokens at T = 0 per prompt, on against off.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
source "$ROOT/scripts/measure/llamacpp_server.sh"
LLAMA_CPP=${LLAMA_CPP:-$(ls -d /work/ext/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | tail -1)}
BIN=$LLAMA_CPP/build/bin
GGUF=${GGUF:-/work/ext/gguf}
OUT=${OUT:-$ROOT/tests/conformance/fixtures/llamacpp}
RAW=${RAW:-/work/ext/conformance-llamacpp}
PORT=${PORT:-18450}  # speculation on; PORT + 1: off
K=${K:-4}
THREADS=${THREADS:-2}
N=${N:-500}
TOKENS=${TOKENS:-4}
SETTINGS=${SETTINGS:-"0.8,0,1,0 1.0,40,0.9,0"}
PROMPTS=${PROMPTS:-1}  # how many of specviz.config.EXAMPLE_PROMPTS
SEED=${SEED:-0}  # the kit's seed: request c of it gets SEED * 10^8 + 2c (on) and + 2c + 1 (off)
PY=${PY:-$ROOT/.venv/bin/python}
TARGET=$GGUF/target-f32.gguf
DRAFT=$GGUF/lite-f32.gguf
for f in "$BIN/llama-server" "$TARGET" "$DRAFT"; do
  [ -e "$f" ] || { echo "missing $f (scripts/measure/build_llamacpp.sh builds and converts)" >&2; exit 1; }
done
mkdir -p "$OUT" "$RAW"
cd "$ROOT"
start=$(date +%s)

COMMON=(-m "$TARGET" -t "$THREADS" -c 512 -np 1 --no-webui)
ON_CMD=("$BIN/llama-server" "${COMMON[@]}" -md "$DRAFT" -td "$THREADS" --spec-type draft-simple
        --spec-draft-n-max "$K" --port "$PORT")
OFF_CMD=("$BIN/llama-server" "${COMMON[@]}" --port "$((PORT + 1))")
echo "on:  ${ON_CMD[*]}"
echo "off: ${OFF_CMD[*]}"
"${ON_CMD[@]}" > "$RAW/server-on.log" 2>&1 &
on_pid=$!
"${OFF_CMD[@]}" > "$RAW/server-off.log" 2>&1 &
off_pid=$!
trap 'kill "$on_pid" "$off_pid" 2>/dev/null || true' EXIT
for port_pid in "$PORT:$on_pid" "$((PORT + 1)):$off_pid"; do
  wait_for_server "${port_pid%%:*}" "${port_pid##*:}" "$RAW/server-*.log" 240
done

KIT_START=$(date +%s)
"$PY" - "$PORT" "$RAW" "$OUT" "$K" "$N" "$TOKENS" "$PROMPTS" "$SEED" $SETTINGS <<'EOF'
import gzip, shutil, sys
sys.path.insert(0, ".")
from specviz.config import EXAMPLE_PROMPTS
from specviz.conformance import LlamaCpp, Setting, run

port, raw, out, k, n, tokens, prompts, seed = sys.argv[1:9]
settings = [Setting.parse(s) for s in sys.argv[9:]]


class TwoServers:
    """Speculation on at one llama-server (with -md), off at another (no draft): the kit's llama.cpp client on each."""

    def __init__(self, url_on: str, url_off: str, n_max: int):
        self.on, self.off = LlamaCpp(url_on, n_max=n_max, timeout=300), LlamaCpp(url_off, n_max=n_max, timeout=300)

    def info(self) -> dict:
        return self.on.info() | dict(url_off=self.off.url, draft="lite-f32.gguf", k=self.on.n_max,
                                     switch="two servers: -md (on), no draft (off)")

    def draw(self, prompt, s, speculative, seed, n_predict, n_probs):
        return (self.on if speculative else self.off).draw(prompt, s, speculative, seed, n_predict, n_probs)


client = TwoServers(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{int(port) + 1}", int(k))
card = run(client, list(EXAMPLE_PROMPTS[:int(prompts)]), settings, n=int(n), n_predict=int(tokens), seed=int(seed),
           out_dir=raw, greedy_tokens=16)
card.write(out)
for mode in ("on", "off"):
    with open(f"{raw}/samples-{mode}.jsonl", "rb") as f, gzip.GzipFile(f"{out}/samples-{mode}.jsonl.gz", "wb",
                                                                       mtime=0) as g:
        shutil.copyfileobj(f, g)
print(card.markdown())
EOF
KIT_S=$(( $(date +%s) - KIT_START ))
kill "$on_pid" "$off_pid"; wait "$on_pid" "$off_pid" 2>/dev/null || true
trap - EXIT

VERSION=$("$BIN/llama-server" --version 2>&1 | grep -E 'version|built' | tr '\n' ' ' | sed 's/ *$//')
HOST=$(lscpu | grep 'Model name' | sed 's/Model name:[[:space:]]*//')
q() { printf '%q ' "$@" | sed 's/ $//'; }
cat > "$OUT/README.md" <<EOF2
# The conformance kit against llama.cpp (fixture)

Recorded $(date -u +%Y-%m-%d) by \`scripts/measure/conformance_llamacpp.sh\` on $HOST ($(nproc) cores visible, shared
with other work), llama.cpp $VERSION. The kit ran for $KIT_S s.
Models: the bundled \`target\` and \`lite\` (its draft) as GGUF f32 (\`scripts/measure/llamacpp_convert.py\`).
N = $N samples per mode, prompt and setting, $TOKENS tokens each, k = $K, $THREADS threads per server, the first
$PROMPTS prompt(s) of \`specviz.config.EXAMPLE_PROMPTS\`, seed $SEED; settings (T,top_k,top_p,min_p): $SETTINGS; the greedy
check: 16 tokens at T = 0.

Speculation on and off are two servers: this build reads no per-request speculative settings
(tools/server/server-schema.cpp keeps them under \`#if 0\`), so the off samples come from a server without a draft.

    $(q "${ON_CMD[@]}")
    $(q "${OFF_CMD[@]}")
    # then specviz.conformance.run(client, prompts, settings, n=$N, n_predict=$TOKENS, seed=$SEED, greedy_tokens=16),
    # the client sending speculation-on requests to the first server and speculation-off ones to the second

Files: card.json and card.md (the kit's card), samples-on.jsonl.gz and samples-off.jsonl.gz (the samples as the kit
wrote them, gzipped). \`python -m specviz.conformance --on samples-on.jsonl --off samples-off.jsonl\` (unpacked)
recomputes the sampled tests; tests/conformance/test_llamacpp_card.py checks the card against them.
EOF2
echo "wrote $(ls "$OUT" | wc -l) files to $OUT in $(( $(date +%s) - start )) s"
