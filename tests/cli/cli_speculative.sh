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
expect_error "unknown drafter" "--speculative" generate --model "$golden/qwen3_5_dense" --prompt-ids 1,2 --speculative eagle
expect_error "MTP without mtp.* weights" "no MTP head (no mtp.fc.weight)" \
  generate --model "$golden/qwen3_5_dense" --prompt-ids 1,2 --speculative mtp
expect_error "MTP on a GGUF model" "has no MTP head" \
  generate --model "$golden/gguf/tiny_llama.gguf" --prompt-ids 1,2 --speculative mtp

# --speculative mtp on a copy of the dense golden model given random f32 mtp.* weights.
mtp_dir=$(mktemp -d)
trap 'rm -f "$errors"; rm -rf "$mtp_dir"' EXIT
cp "$golden/qwen3_5_dense"/* "$mtp_dir"/
python3 - "$mtp_dir" <<'PY'
import json, random, struct, sys
path = sys.argv[1] + "/model.safetensors"
config = json.load(open(sys.argv[1] + "/config.json"))
H, D, I = config["hidden_size"], config["head_dim"], config["intermediate_size"]
Hq, Hkv = config["num_attention_heads"], config["num_key_value_heads"]
shapes = {"fc": [H, 2 * H], "pre_fc_norm_embedding": [H], "pre_fc_norm_hidden": [H], "norm": [H],
          "layers.0.input_layernorm": [H], "layers.0.post_attention_layernorm": [H],
          "layers.0.self_attn.q_proj": [Hq * D * 2, H], "layers.0.self_attn.k_proj": [Hkv * D, H],
          "layers.0.self_attn.v_proj": [Hkv * D, H], "layers.0.self_attn.o_proj": [H, Hq * D],
          "layers.0.self_attn.q_norm": [D], "layers.0.self_attn.k_norm": [D],
          "layers.0.mlp.gate_proj": [I, H], "layers.0.mlp.up_proj": [I, H], "layers.0.mlp.down_proj": [H, I]}
image = open(path, "rb").read()
length = struct.unpack("<Q", image[:8])[0]
header, data = json.loads(image[8:8 + length]), bytearray(image[8 + length:])
random.seed(5)
for name, shape in shapes.items():
    count = shape[0] * (shape[1] if len(shape) > 1 else 1)
    scale = 0.3 if len(shape) == 1 else 1.7 / shape[1] ** 0.5
    begin = len(data)
    data += struct.pack("<%df" % count, *(random.uniform(-scale, scale) for _ in range(count)))
    header["mtp." + name + ".weight"] = {"dtype": "F32", "shape": shape, "data_offsets": [begin, len(data)]}
text = json.dumps(header).encode()
open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
PY
plain_mtp=$("$vt" generate --model "$mtp_dir" --prompt-ids "$ids" --max-new-tokens 24 --json 2>/dev/null)
for k in 1 3; do
  spec=$("$vt" generate --model "$mtp_dir" --prompt-ids "$ids" --max-new-tokens 24 --json --speculative mtp --num-draft $k 2>"$errors")
  python3 - "$plain_mtp" "$plain" "$spec" <<'PY' && echo "ok: --speculative mtp --num-draft $k" || fail "mtp k=$k: $spec $(cat "$errors")"
import json, sys
plain_mtp, plain, spec = (json.loads(arg) for arg in sys.argv[1:])
assert plain_mtp["output_ids"] == plain["output_ids"]  # mtp.* is ignored without --speculative mtp
assert spec["output_ids"] == plain["output_ids"], (spec["output_ids"], plain["output_ids"])
assert spec["speculative"]["drafter"] == "mtp" and spec["speculative"]["drafted"] > 0
PY
done

# --device cuda, where this vt has CUDA and a GPU is visible: MTP drafting on the GPU gives the
# GPU's plain greedy ids (and with f32 activations the CPU's too), the head loaded with the model.
if "$vt" generate --model "$mtp_dir" --prompt-ids 1 --max-new-tokens 1 --device cuda >/dev/null 2>"$errors"; then
  for act in f32 bf16; do
    plain_cuda=$("$vt" generate --model "$mtp_dir" --prompt-ids "$ids" --max-new-tokens 24 --json --device cuda \
      --activations $act 2>/dev/null)
    spec=$("$vt" generate --model "$mtp_dir" --prompt-ids "$ids" --max-new-tokens 24 --json --device cuda \
      --activations $act --speculative mtp --num-draft 3 2>"$errors")
    python3 - "$plain_cuda" "$plain" "$spec" "$act" <<'PY' && echo "ok: --device cuda --activations $act --speculative mtp" \
      || fail "cuda $act mtp: $spec $(cat "$errors")"
import json, sys
plain_cuda, plain, spec = (json.loads(arg) for arg in sys.argv[1:4])
assert spec["output_ids"] == plain_cuda["output_ids"], (spec["output_ids"], plain_cuda["output_ids"])
assert sys.argv[4] != "f32" or spec["output_ids"] == plain["output_ids"]
assert spec["speculative"]["drafter"] == "mtp" and spec["speculative"]["drafted"] > 0
PY
  done
elif grep -qE "built without CUDA|no CUDA-capable device|CUDA driver" "$errors"; then
  echo "skip: --device cuda ($(head -c 120 "$errors"))"
else
  fail "--device cuda: $(cat "$errors")"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_speculative: all passed"
