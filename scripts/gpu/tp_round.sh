#!/usr/bin/env bash
# Run ON a GPU machine with two or more GPUs, after scripts/gpu/cuda_tests.sh built build-gpu/:
# issue 9's round. The tensor-parallel tests (golden models TP=2 vs TP=1 and HF, batched graph
# steps, the 27B FP8 shapes split in two), then synthetic 27B FP8 decode at TP=1 and TP=2 (and
# 35B-A3B), batch 1/16/64, context 1024. Logs: $OUT/tp_round.tar.gz; the table prints last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
LOGS=$(mktemp -d)
CONTEXT=${CONTEXT:-1024}
status=0
nvidia-smi topo -m >"$LOGS/topology.txt" 2>&1
export NCCL_NVLS_ENABLE=0
build-gpu/tests/vt_nccl_tests >"$LOGS/tp_tests.log" 2>&1 || { status=1; echo "FAILED: vt_nccl_tests"; }
grep -E "^\[  (PASSED|FAILED|  OK|SKIPPED) |rel L2" "$LOGS/tp_tests.log" | head -40
bench() {  # name, vt args...
  local name=$1; shift
  "$VT" bench decode "$@" --context "$CONTEXT" --json >"$LOGS/$name.json" 2>"$LOGS/$name.err" || {
    status=1; echo "FAILED: $name"; tail -5 "$LOGS/$name.err"; }
}
bench 27b_fp8_tp1 --synthetic qwen3.5-27b --weights fp8 --batch 1,16,64 --steps 32
bench 27b_fp8_tp2 --synthetic qwen3.5-27b --weights fp8 --batch 1,16,64 --steps 32 --tensor-parallel 2
bench 35b_fp8_tp2 --synthetic qwen3.5-35b-a3b --weights fp8 --batch 1,16,64 --steps 32 --tensor-parallel 2
tar -czf "$OUT/tp_round.tar.gz" -C "$LOGS" .
python3 scripts/gpu/decode_table.py "$LOGS"
exit $status
