#!/usr/bin/env python3
"""Greedy text and perplexity of a trained small model: bf16 vs its FP8 copy, W8A8 and weight-only, with vt.

Usage:  python3 scripts/golden/compare_fp8_checkpoint.py --vt build-cpu/apps/vt
            --dir tests/golden/qwen3_5_trained --fp8 .cache/fp8/qwen3_5_trained [--max-new-tokens 24]

--fp8 is a folder write_fp8_checkpoint.py wrote from --dir (every projection FP8, 128x128 blocks).
Runs `vt generate --prompt-ids ... --json` (greedy, CPU, one thread) on each of reference.json's
held-out prompts, and `vt eval perplexity` on reference.json's held-out perplexity text, for
  bf16            --dir as stored
  FP8 W8A8        --fp8, activations quantised per token and 128 channels (--fp8-activations quantized)
  FP8 weight-only --fp8, activations in f32 (--fp8-activations float)
and prints a markdown table as `vt eval drift` reports the output layer alone: prompts whose
continuation is identical to bf16's, generated tokens before the first difference, perplexity and
its change. It also checks that bf16's continuations start with HF's greedy ids.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

VARIANTS = (("bf16", None, None), ("FP8 W8A8", "fp8", "quantized"), ("FP8 weight-only", "fp8", "float"))


def vt_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def generate(vt, model, ids, max_new, fp8_activations):
    cmd = [vt, "--threads", "1", "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-new-tokens", str(max_new), "--json"]
    if fp8_activations:
        cmd += ["--fp8-activations", fp8_activations]
    return vt_json(cmd)["output_ids"]


def perplexity(vt, model, text_file, fp8_activations):
    cmd = [vt, "--threads", "1", "eval", "perplexity", "--model", model, "--file", text_file, "--json"]
    if fp8_activations:
        cmd += ["--fp8-activations", fp8_activations]
    return vt_json(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vt", required=True)
    ap.add_argument("--dir", required=True, help="the trained model folder (bf16, with reference.json)")
    ap.add_argument("--fp8", required=True, help="its FP8 copy (write_fp8_checkpoint.py)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "reference.json")) as f:
        ref = json.load(f)
    prompts = ref["prompts"]

    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write(ref["perplexity"]["text"])
        text_file = f.name
    try:
        results = {}
        for label, which, acts in VARIANTS:
            model = args.fp8 if which == "fp8" else args.dir
            outputs = [generate(args.vt, model, p["ids"], args.max_new_tokens, acts) for p in prompts]
            results[label] = (outputs, perplexity(args.vt, model, text_file, acts))
            print(f"{label}: done", file=sys.stderr, flush=True)
    finally:
        os.unlink(text_file)

    base_outputs, base_ppl = results["bf16"]
    hf_mismatch = sum(out[: len(p["greedy_ids"])] != p["greedy_ids"] for out, p in zip(base_outputs, prompts))
    name = os.path.basename(os.path.normpath(args.dir))
    print(f"{name}: {len(prompts)} held-out prompts (reference.json ids), {args.max_new_tokens} greedy tokens "
          f"each; perplexity of {base_ppl['tokens']} tokens (windows of {base_ppl['context']}); bf16 vs HF's "
          f"greedy ids: {len(prompts) - hf_mismatch} / {len(prompts)} equal\n")
    print("| checkpoint | prompts identical to bf16 | tokens before first difference | perplexity | vs bf16 |")
    print("|---|---|---|---|---|")
    for label, _, _ in VARIANTS:
        outputs, ppl = results[label]
        identical = matched = compared = 0
        for a, b in zip(base_outputs, outputs):
            same = 0
            while same < min(len(a), len(b)) and a[same] == b[same]:
                same += 1
            identical += a == b
            matched += same
            compared += max(len(a), len(b))
        change = ppl["perplexity"] / base_ppl["perplexity"] - 1.0
        print(f"| {label} | {identical} / {len(prompts)} | {matched} / {compared} | {ppl['perplexity']:.4f} | "
              f"{100 * change:+.3f}% |")
    if hf_mismatch:
        sys.exit(f"{hf_mismatch} bf16 outputs differ from HF's greedy ids")


if __name__ == "__main__":
    main()
