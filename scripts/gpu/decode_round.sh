#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): one decode round —
# 27B and 35B-A3B FP8 at batch 1/16/64 (the output layer in FP8 too, BF16 weights, a forced
# backend), and the CUPTI attribution of a batch-1 and batch-16 step. Logs go to $OUT/decode_round.tar.gz; the
# tables print last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
require_build
CONTEXT=${CONTEXT:-1024}
status=0
bench() {  # name, [env...], -- vt args...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$VT" bench decode "$@" --context "$CONTEXT" --json >"$LOGS/$name.json" 2>"$LOGS/$name.err" || {
    status=1; echo "FAILED: $name"; tail -5 "$LOGS/$name.err"; }
}
bench 27b_fp8 -- --synthetic qwen3.5-27b --weights fp8 --batch 1,16,64 --steps 32
bench 35b_fp8 -- --synthetic qwen3.5-35b-a3b --weights fp8 --batch 1,16,64 --steps 32
bench 27b_fp8_lmhead_fp8 -- --synthetic qwen3.5-27b --weights fp8 --lm-head fp8 --batch 1,16,64 --steps 32
bench 27b_bf16 -- --synthetic qwen3.5-27b --weights bf16 --batch 1,16,64 --steps 32
bench 27b_fp8_mma VT_GEMM_BACKEND=mma -- --synthetic qwen3.5-27b --weights fp8 --batch 16,64 --steps 32
for batch in 1 16; do
  "$VT" profile decode --synthetic qwen3.5-27b --batch "$batch" --steps 20 >"$LOGS/profile_27b_b$batch.txt" \
    2>"$LOGS/profile_27b_b$batch.err" || { status=1; echo "FAILED: profile b$batch"; tail -5 "$LOGS/profile_27b_b$batch.err"; }
done
"$VT" profile decode --synthetic qwen3.5-35b-a3b --batch 1 --steps 20 >"$LOGS/profile_35b_b1.txt" 2>&1 || status=1
tar -czf "$OUT/decode_round.tar.gz" -C "$LOGS" .
for batch in 1 16; do echo; echo "== profile 27B batch $batch (top rows)"; head -40 "$LOGS/profile_27b_b$batch.txt"; done
python3 scripts/gpu/decode_table.py "$LOGS"
exit $status
