#!/usr/bin/env bash
# `vt generate --speculative`: the same greedy ids as without, the stats in --json, clear errors.
#   tests/cli/cli_speculative.sh VT
set -uo pipefail
vt=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
golden=$root/tests/golden
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

ids=$(python3 -c "import json, sys; print(','.join(map(str, json.load(open(sys.argv[1]))['prompts'][1]['ids'])))" \
  "$golden/qwen3_5_dense/reference.json")
plain=$("$vt" generate --model "$golden/qwen3_5_dense" --prompt-ids "$ids" --max-new-tokens 24 --json 2>/dev/null)
for args in "--speculative ngram --num-draft 3" "--speculative draft --draft-model $golden/qwen3_5_moe --num-draft 5" \
            "--speculative draft --draft-model $golden/qwen3_5_dense --num-draft 8 --adaptive-draft"; do
  # shellcheck disable=SC2086
  spec=$("$vt" generate --model "$golden/qwen3_5_dense" --prompt-ids "$ids" --max-new-tokens 24 --json $args 2>"$errors")
  python3 - "$plain" "$spec" <<'PY' && echo "ok: $args" || fail "$args: $spec $(cat "$errors")"
import json, sys
plain, spec = json.loads(sys.argv[1]), json.loads(sys.argv[2])
stats = spec["speculative"]
assert spec["output_ids"] == plain["output_ids"], (spec["output_ids"], plain["output_ids"])
assert sum(stats["accepted_histogram"]) == stats["steps"] and len(stats["drafted_by_position"]) == stats["num_draft"]
assert abs(stats["tokens_per_step"] - 23 / stats["steps"]) < 1e-9  # the first token comes from the prefill
PY
done

# expect_error DESCRIPTION FRAGMENT ARGS...: vt exits non-zero and prints FRAGMENT.
expect_error() {
  local description=$1 fragment=$2
  shift 2
  local output
  output=$("$vt" "$@" 2>&1) && fail "$description: exit status 0"
  grep -qF -- "$fragment" <<<"$output" && echo "ok: $description" || fail "$description: '$fragment' not in: $output"
}
expect_error "draft model without --speculative draft" "--draft-model goes with --speculative draft" \
  generate --model "$golden/qwen3_5_dense" --prompt-ids 1,2 --speculative ngram --draft-model "$golden/qwen3_5_moe"
expect_error "draft model of another vocabulary" "--draft-model: vocabulary of 128 tokens, the model has 320" \
  generate --model "$golden/qwen3_5_dense" --prompt-ids 1,2 --speculative draft --draft-model "$golden/gguf/tiny_llama.gguf"
expect_error "unknown drafter" "--speculative" generate --model "$golden/qwen3_5_dense" --prompt-ids 1,2 --speculative mtp

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_speculative: all passed"
