#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): builds vt only, then the long-context
# runs of the prefill issue on the synthetic model (MODEL, default qwen3.5-27b, FP8), each its own
# process so a failure at one length keeps the others: `vt bench prefill` (steps of 2,048 tokens,
# the chunked path; 8K and 32K also on the engine's path, median of 3) with each part's MFU
# against the peaks measured in the same process; 131,072 tokens (one run); 262,128 tokens then 16
# decode steps on that sequence (262,144 positions, the family's native context); and `vt bench
# decode` at 131,072 tokens of context, batch 1, against its floor. DEADLINE (seconds of this
# script, default 560) bounds the 262K run, which goes last, so the tables print within one device
# call. Logs in $OUT/long_context.tar.gz; the tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
status=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target vt >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; exit 1; }
model=(--synthetic "${MODEL:-qwen3.5-27b}" --weights fp8)

DEADLINE=${DEADLINE:-560}
run() {  # name, seconds allowed, command...: its stdout in $LOGS/name.txt, wall seconds appended
  local name=$1 allowed=$2 start=$SECONDS
  shift 2
  timeout "$allowed" "$@" >"$LOGS/$name.txt" 2>"$LOGS/$name.err" || {
    status=1; echo "FAILED or cut at $allowed s: $name"; tail -5 "$LOGS/$name.err"; }
  echo "($name: $((SECONDS - start)) s wall)" >>"$LOGS/$name.txt"
}
run short 150 "$VT" bench prefill "${model[@]}" --tokens 8192,32768 --paths chunked,engine --repeats 3
run 131k 150 "$VT" bench prefill "${model[@]}" --tokens 131072 --paths chunked --repeats 1
run decode_131k 90 "$VT" bench decode "${model[@]}" --batch 1 --context 131072 --steps 32
run 262k $((DEADLINE - SECONDS)) "$VT" bench prefill "${model[@]}" --tokens 262128 --paths chunked --repeats 1 \
  --decode-after 16

tar -czf "$OUT/long_context.tar.gz" -C "$LOGS" .
for name in short 131k decode_131k 262k; do
  echo "== $name"
  grep -h "^bench prefill:" "$LOGS/$name.err"
  grep -vE "^FP8 GEMM backends|^  [0-9]+ x [0-9]+" "$LOGS/$name.txt"
done
exit $status
