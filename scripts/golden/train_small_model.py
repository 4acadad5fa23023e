#!/usr/bin/env python3
"""Train a small real Qwen3.5 model (GDN + gated attention, 3:1; dense or MoE) on English documentation text.

Usage:  python3 scripts/golden/train_small_model.py [--moe] [--out DIR] [--steps N]

Without --moe: the dense model, tests/golden/qwen3_5_trained. With --moe: its MoE twin,
tests/golden/qwen3_5_moe_trained (Qwen3_5MoeForCausalLM, MOE_DIMS), which reuses the dense model's
tokenizer.json byte for byte (same vocabulary and ids) instead of training one.

Corpus: the reStructuredText sources of the Python 3.11 documentation in Debian's python3.11-doc
3.11.2-6+deb12u9 (bookworm-security; also on snapshot.debian.org), sha256-checked, from the folders
CORPUS_DIRS. Files are sorted by path; every HOLDOUT_EVERY-th file is held out (never trained on,
never seen by the tokenizer trainer). Tokenizer: byte-level BPE (HF `tokenizers`, vocab VOCAB_SIZE,
Qwen3.5's pipeline: NFC, the Qwen3.5 split regex, ByteLevel), trained on the training files only.
Model: transformers Qwen3_5ForCausalLM, MODEL_DIMS below (tied embeddings), trained from a fixed seed
with AdamW on random windows of the training token stream, one CPU thread, float32, deterministic.

Writes config.json, generation_config.json, model.safetensors (bf16), tokenizer.json,
tokenizer_config.json and train_log.json (loss curve, held-out loss, timings, corpus digest).
About 25 minutes (1,500 s of training) on one core of a shared 2-core x86 machine (2026-12-05).
Fixed seeds, torch.use_deterministic_algorithms and one thread; the tokenizer was checked
byte-identical over two runs, the weights were not re-trained to check.
"""

import argparse
import glob
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402
from transformers import (  # noqa: E402
    Qwen3_5ForCausalLM,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.utils.logging.set_verbosity_error()

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEB_PACKAGE = "python3.11-doc"
DEB_VERSION = "3.11.2-6+deb12u9"
DEB_FILE = f"{DEB_PACKAGE}_{DEB_VERSION}_all.deb"
DEB_SHA256 = "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"
DEB_SNAPSHOT = f"https://snapshot.debian.org/archive/debian-security/20250501T000000Z/pool/updates/main/p/python3.11/{DEB_FILE}"
SOURCES = "usr/share/doc/python3.11/html/_sources"
# English prose and examples; the library reference (6 MB, mostly API lists) and the C API are left out.
CORPUS_DIRS = ("tutorial", "howto", "faq", "reference", "using", "extending", "whatsnew")
HOLDOUT_EVERY = 10  # files 9, 19, 29, ... of the sorted list are held out

EOT = "<|endoftext|>"  # document separator, id 0, as in Qwen's tokenizers
VOCAB_SIZE = 3072
# transformers' Qwen3_5Tokenizer pre-tokenisation regex.
QWEN3_5_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

MODEL_DIMS = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=192,
    intermediate_size=320,
    num_hidden_layers=8,  # default layer_types: (3 x linear_attention, full_attention) x 2
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    # Tied like Qwen's small dense checkpoints; here it also keeps the checkpoint under 6 MB.
    tie_word_embeddings=True,
    max_position_embeddings=2048,
    hidden_act="silu",
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    bos_token_id=None,
    eos_token_id=0,
    pad_token_id=0,
)

# The MoE twin: same attention / GDN / embeddings; each MLP becomes 8 routed experts (top-2) plus a
# gated shared expert. Active MLP width 2 x 48 + 64 = 160 (dense: 320); the total is held to about
# 3.5 M parameters so that the bf16 checkpoint stays under 7 MB in git.
MOE_DIMS = dict(
    MODEL_DIMS,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    shared_expert_intermediate_size=64,
    router_aux_loss_coef=0.001,
)
del MOE_DIMS["intermediate_size"]
DENSE_DIR = os.path.join(REPO, "tests/golden/qwen3_5_trained")
MOE_DIR = os.path.join(REPO, "tests/golden/qwen3_5_moe_trained")
MOE_STEPS = 1200

SEED = 20261205
SEQ_LEN = 128
BATCH = 16
STEPS = 1200
LR = 3e-3
LR_MIN = 3e-4
WARMUP = 60
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
LOG_EVERY = 50
EVAL_EVERY = 200
EVAL_WINDOWS = 32  # fixed held-out windows of SEQ_LEN + 1 tokens


# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_deb(cache):
    """The pinned .deb in <cache>/downloads (apt-get download, else snapshot.debian.org)."""
    downloads = os.path.join(cache, "downloads")
    os.makedirs(downloads, exist_ok=True)
    deb = os.path.join(downloads, DEB_FILE)
    if not os.path.exists(deb):
        try:
            subprocess.run(["apt-get", "download", f"{DEB_PACKAGE}={DEB_VERSION}"], cwd=downloads, check=True)
        except (OSError, subprocess.CalledProcessError):
            subprocess.run(["curl", "-fsSL", "-o", deb, DEB_SNAPSHOT], check=True)
    digest = sha256_file(deb)
    if digest != DEB_SHA256:
        sys.exit(f"{deb}: sha256 {digest}, expected {DEB_SHA256}")
    return deb


def load_corpus(cache=os.path.join(REPO, ".cache")):
    """[(relative path, text)] for the training and the held-out files, and a digest of both."""
    deb = fetch_deb(cache)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", deb, tmp], check=True)
        root = os.path.join(tmp, SOURCES)
        paths = sorted(
            os.path.relpath(p, root)
            for d in CORPUS_DIRS
            for p in glob.glob(os.path.join(root, d, "**", "*.txt"), recursive=True)
        )
        files = []
        for rel in paths:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                files.append((rel, f.read()))
    train = [f for i, f in enumerate(files) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    held_out = [f for i, f in enumerate(files) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    h = hashlib.sha256()
    for rel, text in files:
        h.update(rel.encode() + b"\0" + text.encode() + b"\0")
    return train, held_out, h.hexdigest()


# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------
def train_tokenizer(train_files):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN3_5_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text for _, text in train_files], trainer=trainer, length=len(train_files))
    if tok.get_vocab_size() != VOCAB_SIZE or tok.token_to_id(EOT) != 0:
        raise RuntimeError(f"tokenizer: vocab {tok.get_vocab_size()}, {EOT} id {tok.token_to_id(EOT)}")
    return tok


def token_stream(tok, files):
    """All files' ids, each followed by <|endoftext|>."""
    ids = []
    for enc in tok.encode_batch([text for _, text in files], add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(0)
    return torch.tensor(ids, dtype=torch.long)


# --------------------------------------------------------------------------------------------
# Model and training
# --------------------------------------------------------------------------------------------
def make_config(moe):
    if moe:
        cfg = Qwen3_5MoeTextConfig(**MOE_DIMS)
        cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    else:
        cfg = Qwen3_5TextConfig(**MODEL_DIMS)
        cfg.architectures = ["Qwen3_5ForCausalLM"]
    return cfg


def model_class(cfg):
    return Qwen3_5MoeForCausalLM if getattr(cfg, "num_experts", 0) else Qwen3_5ForCausalLM


def model_kwargs(cfg, attn):
    # The eager expert loop: deterministic on the CPU, and the path HF's references use.
    kw = {"attn_implementation": attn}
    if getattr(cfg, "num_experts", 0):
        kw["experts_implementation"] = "eager"
    return kw


def init_model(cfg):
    torch.manual_seed(SEED)
    model = model_class(cfg)._from_config(cfg, **model_kwargs(cfg, "sdpa"))
    return model.train()


def lr_at(step):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, STEPS - WARMUP)
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * t))


def lm_loss(model, windows, aux=False):
    """Mean next-token NLL over the windows (labels already shifted by hand); with aux, plus the MoE
    load-balancing loss times router_aux_loss_coef (keeps all experts in use)."""
    moe = aux and getattr(model.config, "num_experts", 0)
    kw = {"output_router_logits": True} if moe else {}
    out = model(input_ids=windows[:, :-1], use_cache=False, **kw)
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))
    if moe:
        loss = loss + model.config.router_aux_loss_coef * out.aux_loss
    return loss


@torch.no_grad()
def eval_loss(model, windows):
    model.eval()
    loss = sum(lm_loss(model, windows[i : i + 8]).item() * len(windows[i : i + 8]) for i in range(0, len(windows), 8))
    model.train()
    return loss / len(windows)


def eval_windows(stream):
    """EVAL_WINDOWS evenly spaced held-out windows (fixed, no randomness)."""
    n = SEQ_LEN + 1
    starts = torch.linspace(0, len(stream) - n, EVAL_WINDOWS).long()
    return torch.stack([stream[s : s + n] for s in starts.tolist()])


