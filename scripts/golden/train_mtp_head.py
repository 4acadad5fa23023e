#!/usr/bin/env python3
"""Train the MTP (multi-token-prediction) head of a trained small Qwen3.5 model, base frozen.

Usage:  python3 scripts/golden/train_mtp_head.py [--dir tests/golden/qwen3_5_trained] [--steps N]

HF transformers has no MTP head, so it is written here as vt runs it (src/models/qwen3_5/mtp.cpp,
the definition of vLLM's qwen3_5_mtp): for the pair (hidden h_p, token x_{p+1}) at position p,
  x   = fc([norm_e(embed(x_{p+1})) | norm_h(h_p)])          fc: [H, 2H], no bias
  x  += attn(input_layernorm(x))                            one full-attention layer (gated, q/k
  x  += ffn(post_attention_layernorm(x))                    norms, partial rotary at position p,
  out = norm(x);  logits = lm_head(out)   -> token x_{p+2}  causal over the pairs 0..p)
where h_p is the base model's lm_head input (after its final norm), the norms are Qwen3.5's
zero-centred RMSNorms (x * (1 + w)), embed and lm_head are the base model's (tied, frozen) and the
FFN is the base's layer-0 kind (dense MLP or the MoE block). The decoder layer is HF's own
Qwen3_5(Moe)DecoderLayer for a full-attention layer index, so its weights carry the checkpoint names.

Training: the frozen base (the bf16 checkpoint as float32) gives h on random 129-token windows of
the training stream; the head learns x_{p+2} (cross entropy, AdamW, cosine schedule, one thread,
fixed seed). Only draft position 1 is trained: vt chains later drafts on the head's own output.

Writes into --dir: mtp.* tensors (bf16) added to model.safetensors (MoE experts per expert, as
the base), config.json's mtp_num_hidden_layers = 1, mtp_log.json (loss curve, held-out loss and
top-1 accuracy of the head vs the base's next-token top-1), and mtp_reference.json: for one
held-out prompt, the head's logits (computed from the saved bf16 values) of every pair and of two
chained steps, top 16 per row, for tests/models/test_trained_mtp.cpp.
"""

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

import make_trained_references as refs  # noqa: E402
import train_small_model as recipe  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

SEED = 20261206
STEPS = 600
BATCH = 16
LR = 2e-3
LR_MIN = 2e-4
WARMUP = 30
WEIGHT_DECAY = 0.1
LOG_EVERY = 50
EVAL_EVERY = 150
TOP = 16  # logits per row in mtp_reference.json
REFERENCE_PROMPT = 2  # reference.json prompt whose pairs mtp_reference.json records (48 tokens)
CHAINED = 2  # chained draft steps recorded after the prompt's pairs


