#!/usr/bin/env bash
# Run ON the GPU machine (after scripts/gpu/cuda_tests.sh built build-gpu/): an A/B of one
# environment knob on the synthetic 27B FP8 decode, e.g.
#   bash scripts/gpu/decode_ab.sh VT_ATTENTION_SPLIT_KEYS 64 32 16
# BATCH (default 1,16), CONTEXT (1024), STEPS (32), MODEL (qwen3.5-27b) adjust it. One
# `vt bench decode --json` per value; ms per step per batch size prints as a table.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
require_build
knob=$1; shift
LOGS=$(mktemp -d)
status=0
for value in "$@"; do
  env "$knob=$value" "$VT" bench decode --synthetic "${MODEL:-qwen3.5-27b}" --weights fp8 --batch "${BATCH:-1,16}" \
    --context "${CONTEXT:-1024}" --steps "${STEPS:-32}" --json >"$LOGS/$value.json" 2>"$LOGS/$value.err" ||
    { status=1; echo "FAILED: $knob=$value"; tail -5 "$LOGS/$value.err"; }
done
python3 - "$knob" "$LOGS" "$@" <<'PY'
import json, sys, pathlib
knob, logs, values = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
print(f"| {knob} | batch | ms/step | tok/s |\n|---|---|---|---|")
for value in values:
    path = logs / f"{value}.json"
    if not path.exists() or path.stat().st_size == 0:
        print(f"| {value} | - | failed | |"); continue
    for row in json.loads(path.read_text())["rows"]:
        print(f"| {value} | {row['batch']} | {row['ms_per_step']:.3f} | {row['tokens_per_second']:.1f} |")
PY
exit $status
