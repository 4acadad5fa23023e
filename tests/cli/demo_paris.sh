#!/usr/bin/env bash
# CI check of the README's first command: the chat turn of scripts/demo.sh names Paris as the
# capital of France. Exit 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1.
set -uo pipefail
vt=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ ! -f "$root/.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ] && [ "${VT_REQUIRE_SMOLLM2:-0}" != 1 ]; then
  echo "skipped: SmolLM2 not fetched (scripts/fetch-smollm2.sh)"
  exit 77
fi
output=$("$root/scripts/demo.sh" "$vt" 2>&1)
status=$?
echo "$output"
[ $status -eq 0 ] || { echo "demo_paris: scripts/demo.sh exited $status"; exit 1; }
# The answer: what follows the echoed question, less the load and timing lines (stderr).
answer=$(awk 'seen && !/^loaded / && !/^\[/ {print} /^> /{seen=1}' <<<"$output")
grep -q "Paris" <<<"$answer" || { echo "demo_paris: the answer does not name Paris: $answer"; exit 1; }
echo "demo_paris: ok"
