#!/usr/bin/env bash
# Run ON the GPU machine: builds scripts/gpu/wgmma_explore.cu (standalone, nvcc only; the kernel
# is vt's src/backends/cuda/kernels/fp8_gemm_wgmma.cuh) and sweeps its configurations on the 27B
# decode shapes at M = 1..64, each checked against an f32 reference and for bit-identical reruns.
# Full table in $OUT/wgmma_explore.md; the best configuration per shape and M prints last.
# Optional argument: one M, "grid" (one CTA per tile with deep rings against the registry's splits,
# M = 8 / 16), "waves" (stream-K over 2-8 x SMs CTAs, two per SM, M = 8 / 16), "halves" (64-row
# tiles against 128, M = 8 / 16), "stamps" (when each CTA passes the shared-tile sum's points, M = 16; WGMMA_STAMPS_CSV=path: every CTA's row), "diag" (the
# kernel without parts of its work; WGMMA_NO_PDL_ROWS=1 adds
# each row without PDL), or "ab": the registry's
# configuration of this kernel against the kernel at commit $WGMMA_BASE (default efe0435, the
# stream-K kernel before its scales moved into the stages): this kernel's stream-K and receivers
# splits, one CTA per tile, 6 stages.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
TMP=$(mktemp -d)
BIN=$TMP/wgmma_explore
# The base kernel for the A/B rows (every mode builds them), from git: the tree must carry its history.
git show "${WGMMA_BASE:-efe0435}:src/backends/cuda/kernels/fp8_gemm_wgmma.cuh" >"$TMP/wgmma_base.cuh" || {
  echo "wgmma_explore.sh: cannot read the base kernel at ${WGMMA_BASE:-efe0435} (no git history here?)" >&2; exit 1; }
nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O3 -Xptxas -warn-spills -I src -I "$TMP" -o "$BIN" \
  scripts/gpu/wgmma_explore.cu || exit 1
cuobjdump --dump-sass "$BIN" | grep -c QGMMA | sed 's/^/QGMMA instructions in SASS: /'
timeout "${SWEEP_TIMEOUT:-300}" "$BIN" "$@" >"$OUT/wgmma_explore.md" 2>&1 || { tail -30 "$OUT/wgmma_explore.md"; exit 1; }
head -1 "$OUT/wgmma_explore.md"
grep -c FAILED "$OUT/wgmma_explore.md" | sed 's/^/FAILED rows: /'
sed -n '/when the CTAs pass\|best variant/,$p' "$OUT/wgmma_explore.md"
