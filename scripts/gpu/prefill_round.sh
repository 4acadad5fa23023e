#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): the chunked Gated
# DeltaNet prefill — its CUDA tests (kernels against the CPU reference, chunked vs token by token
# through the golden models, mixed batches, the golden model tests), compute-sanitizer memcheck over
# the chunked kernels, and `vt bench prefill` on the synthetic 27B FP8: prompts of 1024 and 4096
# tokens (steps of 2048), chunked vs token-by-token delta rule in the same run, plus short prompts
# (64 / 256, one step) for the dispatch threshold, and the 35B-A3B at 4096. Logs go to
# $OUT/prefill_round.tar.gz; the tables print last.
# PARTS="tests memcheck bench" (the default: all) picks parts, to fit the device's 10 minutes per
# command; MEMCHECK_TIMEOUT (s, default 300) bounds the sanitizer run.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
require_build
PARTS=${PARTS:-tests memcheck bench}
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-300}
want() { [[ " $PARTS " == *" $1 "* ]]; }
TESTS=build-gpu/tests/vt_cuda_tests
status=0
# The build may predate this round's sources: bring the two binaries up to date.
cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; tar -czf "$OUT/prefill_round.tar.gz" -C "$LOGS" .; exit 1; }
export VT_REQUIRE_GPU=1

TEST_FILTER='AttentionCuda.*:GdnCuda.*:MoeCuda.*:SamplingCuda.Argmax*:CudaModel.*'
test_result="not asked for (PARTS)"
if want tests; then
  "$TESTS" --gtest_filter="$TEST_FILTER" >"$LOGS/tests.log" 2>&1 && test_result="passed" || {
    status=1; test_result="FAILED"; }
  test_result+=": $(grep -cE '^\[       OK \]' "$LOGS/tests.log") ok, $(grep -cE '^\[  FAILED  \]' "$LOGS/tests.log") failed"
fi

SANITIZE_FILTER='GdnCuda.GatedDeltaNetChunked*'
sanitizer_result="not asked for (PARTS)"
if want memcheck; then run_memcheck "$SANITIZE_FILTER" "$LOGS/memcheck.log" || status=1; fi

bench() {  # name, vt bench prefill args...
  local name=$1; shift
  "$VT" bench prefill "$@" --json >"$LOGS/$name.json" 2>"$LOGS/$name.err" || {
    status=1; echo "FAILED: $name"; tail -5 "$LOGS/$name.err"; }
}
if want bench; then
  bench 27b_fp8 --synthetic qwen3.5-27b --weights fp8 --tokens 1024,4096 --step-tokens 2048 --repeats 3
  bench 27b_fp8_short --synthetic qwen3.5-27b --weights fp8 --tokens 64,256 --step-tokens 256 --repeats 5
  bench 35b_fp8 --synthetic qwen3.5-35b-a3b --weights fp8 --tokens 4096 --step-tokens 2048 --repeats 3
fi

tar -czf "$OUT/prefill_round.tar.gz" -C "$LOGS" .
echo
echo "| part | result |"
echo "|---|---|"
echo "| tests ($TEST_FILTER) | $test_result |"
echo "| memcheck ($SANITIZE_FILTER) | $sanitizer_result |"
if want tests; then
  echo; echo "== chunked vs token-by-token through the models, golden logits"
  grep -E "chunked vs token-by-token|logits rel L2" "$LOGS/tests.log" | head -30
  grep -E "^\[  FAILED  \]" "$LOGS/tests.log" | head -20
fi
python3 - "$LOGS" <<'PY'
import json, sys, glob, os
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        report = json.load(open(path))
    except Exception as error:
        print(path, "unreadable:", error); continue
    print(f"\n{os.path.basename(path)}: {report['model']}, steps of {report['step_tokens']} tokens, "
          f"median of {report['repeats']}")
    print("| tokens | GDN delta rule | ms | tok/s | GDN kernels ms | GDN share | speedup |")
    print("|---|---|---|---|---|---|---|")
    for row in report["rows"]:
        print(f"| {row['tokens']} | {row['delta_rule']} | {row['ms']:.1f} | {row['tokens_per_second']:.0f} | "
              f"{row['gdn_kernel_ms']:.1f} | {100*row['gdn_share']:.0f}% | {row['speedup_vs_token_by_token']:.2f}x |")
PY
exit $status