class MtpHead(nn.Module):
    def __init__(self, base):
        super().__init__()
        cfg = base.config
        decoder = type(base.model.layers[0])
        norm = type(base.model.norm)
        full = cfg.layer_types.index("full_attention")
        h = cfg.hidden_size
        self.pre_fc_norm_embedding = norm(h, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = norm(h, eps=cfg.rms_norm_eps)
        self.fc = nn.Linear(2 * h, h, bias=False)
        self.layers = nn.ModuleList([decoder(cfg, full)])
        self.norm = norm(h, eps=cfg.rms_norm_eps)
        self.rotary = base.model.rotary_emb
        self.embed = base.model.embed_tokens
        self.lm_head = base.lm_head

    def forward(self, tokens, hidden):
        """tokens [B, T] (x_{p+1}), hidden [B, T, H] (h_p) -> the head's output [B, T, H]."""
        b, t = tokens.shape
        x = self.fc(torch.cat([self.pre_fc_norm_embedding(self.embed(tokens)), self.pre_fc_norm_hidden(hidden)], -1))
        return self.run(x, b, t)

    def run(self, x, b, t):
        positions = torch.arange(t).view(1, 1, t).expand(3, b, t)  # text-only mrope: three equal rows
        rope = self.rotary(x, positions)
        x = self.layers[0](x, position_embeddings=rope, attention_mask=None)  # sdpa, causal
        return self.norm(x)

    def head_state(self):
        skip = ("rotary.", "embed.", "lm_head.")
        return {k: v for k, v in self.state_dict().items() if not k.startswith(skip)}


@torch.no_grad()
def base_hidden(base, ids):
    return base.model(input_ids=ids, use_cache=False).last_hidden_state  # after the final norm


def mtp_loss(head, base, windows):
    """Cross entropy of x_{p+2} from pairs (h_p, x_{p+1}), and top-1 hits, over [B, L+1] windows."""
    hidden = base_hidden(base, windows[:, :-1])  # h_0 .. h_{L-1}
    out = head(windows[:, 1:-1], hidden[:, :-1])  # pairs 0 .. L-2
    logits = head.lm_head(out).float()
    target = windows[:, 2:]
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    return loss, (logits.argmax(-1) == target).double().mean().item()


@torch.no_grad()
def evaluate(head, base, windows):
    head.eval()
    loss = acc = base_acc = 0.0
    for i in range(0, len(windows), 8):
        w = windows[i : i + 8]
        l, a = mtp_loss(head, base, w)
        base_logits = base(input_ids=w[:, :-1], use_cache=False).logits
        loss += l.item() * len(w)
        acc += a * len(w)
        base_acc += (base_logits.argmax(-1) == w[:, 1:]).double().mean().item() * len(w)
    head.train()
    n = len(windows)
    return loss / n, acc / n, base_acc / n


def lr_at(step, steps):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, steps - WARMUP)
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * t))


