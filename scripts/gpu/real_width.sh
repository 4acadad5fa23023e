#!/usr/bin/env bash
# Run ON the GPU machine (device tool, carry .gpu-deps made by scripts/gpu/pack_deps.sh; python3
# there has torch and transformers): issue 34's "what we benchmark is what we verify" at real
# widths. Makes the real-width FP8 goldens with HF transformers on the GPU
# (scripts/golden/make_real_width_goldens.py: Qwen3.5-27B and 35B-A3B layer widths from fixed
# seeds, ~1.6 GB each, into the git-ignored tests/golden/real_width/) while vt builds (build-gpu,
# targets vt and vt_cuda_tests), then runs CudaRealWidth.* (vt serve's configuration against HF's
# float32 W8A8, bounds from the recorded floors; a skip counts as a failure) and `vt eval layers`
# on the 27B-width case's 7-token prompt: the CPU W8A8 reference against the served CUDA
# configuration, tap by tap. Logs and the references go to $OUT/real_width.tar.gz; the table
# prints last. Goldens already in the folder (both reference.json) are kept unless GOLDENS=remake;
# LAYERS_TIMEOUT (s, default 300) bounds the eval layers run.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
GOLDEN=tests/golden/real_width
TESTS=build-gpu/tests/vt_cuda_tests
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
start=$(date +%s)

# The goldens on the GPU, beside the build on the CPU cores.
if [ "${GOLDENS:-}" != remake ] && [ -f "$GOLDEN/qwen3_5_27b_fp8/reference.json" ] &&
   [ -f "$GOLDEN/qwen3_5_35b_a3b_fp8/reference.json" ]; then
  echo "goldens kept from an earlier run in $GOLDEN" >"$LOGS/goldens.log"; true &
else
  python3 scripts/golden/make_real_width_goldens.py --out "$GOLDEN" --device cuda >"$LOGS/goldens.log" 2>&1 &
fi
goldens_pid=$!

if [ ! -f build-gpu/build.ninja ]; then
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DVT_CUDA=ON \
    -DCMAKE_PREFIX_PATH="$PWD/.gpu-deps/usr" >"$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; status=1; }
fi
if [ $status -eq 0 ]; then
  cmake --build build-gpu -j "$(nproc)" --target vt vt_cuda_tests >"$LOGS/build.log" 2>&1 || {
    grep -E "error" -A3 "$LOGS/build.log" | head -40; status=1; }
fi
built=$(date +%s)
wait $goldens_pid
goldens_status=$?
generated=$(date +%s)
grep -E "noise floor|Error|error" "$LOGS/goldens.log" | head -20
if [ $goldens_status -ne 0 ]; then status=1; tail -20 "$LOGS/goldens.log"; fi
mkdir -p "$LOGS/references"
for case in qwen3_5_27b_fp8 qwen3_5_35b_a3b_fp8; do
  [ -f "$GOLDEN/$case/reference.json" ] && cp "$GOLDEN/$case/reference.json" "$LOGS/references/$case.json"
done

export VT_REQUIRE_GPU=1
test_result="not run"
if [ $status -eq 0 ]; then
  "$TESTS" --gtest_filter='Cases/CudaRealWidth.*' >"$LOGS/tests.log" 2>&1 && test_result="passed" || {
    status=1; test_result="FAILED"; }
  skipped=$(grep -cE '^\[  SKIPPED \]' "$LOGS/tests.log")
  if [ "$skipped" -gt 0 ]; then status=1; test_result="FAILED (skipped: a golden folder is missing)"; fi
  passed=$(grep -cE '^\[       OK \]' "$LOGS/tests.log")
  if [ "$passed" -ne 2 ] && [ "$test_result" = passed ]; then status=1; test_result="FAILED (not both cases ran)"; fi
  test_result+=": $(grep -cE '^\[       OK \]' "$LOGS/tests.log") ok, $(grep -cE '^\[  FAILED  \]' "$LOGS/tests.log") failed"
fi
tested=$(date +%s)

