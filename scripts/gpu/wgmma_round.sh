#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): issue 6's wgmma round. Builds vt and the
# CUDA tests (sm_90a, all cores), runs the FP8 GEMM backends against the CPU reference on the
# awkward grid (NormCuda.*:ActivationCuda.*:GemmCuda.*), `vt bench gemm` on the 27B decode shapes, and the end-to-end A/B of the
# synthetic 27B FP8 decode with the registry's plan without wgmma (--gemm-exclude wgmma) and with
# it, alternating (VARIANTS: other variants to compare). Logs in $OUT/wgmma_round.tar.gz; the
# tables print last. GEMM_M (default 1,8,16,32,64; "none" skips), BATCH (1,4,16), STEPS (32), ROUNDS (2),
# PROFILE=1 (the attribution per variant at batch PROFILE_BATCH, default 1; PROFILE_ROWS: the rows it
# prints, an extended regex, default gemm), TESTS (gtest filter,
# default NormCuda.*:ActivationCuda.*:GemmCuda.*), MEMCHECK (a gtest filter run under compute-sanitizer) adjust it. Each variant
# tunes its own GEMM plan (VT_CACHE_DIR per variant: two builds of one vt version would otherwise
# share ~/.cache/vt/gemm_plan.json, the second running the first one's choices). GEMM_VARIANTS=1
# runs `vt bench gemm` in each variant's environment too.
# BASE=<commit> also builds that commit's vt (build-base/, from the carried .base-src that
# scripts/gpu/base_src.sh makes, else a git worktree) beside this one: a
# variant that starts with "base" runs it (VARIANTS='base|none' is the same-call A/B of the two
# commits; the variant's other words are environment assignments), and `vt bench gemm` runs on both.
# A variant's words from the first one that starts with "--" on are vt arguments of its decode and
# profile runs (VARIANTS='none|--lm-head fp8'). PROFILE_BATCH may list batches (1,16).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
status=0
start=$(date +%s)
if [ ! -x build-gpu/tests/vt_cuda_tests ] || [ ! -x "$VT" ] || [ -n "${REBUILD:-}" ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
fi
cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
  grep -E "error" -A3 "$LOGS/build.log" | head -40; tar -czf "$OUT/wgmma_round.tar.gz" -C "$LOGS" .; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
if [ -n "${BASE:-}" ] && [ ! -x build-base/apps/vt ]; then
  # The base's source: the carried .base-src (scripts/gpu/base_src.sh <commit> makes it here; the
  # GPU machine's copy has no git history of recent commits), else a git worktree.
  if [ -f .base-src/COMMIT ] && [ "$(cat .base-src/COMMIT)" = "$BASE" ]; then
    rm -rf /tmp/vt-base && cp -r .base-src /tmp/vt-base
  else
    rm -rf /tmp/vt-base && git worktree add -f /tmp/vt-base "$BASE" >"$LOGS/base.log" 2>&1
  fi &&
    cmake -S /tmp/vt-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >>"$LOGS/base.log" 2>&1 &&
    cmake --build build-base -j "$(nproc)" --target vt >>"$LOGS/base.log" 2>&1 || {
      status=1; echo "FAILED: the base build ($BASE)"; tail -5 "$LOGS/base.log"; }
  echo "base build ($BASE): $(( $(date +%s) - start )) s"
fi
# A variant's binary and environment: "base ..." runs build-base's vt.
variant_cmd() {
  case "$1" in
    base*) echo "build-base/apps/vt" ;;
    *) echo "$VT" ;;
  esac
}
variant_env() { local v=${1#base}; v=${v%%--*}; [ "$(echo $v)" = none ] && v=""; echo "$v"; }
variant_args() { case "$1" in *--*) echo "--${1#*--}" ;; esac; }
export VT_REQUIRE_GPU=1
timeout 300 build-gpu/tests/vt_cuda_tests --gtest_filter="${TESTS:-NormCuda.*:ActivationCuda.*:GemmCuda.*}" >"$LOGS/ops.log" 2>&1 || {
  status=1; echo "FAILED: vt_cuda_tests ${TESTS:-NormCuda.*:ActivationCuda.*:GemmCuda.*}"; }
if [ "${GEMM_M:-}" != none ]; then
  "$VT" bench gemm --synthetic qwen3.5-27b --m "${GEMM_M:-1,8,16,32,64}" >"$LOGS/gemm_27b.md" 2>&1 || {
    status=1; echo "FAILED: bench gemm"; }
  if [ -n "${BASE:-}" ] && [ -x build-base/apps/vt ]; then
    build-base/apps/vt bench gemm --synthetic qwen3.5-27b --m "${GEMM_M:-1,8,16,32,64}" >"$LOGS/gemm_27b_base.md" 2>&1 || {
      status=1; echo "FAILED: bench gemm (base)"; }
  fi
fi
# Decode variants: environment assignments, separated by '|'; ROUNDS (default 2) alternating rounds.
IFS='|' read -r -a variants <<<"${VARIANTS:---gemm-exclude wgmma|none}"
# GEMM_VARIANTS=1: `vt bench gemm` once more per variant, in its environment (gemm_27b_v<index>.md).
if [ -n "${GEMM_VARIANTS:-}" ] && [ "${GEMM_M:-}" != none ]; then
  for index in "${!variants[@]}"; do
    env VT_CACHE_DIR="$LOGS/plan_$index" $(variant_env "${variants[$index]}") "$(variant_cmd "${variants[$index]}")" \
      bench gemm --synthetic qwen3.5-27b --m "${GEMM_M:-1,8,16,32,64}" >"$LOGS/gemm_27b_v$index.md" 2>&1 || {
      status=1; echo "FAILED: bench gemm with ${variants[$index]}"; }
  done
fi
for round in $(seq 1 "${ROUNDS:-2}"); do
  for index in "${!variants[@]}"; do
    env VT_CACHE_DIR="$LOGS/plan_$index" $(variant_env "${variants[$index]}") "$(variant_cmd "${variants[$index]}")" bench decode --synthetic qwen3.5-27b --weights fp8 --batch "${BATCH:-1,4,16}" \
      --context 1024 --steps "${STEPS:-32}" $(variant_args "${variants[$index]}") --json >"$LOGS/decode_${index}_$round.json" 2>"$LOGS/decode_${index}_$round.err" || {
      status=1; echo "FAILED: decode with ${variants[$index]}"; tail -3 "$LOGS/decode_${index}_$round.err"; }
  done
done
# PROFILE=1: the CUPTI attribution per variant at each batch of PROFILE_BATCH (GEMM rows print).
IFS=',' read -r -a profile_batches <<<"${PROFILE_BATCH:-1}"
if [ -n "${PROFILE:-}" ]; then
  for index in "${!variants[@]}"; do
    for batch in "${profile_batches[@]}"; do
      env VT_CACHE_DIR="$LOGS/plan_$index" $(variant_env "${variants[$index]}") "$(variant_cmd "${variants[$index]}")" profile decode \
        --synthetic qwen3.5-27b --batch "$batch" --steps 20 $(variant_args "${variants[$index]}") \
        >"$LOGS/profile_${index}_b$batch.txt" 2>"$LOGS/profile_${index}_b$batch.err" || {
        status=1; echo "FAILED: profile with ${variants[$index]} at batch $batch"; }
    done
  done
fi
if [ -n "${MEMCHECK:-}" ]; then
  run_memcheck "$MEMCHECK" "$LOGS/memcheck.log" || status=1
  echo "== memcheck $MEMCHECK: $sanitizer_result"
fi
tar -czf "$OUT/wgmma_round.tar.gz" -C "$LOGS" .
echo "== vt_cuda_tests ${TESTS:-NormCuda.*:ActivationCuda.*:GemmCuda.*}"; grep -E "^\[  (FAILED|PASSED) |^wgmma" "$LOGS/ops.log" | head -40
[ -f "$LOGS/gemm_27b.md" ] && { echo "== bench gemm (chosen rows marked *)"; grep -E "\*|read_floor|\+norm|alone|bandwidth|FAIL|rror" "$LOGS/gemm_27b.md" | head -160; }
if [ -n "${GEMM_VARIANTS:-}" ]; then
  for index in "${!variants[@]}"; do
    echo "== bench gemm, ${variants[$index]} (wgmma rows and the chosen)"
    grep -E "\*|fp8_wgmma |read_floor|partials" "$LOGS/gemm_27b_v$index.md" | awk -F'|' '$4+0 <= 16' | head -40
  done
fi
[ -f "$LOGS/gemm_27b_base.md" ] && { echo "== bench gemm, base ${BASE:-}"; grep -E "\*|bandwidth|FAIL|rror" "$LOGS/gemm_27b_base.md" | head -40; }
if [ -n "${PROFILE:-}" ]; then
  for index in "${!variants[@]}"; do
    for batch in "${profile_batches[@]}"; do
      echo "== profile batch $batch, ${variants[$index]}"
      grep -E "us/step wall|${PROFILE_ROWS:-gemm}|^\| group" "$LOGS/profile_${index}_b$batch.txt" | head -24
    done
  done
fi
python3 - "$LOGS" "${ROUNDS:-2}" "${variants[@]}" <<'PY'
import json, sys, pathlib
logs, rounds, variants = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
print("\n== decode, synthetic 27B FP8, context 1024\n| variant | round | batch | ms/step | tok/s |\n|---|---|---|---|---|")
for round_ in range(1, rounds + 1):
    for index, variant in enumerate(variants):
        path = logs / f"decode_{index}_{round_}.json"
        if not path.exists() or path.stat().st_size == 0:
            print(f"| {variant} | {round_} | - | failed | |"); continue
        for row in json.loads(path.read_text())["rows"]:
            print(f"| {variant} | {round_} | {row['batch']} | {row['ms_per_step']:.3f} | {row['tokens_per_second']:.1f} |")
PY
exit $status