def train(head, base, train_ids, held_windows, steps, log):
    params = [p for n, p in head.named_parameters() if not n.startswith(("rotary.", "embed.", "lm_head."))]
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(SEED + 1)
    n = recipe.SEQ_LEN + 1
    start, running = time.time(), None
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        starts = torch.randint(0, len(train_ids) - n, (BATCH,), generator=gen)
        loss, acc = mtp_loss(head, base, torch.stack([train_ids[s : s + n] for s in starts.tolist()]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, recipe.GRAD_CLIP)
        opt.step()
        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        if step % LOG_EVERY == 0 or step == steps - 1:
            elapsed = time.time() - start
            log["train"].append({"step": step, "loss": loss.item(), "loss_ema": running, "top1": acc, "seconds": elapsed})
            print(f"step {step:5d}  loss {loss.item():.4f}  ema {running:.4f}  top1 {acc:.3f}  {elapsed:7.1f} s", flush=True)
        if (step + 1) % EVAL_EVERY == 0 or step == steps - 1:
            held, top1, base_top1 = evaluate(head, base, held_windows)
            log["held_out"].append({"step": step + 1, "loss": held, "top1": top1, "base_next_token_top1": base_top1})
            print(f"step {step + 1:5d}  held-out loss {held:.4f}  top1 {top1:.3f} (base next-token top1 {base_top1:.3f})", flush=True)
    log["train_seconds"] = time.time() - start


def checkpoint_tensors(head, moe):
    """The head's tensors under mtp.*, bf16; fused MoE experts split per expert as the base is saved."""
    out = {}
    for name, value in head.head_state().items():
        value = value.detach().to(torch.bfloat16).contiguous()
        if moe and name.endswith("mlp.experts.gate_up_proj"):
            prefix, inter = name[: -len("gate_up_proj")], value.shape[1] // 2
            for e in range(value.shape[0]):
                out[f"mtp.{prefix}{e}.gate_proj.weight"] = value[e, :inter].contiguous()
                out[f"mtp.{prefix}{e}.up_proj.weight"] = value[e, inter:].contiguous()
        elif moe and name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            for e in range(value.shape[0]):
                out[f"mtp.{prefix}{e}.down_proj.weight"] = value[e].contiguous()
        else:
            out[f"mtp.{name}"] = value
    return out


def top_rows(logits):
    top = logits.double().topk(TOP, dim=-1)
    return [{"ids": i.tolist(), "logits": v.tolist()} for i, v in zip(top.indices, top.values)]


@torch.no_grad()
def reference(head, base, ids):
    """The head on one prompt from the saved bf16 values: every pair's logits, then CHAINED steps
    where each input hidden is the head's previous output and the token its previous argmax."""
    head.eval()
    for p in head.parameters():
        p.copy_(p.to(torch.bfloat16).float())
    seq = torch.tensor([ids])
    hidden = base_hidden(base, seq)
    tokens = seq[:, 1:]
    hidden = hidden[:, :-1]
    fc_in = lambda tok, hid: head.fc(  # noqa: E731
        torch.cat([head.pre_fc_norm_embedding(head.embed(tok)), head.pre_fc_norm_hidden(hid)], -1)
    )
    x = fc_in(tokens, hidden)
    out = head.run(x, 1, x.shape[1])
    pairs = head.lm_head(out)[0]
    chained, last_out, last_logits = [], out[:, -1:], pairs[-1]
    for _ in range(CHAINED):
        token = int(last_logits.argmax())
        x = torch.cat([x, fc_in(torch.tensor([[token]]), last_out)], 1)
        out = head.run(x, 1, x.shape[1])
        last_out, last_logits = out[:, -1:], head.lm_head(out)[0, -1]
        chained.append({"token": token, **top_rows(last_logits[None])[0]})
    # Causality: the first pairs' logits from a prefix alone equal the full run's.
    prefix = head.lm_head(head(tokens[:, :8], hidden[:, :8]))[0]
    assert (prefix - pairs[:8]).abs().max().item() < 1e-4, "MTP attention is not causal"
    return {"ids": ids, "pairs": top_rows(pairs), "chained": chained}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=recipe.DENSE_DIR)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--cache", default=os.path.join(recipe.REPO, ".cache"))
    args = ap.parse_args()

    t0 = time.time()
    train_files, held_files, _ = recipe.load_corpus(args.cache)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.dir, "tokenizer.json"))
    train_ids = recipe.token_stream(tok, train_files)
    held_windows = recipe.eval_windows(recipe.token_stream(tok, held_files))
    arch, base = refs.load_model(args.dir)
    base.config._attn_implementation = "sdpa"
    for p in base.parameters():
        p.requires_grad_(False)
    moe = arch == "Qwen3_5MoeForCausalLM"

    torch.manual_seed(SEED)
    head = MtpHead(base)
    for module in head.modules():
        if module not in (head.embed, head.lm_head, head.rotary):
            base._init_weights(module)
    head.train()
    n_params = sum(v.numel() for v in head.head_state().values())
    print(f"{arch}: MTP head of {n_params} parameters; {time.time() - t0:.1f} s", flush=True)
    log = {
        "base": os.path.basename(os.path.normpath(args.dir)),
        "parameters": n_params,
        "hyperparameters": dict(
            seed=SEED, seq_len=recipe.SEQ_LEN, batch=BATCH, steps=args.steps, lr=LR, lr_min=LR_MIN, warmup=WARMUP,
            weight_decay=WEIGHT_DECAY, grad_clip=recipe.GRAD_CLIP, target="token p + 2 from (h_p, x_{p+1})",
        ),
        "train": [],
        "held_out": [],
    }
    train(head, base, train_ids, held_windows, args.steps, log)

    with open(os.path.join(args.dir, "reference.json")) as f:
        prompt_ids = json.load(f)["prompts"][REFERENCE_PROMPT]["ids"]
    ref = reference(head, base, prompt_ids)  # rounds the head to bf16 first
    ref["generator"] = {"script": "scripts/golden/train_mtp_head.py", "torch": torch.__version__.split("+")[0],
                        "compute": "cpu float32 from the bf16 head and base, 1 thread, sdpa causal"}
    path = os.path.join(args.dir, "model.safetensors")
    tensors = {k: v for k, v in load_file(path).items() if not k.startswith("mtp.")}
    tensors.update(checkpoint_tensors(head, moe))
    save_file(tensors, path, metadata={"format": "pt"})
    cfg_path = os.path.join(args.dir, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["mtp_num_hidden_layers"] = 1
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for name, value in (("mtp_reference.json", ref), ("mtp_log.json", log)):
        with open(os.path.join(args.dir, name), "w") as f:
            json.dump(value, f, indent=1)
            f.write("\n")
    print(f"wrote the MTP head into {args.dir} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
