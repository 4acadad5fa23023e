#!/usr/bin/env bash
# vt on GGUF files through the CLI: generate and inspect on the tiny fixture, clear errors for
# corrupt or truncated files, and, when SmolLM2 is fetched, `vt eval perplexity` (within 0.5% of
# HF transformers) and `vt generate --prompt` on the real model.
#   tests/cli/cli_gguf.sh VT SCRATCH_DIR
set -uo pipefail
vt=$1
scratch=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fixtures=$root/tests/golden/gguf
smollm2=$root/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
text=$root/.cache/text/python-tutorial-appetite.txt
mkdir -p "$scratch"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error DESCRIPTION FRAGMENT ARGS...: vt exits 1 and prints FRAGMENT.
expect_error() {
  local description=$1 fragment=$2
  shift 2
  local output status
  output=$("$vt" "$@" 2>&1)
  status=$?
  [ $status -eq 1 ] || fail "$description: exit status $status, expected 1"
  grep -qF -- "$fragment" <<<"$output" || fail "$description: '$fragment' not in: $output"
  echo "ok: $description"
}

json_ids() { python3 -c "import json, sys; print(','.join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))" "$@"; }

# Greedy ids of the tiny Llama (written as llama.cpp writes it) equal HF's on the original weights.
ids=$(json_ids "$fixtures/tiny_llama.json" ids)
want=$(json_ids "$fixtures/tiny_llama.json" greedy_ids)
"$vt" generate --model "$fixtures/tiny_llama.gguf" --prompt-ids "$ids" --max-new-tokens 16 --json \
  >"$scratch/generate.json" 2>"$scratch/generate.err" || fail "generate on tiny_llama.gguf: $(cat "$scratch/generate.err")"
got=$(json_ids "$scratch/generate.json" output_ids 2>/dev/null)
[ "$got" = "$want" ] && echo "ok: tiny llama greedy ids" || fail "tiny llama greedy ids $got, expected $want"

# The FP8 output layer (--lm-head fp8, its 8 largest input columns exact): 16 ids of the vocabulary,
# and the flags' errors.
"$vt" generate --model "$fixtures/tiny_llama.gguf" --prompt-ids "$ids" --max-new-tokens 16 --json --lm-head fp8 \
  --lm-head-exact-columns 8 >"$scratch/fp8_head.json" 2>"$scratch/fp8_head.err" ||
  fail "generate --lm-head fp8: $(cat "$scratch/fp8_head.err")"
python3 -c "
import json, sys
ids = json.load(open(sys.argv[1]))['output_ids']
sys.exit(0 if len(ids) == 16 and all(0 <= i < 128 for i in ids) else 1)" "$scratch/fp8_head.json" &&
  echo "ok: generate --lm-head fp8" || fail "generate --lm-head fp8: $(cat "$scratch/fp8_head.json")"
expect_error "exact columns without --lm-head fp8" "--lm-head-exact-columns goes with --lm-head fp8" \
  generate --model "$fixtures/tiny_llama.gguf" --prompt-ids 1 --lm-head-exact-columns 8
expect_error "an unknown output layer format" "--lm-head: expected bf16 or fp8, got 'fp4'" \
  generate --model "$fixtures/tiny_llama.gguf" --prompt-ids 1 --lm-head fp4
expect_error "more exact columns than inputs" "100 exact columns of 64" \
  generate --model "$fixtures/tiny_llama.gguf" --prompt-ids 1 --lm-head fp8 --lm-head-exact-columns 100

inspect=$("$vt" inspect --model "$fixtures/tiny_llama.gguf" 2>&1)
grep -q "architecture: llama" <<<"$inspect" && grep -q "blk.1.ffn_down.weight .*Q8_0" <<<"$inspect" &&
  echo "ok: inspect" || fail "inspect: $inspect"

