#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/; the Qwen3.5 tokenizer
# folder carried in .cache/tokenizers/qwen3_5 from `make tokenizers` here): `vt serve` on the
# synthetic Qwen3.5-27B FP8 model (CUDA, batched engine steps) and `vt bench serve` against it at
# concurrency 1/16/64, chat and edit workloads (REQUESTS per run, or DURATION seconds each, with
# CANCEL_FRACTION of them cancelled by the client mid-stream; SERVE_FLAGS: more vt serve flags). Logs in $OUT/serve_bench.tar.gz;
# the table last.
# A/B of sampling on the GPU: DEVICE_SAMPLING=on|off (vt serve --device-sampling, default on), with
# the requests' TEMPERATURE (default 0: greedy) and TOP_P (default 1). The engine's own rates are
# measured first with the same build (`vt bench prefill` at 1,024 tokens, `vt bench decode` at
# batch 1/16/64), so each run prints its engine-bound time and efficiency; the server writes its
# step trace (one JSON line per engine step), summarised last by kind of step.
# WORKLOADS=multiturn (alone or in the list): sessions of TURNS turns (default 4) after a shared
# system prompt of SYSTEM_TOKENS (default 3000), THINK_TIME seconds apart (default 1), against two
# servers one after the other, `vt serve --prefix-cache on` then `off` (MULTITURN_MAX_CONTEXT
# tokens per sequence, default 8192; MULTITURN_CACHE_TOKENS of KV, default 524288; PREFIX_CACHE_GB of
# saved states, default 40); their hit
# rates, TTFT by turn and snapshot memory side by side in the last table.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
LOGS=$(mktemp -d)
TOKENIZER=${TOKENIZER:-.cache/tokenizers/qwen3_5}
PORT=${PORT:-18800}
WORKLOADS=${WORKLOADS:-chat,edit}
single=$(tr ',' '\n' <<<"$WORKLOADS" | grep -vx multiturn | paste -sd, -)  # against one server
multiturn=$(tr ',' '\n' <<<"$WORKLOADS" | grep -cx multiturn)
require_build
[ -f "$TOKENIZER/tokenizer.json" ] || { echo "no tokenizer at $TOKENIZER" >&2; exit 1; }
status=0

# vt serve in the background, its log in $LOGS/$1.err; the rest are extra flags. Sets $server.
start_server() {
  local name=$1
  shift
  "$VT" serve --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --tokenizer "$TOKENIZER" --port "$PORT" \
    --max-running 64 --device-sampling "${DEVICE_SAMPLING:-on}" "$@" 2>"$LOGS/$name.err" &
  server=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$LOGS/$name.err" && break; sleep 1; done
  grep -q "listening on" "$LOGS/$name.err" && return 0
  echo "server did not start ($name)"
  tail -20 "$LOGS/$name.err"
  kill $server
  return 1
}

stop_server() {  # $1: where its /metrics go
  curl -s "http://127.0.0.1:$PORT/metrics" >"$1" 2>/dev/null || true
  kill -TERM $server
  wait $server || status=1
}

if [ -n "$single" ]; then
  "$VT" bench prefill --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --tokens 1024 --repeats 2 --json \
    >"$LOGS/prefill.json" 2>"$LOGS/prefill.err" || echo "FAILED: bench prefill"
  "$VT" bench decode --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --batch 1,16,64 --context 1024 --steps 16 --json \
    >"$LOGS/decode.json" 2>"$LOGS/decode.err" || echo "FAILED: bench decode"
  rates=$(python3 - "$LOGS/prefill.json" "$LOGS/decode.json" <<'PY'
import json, sys
prefill = json.load(open(sys.argv[1]))
rate = max(row["tokens_per_second"] for row in prefill["rows"] if row.get("delta_rule", "chunked") == "chunked")
decode = json.load(open(sys.argv[2]))
steps = ",".join(f"{row['batch']}:{row['ms_per_step']:.3f}" for row in decode["rows"])
print(f"--prefill-rate {rate:.0f} --decode-step-ms {steps}")
PY
  ) || rates=""
  echo "engine rates: $rates"
  if start_server serve --max-context 2048 --step-trace "$LOGS/steps.jsonl" ${SERVE_FLAGS:-}; then
    "$VT" bench serve --url "http://127.0.0.1:$PORT" --concurrency "${CONCURRENCY:-1,16,64}" --workload "$single" \
      --temperature "${TEMPERATURE:-0}" --top-p "${TOP_P:-1}" ${REQUESTS:+--requests $REQUESTS} $rates \
      ${DURATION:+--duration $DURATION} ${CANCEL_FRACTION:+--cancel-fraction $CANCEL_FRACTION} \
      --json >"$LOGS/bench_serve.json" 2>"$LOGS/bench_serve.err" || { status=1; tail -20 "$LOGS/bench_serve.err"; }
    stop_server "$LOGS/metrics.txt"
    tail -3 "$LOGS/serve.err"
  else
    status=1
  fi
