#!/usr/bin/env bash
# `vt eval layers` on the CPU: a side against itself is 0 at every tap; W8A8 against weight-only on
# the FP8 golden model is 0 at the embedding, parts at the first layer's GDN and names it, with a
# row per layer; bad arguments are refused with a message.
#   tests/cli/cli_eval_layers.sh VT
set -uo pipefail
vt=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
model=$root/tests/golden/qwen3_5_fp8
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

same=$("$vt" eval layers --model "$model" --prompt-ids 1,2,3,4,5,6,7,8 --a cpu --b cpu --json 2>/dev/null)
python3 - "$same" <<'PY' && echo "ok: cpu against cpu" || fail "cpu against cpu: $same"
import json, sys
r = json.loads(sys.argv[1])
assert r["rows"] and all(row["relative_l2"] == 0 for row in r["rows"]), r["rows"]
assert r["logits"]["relative_l2"] == 0 and r["first_past_threshold"] == ""
PY

mixed=$("$vt" eval layers --model "$model" --prompt-ids 1,2,3,4,5,6,7,8 --a cpu:weight-only --b cpu --json 2>/dev/null)
python3 - "$mixed" "$model/config.json" <<'PY' && echo "ok: W8A8 against weight-only" || fail "W8A8 against weight-only: $mixed"
import json, sys
r, config = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
layers = config.get("text_config", config)["num_hidden_layers"]
rows = {(row["tap"], row["layer"]): row for row in r["rows"]}
assert rows[("embed", -1)]["relative_l2"] == 0
assert all(("layer_out", i) in rows for i in range(layers)), sorted(rows)
assert rows[("layer_out", layers - 1)]["relative_l2"] > 1e-3
assert r["first_past_threshold"] == "gdn_core of layer 0", r["first_past_threshold"]
PY

for args in "--a gpu" "--prompt-ids 1,x" "--prompt-ids 1 --prompt hi"; do
  # shellcheck disable=SC2086
  out=$("$vt" eval layers --model "$model" $args 2>&1)
  status=$?
  [ $status -eq 1 ] && echo "$out" | grep -q "error" && echo "ok: refused $args" || fail "$args: exit $status, $out"
done
[ $failures -eq 0 ] && echo "passed" || { echo "$failures failures"; exit 1; }
