# HF tokenizers' side of the tokenizer benchmark (vt's: tests/tokenizer/bench_tokenizer.cpp): load
# time, encode of every line of the same file, decode. Run with RAYON_NUM_THREADS=1 and
# TOKENIZERS_PARALLELISM=false so encode_batch stays on one thread, as vt does.
#   python3 scripts/tokenizer/bench_hf.py TOKENIZER_DIR TEXT_FILE [REPEATS]
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_tokenizers import split_lines  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def main() -> None:
    folder, text_file = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    assert os.environ.get("RAYON_NUM_THREADS") == "1", "set RAYON_NUM_THREADS=1 for a one-thread comparison"
    data = Path(text_file).read_bytes()
    lines = split_lines(data)
    start = time.perf_counter()
    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    load = time.perf_counter() - start
    chunks = ["".join(lines[i:i + 64]) for i in range(0, len(lines), 64)]
    best_batch = best_loop = best_chunks = best_decode = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        encodings = tokenizer.encode_batch(lines)
        best_batch = min(best_batch, time.perf_counter() - start)
        start = time.perf_counter()
        for line in lines:
            tokenizer.encode(line)
        best_loop = min(best_loop, time.perf_counter() - start)
        start = time.perf_counter()
        tokenizer.encode_batch(chunks)
        best_chunks = min(best_chunks, time.perf_counter() - start)
        ids = [e.ids for e in encodings]
        start = time.perf_counter()
        tokenizer.decode_batch(ids)
        best_decode = min(best_decode, time.perf_counter() - start)
    tokens = sum(len(i) for i in ids)
    mb = len(data) / 1e6
    print(f"HF  {folder}: load {load:.2f} s | {len(lines)} lines, {mb:.1f} MB, {tokens} tokens | encode per line: "
          f"encode_batch {best_batch:.2f} s ({mb / best_batch:.1f} MB/s), encode loop {best_loop:.2f} s "
          f"({mb / best_loop:.1f} MB/s) | encode_batch 64-line chunks {best_chunks:.2f} s ({mb / best_chunks:.1f} MB/s)"
          f" | decode_batch per line {best_decode:.2f} s ({tokens / best_decode / 1e6:.1f} M tok/s) | "
          f"tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
