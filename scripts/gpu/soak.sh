#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/; the Qwen3.5 tokenizer in
# .cache/tokenizers/qwen3_5_min): a soak of `vt serve` on the synthetic Qwen3.5-27B FP8 model.
# `vt bench serve` keeps CLIENTS (default 64) clients busy for DURATION seconds (default 300) on the chat workload
# with 10% of requests cancelled mid-stream (it counts every outcome and, after the run, checks that
# running, waiting, KV blocks and slots are back to 0: exit 1 otherwise); beside it, every STORM_EVERY
# seconds (default 60) a disconnect storm of CLIENTS streams that hang up after a few tokens
# (scripts/serve_faults.py storm --under-load); the server's RSS and the GPU's used memory are
# sampled every 5 s; SIGTERM at the end must drain and exit 0. Logs in $OUT/soak.tar.gz; the table last.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
LOGS=$(mktemp -d)
TOKENIZER=${TOKENIZER:-.cache/tokenizers/qwen3_5_min}
PORT=${PORT:-18900}
DURATION=${DURATION:-300}
CLIENTS=${CLIENTS:-64}
STORM_EVERY=${STORM_EVERY:-60}
# MODEL_FLAGS: another model (a dry run here on the CPU: VT=build-cpu/apps/vt MODEL_FLAGS="--model FILE").
read -ra model_flags <<<"${MODEL_FLAGS:---synthetic ${MODEL:-qwen3.5-27b} --weights fp8 --tokenizer $TOKENIZER}"
status=0

"$VT" serve "${model_flags[@]}" --port "$PORT" --max-running 64 --max-context 4096 \
  --served-model-name soak 2>"$LOGS/serve.err" &
server=$!
for _ in $(seq 1 300); do grep -q "listening on" "$LOGS/serve.err" && break; sleep 1; done
grep -q "listening on" "$LOGS/serve.err" || { echo "server did not start"; tail -20 "$LOGS/serve.err"; exit 1; }

sample() {  # seconds since start, RSS MB, GPU MiB used, 1 while the load runs: a line every 5 s until the flag goes
  local start=$SECONDS rss gpu
  while [ -e "$LOGS/sampling" ]; do
    rss=$(awk '/VmRSS/ {print int($2 / 1024)}' /proc/$server/status)
    gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    echo "$((SECONDS - start)) ${rss:-0} ${gpu:-0} $([ -e "$LOGS/loading" ] && echo 1 || echo 0)" >>"$LOGS/memory.txt"
    sleep 5
  done
}
touch "$LOGS/sampling"
sample &
sampler=$!

touch "$LOGS/loading"  # the samples taken while the load runs are the ones checked
"$VT" bench serve --url "http://127.0.0.1:$PORT" --concurrency "$CLIENTS" --workload chat --duration "$DURATION" \
  --cancel-fraction 0.1 --temperature 0 --json >"$LOGS/bench_serve.json" 2>"$LOGS/bench_serve.err" &
bench=$!
storms=0
storm_failures=0
sleep 20
while kill -0 $bench 2>/dev/null; do
  python3 scripts/serve_faults.py --port "$PORT" --clients "$CLIENTS" --under-load storm >>"$LOGS/storms.txt" 2>&1 ||
    storm_failures=$((storm_failures + 1))
  storms=$((storms + 1))
  for _ in $(seq 1 "$STORM_EVERY"); do kill -0 $bench 2>/dev/null || break; sleep 1; done
done
wait $bench
bench_status=$?
rm -f "$LOGS/loading"
[ $bench_status -eq 0 ] || { status=1; tail -20 "$LOGS/bench_serve.err"; }
python3 scripts/serve_faults.py --port "$PORT" --clients "$CLIENTS" storm >>"$LOGS/storms.txt" 2>&1 ||
  storm_failures=$((storm_failures + 1))
storms=$((storms + 1))
rm -f "$LOGS/sampling"
wait $sampler
curl -s "http://127.0.0.1:$PORT/metrics" >"$LOGS/metrics_after_soak.txt"

kill -TERM $server
wait $server
server_status=$?
[ $server_status -eq 0 ] || status=1

tar -czf "$OUT/soak.tar.gz" -C "$LOGS" .
grep -hE "^(ok|FAIL|status):" "$LOGS/storms.txt" | sed -E 's/[0-9.]+ s:/N s:/' | sort | uniq -c | sort -rn | head -8
echo
python3 - "$LOGS" "$bench_status" "$storms" "$storm_failures" "$server_status" "$DURATION" "$CLIENTS" <<'PY' || status=1
import json, sys
logs, bench_status, storms, storm_failures, server_status, duration, clients = sys.argv[1:]
try:
    report = json.load(open(f"{logs}/bench_serve.json"))
    run, after = report["runs"][0], report["server_after"]
    outcomes = run["outcomes"]
except Exception as error:
    report, run, after, outcomes = None, {}, {}, {}
    print("no report:", error)
# Memory while the load runs, past its first quarter (the pool, graphs and allocator warm up).
# Bounds from the first soak's trace (docs/perf/2026-12-05-soak-greedy-multiturn.md): its GPU
# memory moved within 256 MiB under load as prefix snapshots came and went; flat = a spread of at
# most twice that, and the last quarter's peak no more than one 128 MiB step above the second's.
rows = [list(map(int, line.split())) for line in open(f"{logs}/memory.txt") if len(line.split()) == 4]
load = [r for r in rows if r[3] == 1]
warm = load[len(load) // 4:] or [[0, 0, 0, 1]]
quarter = max(1, len(warm) // 3)
rss = (min(r[1] for r in warm), max(r[1] for r in warm))
gpu = (min(r[2] for r in warm), max(r[2] for r in warm))
gpu_growth = max(r[2] for r in warm[-quarter:]) - max(r[2] for r in warm[:quarter])
bad = outcomes.get("no_status", 1) + outcomes.get("http_5xx", 1)
checks = [
    ("requests (%s clients, %s s, 10%% cancelled): %s" % (clients, duration, json.dumps(outcomes)),
     report is not None and bad == 0),
    ("queues and KV after the load: %s" % json.dumps(after.get("gauges", after)),
     bool(after.get("back_to_zero")) and bench_status == "0"),
    ("disconnect storms of %s streams: %s run, %s failed" % (clients, storms, storm_failures), storm_failures == "0"),
    ("RSS under load after warm-up (%d samples): %d..%d MB" % (len(warm), *rss), rss[1] - rss[0] < 100),
    ("GPU memory under load after warm-up: %d..%d MiB, last third's peak %+d MiB from the first's" % (*gpu, gpu_growth),
     gpu[1] - gpu[0] <= 512 and gpu_growth <= 128),
    ("SIGTERM at the end: exit %s" % server_status, server_status == "0"),
]
print("| check | pass |")
print("|---|---|")
for text, ok in checks:
    print(f"| {text} | {'yes' if ok else 'NO'} |")
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
exit $status
