#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps, and .base-src for BASE): the chunked Gated
# DeltaNet prefill. Builds vt and vt_cuda_tests (build-gpu/) unless built; its CUDA tests (kernels
# against the CPU reference, chunked vs token by token through the golden models, mixed batches,
# bit-identical reruns), compute-sanitizer memcheck and racecheck over the chunked kernels, and
# `vt bench prefill` on the synthetic 27B FP8 (TOKENS, default 8192,32768, steps of 2,048, the
# chunked path, median of 3) with the KERNELS (default 12) longest kernels of the profiled run.
# BASE=<commit> (its tree carried as .base-src: scripts/gpu/base_src.sh <commit> here) also builds
# that commit's vt (build-base/) and runs the same bench with it in the same call: the A/B.
# PARTS="tests memcheck bench" (the default: all) picks parts; MEMCHECK_TIMEOUT (s, default 200)
# bounds each sanitizer run. Logs in $OUT/prefill_round.tar.gz; the tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
PARTS=${PARTS:-tests memcheck bench}
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-200}
TOKENS=${TOKENS:-8192,32768}
KERNELS=${KERNELS:-12}
want() { [[ " $PARTS " == *" $1 "* ]]; }
TESTS=build-gpu/tests/vt_cuda_tests
status=0
finish() { tar -czf "$OUT/prefill_round.tar.gz" -C "$LOGS" .; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
start=$(date +%s)
if [ -n "${BASE:-}" ]; then  # the base first, in the background, while this tree builds
  ([ -f .base-src/COMMIT ] && [ "$(cat .base-src/COMMIT)" = "$BASE" ] || { echo "no .base-src for $BASE"; exit 1; }
   # The carried dependencies (FlashInfer's headers among them) are found from the source folder.
   ln -sfn "$PWD/.gpu-deps" .base-src/.gpu-deps
   cmake -S .base-src -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
     -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" && cmake --build build-base -j 8 --target vt) >"$LOGS/base_build.log" 2>&1 &
  base_build=$!
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$LOGS/configure.log" 2>&1 &&
  cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; finish; exit 1; }
if [ -n "${BASE:-}" ]; then
  wait $base_build || { status=1; echo "FAILED: the base build ($BASE)"; tail -5 "$LOGS/base_build.log"; }
fi
echo "builds: $(( $(date +%s) - start )) s"
export VT_REQUIRE_GPU=1

TEST_FILTER='GdnCuda.*:NormCuda.*:ActivationCuda.*:CudaModel.*:*CudaTrained*'
test_result="not asked for (PARTS)"
if want tests; then
  "$TESTS" --gtest_filter="$TEST_FILTER" >"$LOGS/tests.log" 2>&1 && test_result="passed" || {
    status=1; test_result="FAILED"; }
  test_result+=": $(grep -cE '^\[       OK \]' "$LOGS/tests.log") ok, $(grep -cE '^\[  FAILED  \]' "$LOGS/tests.log") failed"
fi

SANITIZE_FILTER='GdnCuda.GatedDeltaNetChunked*:GdnCuda.ConvSchedules*'
sanitizer_result="not asked for (PARTS)"
racecheck_result="not asked for (PARTS)"
if want memcheck; then
  run_memcheck "$SANITIZE_FILTER" "$LOGS/memcheck.log" || status=1
  # The state walk's copies land while other warps compute: racecheck looks for shared-memory hazards.
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -n "$sanitizer" ]; then
    timeout "$MEMCHECK_TIMEOUT" "$sanitizer" --tool racecheck --racecheck-report hazard --error-exitcode 3 "$TESTS" \
      --gtest_filter="$SANITIZE_FILTER" >"$LOGS/racecheck.log" 2>&1
    case $? in
      0) racecheck_result="clean: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOGS/racecheck.log" | tail -1)" ;;
      124) racecheck_result="TIMEOUT after $MEMCHECK_TIMEOUT s"; status=1 ;;
      *) racecheck_result="HAZARDS or failures: $(grep -E 'SUMMARY' "$LOGS/racecheck.log" | tail -1)"; status=1 ;;
    esac
  else
    racecheck_result="not run (no compute-sanitizer)"
  fi
fi

bench() {  # name, binary
  "$2" bench prefill --synthetic qwen3.5-27b --weights fp8 --tokens "$TOKENS" --step-tokens 2048 --paths chunked \
    --repeats 3 --kernels "$KERNELS" >"$LOGS/$1.md" 2>"$LOGS/$1.err" || {
    status=1; echo "FAILED: bench $1"; tail -5 "$LOGS/$1.err"; }
}
if want bench; then
  [ -n "${BASE:-}" ] && [ -x build-base/apps/vt ] && bench "base_$BASE" build-base/apps/vt
  bench this build-gpu/apps/vt
fi

finish
echo
echo "| part | result |"
echo "|---|---|"
echo "| gpu | $(cat "$LOGS/gpu.txt") |"
echo "| tests ($TEST_FILTER) | $test_result |"
echo "| memcheck ($SANITIZE_FILTER) | ${sanitizer_result:-} |"
echo "| racecheck ($SANITIZE_FILTER) | $racecheck_result |"
if want tests; then grep -E "^\[  FAILED  \]" "$LOGS/tests.log" | head -20; fi
for name in ${BASE:+base_$BASE} this; do
  [ -f "$LOGS/$name.md" ] || continue
  echo; echo "== $name"; cat "$LOGS/$name.md"
done
exit $status
