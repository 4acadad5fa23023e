#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): the FP8 GEMM
# backends on the 27B and 35B-A3B decode shapes (`vt bench gemm`) and the cuBLASLt peer through
# torch._scaled_mm in the same call; issue 6's acceptance table from them (gemm_acceptance.py,
# M = 1, 8, 16) prints last. Logs in $OUT/gemm_round.tar.gz (and in GEMM_LOGS, where given, as they
# are written: scripts/gpu/peers_round.sh keeps them there should its time limit cut this short).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=${GEMM_LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"
require_build
status=0
"$VT" bench gemm --synthetic qwen3.5-27b >"$LOGS/gemm_27b.md" 2>&1 || status=1
"$VT" bench gemm --synthetic qwen3.5-35b-a3b --m 1,16,64 >"$LOGS/gemm_35b.md" 2>&1 || status=1
python3 scripts/gpu/scaled_mm_peer.py >"$LOGS/scaled_mm_peer.md" 2>&1 || status=1
echo "== 27B"; grep -E "\*|cublaslt_bf16|bandwidth|FAIL|rror" "$LOGS/gemm_27b.md"
echo "== 35B"; grep -E "\*|bandwidth|rror" "$LOGS/gemm_35b.md"
echo "== acceptance (27B, M <= 16)"
python3 scripts/gpu/gemm_acceptance.py "$LOGS/gemm_27b.md" "$LOGS/scaled_mm_peer.md" | tee "$LOGS/acceptance.md" || status=1
tar -czf "$OUT/gemm_round.tar.gz" -C "$LOGS" .
exit $status
