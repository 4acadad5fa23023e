#!/usr/bin/env python3
"""MTP acceptance per draft position of a trained small model's head, measured with vt.

Usage:  python3 scripts/golden/measure_mtp_acceptance.py --vt build-cpu/apps/vt
            [--dir tests/golden/qwen3_5_trained] [--num-draft 1,2,3,4] [--max-new-tokens 64]

Runs `vt generate --speculative mtp --num-draft K --json` (greedy, CPU, one thread) on each of
reference.json's held-out prompts, sums drafted_by_position / accepted_by_position over the
prompts and prints a markdown table: acceptance at draft position i = accepted / drafted there (a
draft is verified only after every earlier one of its step was accepted, so this is conditional
on reaching position i), and tokens per verify step. It also checks that each output starts with
HF's greedy ids (speculative decoding must not change greedy text) and exits non-zero otherwise.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_small_model as recipe  # noqa: E402


def run(vt, model, ids, k, max_new):
    cmd = [vt, "--threads", "1", "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-new-tokens", str(max_new), "--speculative", "mtp", "--num-draft", str(k), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vt", required=True)
    ap.add_argument("--dir", default=recipe.DENSE_DIR)
    ap.add_argument("--num-draft", default="1,2,3,4")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "reference.json")) as f:
        prompts = json.load(f)["prompts"]
    ks = [int(k) for k in args.num_draft.split(",")]
    width = max(ks)
    print(f"{os.path.basename(os.path.normpath(args.dir))}: {len(prompts)} held-out prompts, "
          f"{args.max_new_tokens} new tokens each, greedy\n")
    print("| k | " + " | ".join(f"pos {i + 1}" for i in range(width)) + " | accepted / drafted | tokens per step |")
    print("|---|" + "---|" * width + "---|---|")
    mismatches = 0
    for k in ks:
        drafted, accepted = [0] * k, [0] * k
        steps = tokens = 0
        for p in prompts:
            result = run(args.vt, args.dir, p["ids"], k, args.max_new_tokens)
            spec = result["speculative"]
            drafted = [a + b for a, b in zip(drafted, spec["drafted_by_position"])]
            accepted = [a + b for a, b in zip(accepted, spec["accepted_by_position"])]
            steps += spec["steps"]
            tokens += len(result["output_ids"])
            if result["output_ids"][: len(p["greedy_ids"])] != p["greedy_ids"]:
                mismatches += 1
                print(f"k {k}: output differs from HF's greedy ids on {p['text'][:40]!r}", file=sys.stderr)
        cells = [f"{a / d:.3f} ({a}/{d})" if d else "-" for a, d in zip(accepted, drafted)]
        cells += [""] * (width - k)
        print(f"| {k} | " + " | ".join(cells) + f" | {sum(accepted)} / {sum(drafted)} | {tokens / steps:.2f} |", flush=True)
    if mismatches:
        sys.exit(f"{mismatches} outputs differ from HF's greedy ids")


if __name__ == "__main__":
    main()
