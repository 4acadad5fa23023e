#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): greedy text through
# `vt serve --device cuda` against `vt generate --device cuda` on a real model, the trained small
# Qwen3.5 (tests/golden/qwen3_5_trained; real weights, so greedy steps are not the near-ties of a
# random model): each of its 32 held-out prompts alone, then 64 requests at once (each prompt
# twice, streamed and not), with the prefix cache on and off, and HF's float32 greedy text beside
# (reference.json). Logs in
# $OUT/greedy_server.tar.gz; the table last. DEVICE=cpu: a dry run here (VT=build-cpu/apps/vt).
# BATCH_INVARIANT=1: vt serve and vt generate with --batch-invariant (then 64 / 64 is expected).
# SYNTHETIC=qwen3.5-27b: the benchmarked model instead (`vt serve --synthetic`, FP8 weights, the
# tokenizer carried in $TOKENIZER): 32 seeded token-id prompts, the ids compared (the server's
# through logprobs' token ids), vt generate --synthetic on the first GENERATED (default 8) alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
LOGS=$(mktemp -d)
PORT=${PORT:-18950}
DIR=tests/golden/qwen3_5_trained
status=0
mode=()
[ "${BATCH_INVARIANT:-0}" = 1 ] && mode=(--batch-invariant)

if [ -n "${SYNTHETIC:-}" ]; then
  TOKENIZER=${TOKENIZER:-.cache/tokenizers/qwen3_5}
  [ -f "$TOKENIZER/tokenizer.json" ] || { echo "no tokenizer at $TOKENIZER" >&2; exit 1; }
  "$VT" serve --synthetic "$SYNTHETIC" --weights fp8 --tokenizer "$TOKENIZER" --port "$PORT" --max-running 64 \
    --max-context 1024 --served-model-name synthetic "${mode[@]}" 2>"$LOGS/serve.err" &
  server=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$LOGS/serve.err" && break; sleep 1; done
  grep -q "listening on" "$LOGS/serve.err" || { echo "server did not start"; tail -20 "$LOGS/serve.err"; exit 1; }
  python3 - "$PORT" "$VT" "$SYNTHETIC" "$LOGS" "${GENERATED:-8}" "${mode[@]}" <<'PY' || status=1
import concurrent.futures, http.client, json, subprocess, sys
port, vt, synthetic, logs, generated, *mode = sys.argv[1:]
port, generated, tokens = int(port), int(generated), 24
state, prompts = 2026, []
def next_value():
    global state
    state = (state * 1664525 + 1013904223) % 2**32
    return state
for _ in range(32):
    prompts.append([next_value() % 150000 for _ in range(5 + next_value() % 120)])

def complete(prompt, stream=False):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": "synthetic", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": stream,
            "logprobs": 1, "return_tokens_as_token_ids": True}
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        return [f"HTTP {response.status}"]
    ids = []
    if not stream:
        for token in json.loads(response.read())["choices"][0]["logprobs"]["tokens"]:
            ids.append(int(token.split(":")[1]))
        return ids
    for line in response:
        line = line.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                for token in (choice.get("logprobs") or {}).get("tokens") or []:
                    ids.append(int(token.split(":")[1]))
    return ids

