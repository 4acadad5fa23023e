#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps): issue 6's wgmma round. Builds vt and the
# CUDA tests (sm_90a, all cores), runs the FP8 GEMM backends against the CPU reference on the
# awkward grid (CudaOps.*), `vt bench gemm` on the 27B decode shapes, and the end-to-end A/B of the
# synthetic 27B FP8 decode with the registry's plan without wgmma (VT_GEMM_EXCLUDE=wgmma) and with
# it, alternating. Logs in $OUT/wgmma_round.tar.gz; the tables print last.
# GEMM_M (default 1,8,16,32,64), BATCH (1,4,16), STEPS (32) adjust it.
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
export VT_REQUIRE_GPU=1
build-gpu/tests/vt_cuda_tests --gtest_filter='CudaOps.*' >"$LOGS/ops.log" 2>&1 || { status=1; echo "FAILED: CudaOps"; }
"$VT" bench gemm --synthetic qwen3.5-27b --m "${GEMM_M:-1,8,16,32,64}" >"$LOGS/gemm_27b.md" 2>&1 || {
  status=1; echo "FAILED: bench gemm"; }
for round in 1 2; do
  for plan in wgmma none; do
    VT_GEMM_EXCLUDE=$plan "$VT" bench decode --synthetic qwen3.5-27b --weights fp8 --batch "${BATCH:-1,4,16}" \
      --context 1024 --steps "${STEPS:-32}" --json >"$LOGS/decode_${plan}_$round.json" 2>"$LOGS/decode_${plan}_$round.err" || {
      status=1; echo "FAILED: decode without $plan"; tail -3 "$LOGS/decode_${plan}_$round.err"; }
  done
done
tar -czf "$OUT/wgmma_round.tar.gz" -C "$LOGS" .
echo "== CudaOps"; grep -E "^\[  (FAILED|PASSED) |^wgmma" "$LOGS/ops.log" | head -20
echo "== bench gemm (chosen rows marked *)"; grep -E "\*|bandwidth|FAIL|rror" "$LOGS/gemm_27b.md" | head -40
python3 - "$LOGS" <<'PY'
import json, sys, pathlib
logs = pathlib.Path(sys.argv[1])
print("\n== decode, synthetic 27B FP8, context 1024\n| plan | round | batch | ms/step | tok/s |\n|---|---|---|---|---|")
for round_ in (1, 2):
    for plan in ("wgmma", "none"):
        path = logs / f"decode_{plan}_{round_}.json"
        if not path.exists() or path.stat().st_size == 0:
            print(f"| without {plan} | {round_} | - | failed | |"); continue
        for row in json.loads(path.read_text())["rows"]:
            name = "without wgmma" if plan == "wgmma" else "with wgmma"
            print(f"| {name} | {round_} | {row['batch']} | {row['ms_per_step']:.3f} | {row['tokens_per_second']:.1f} |")
PY
exit $status
