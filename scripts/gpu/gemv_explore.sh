#!/usr/bin/env bash
# Run ON the GPU machine: builds scripts/gpu/gemv_explore.cu (standalone, nvcc only) and runs the
# small-M FP8 GEMM design sweep (pure-read ceilings, CUDA-core and tensor-core GEMV variants on
# the 27B decode shapes at M = 1 and 16, each checked against an f32 reference). Full table in
# $OUT/gemv_explore.md; the best variant per shape prints last.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
BIN=$(mktemp -d)/gemv_explore
nvcc -std=c++17 -arch=sm_90a -O3 -o "$BIN" scripts/gpu/gemv_explore.cu || exit 1
"$BIN" "$@" >"$OUT/gemv_explore.md" || { tail -20 "$OUT/gemv_explore.md"; exit 1; }
head -1 "$OUT/gemv_explore.md"
sed -n '/best variant/,$p' "$OUT/gemv_explore.md"
