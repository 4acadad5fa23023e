#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): the A/B of where kernels trigger their
# PDL dependents (common.cuh pdl_enter): after their wait (the default build, build-gpu) or
# before it (build-gpu-early, -DVT_PDL_EARLY_TRIGGER=ON). Builds both, runs every CUDA test on
# each (GPU required), then alternating rounds of the synthetic 27B FP8 decode with each build,
# and `vt bench gemm` (each GEMM after its producer) with each. Parts are skipped
# once BUDGET seconds (default 540) have passed; the tables print last, logs in $OUT/pdl_round.tar.gz.
# BATCH (1,4,16), STEPS (32), GEMM_M (1,8,16; "none" skips), TESTS (default on; 0 skips),
# MODELS (qwen3.5-27b; comma-separated synthetic models) adjust it.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
status=0
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
in_budget() { [ "$(elapsed)" -lt "${BUDGET:-540}" ] || { echo "skipped (budget): $1"; return 1; }; }
EARLY=build-gpu-early/apps/vt
configure() {  # build dir, extra flags
  [ -f "$1/build.ninja" ] && return 0
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" "${@:2}" \
    >"$LOGS/configure_$(basename "$1").log" 2>&1 || { tail -30 "$LOGS/configure_$(basename "$1").log"; exit 1; }
}
configure build-gpu
configure build-gpu-early -DVT_PDL_EARLY_TRIGGER=ON
cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; tar -czf "$OUT/pdl_round.tar.gz" -C "$LOGS" .; exit 1; }
cmake --build build-gpu-early -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build_early.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build_early.log" | head -40; tar -czf "$OUT/pdl_round.tar.gz" -C "$LOGS" .; exit 1; }
echo "builds: $(elapsed) s"
export VT_REQUIRE_GPU=1
if [ "${TESTS:-1}" != 0 ]; then
  for build in late early; do
    tests=build-gpu/tests/vt_cuda_tests; [ $build = early ] && tests=build-gpu-early/tests/vt_cuda_tests
    timeout 240 "$tests" >"$LOGS/tests_$build.log" 2>&1 || { status=1; echo "FAILED: vt_cuda_tests, $build trigger"; }
  done
  echo "tests: $(elapsed) s"
fi
IFS=',' read -r -a models <<<"${MODELS:-qwen3.5-27b}"
for round in 1 2; do
  for model in "${models[@]}"; do
    for build in late early; do
      in_budget "decode $model $build round $round" || continue
      binary=$VT; [ $build = early ] && binary=$EARLY
      "$binary" bench decode --synthetic "$model" --weights fp8 --batch "${BATCH:-1,4,16}" --context 1024 \
        --steps "${STEPS:-32}" --json >"$LOGS/decode_${model}_${build}_$round.json" 2>"$LOGS/decode_${model}_${build}_$round.err" || {
        status=1; echo "FAILED: decode $model $build"; tail -3 "$LOGS/decode_${model}_${build}_$round.err"; }
    done
  done
done
if [ "${GEMM_M:-}" != none ]; then
  for build in early late; do
    in_budget "bench gemm $build" || continue
    binary=$VT; [ $build = early ] && binary=$EARLY
    timeout 120 "$binary" bench gemm --synthetic qwen3.5-27b --m "${GEMM_M:-1,8,16}" >"$LOGS/gemm_$build.md" 2>&1 || {
      status=1; echo "FAILED: bench gemm $build"; }
  done
fi
tar -czf "$OUT/pdl_round.tar.gz" -C "$LOGS" .
echo "total: $(elapsed) s"
for build in late early; do
  [ -f "$LOGS/tests_$build.log" ] && { echo "== vt_cuda_tests, $build trigger"; grep -E "^\[  (FAILED|PASSED) " "$LOGS/tests_$build.log" | head -20; }
done
for build in early late; do
  [ -f "$LOGS/gemm_$build.md" ] && { echo "== bench gemm, $build trigger (chosen rows marked *)"; grep -E "\*|bandwidth|FAIL|rror" "$LOGS/gemm_$build.md" | head -30; }
done
echo "== decode, synthetic FP8, context 1024 (decode_<model>_<trigger>_<round>.json)"
python3 scripts/gpu/decode_table.py "$LOGS"
exit $status
