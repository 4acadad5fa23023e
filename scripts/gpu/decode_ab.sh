#!/usr/bin/env bash
# Run ON the GPU machine (device tool; carry .gpu-deps and .base-src, made here by
# scripts/gpu/pack_deps.sh and scripts/gpu/base_src.sh <commit>): the same-call A/B of two
# commits' decode. Builds this tree (build-gpu) and, beside it, the base (build-base), runs the CUDA
# tests on this tree with the GPU required (TEST_FILTER, default all), then `vt bench decode` of
# MODELS (default the synthetic 27B and 35B-A3B FP8) at BATCH (default 1,16,64), alternating base
# and this tree for ROUNDS (default 2) rounds, each build tuning its own GEMM plan; EXTRA_MODELS
# (default qwen3-next-80b; it needs the H200's memory) on this tree once; finally the GEMM plans
# and the tables, the failed tests' messages first; PROFILE="model:batch ..." profiles both builds;
# OP_BENCH="op:model:m-list ..." (e.g. moe:qwen3.5-35b-a3b:1,2,4,8,16) runs `vt bench op` on this
# tree, each table whole in $OUT/op_<op>.txt (a call's output tail cuts long tables);
# PREFILL="model:tokens ..." (e.g. qwen3.5-35b-a3b:8192) runs `vt bench prefill` (steps of 2,048,
# median of 3) with both builds, the tables as $OUT/prefill_<build>_<model>.md. With .alt-src
# (base_src.sh <commit> .alt-src; carry it too) a third build, build-alt, runs beside the base in
# every round, profile and prefill: two changes against one base in one call.
# Logs: $OUT/decode_ab.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
status=0
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON -DCMAKE_PREFIX_PATH="$VT_DEPS" \
  >"$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
[ -f .base-src/COMMIT ] || { echo "no .base-src: run scripts/gpu/base_src.sh <commit> first"; exit 1; }
BASE=$(cat .base-src/COMMIT)
# Built in place, as prefill_round.sh does: the two share build-base (and build-gpu) in one call.
ln -sfn "$PWD/.gpu-deps" .base-src/.gpu-deps
(cmake -S .base-src -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON -DCMAKE_PREFIX_PATH="$VT_DEPS" &&
  cmake --build build-base -j 8 --target vt) >"$LOGS/base.log" 2>&1 &
base_build=$!
alt_build=
if [ -f .alt-src/COMMIT ]; then
  ln -sfn "$PWD/.gpu-deps" .alt-src/.gpu-deps
  (cmake -S .alt-src -B build-alt -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON -DCMAKE_PREFIX_PATH="$VT_DEPS" &&
    cmake --build build-alt -j 8 --target vt) >"$LOGS/alt.log" 2>&1 &
  alt_build=$!
fi
cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
wait $base_build || { status=1; echo "FAILED: the base build ($BASE)"; tail -5 "$LOGS/base.log"; }
echo "base build ($BASE): $(( $(date +%s) - start )) s"
if [ -n "$alt_build" ]; then
  wait $alt_build || { status=1; echo "FAILED: the alt build ($(cat .alt-src/COMMIT))"; tail -5 "$LOGS/alt.log"; }
  echo "alt build ($(cat .alt-src/COMMIT)): $(( $(date +%s) - start )) s"
fi
export VT_REQUIRE_GPU=1
timeout 420 build-gpu/tests/vt_cuda_tests --gtest_filter="${TEST_FILTER:-*}" >"$LOGS/cuda_tests.log" 2>&1 || {
  status=1; echo "FAILED: vt_cuda_tests"; grep -E -B2 -A8 "Failure|what\(\)|C\+\+ exception" "$LOGS/cuda_tests.log" | head -60; }
[ -x build-gpu/tests/vt_nccl_tests ] && { timeout 120 build-gpu/tests/vt_nccl_tests >"$LOGS/nccl_tests.log" 2>&1 ||
  { status=1; echo "FAILED: vt_nccl_tests"; }; }
bench() {  # build-dir name model
  env VT_CACHE_DIR="$LOGS/plan_$1" "$1/apps/vt" bench decode --synthetic "$3" --weights fp8 --batch "${BATCH:-1,16,64}" \
    --context 1024 --steps 32 --json >"$LOGS/$2.json" 2>"$LOGS/$2.err" || {
    status=1; echo "FAILED: $2"; tail -3 "$LOGS/$2.err"; }
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for model in ${MODELS:-qwen3.5-27b qwen3.5-35b-a3b}; do
    [ -x build-base/apps/vt ] && bench build-base "base_${model}_$round" "$model"
    [ -n "$alt_build" ] && [ -x build-alt/apps/vt ] && bench build-alt "alt_${model}_$round" "$model"
    bench build-gpu "new_${model}_$round" "$model"
  done
done
for model in ${EXTRA_MODELS-qwen3-next-80b}; do bench build-gpu "new_${model}_1" "$model"; done
# PROFILE="model:batch ...": `vt profile decode` of both builds, the reports as $OUT/profile_*.txt.
for spec in ${PROFILE-}; do
  for build in build-base ${alt_build:+build-alt} build-gpu; do
    [ -x "$build/apps/vt" ] || continue
    name="profile_${build#build-}_${spec/:/_b}.txt"
    env VT_CACHE_DIR="$LOGS/plan_$build" "$build/apps/vt" profile decode --synthetic "${spec%%:*}" --weights fp8 \
      --batch "${spec##*:}" --steps 30 >"$OUT/$name" 2>&1 || { status=1; echo "FAILED: $name"; tail -3 "$OUT/$name"; }
  done
done
for spec in ${PREFILL-}; do
  for build in build-base ${alt_build:+build-alt} build-gpu; do
    [ -x "$build/apps/vt" ] || continue
    name="prefill_${build#build-}_${spec%%:*}.md"
    env VT_CACHE_DIR="$LOGS/plan_$build" "$build/apps/vt" bench prefill --synthetic "${spec%%:*}" --weights fp8 \
      --tokens "${spec##*:}" --step-tokens 2048 --repeats 3 >"$OUT/$name" 2>"$LOGS/$name.err" ||
      { status=1; echo "FAILED: $name"; tail -3 "$LOGS/$name.err"; }
  done
done
for spec in ${OP_BENCH-}; do
  IFS=: read -r op model rows <<<"$spec"
  env VT_CACHE_DIR="$LOGS/plan_build-gpu" build-gpu/apps/vt bench op "$op" --synthetic "$model" --m "$rows" \
    >"$OUT/op_$op.txt" 2>&1 || { status=1; echo "FAILED: vt bench op $spec"; tail -3 "$OUT/op_$op.txt"; }
done
tar -czf "$OUT/decode_ab.tar.gz" -C "$LOGS" .
echo "== vt_cuda_tests: $(grep -cE '^\[       OK \]' "$LOGS/cuda_tests.log") ok"
grep -E "^\[  FAILED  \]|^\[  SKIPPED \]" "$LOGS/cuda_tests.log" | sort -u | head -20
[ -f "$LOGS/nccl_tests.log" ] && echo "== vt_nccl_tests: $(grep -E '^\[  PASSED  \]|FAILED' "$LOGS/nccl_tests.log" | head -3)"
for model in ${MODELS:-qwen3.5-27b qwen3.5-35b-a3b} ${EXTRA_MODELS-qwen3-next-80b}; do
  echo "== GEMM plan, $model (this tree)"; grep -E "M<=|forced|tuned" "$LOGS/new_${model}_1.err" | head -12
done
python3 scripts/gpu/decode_table.py "$LOGS"
exit $status
