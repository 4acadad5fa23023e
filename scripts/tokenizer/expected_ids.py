# Writes what HF `tokenizers` (PyPI) produces for each tokenizer in .cache/tokenizers/, so the C++
# tests compare vt against HF itself: .cache/expected/<name>/
#   corpus.ids, edge_cases.ids   one line per input line ("\n"-split), the ids separated by spaces
#   decode.jsonl                 {"ids", "text", "text_skip_special"} for the edge-case encodings and
#                                for random id sequences (partial UTF-8, special tokens, byte tokens)
# Skipped when stamp.json says the inputs and the tokenizers version are unchanged.
import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_tokenizers import split_lines  # noqa: E402  (one line-splitting rule for every script)


def digest(*paths: Path) -> str:
    hasher = hashlib.sha256()
    for path in paths:
        hasher.update(path.read_bytes())
    return hasher.hexdigest()


def write_ids(path: Path, encodings) -> None:
    with path.open("w", encoding="ascii") as out:
        for ids in encodings:
            out.write(" ".join(map(str, ids)) + "\n")


def expected_for(tokenizer_dir: Path, out: Path, corpus: Path, edge_cases: Path) -> None:
    import tokenizers
    from tokenizers import Tokenizer

    stamp = {"tokenizers": tokenizers.__version__,
             "inputs": digest(tokenizer_dir / "tokenizer.json", corpus, edge_cases, Path(__file__))}
    stamp_path = out / "stamp.json"
    if stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp:
        return
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    for name, source in (("corpus", corpus), ("edge_cases", edge_cases)):
        lines = split_lines(source.read_bytes())
        encodings = tokenizer.encode_batch(lines, add_special_tokens=True)
        write_ids(out / f"{name}.ids", [e.ids for e in encodings])
        if name == "edge_cases":
            edge_ids = [e.ids for e in encodings]

    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    generator = random.Random(1234)
    sequences = list(edge_ids)
    for _ in range(400):
        sequences.append([generator.randrange(vocab_size) for _ in range(generator.randint(1, 24))])
    # Sequences of single-byte tokens (cut UTF-8), where the decoders' byte handling shows.
    single_bytes = [i for i in range(vocab_size) if len(tokenizer.decode([i]).encode("utf-8")) <= 3]
    for _ in range(200):
        sequences.append([generator.choice(single_bytes) for _ in range(generator.randint(1, 12))])
    with (out / "decode.jsonl").open("w", encoding="utf-8") as jsonl:
        for ids in sequences:
            record = {"ids": ids, "text": tokenizer.decode(ids, skip_special_tokens=False),
                      "text_skip_special": tokenizer.decode(ids, skip_special_tokens=True)}
            jsonl.write(json.dumps(record, ensure_ascii=True) + "\n")
    stamp_path.write_text(json.dumps(stamp) + "\n")
    print(f"expected-ids: {out} (HF tokenizers {tokenizers.__version__})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", default=".cache")
    parser.add_argument("--edge-cases", default="tests/tokenizer/data/edge_cases.txt")
    args = parser.parse_args()
    cache = Path(args.cache)
    for tokenizer_dir in sorted((cache / "tokenizers").iterdir()):
        if (tokenizer_dir / "tokenizer.json").exists():
            expected_for(tokenizer_dir, cache / "expected" / tokenizer_dir.name,
                         cache / "corpus" / "multilingual.txt", Path(args.edge_cases))


if __name__ == "__main__":
    main()
