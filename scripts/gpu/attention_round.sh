#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps; with BASE=<commit> also .base-src from
# scripts/gpu/base_src.sh): the decode attention round. Builds vt and the CUDA tests, runs the
# attention and model tests against the CPU reference (with the tensor-core kernel and again with
# VT_ATTENTION_KERNEL=cuda_cores), compute-sanitizer memcheck of the attention test, the synthetic
# 27B FP8 decode A/B of VARIANTS (default: the tensor-core kernel against the CUDA-core one; 'base'
# runs BASE's build) with the CUPTI attention rows at PROFILE_BATCH (default 16), and a 4,096-token
# prefill per build. Every part goes through scripts/gpu/wgmma_round.sh (its logs and tables);
# docs/perf/2026-12-02-attention-gqa.md is the first round's record.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
TESTS=${TESTS:-'CudaKernels.*:CudaModel.*'} GEMM_M=none BATCH=${BATCH:-1,4,16,32} STEPS=${STEPS:-24} \
  ROUNDS=${ROUNDS:-2} VARIANTS=${VARIANTS:-'none|VT_ATTENTION_KERNEL=cuda_cores'} PROFILE=1 \
  PROFILE_BATCH=${PROFILE_BATCH:-16} PROFILE_ROWS='attention' MEMCHECK='CudaKernels.Attention*' \
  bash scripts/gpu/wgmma_round.sh || status=1
echo "== attention and model tests with VT_ATTENTION_KERNEL=cuda_cores"
VT_REQUIRE_GPU=1 VT_ATTENTION_KERNEL=cuda_cores build-gpu/tests/vt_cuda_tests \
  --gtest_filter='CudaKernels.Attention*:CudaModel.*' 2>&1 | grep -E "^\[  (PASSED|FAILED)" || status=1
for build in build-gpu ${BASE:+build-base}; do
  echo "== prefill, $build"
  "$build/apps/vt" bench prefill --synthetic qwen3.5-27b --weights fp8 --tokens 4096 --step-tokens 2048 \
    --repeats 3 2>/dev/null | grep -E "^\| 4096" || status=1
done
exit $status
