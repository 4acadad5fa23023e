#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps made by scripts/gpu/pack_deps.sh):
# builds vt with CUDA for sm_90a on all cores, runs the whole test suite with the GPU required
# (CUDA kernels against the CPU reference; golden model tests), and prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-/tmp/vt-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
nvcc --version | tail -2
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -40; exit 1; }
built=$(date +%s)
export VT_REQUIRE_GPU=1
(cd build-gpu && ctest --output-on-failure -j 8) >"$OUT/ctest.log" 2>&1
status=$?
tail -15 "$OUT/ctest.log"
build-gpu/tests/vt_cuda_tests --gtest_brief=0 >"$OUT/cuda_tests.log" 2>&1
cuda_status=$?
echo
echo "| step | result |"
echo "|---|---|"
echo "| gpu | $(cat "$OUT/gpu.txt") |"
echo "| build (s) | $((built - start)) |"
echo "| ctest | $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1) |"
echo "| CUDA vs CPU | $(grep -cE '^\[       OK \]' "$OUT/cuda_tests.log") ok, $(grep -cE '^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/cuda_tests.log") failed/skipped |"
exit $(( status || cuda_status ))
