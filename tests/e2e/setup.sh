#!/usr/bin/env bash
# Installs what tests/e2e/test_server.py needs (the official openai client) unless present.
set -euo pipefail
python3 -c "import openai, jsonschema" 2>/dev/null && exit 0
python3 -m pip install --quiet -r "$(dirname "$0")/requirements.txt"