def train(model, train_ids, held_windows, steps, log):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(SEED + 1)
    n = SEQ_LEN + 1
    start = time.time()
    running = None
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        starts = torch.randint(0, len(train_ids) - n, (BATCH,), generator=gen)
        windows = torch.stack([train_ids[s : s + n] for s in starts.tolist()])
        loss = lm_loss(model, windows, aux=True)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        value = loss.item()
        running = value if running is None else 0.9 * running + 0.1 * value
        if step % LOG_EVERY == 0 or step == steps - 1:
            elapsed = time.time() - start
            log["train"].append({"step": step, "loss": value, "loss_ema": running, "lr": lr_at(step), "seconds": elapsed})
            print(f"step {step:5d}  loss {value:.4f}  ema {running:.4f}  lr {lr_at(step):.2e}  {elapsed:7.1f} s", flush=True)
        if (step + 1) % EVAL_EVERY == 0 or step == steps - 1:
            held = eval_loss(model, held_windows)
            log["held_out"].append({"step": step + 1, "loss": held, "perplexity": math.exp(held)})
            print(f"step {step + 1:5d}  held-out loss {held:.4f}  perplexity {math.exp(held):.2f}", flush=True)
    log["train_seconds"] = time.time() - start


def save(model, tok, cfg, out_dir, log):
    os.makedirs(out_dir, exist_ok=True)
    bf16 = model_class(cfg)._from_config(cfg, **model_kwargs(cfg, "eager"))
    bf16.load_state_dict(model.state_dict())
    bf16 = bf16.to(torch.bfloat16).eval()
    bf16.generation_config = transformers.GenerationConfig(eos_token_id=0, pad_token_id=0, do_sample=False)
    bf16.save_pretrained(out_dir)
    if isinstance(tok, bytes):
        with open(os.path.join(out_dir, "tokenizer.json"), "wb") as f:
            f.write(tok)
    else:
        tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": EOT,
                "pad_token": EOT,
                "unk_token": None,
                "bos_token": None,
                "add_bos_token": False,
                "model_max_length": cfg.max_position_embeddings,
            },
            f,
            indent=1,
        )
        f.write("\n")
    with open(os.path.join(out_dir, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")


def main():
    global STEPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moe", action="store_true", help="train the MoE twin (reuses the dense model's tokenizer)")
    ap.add_argument("--out", help=f"default {DENSE_DIR}, with --moe {MOE_DIR}")
    ap.add_argument("--steps", type=int, help=f"training steps (default {STEPS}, with --moe {MOE_STEPS})")
    ap.add_argument("--tokenizer-from", default=DENSE_DIR, help="with --moe: the folder whose tokenizer.json is reused")
    ap.add_argument("--cache", default=os.path.join(REPO, ".cache"))
    args = ap.parse_args()
    STEPS = args.steps or (MOE_STEPS if args.moe else STEPS)
    out_dir = args.out or (MOE_DIR if args.moe else DENSE_DIR)

    t0 = time.time()
    train_files, held_files, corpus_sha = load_corpus(args.cache)
    if args.moe:
        with open(os.path.join(args.tokenizer_from, "tokenizer.json"), "rb") as f:
            tok_bytes = f.read()
        tok = Tokenizer.from_str(tok_bytes.decode("utf-8"))
    else:
        tok = train_tokenizer(train_files)
    train_ids = token_stream(tok, train_files)
    held_ids = token_stream(tok, held_files)
    train_chars = sum(len(t) for _, t in train_files)
    print(
        f"corpus: {len(train_files)} training files ({train_chars} chars, {len(train_ids)} tokens), "
        f"{len(held_files)} held out ({len(held_ids)} tokens); tokenizer {time.time() - t0:.1f} s",
        flush=True,
    )
    cfg = make_config(args.moe)
    model = init_model(cfg)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters, layer types {cfg.layer_types}", flush=True)
    log = {
        "corpus": {
            "package": f"Debian {DEB_PACKAGE} {DEB_VERSION}",
            "deb_sha256": DEB_SHA256,
            "dirs": [f"{SOURCES}/{d}" for d in CORPUS_DIRS],
            "files_sha256": corpus_sha,
            "train_files": len(train_files),
            "held_out_files": [rel for rel, _ in held_files],
            "train_tokens": len(train_ids),
            "held_out_tokens": len(held_ids),
        },
        "parameters": params,
        "hyperparameters": dict(
            seed=SEED, seq_len=SEQ_LEN, batch=BATCH, steps=STEPS, lr=LR, lr_min=LR_MIN, warmup=WARMUP,
            weight_decay=WEIGHT_DECAY, grad_clip=GRAD_CLIP, optimizer="AdamW(0.9, 0.95)", schedule="linear warmup, cosine",
        ),
        "generator": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__, "threads": 1},
        "train": [],
        "held_out": [],
    }
    train(model, train_ids, eval_windows(held_ids), STEPS, log)
    save(model, tok_bytes if args.moe else tok, cfg, out_dir, log)
    print(f"wrote {out_dir} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
