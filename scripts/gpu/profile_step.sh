#!/usr/bin/env bash
# Run ON the GPU machine after scripts/gpu/cuda_tests.sh: per-kernel durations of one decode step
# (Nsight Compute, clocks left alone), grouped by kernel, with each kernel's share of the step.
# Usage: profile_step.sh [batch] [extra vt bench args...]   (env VT_FP8_GEMM selects the FP8 kernel)
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
OUT=${OUT:-/tmp/vt-out}
BATCH=${1:-1}
shift || true
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
tag=${VT_FP8_GEMM:-mma}_b$BATCH
# 64 layers x ~9 kernels ~ 600 launches a step; skip set-up and warm-up, record about one step.
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 4000 --launch-count 640 \
  build-gpu/apps/vt bench decode --synthetic qwen3.5-27b --batch "$BATCH" --steps 8 --no-graph "$@" \
  >"$OUT/ncu_$tag.csv" 2>"$OUT/ncu_$tag.err"
python3 - "$OUT/ncu_$tag.csv" "$tag" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
header = rows[0]; name_i = header.index("Kernel Name"); value_i = header.index("Metric Value"); unit_i = header.index("Metric Unit")
totals = collections.defaultdict(float); counts = collections.Counter()
for r in rows[1:]:
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(r[unit_i], 1.0)
    name = re.sub(r"\(.*", "", r[name_i]).split("<")[0].replace("void ", "").strip()
    totals[name] += float(r[value_i].replace(",", "")) * scale; counts[name] += 1
step = sum(totals.values())
print(f"\n{sys.argv[2]}: {sum(counts.values())} kernels, {step/1e3:.3f} ms of kernel time")
print("| kernel | calls | us total | share |")
for name, us in sorted(totals.items(), key=lambda x: -x[1]):
    print(f"| {name[:60]} | {counts[name]} | {us:.0f} | {100*us/step:.1f}% |")
PY
