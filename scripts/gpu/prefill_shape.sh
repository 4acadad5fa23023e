#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): builds vt only, then `vt bench prefill` on
# the synthetic model (MODEL, default qwen3.5-27b, FP8) in two shapes: the bench's own (one slot,
# context = the prompt) and the server's (`vt serve` defaults of scripts/gpu/serve_bench.sh: 64
# slots, 2,048 tokens of context, 512-token steps), each with the engine's path (and a mixed step: the prompt's chunks beside
# DECODING decode tokens) (forward_batch in
# 256-token chunks) beside forward(), and the top kernels of one profiled run per row. Logs in
# $OUT/prefill_shape.tar.gz; tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target vt >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; exit 1; }
TOKENS=${TOKENS:-256,272,512}
common=(--synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --tokens "$TOKENS" --repeats 3 --kernels "${KERNELS:-10}")
"$VT" bench prefill "${common[@]}" >"$LOGS/bench_shape.txt" 2>&1 || echo "FAILED: bench shape"
"$VT" bench prefill "${common[@]}" --max-running 64 --max-context 2048 --step-tokens 512 \
  >"$LOGS/server_shape.txt" 2>&1 || echo "FAILED: server shape"
# A mixed step as the server runs it: the prompt's chunks beside DECODING (default 22) decode tokens.
"$VT" bench prefill "${common[@]}" --max-running 64 --max-context 2048 --step-tokens 512 --decoding "${DECODING:-22}" \
  --context 1024 >"$LOGS/mixed.txt" 2>&1 || echo "FAILED: mixed"
# Several prompts at once, packed into 512-token steps as the engine packs them (PROMPTS, default 4,
# each of every TOKENS length), beside DECODING decode tokens.
"$VT" bench prefill "${common[@]}" --max-running 64 --max-context 2048 --step-tokens 512 --prompts "${PROMPTS:-4}" \
  --decoding "${DECODING:-22}" --context 1024 >"$LOGS/prompts.txt" 2>&1 || echo "FAILED: prompts"
tar -czf "$OUT/prefill_shape.tar.gz" -C "$LOGS" .
for shape in ${SHAPES:-bench_shape server_shape mixed prompts}; do echo "== $shape"; cat "$LOGS/$shape.txt"; done
