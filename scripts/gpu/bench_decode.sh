#!/usr/bin/env bash
# Run ON the GPU machine after scripts/gpu/cuda_tests.sh (which builds build-gpu/): decode
# benchmark of the synthetic real-size models next to the bandwidth floor. Prints the tables last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
CONTEXT=${CONTEXT:-1024}
BATCHES=${BATCHES:-1,16,64}
status=0
for weights in fp8 bf16; do
  "$VT" bench decode --synthetic qwen3.5-27b --weights "$weights" --batch "$BATCHES" --context "$CONTEXT" \
    --steps 32 --json >"$OUT/bench_27b_$weights.json" 2>"$OUT/bench_27b_$weights.err" || status=1
  "$VT" bench decode --synthetic qwen3.5-27b --weights "$weights" --batch 1 --context "$CONTEXT" --steps 16 \
    --no-graph --json >"$OUT/bench_27b_${weights}_nograph.json" 2>>"$OUT/bench_27b_$weights.err" || status=1
done
python3 - "$OUT" <<'PY'
import json, sys, glob, os
for path in sorted(glob.glob(os.path.join(sys.argv[1], "bench_*.json"))):
    try:
        report = json.load(open(path))
    except Exception as error:
        print(path, "unreadable:", error); continue
    print(f"\n{os.path.basename(path)}: {report['model']}, context {report['context']}, graphs {report['graphs']}, "
          f"read bandwidth {report['bandwidth_gbps']:.0f} GB/s, weights {report['weight_bytes']/1e9:.2f} GB")
    print("| batch | ms/step | tok/s | floor ms | of floor |")
    for row in report["rows"]:
        print(f"| {row['batch']} | {row['ms_per_step']:.3f} | {row['tokens_per_second']:.1f} | {row['floor_ms']:.3f} | {100*row['floor_fraction']:.0f}% |")
PY
cat "$OUT"/bench_*.err | tail -5
exit $status
