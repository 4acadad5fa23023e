#!/usr/bin/env python3
"""HF transformers references for the trained small models (tests/golden/qwen3_5_trained/ and its
MoE twin tests/golden/qwen3_5_moe_trained/).

Usage:  python3 scripts/golden/make_trained_references.py [--dir tests/golden/qwen3_5_trained]

Reads the checkpoint that scripts/golden/train_small_model.py wrote, reloads it as float32
(eager attention, one thread: as make_goldens.py does) and writes reference.json with
  - prompts: N_PROMPTS pieces of the held-out files (never trained on), each as text and as the ids
    HF tokenizers gives, with N_NEW greedy ids (full forward of prompt + ids so far, no cache) and
    the min top1 - top2 margin; candidates with a margin below MIN_MARGIN at any step, or whose
    continuation is one repeated token, are skipped;
  - perplexity: the first PPL_CHARS characters of the first held-out file (cut at a paragraph end),
    its ids, and HF's perplexity over non-overlapping windows of CONTEXT tokens (as vt's).
For a MoE checkpoint each prompt also records min_router_gap: over every layer, every token of the
last greedy step's full forward, the gap between the router's k-th and (k+1)-th logits (an expert
choice flips under rounding only where this gap is tiny). Deterministic; about a minute.

--fp8-out DIR also writes the checkpoint block-quantised to FP8 as make_goldens.py's qwen3_5_fp8
(128x128 blocks, partial where a dimension is not a multiple of 128; same tensors quantised), with
the tokenizer, for `vt eval perplexity` on it (docs/perf/2026-12-05-trained-small-model.md).
It is not committed.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM  # noqa: E402

import train_small_model as recipe  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

N_PROMPTS = 32
N_NEW = 24
MIN_MARGIN = 1e-3
PROMPT_TOKENS = (8, 24, 48, 96, 160)  # cycled over the candidates; 96 and 160 cross the GDN chunk (64)
CONTEXT = 512
PPL_CHARS = 12000


@torch.no_grad()
def greedy(model, ids):
    seq, out, margins = list(ids), [], []
    for _ in range(N_NEW):
        last = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].double()
        top = last.topk(2)
        margins.append((top.values[0] - top.values[1]).item())
        out.append(int(top.indices[0]))
        seq.append(out[-1])
    return out, margins


@torch.no_grad()
def min_router_gap(model, ids):
    """Smallest router logit gap between the k-th and (k+1)-th expert over all layers and tokens."""
    k = model.config.num_experts_per_tok
    out = model(input_ids=torch.tensor([ids]), use_cache=False, output_router_logits=True)
    gap = math.inf
    for logits in out.router_logits:
        top = logits.double().topk(k + 1, dim=-1).values
        gap = min(gap, (top[:, k - 1] - top[:, k]).min().item())
    return gap


def load_model(path):
    with open(os.path.join(path, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    if arch == "Qwen3_5MoeForCausalLM":
        return arch, Qwen3_5MoeForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
        ).eval()
    return arch, Qwen3_5ForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


@torch.no_grad()
def perplexity(model, ids):
    nll, predicted = 0.0, 0
    for start in range(0, len(ids), CONTEXT):
        window = ids[start : start + CONTEXT]
        if len(window) < 2:
            continue
        logits = model(input_ids=torch.tensor([window]), use_cache=False).logits[0].double()
        logp = torch.log_softmax(logits[:-1], dim=-1)
        nll -= logp.gather(1, torch.tensor(window[1:]).unsqueeze(1)).sum().item()
        predicted += len(window) - 1
    return nll, predicted


def candidates(tok, held_files):
    """(text, ids): paragraph starts of the held-out files, cut to PROMPT_TOKENS lengths in turn;
    only pieces whose decoded text encodes back to the same ids (whole pre-tokens)."""
    k = 0
    for rel, text in held_files:
        for para in text.split("\n\n"):
            para = para.strip("\n")
            if len(para) < 40 or para.lstrip().startswith(("..", "::", "=", "-", "*", "+")):
                continue
            ids = tok.encode(para, add_special_tokens=False).ids
            n = PROMPT_TOKENS[k % len(PROMPT_TOKENS)]
            if len(ids) < n:
                continue
            piece = tok.decode(ids[:n])
            if tok.encode(piece, add_special_tokens=False).ids != ids[:n]:
                continue
            k += 1
            yield rel, piece, ids[:n]


def write_fp8(src_dir, out_dir):
    import shutil

    from safetensors.torch import save_file

    import make_goldens as goldens

    model = Qwen3_5ForCausalLM.from_pretrained(src_dir, dtype=torch.float32, attn_implementation="eager")
    os.makedirs(out_dir, exist_ok=True)
    tensors, qnames = {}, set()
    for name, mod in goldens.quantised_linears(model):
        q, scale = goldens.quantise_weight_blocks(mod.weight.data)
        tensors[f"{name}.weight"], tensors[f"{name}.weight_scale_inv"] = q.contiguous(), scale.contiguous()
        qnames.add(f"{name}.weight")
    for name, p in model.state_dict().items():
        if name not in qnames and name != "lm_head.weight":  # tied: lm_head is the embedding
            tensors[name] = p.to(torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src_dir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = dict(goldens.FP8_QUANT_CONFIG)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(src_dir, name), out_dir)
    print(f"wrote {out_dir}: {len(qnames)} matrices in FP8")

    # HF's view of the same rounding, as make_goldens.py measures it on the random qwen3_5_fp8
    # (logits_rel_l2_vs_weight_only): the first perplexity window, unquantised vs weight-only
    # (fp8 * scale weights) vs W8A8 (plus per-token, per-128 e4m3 activations).
    with open(os.path.join(src_dir, "reference.json")) as f:
        ids = json.load(f)["perplexity"]["ids"][:CONTEXT]
    target = torch.tensor(ids[1:])

    def run(label):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
        nll = torch.nn.functional.cross_entropy(logits[:-1], target).item()
        print(f"  HF {label:12s} perplexity of the first {len(ids)}-token window {math.exp(nll):.4f}")
        return logits

    base = run("unquantised")
    with torch.no_grad():
        for name, mod in goldens.quantised_linears(model):
            q, scale = tensors[f"{name}.weight"], tensors[f"{name}.weight_scale_inv"]
            mod.weight.copy_(goldens.dequantise_weight_blocks(q, scale))
    weight_only = run("weight-only")
    goldens.enable_w8a8_(model)
    w8a8 = run("w8a8")

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    def argmax_agree(a, b):
        return (a.argmax(-1) == b.argmax(-1)).double().mean().item()

    print(f"  logits rel L2: weight-only vs unquantised {rel(weight_only, base):.4g}, "
          f"w8a8 vs weight-only {rel(w8a8, weight_only):.4g}, w8a8 vs unquantised {rel(w8a8, base):.4g}; "
          f"argmax equal at {argmax_agree(w8a8, base):.4f} of positions (w8a8 vs unquantised)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(recipe.REPO, "tests/golden/qwen3_5_trained"))
    ap.add_argument("--cache", default=os.path.join(recipe.REPO, ".cache"))
    ap.add_argument("--fp8-out", help="only write the FP8 block-quantised copy of --dir here")
    ap.add_argument("--held-out-text", help="only write the held-out perplexity text here (for vt eval)")
    args = ap.parse_args()
    if args.fp8_out:
        write_fp8(args.dir, args.fp8_out)
        return
    if args.held_out_text:
        with open(os.path.join(args.dir, "reference.json")) as f:
            text = json.load(f)["perplexity"]["text"]
        with open(args.held_out_text, "w", encoding="utf-8") as f:
            f.write(text)
        return

    _, held_files, corpus_sha = recipe.load_corpus(args.cache)
    tok = Tokenizer.from_file(os.path.join(args.dir, "tokenizer.json"))
    arch, model = load_model(args.dir)
    moe = arch == "Qwen3_5MoeForCausalLM"

    prompts, skipped = [], 0
    for rel, text, ids in candidates(tok, held_files):
        out, margins = greedy(model, ids)
        m = min(margins)
        if m < MIN_MARGIN or len(set(out)) == 1:
            skipped += 1
            continue
        prompts.append(
            {
                "source": rel,
                "text": text,
                "ids": ids,
                "greedy_ids": out,
                "greedy_text": tok.decode(out),
                "min_margin": m,
                "min_margin_step": margins.index(m),
                "greedy_distinct": len(set(out)),
            }
        )
        if moe:
            prompts[-1]["min_router_gap"] = min_router_gap(model, ids + out[:-1])
        print(f"  {rel}: {len(ids)} ids, min margin {m:.4g}, -> {tok.decode(out)!r}", flush=True)
        if len(prompts) == N_PROMPTS:
            break
    if len(prompts) < N_PROMPTS:
        sys.exit(f"only {len(prompts)} prompts pass the margin check")

    rel, text = held_files[0]
    cut = text[:PPL_CHARS]
    cut = cut[: cut.rfind("\n\n") + 2]
    ppl_ids = tok.encode(cut, add_special_tokens=False).ids
    nll, predicted = perplexity(model, ppl_ids)
    ppl = math.exp(nll / predicted)
    print(f"  perplexity of {rel}[:{len(cut)}]: {ppl:.6f} over {predicted} predicted tokens; {skipped} prompts skipped")

    ref = {
        "case": os.path.basename(os.path.normpath(args.dir)),
        "architecture": arch,
        "weights_dtype": "bfloat16 (trained by scripts/golden/train_small_model.py)",
        "corpus_files_sha256": corpus_sha,
        "n_new_tokens": N_NEW,
        "margin": "top1 - top2 logit of each greedy step; min over the steps",
        "prompts": prompts,
        "skipped_prompts": skipped,
        "perplexity": {
            "source": f"{rel}, first {len(cut)} characters",
            "text": cut,
            "ids": ppl_ids,
            "context": CONTEXT,
            "method": "non-overlapping windows of `context` tokens, each scored alone; "
            "perplexity = exp(sum NLL / predicted tokens)",
            "nll_sum": nll,
            "predicted_tokens": predicted,
            "perplexity": ppl,
        },
        "generator": {
            "script": "scripts/golden/make_trained_references.py",
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
            "compute": "cpu float32 (the bf16 checkpoint reloaded as float32), 1 thread, attn_implementation=eager"
            + (", experts_implementation=eager" if moe else ""),
            "greedy": f"{N_NEW} tokens, full forward without cache each step",
        },
    }
    with open(os.path.join(args.dir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
