#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps; with BASE=<commit> also .base-src from
# scripts/gpu/base_src.sh): the Gated DeltaNet recurrent kernel's round. Builds vt and the CUDA
# tests, runs the GDN kernel and model tests against the CPU reference (the chunked test also with 3
# and 8 sequences per cluster, bit for bit), compute-sanitizer memcheck of the GDN tests, the
# synthetic 27B FP8 decode A/B of VARIANTS (default: the sequences-per-cluster rule against one
# sequence per cluster; 'base' runs BASE's build) with the CUPTI gdn rows at PROFILE_BATCH (default
# 16), then Nsight Compute's view of the kernel at that batch. Every part goes through
# scripts/gpu/wgmma_round.sh (its logs and tables); docs/perf/2026-12-02-gdn-recurrent.md is the
# first round's record. NCU= (empty) skips Nsight Compute.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
TESTS=${TESTS:-'CudaKernels.GatedDeltaNet*:CudaModel.*'} GEMM_M=none BATCH=${BATCH:-1,4,16,32} STEPS=${STEPS:-32} \
  ROUNDS=${ROUNDS:-2} VARIANTS=${VARIANTS:-'none|VT_GDN_SEQS_PER_CTA=1'} PROFILE=1 \
  PROFILE_BATCH=${PROFILE_BATCH:-16} PROFILE_ROWS='gdn|busy' MEMCHECK='CudaKernels.GatedDeltaNet*' \
  bash scripts/gpu/wgmma_round.sh || status=1
[ -n "${NCU-1}" ] && { bash scripts/gpu/ncu_kernels.sh 'gdn_recurrent' "${PROFILE_BATCH:-16}" | tail -24 || status=1; }
exit $status
