#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): the FP8 output layer's round (issue 6).
# Builds vt and the CUDA tests, runs them against the CPU reference (TESTS, default all; among them
# the exact columns' kernels and the model's FP8 output layer with exact columns against the CPU
# reference's), compute-sanitizer memcheck of the exact-columns test, then the synthetic 27B FP8
# decode with the output layer as stored, FP8 with no exact columns, and FP8 with 32 (the default),
# alternating, and the
# CUPTI attribution of each at batches 1 and 16 (the lm_head rows). Everything goes through
# scripts/gpu/wgmma_round.sh (its logs and tables).
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS=${TESTS:-'*'} GEMM_M=none BATCH=${BATCH:-1,16} STEPS=${STEPS:-32} ROUNDS=${ROUNDS:-2} \
  VARIANTS=${VARIANTS:-'none|--lm-head fp8 --lm-head-exact-columns 0|--lm-head fp8'} PROFILE=1 \
  PROFILE_BATCH=${PROFILE_BATCH:-1,16} PROFILE_ROWS=${PROFILE_ROWS:-'lm_head|exact|busy'} MEMCHECK=${MEMCHECK:-'GemmCuda.ExactColumnsMatchCpu'} \
  bash scripts/gpu/wgmma_round.sh