fi

if [ "$multiturn" -gt 0 ]; then
  for setting in on off; do
    start_server "serve_multiturn_$setting" --prefix-cache "$setting" --prefix-cache-gb "${PREFIX_CACHE_GB:-40}" \
      --max-context "${MULTITURN_MAX_CONTEXT:-8192}" --cache-tokens "${MULTITURN_CACHE_TOKENS:-524288}" || {
      status=1
      continue
    }
    "$VT" bench serve --url "http://127.0.0.1:$PORT" --concurrency "${CONCURRENCY:-1,16,64}" --workload multiturn \
      --temperature "${TEMPERATURE:-0}" --top-p "${TOP_P:-1}" ${REQUESTS:+--requests $REQUESTS} \
      ${TURNS:+--turns $TURNS} ${SYSTEM_TOKENS:+--system-tokens $SYSTEM_TOKENS} \
      ${USER_TOKENS:+--user-tokens $USER_TOKENS} ${MULTITURN_TOKENS:+--multiturn-tokens $MULTITURN_TOKENS} \
      ${THINK_TIME:+--think-time $THINK_TIME} --json >"$LOGS/multiturn_$setting.json" \
      2>"$LOGS/multiturn_$setting.err" || { status=1; tail -20 "$LOGS/multiturn_$setting.err"; }
    stop_server "$LOGS/metrics_multiturn_$setting.txt"
    tail -3 "$LOGS/serve_multiturn_$setting.err"
  done
fi

tar -czf "$OUT/serve_bench.tar.gz" -C "$LOGS" .
if [ -n "$single" ]; then
  python3 - "$LOGS/bench_serve.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as error:
    print("no report:", error); sys.exit(0)
runs = report.get("runs", report if isinstance(report, list) else [])
for run in runs:
    print(json.dumps({k: v for k, v in run.items() if not isinstance(v, (list, dict))}))
PY
  python3 - "$LOGS/steps.jsonl" <<'PY'
import json, os, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
kinds, seen = {}, set()
for step in steps:
    kind = "verify" if step["verify_tokens"] else "mixed" if step["prefill_tokens"] and step["decode_tokens"] else \
        "prefill" if step["prefill_tokens"] else "decode"
    if kind == "decode":  # the first decode step of a batch size captures its CUDA graph
        kind = "decode (batch seen before)" if step["decode_tokens"] in seen else "decode (first of its batch)"
        seen.add(step["decode_tokens"])
    kinds.setdefault(kind, []).append(step)
print("| steps | count | wall ms mean | wall ms p50 | forward ms mean | host ms mean | decode tokens/step | prefill tokens/step |")
print("|---|---|---|---|---|---|---|---|")
for kind, rows in sorted(kinds.items()):
    n = len(rows)
    mean = lambda key: sum(row[key] for row in rows) / n
    print(f"| {kind} | {n} | {mean('wall_ms'):.2f} | {statistics.median(r['wall_ms'] for r in rows):.2f} | "
          f"{mean('forward_ms'):.2f} | {mean('host_ms'):.2f} | {mean('decode_tokens'):.1f} | {mean('prefill_tokens'):.1f} |")
PY
fi
if [ "$multiturn" -gt 0 ]; then
  python3 scripts/gpu/multiturn_table.py on="$LOGS/multiturn_on.json" off="$LOGS/multiturn_off.json"
fi
exit $status