alone = [complete(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    together = list(pool.map(lambda i: complete(prompts[i % 32], stream=i % 2 == 1), range(64)))
generate = []
for prompt in prompts[:generated]:
    result = subprocess.run([vt, "generate", "--synthetic", synthetic, "--weights", "fp8", "--prompt-ids",
                             ",".join(map(str, prompt)), "--max-new-tokens", str(tokens), "--temperature", "0",
                             "--json", *mode], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"vt generate failed: {result.stderr[-500:]}")
    generate.append(json.loads(result.stdout)["output_ids"])
json.dump({"prompts": prompts, "alone": alone, "together": together, "generate": generate},
          open(f"{logs}/synthetic.json", "w"))
for i, ids in enumerate(generate):
    if alone[i] != ids:
        print(f"prompt {i}: server alone {alone[i]} != vt generate {ids}")
for i, ids in enumerate(together):
    if ids != alone[i % 32]:
        print(f"request {i} (prompt {i % 32}): at 64 {ids} != alone {alone[i % 32]}")
equal_generate = sum(a == g for a, g in zip(alone, generate))
equal_together = sum(t == alone[i % 32] for i, t in enumerate(together))
print(f"| synthetic {synthetic} FP8, {'batch-invariant' if mode else 'default'} | server alone = vt generate | "
      f"64 at once = alone |\n|---|---|---|\n| | {equal_generate} / {len(generate)} | {equal_together} / 64 |")
sys.exit(0 if equal_generate == len(generate) and equal_together == 64 else 1)
PY
  kill -TERM $server
  wait $server || status=1
  tar -czf "$OUT/greedy_server.tar.gz" -C "$LOGS" .
  exit $status
fi

# The server twice: prefix cache on (the default) and off, so a difference at 64 can be told
# apart from a cache hit's numerics (the hits are counted from /metrics).
for setting in on off; do
"$VT" serve --model "$DIR" --device "${DEVICE:-cuda}" --port "$PORT" --max-running 64 --max-context 1024 \
  --served-model-name trained --prefix-cache "$setting" "${mode[@]}" 2>"$LOGS/serve_$setting.err" &
server=$!
for _ in $(seq 1 120); do grep -q "listening on" "$LOGS/serve_$setting.err" && break; sleep 1; done
grep -q "listening on" "$LOGS/serve_$setting.err" || { echo "server did not start"; tail -20 "$LOGS/serve_$setting.err"; exit 1; }

python3 - "$PORT" "$DIR/reference.json" "$LOGS/server_$setting.json" <<'PY' || status=1
import concurrent.futures, http.client, json, sys
port, reference, out = int(sys.argv[1]), json.load(open(sys.argv[2])), sys.argv[3]
prompts = [p["text"] for p in reference["prompts"]]
tokens = reference["n_new_tokens"]

def complete(prompt, stream=False):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": "trained", "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": stream}
    connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if not stream:
        return json.loads(response.read())["choices"][0]["text"]
    text = ""
    for line in response:
        line = line.strip()
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            chunk = json.loads(line[6:])
            if chunk.get("choices"):
                text += chunk["choices"][0].get("text") or ""
    return text

alone = [complete(p) for p in prompts]
with concurrent.futures.ThreadPoolExecutor(64) as pool:
    together = list(pool.map(lambda i: complete(prompts[i % len(prompts)], stream=i % 2 == 1), range(64)))
json.dump({"prompts": prompts, "alone": alone, "together": together}, open(out, "w"))
PY
curl -s "http://127.0.0.1:$PORT/metrics" >"$LOGS/metrics_$setting.txt"
kill -TERM $server
wait $server || status=1
done

# vt generate of each prompt alone (python passes the prompt as is: a shell would strip its trailing newlines).
python3 - "$VT" "$DIR" "${DEVICE:-cuda}" "$LOGS" "${mode[@]}" <<'PY' || status=1
import json, subprocess, sys
vt, folder, device, logs, *mode = sys.argv[1:]
for i, prompt in enumerate(p["text"] for p in json.load(open(f"{folder}/reference.json"))["prompts"]):
    result = subprocess.run([vt, "generate", "--model", folder, "--device", device, "--prompt", prompt,
                             "--max-new-tokens", "24", "--temperature", "0", "--json", *mode], capture_output=True,
                            text=True)
    open(f"{logs}/generate_{i}.json", "w").write(result.stdout)
    if result.returncode != 0:
        sys.exit(f"vt generate failed on prompt {i}: {result.stderr[-500:]}")
PY

tar -czf "$OUT/greedy_server.tar.gz" -C "$LOGS" .
python3 - "$LOGS" "$DIR/reference.json" "${DEVICE:-cuda}" <<'PY' || status=1
import json, re, sys
logs, reference, device = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
hf = [p["greedy_text"] for p in reference["prompts"]]
count = len(hf)
generate = [json.load(open(f"{logs}/generate_{i}.json"))["text"] for i in range(count)]
rows, ok = [], True
for setting in ("on", "off"):
    server = json.load(open(f"{logs}/server_{setting}.json"))
    metrics = open(f"{logs}/metrics_{setting}.txt").read()
    hits = re.search(r"^vt_prefix_cache_hits_tokens_total (\S+)", metrics, re.M)
    alone_vs_generate = sum(a == g for a, g in zip(server["alone"], generate))
    together_vs_alone = sum(t == server["alone"][i % count] for i, t in enumerate(server["together"]))
    for i in range(count):
        if server["alone"][i] != generate[i]:
            print(f"cache {setting}, prompt {i}: server alone {server['alone'][i]!r} != vt generate {generate[i]!r}")
    for i, text in enumerate(server["together"]):
        if text != server["alone"][i % count]:
            print(f"cache {setting}, request {i} (prompt {i % count}): at 64 {text!r} != alone {server['alone'][i % count]!r}")
    rows.append((setting, alone_vs_generate, together_vs_alone, len(server["together"]), hits.group(1) if hits else "?"))
    ok &= alone_vs_generate == count and together_vs_alone == len(server["together"])
print(f"| trained Qwen3.5, {device} (CUDA: bf16 activations) | prefix cache | server alone = vt generate | "
      f"64 at once = alone | cache hit tokens |")
print("|---|---|---|---|---|")
for setting, alone, together, total, hits in rows:
    print(f"| | {setting} | {alone} / {count} | {together} / {total} | {hits} |")
print(f"vt generate = HF float32 (bf16 vs f32 at margins down to 0.001, informative): "
      f"{sum(g == h for g, h in zip(generate, hf))} / {count}")
sys.exit(0 if ok else 1)
PY
exit $status
