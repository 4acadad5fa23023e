#!/usr/bin/env bash
# Run ON the GPU machine after scripts/gpu/cuda_tests.sh built build-gpu/: Nsight Compute's view of
# chosen kernels of an ungraphed 27B FP8 decode step (clocks left alone): duration, achieved
# occupancy, memory throughput and the warp stall reasons, to see where a kernel's time goes
# before rewriting it. Usage: ncu_kernels.sh 'regex of kernel names' [batch]. Logs: $OUT/ncu.csv.
# PREFILL=<tokens> profiles the kernels of a 27B FP8 prefill of that many tokens instead (`vt bench
# prefill`, steps of 2,048, the chunked path); SKIP (default 40) launches of the chosen kernels are
# skipped first, COUNT (default 6) profiled; MODEL (default qwen3.5-27b) picks the synthetic model
# (e.g. qwen3.5-35b-a3b for the MoE kernels).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
KERNELS=${1:-paged_attention_partial|attention_combine}
BATCH=${2:-1}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
# Skip the start-up (GEMM tuning, warm-up), then a few launches of each kernel.
if [ -n "${PREFILL:-}" ]; then
  workload=("$VT" bench prefill --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --tokens "$PREFILL" --step-tokens 2048
            --paths chunked --repeats 1)
else
  workload=("$VT" bench decode --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --batch "$BATCH" --steps 4 --no-graph --context 1024)
fi
STALLS=""
for reason in long_scoreboard short_scoreboard barrier wait membar math_pipe_throttle lg_throttle mio_throttle \
  no_instruction not_selected dispatch_stall drain branch_resolving; do
  STALLS+="smsp__average_warps_issue_stalled_${reason}_per_issue_active.ratio,"
done
"$NCU" --clock-control none --kernel-name "regex:$KERNELS" --launch-skip "${SKIP:-40}" --launch-count "${COUNT:-6}" \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  --metrics "${STALLS}l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed.sum" --csv --page details \
  "${workload[@]}" >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
# vt's own kernel-ran gate cannot subscribe to CUPTI under ncu, so the bench stops with
# CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED after its warm-up steps, which ncu has recorded.
grep -q "Metric Name" "$OUT/ncu.csv" || { tail -5 "$OUT/ncu.err"; exit 1; }
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
header = next(r for r in rows if "Metric Name" in r)
k, m, u, v = (header.index(x) for x in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
wanted = ("Duration", "Achieved Occupancy", "Theoretical Occupancy", "Memory Throughput", "DRAM Throughput",
          "Registers Per Thread", "Block Size", "Grid Size", "Warp Cycles Per Issued Instruction",
          "Stall", "stalled", "Compute (SM) Throughput", "bank_conflicts", "pipe_tensor", "inst_executed")
seen = collections.OrderedDict()
for r in rows[rows.index(header) + 1:]:
    if len(r) <= v: continue
    name = r[k].split("(")[0].split("<")[0].replace("void ", "")[-40:]
    if any(w in r[m] for w in wanted):
        seen.setdefault((name, r[m].replace("smsp__average_warps_issue_stalled_", "stall ")
                         .replace("_per_issue_active.ratio", "")), f"{r[v]} {r[u]}")
print("| kernel | metric | value (first launch) |\n|---|---|---|")
for (name, metric), value in seen.items():
    print(f"| {name} | {metric} | {value} |")
PY