layers_result="not run"
LAYERS_CASE=$GOLDEN/qwen3_5_27b_fp8
if [ -f "$LAYERS_CASE/reference.json" ] && [ -x "$VT" ]; then  # also where the tests failed
  ids=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(",".join(map(str, r["modes"]["w8a8"]["prompts"][1]["ids"])))' \
    "$LAYERS_CASE/reference.json")
  timeout "${LAYERS_TIMEOUT:-300}" "$VT" eval layers --model "$LAYERS_CASE" --prompt-ids "$ids" --a cpu --b cuda --json \
    >"$LOGS/layers.json" 2>"$LOGS/layers.err" && layers_result="ran" || { status=1; layers_result="FAILED"; tail -5 "$LOGS/layers.err"; }
fi
finished=$(date +%s)

tar -czf "$OUT/real_width.tar.gz" -C "$LOGS" .
echo
echo "| step | result |"
echo "|---|---|"
echo "| gpu | $(cat "$LOGS/gpu.txt") |"
echo "| build (s) | $((built - start)) |"
echo "| goldens (s, beside the build) | $((generated - start)), exit $goldens_status |"
echo "| CudaRealWidth.* ($((tested - generated)) s) | $test_result |"
echo "| eval layers, 27B widths, cpu vs cuda ($((finished - tested)) s) | $layers_result |"
grep -E "^\[  FAILED  \]" "$LOGS/tests.log" 2>/dev/null | head -10
python3 - "$LOGS" <<'PY'
import json, os, re, sys
logs = sys.argv[1]
tests = open(os.path.join(logs, "tests.log")).read() if os.path.exists(os.path.join(logs, "tests.log")) else ""
for case in ("qwen3_5_27b_fp8", "qwen3_5_35b_a3b_fp8"):
    path = os.path.join(logs, "references", case + ".json")
    if not os.path.exists(path):
        print(f"\n{case}: no reference"); continue
    ref = json.load(open(path))
    f64, bf16 = ref["noise_floor"]["w8a8"], ref["noise_floor"]["w8a8_bf16"]
    vt = {int(m[0]): m for m in re.findall(
        rf"real-width {case} prompt (\d+) \(\d+ tokens\): logits rel L2 (\S+) \(bound (\S+)\), last position (\S+) "
        rf"\(bound (\S+)\); vs HF's served arithmetic (\S+); prompt positions whose argmax differs: (\d+)", tests)}
    greedy = {int(m[0]): m for m in re.findall(
        rf"real-width {case} prompt (\d+): greedy ids equal to HF f32 for (\d+) of (\d+) steps \((\d+) checked", tests)}
    print(f"\n{case}: HF float32 W8A8 reference; floors per prompt; vt = vt serve's configuration")
    print("| prompt | tokens | floor f32 vs f64 | floor bf16 vs f32 (last pos) | vt rel L2 (bound) | vt last pos (bound) "
          "| vt vs HF bf16 | argmax diffs vt / HF bf16 | greedy equal / checked / 24 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, entry in enumerate(ref["modes"]["w8a8"]["prompts"]):
        v, g = vt.get(i), greedy.get(i)
        print(f"| {i} | {len(entry['ids'])} | {f64[i]['logits_rel_l2']:.3g} | {bf16[i]['logits_rel_l2']:.3g} "
              f"({bf16[i]['last_logits_rel_l2']:.3g}) | "
              + (f"{v[1]} ({v[2]}) | {v[3]} ({v[4]}) | {v[5]} | {v[6]} / {bf16[i]['prompt_positions_argmax_differs']} | "
                 if v else "- | - | - | - | ")
              + (f"{g[1]} / {g[3]} / {g[2]} |" if g else "- |"))
path = os.path.join(logs, "layers.json")
if os.path.exists(path) and os.path.getsize(path):
    report = json.load(open(path))
    print(f"\neval layers, {report['tokens']} tokens: {report['b']} against {report['a']} (rel L2 per tap)")
    print("| layer | tap | rel L2 | max abs |")
    print("|---|---|---|---|")
    for row in report["rows"]:
        print(f"| {row['layer']} | {row['tap']} | {row['relative_l2']:.3g} | {row['max_abs']:.3g} |")
    lg = report["logits"]
    print(f"| - | logits (last token) | {lg['relative_l2']:.3g} | {lg['max_abs']:.3g} (argmax {lg['argmax_a']} vs {lg['argmax_b']}) |")
    print(f"first tap past {report['threshold']}: {report['first_past_threshold'] or 'none'}")
PY
exit $status
