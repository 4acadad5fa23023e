#!/usr/bin/env bash
# Installs what the end-to-end tests need unless present: the official openai client and
# jsonschema (requirements.txt), and sglang-router (requirements-router.txt). A router that cannot
# be installed fails test_router.py with its own message; the other tests still run.
set -euo pipefail
here=$(dirname "$0")
python3 -c "import openai, jsonschema" 2>/dev/null || python3 -m pip install --quiet -r "$here/requirements.txt"
python3 -c "import sglang_router" 2>/dev/null ||
  python3 -m pip install --quiet -r "$here/requirements-router.txt" ||
  echo "tests/e2e/setup.sh: sglang-router did not install: e2e_router will fail" >&2