# Corrupt and truncated files.
head -c 3000 "$fixtures/tiny_llama.gguf" >"$scratch/truncated.gguf"
expect_error "truncated file" "truncated" generate --model "$scratch/truncated.gguf" --prompt-ids 1
head -c 200 "$fixtures/tiny_llama.gguf" >"$scratch/header_cut.gguf"
expect_error "file cut inside the metadata" "truncated" inspect --model "$scratch/header_cut.gguf"
printf 'GGML\003\000\000\000' >"$scratch/magic.gguf"
expect_error "wrong magic" "not a GGUF file" generate --model "$scratch/magic.gguf" --prompt-ids 1
python3 -c "
import sys
data = bytearray(open(sys.argv[1], 'rb').read())
data[4] = 7
open(sys.argv[2], 'wb').write(data)" "$fixtures/tiny_llama.gguf" "$scratch/version.gguf"
expect_error "unsupported version" "GGUF version 7" generate --model "$scratch/version.gguf" --prompt-ids 1
: >"$scratch/empty.gguf"
expect_error "empty file" "not a GGUF file" generate --model "$scratch/empty.gguf" --prompt-ids 1
expect_error "missing file" "cannot open" generate --model "$scratch/absent.gguf" --prompt-ids 1
expect_error "no tokenizer in the file" "tokenizer.ggml.model" generate --model "$fixtures/tiny_llama.gguf" --prompt "hi"
expect_error "not a llama file" "general.architecture" generate --model "$fixtures/quants.gguf" --prompt-ids 1

if [ -f "$smollm2" ] && [ -f "$text" ]; then
  # vt eval perplexity (vt's tokenizer from the GGUF metadata) against HF's figure.
  "$vt" eval perplexity --model "$smollm2" --file "$text" --json >"$scratch/perplexity.json" 2>"$scratch/perplexity.err" ||
    fail "eval perplexity: $(cat "$scratch/perplexity.err")"
  python3 - "$scratch/perplexity.json" "$root/tests/golden/smollm2/reference.json" <<'PY' && echo "ok: eval perplexity" || fail "eval perplexity"
import json, sys
got = json.load(open(sys.argv[1]))
want = json.load(open(sys.argv[2]))["perplexity"]
relative = got["perplexity"] / want["perplexity"] - 1
print(f"vt eval perplexity {got['perplexity']:.6f} vs HF {want['perplexity']:.6f} (relative {relative:.2g}), "
      f"{got['predicted_tokens']} tokens in {got['seconds']:.1f} s")
sys.exit(0 if abs(relative) <= 0.005 and got["predicted_tokens"] == want["predicted_tokens"] else 1)
PY
  # The FP8 output layer (32 input columns exact, the default): perplexity moves, by under 2%
  # (+0.40% over 2,048 tokens of the tutorial, docs/perf/2026-12-02-fp8-lm-head-exact-columns.md).
  "$vt" eval perplexity --model "$smollm2" --file "$text" --json --lm-head fp8 >"$scratch/perplexity_fp8.json" \
    2>"$scratch/perplexity_fp8.err" || fail "eval perplexity --lm-head fp8: $(cat "$scratch/perplexity_fp8.err")"
  python3 - "$scratch/perplexity.json" "$scratch/perplexity_fp8.json" <<'PY' && echo "ok: eval perplexity --lm-head fp8" ||
import json, sys
stored, fp8 = (json.load(open(path))["perplexity"] for path in sys.argv[1:3])
relative = fp8 / stored - 1
print(f"perplexity {stored:.4f} as stored, {fp8:.4f} with the FP8 output layer ({relative:+.2%})")
sys.exit(0 if relative != 0 and abs(relative) < 0.02 else 1)
PY
    fail "eval perplexity --lm-head fp8"
  output=$("$vt" generate --model "$smollm2" --prompt "The capital of France is" --max-new-tokens 6 2>&1)
  grep -q "The capital of France is.*Paris" <<<"$output" && echo "ok: generate --prompt" || fail "generate --prompt: $output"
else
  echo "SmolLM2 not fetched: its CLI checks skipped"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_gguf: all passed"
