#!/usr/bin/env bash
# Build llama.cpp from the llama-cpp-python source distribution on PyPI, once, and everything the llama.cpp
# benchmarks need beside it: llama-cpp-python in the project's venv on that same build, gguf-py, and the bundled
# target and `lite` as f32 GGUF files. Each step is skipped where its output is already there (a cache, not CI).
#
#   scripts/measure/build_llamacpp.sh        # env: EXT (default /work/ext), VERSION (0.3.36), PY (.venv/bin/python)
#
# Then:
#   .venv/bin/python scripts/measure/bench_llamacpp.py --repeats 5 --default-ks 4 6 12
#   .venv/bin/python scripts/measure/decode_vs_llamabench.py
# Costs (2-core AMD EPYC, 2026-12-03): the download about 5 s (77 MB), the build about 10 minutes (llama-server,
# llama-speculative-simple and llama-bench; both cores), llama-cpp-python on that build 8 s (no second compile:
# LLAMA_BUILD=OFF), the conversion and its check about 11 s. Needs cmake, ninja and a C++ compiler.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EXT=${EXT:-/work/ext}
VERSION=${VERSION:-0.3.36}
PY=${PY:-$ROOT/.venv/bin/python}
SDIST=$EXT/llama_cpp_python-$VERSION
LLAMA_CPP=$SDIST/vendor/llama.cpp
BIN=$LLAMA_CPP/build/bin
mkdir -p "$EXT"

if [ ! -d "$LLAMA_CPP" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$EXT"
  tar xzf "$EXT/llama_cpp_python-$VERSION.tar.gz" -C "$EXT"
fi

# Without AMX: on a Xeon with AMX (model 207, 2026-12-06) this build's AMX matmul (tinygemm_kernel_amx) stopped at
# its first tile instruction with SIGILL in every pass of several rows (llama-server's warm-up, llama-bench -p 16), so
# -march=native's AMX is turned off and those passes run on its AVX-512 VNNI kernels, as on a CPU without AMX.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
if [ ! -x "$BIN/llama-server" ] || [ ! -x "$BIN/llama-speculative-simple" ] || [ ! -x "$BIN/llama-bench" ] \
   || [ ! -x "$BIN/llama-batched-bench" ] || ! grep -q -- "-mno-amx-int8" "$LLAMA_CPP/build/CMakeCache.txt"; then
  cmake -S "$LLAMA_CPP" -B "$LLAMA_CPP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX"
  cmake --build "$LLAMA_CPP/build" -j "$(nproc)" --target llama-server llama-speculative-simple llama-bench \
    llama-batched-bench
fi

# llama-cpp-python on the libraries just built (LLAMA_CPP_LIB_PATH points it there at run time), and gguf-py (not
# -e: an editable install puts gguf-py's own tests folder on the path, where it hides this project's tests package)
if ! LLAMA_CPP_LIB_PATH=$BIN "$PY" -c "import llama_cpp, gguf" 2>/dev/null; then
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF -DMTMD_BUILD=OFF" "$PY" -m pip install -q \
    "$EXT/llama_cpp_python-$VERSION.tar.gz" "$LLAMA_CPP/gguf-py" sentencepiece
fi

if [ ! -e "$EXT/gguf/target-f32.gguf" ] || [ ! -e "$EXT/gguf/lite-f32.gguf" ]; then
  LLAMA_CPP=$LLAMA_CPP LLAMA_CPP_LIB_PATH=$BIN "$PY" "$ROOT/scripts/measure/llamacpp_convert.py" --out "$EXT/gguf" \
    --llama-cpp "$LLAMA_CPP"
fi
echo "llama.cpp: $BIN; GGUF files: $EXT/gguf; llama-cpp-python: LLAMA_CPP_LIB_PATH=$BIN"
