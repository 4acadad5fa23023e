#!/usr/bin/env bash
# Run ON the GPU machine after scripts/gpu/cuda_tests.sh: issue 7's acceptance round. The CUPTI
# attribution of a 27B FP8 decode step at batch 1 and 16 (`vt profile decode`, text and JSON), the
# same GEMMs alone (`vt bench gemm`) to check the profile's GEMM rows against, a step with the
# fused FP8 quantisation disabled (the report must name the quantise kernels that ran instead), and
# a forced backend that cannot serve a shape (must be refused). Logs: $OUT/profile_round.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
LOGS=$(mktemp -d)
status=0
MODEL=${MODEL:-qwen3.5-27b}
for batch in 1 16; do
  "$VT" profile decode --synthetic "$MODEL" --batch "$batch" --steps 20 >"$LOGS/profile_b$batch.txt" \
    2>"$LOGS/profile_b$batch.err" || { status=1; echo "FAILED: profile b$batch"; tail -5 "$LOGS/profile_b$batch.err"; }
  "$VT" profile decode --synthetic "$MODEL" --batch "$batch" --steps 20 --json >"$LOGS/profile_b$batch.json" \
    2>>"$LOGS/profile_b$batch.err" || status=1
done
"$VT" bench gemm --synthetic "$MODEL" --m 1,16 --json >"$LOGS/gemm.json" 2>"$LOGS/gemm.err" || {
  status=1; echo "FAILED: bench gemm"; tail -5 "$LOGS/gemm.err"; }
VT_FUSED_QUANT=0 "$VT" profile decode --synthetic "$MODEL" --batch 1 --steps 20 >"$LOGS/profile_b1_unfused.txt" \
  2>"$LOGS/profile_b1_unfused.err" || { status=1; echo "FAILED: unfused profile"; }
# gemv serves only M = 1: a batch-16 profile with it forced must be refused before it starts.
if VT_GEMM_BACKEND=gemv "$VT" profile decode --synthetic "$MODEL" --batch 16 --steps 4 >"$LOGS/forced.txt" 2>&1; then
  status=1; echo "FAILED: VT_GEMM_BACKEND=gemv at batch 16 was not refused"
else
  echo "forced gemv at batch 16 refused: $(grep -m1 -i 'cannot serve' "$LOGS/forced.txt")"
fi
tar -czf "$OUT/profile_round.tar.gz" -C "$LOGS" .
echo; echo "== unfused b1: quantise kernels (the fallback that ran)"
grep -iE "quantize|quantise" "$LOGS/profile_b1_unfused.txt" | head -8
for batch in 1 16; do echo; echo "== profile $MODEL batch $batch"; head -60 "$LOGS/profile_b$batch.txt"; done
python3 scripts/gpu/profile_vs_gemm.py "$LOGS/profile_b1.json" "$LOGS/profile_b16.json" "$LOGS/gemm.json" || status=1
exit $status
