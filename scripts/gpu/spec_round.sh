#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): speculative decoding
# on the GPU (issue 10) — the CUDA speculation tests (rollback windows, lossless greedy at k = 1..8,
# batch 16, sampling; the MTP head against the CPU's, MTP drafting, MTP in the serving engine),
# compute-sanitizer memcheck over the window kernels, verifies up to k = 8, the MTP head and the
# engine's batch of 16 MTP requests, and `vt bench decode --verify` on
# the synthetic 27B FP8 (a k+1-token verify vs a 1-token step, k = 1..8, batch 1 and 16). Logs go
# to $OUT/spec_round.tar.gz; the tables print last.
# PARTS="tests memcheck bench" (the default: all) picks parts, to fit the device's 10 minutes per
# command; MEMCHECK_TIMEOUT (s, default 400) bounds the sanitizer run.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
require_build
CONTEXT=${CONTEXT:-1024}
PARTS=${PARTS:-tests memcheck bench}
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-400}
want() { [[ " $PARTS " == *" $1 "* ]]; }
TESTS=build-gpu/tests/vt_cuda_tests
status=0
# The build may predate this round's sources: bring the two binaries up to date.
cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; tar -czf "$OUT/spec_round.tar.gz" -C "$LOGS" .; exit 1; }
export VT_REQUIRE_GPU=1

SPEC_FILTER='CudaSpec.*:CudaMtpHead.*:GdnCuda.GatedDeltaNetWindow*:GdnCuda.CopySpans*:GdnCuda.GatedDeltaNetMatchesCpu'
# MTP in the serving engine: hidden states kept per target sequence, k = 1..8, 16 mixed,
# preemption and cancellation, prompts longer than a step.
SPEC_FILTER+=':CudaEngineMtp.*'
if want tests; then
  "$TESTS" --gtest_filter="$SPEC_FILTER" >"$LOGS/spec_tests.log" 2>&1 || { status=1; echo "FAILED: spec tests"; }
fi

# memcheck: the window kernels at real head sizes, windows of 8 and 9 tokens (k = 7, 8) on the
# golden models and the 27B layer shapes, and batched verifies of 0..8 drafts for 16 sequences.
SANITIZE_FILTER='GdnCuda.GatedDeltaNetWindow*:GdnCuda.CopySpans*:CudaSpec.RollbackWindowBoundsAndRepeatedRollbacks'
SANITIZE_FILTER+=':CudaSpec.RollbackToEveryPositionEqualsAFreshRun:CudaSpec.RealShapesRollback'
SANITIZE_FILTER+=':CudaSpec.BatchedVerifyOf16SequencesIsLossless'
# The MTP head: its KV cache and chunked pairs, chained drafts, rollbacks, FP8 linears.
SANITIZE_FILTER+=':CudaMtpHead.RollbackAndRefusals:CudaMtpHead.LogitsFollowTheCpuHeadFp8'
# The per-sequence rings of kept hidden states (wraps, refusals) and the engine's batch of 16 MTP
# requests at k = 1..8 (ring copies after graph and non-graph steps, the head reading them).
SANITIZE_FILTER+=':CudaEngineMtp.SequenceHiddenStatesFollowTheCpu:CudaEngineMtp.SixteenMixedRequestsEqualRunningAlone'
sanitizer_result="not asked for (PARTS)"
if want memcheck; then run_memcheck "$SANITIZE_FILTER" "$LOGS/memcheck.log" || status=1; fi

if want bench; then
  "$VT" bench decode --synthetic qwen3.5-27b --weights fp8 --batch 1,16 --context "$CONTEXT" --steps 20 \
    --verify 1,2,3,4,5,6,7,8 --json >"$LOGS/verify_27b_fp8.json" 2>"$LOGS/verify_27b_fp8.err" || {
    status=1; echo "FAILED: verify bench"; tail -5 "$LOGS/verify_27b_fp8.err"; }
fi

tar -czf "$OUT/spec_round.tar.gz" -C "$LOGS" .
echo
want tests && { echo "== spec tests"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|near tie|chi-square|MTP|rel L2" \
  "$LOGS/spec_tests.log" | tail -30; }
echo "== memcheck: $sanitizer_result"
grep -E "^\[  FAILED  \]|Invalid|out of bounds" "$LOGS/memcheck.log" 2>/dev/null | head -10
want bench && python3 - "$LOGS/verify_27b_fp8.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as error:
    print("verify bench unreadable:", error); sys.exit(0)
rates = report["acceptance"]
print(f"\n== verify vs 1-token step: {report['model']}, context {report['context']}")
for entry in report["batches"]:
    print(f"\nbatch {entry['batch']}: 1-token step {entry['one_token_ms']:.3f} ms (graph {entry['graphs']})")
    print("| k | ms/step | x 1-token | ms/draft | " + " | ".join(f"tok/s a={a}" for a in rates) + " |")
    print("|---|---|---|---|" + "---|" * len(rates))
    for row in entry["rows"]:
        projected = " | ".join(f"{p['tokens_per_second']:.1f} ({p['speedup']:.2f}x)" for p in row["projected"])
        print(f"| {row['k']} | {row['ms_per_step']:.3f} | {row['vs_one_token']:.2f} | {row['ms_per_draft']:.3f} | {projected} |")
PY
exit $status
