#!/usr/bin/env python3
"""Make tiny random Qwen3.5 / Qwen3-Next checkpoints plus HF-transformers reference outputs.

Usage:  python3 scripts/golden/make_goldens.py [--out tests/golden] [--cases a,b,...]

One folder per case (see README.md next to this file). Everything runs on the CPU in float32
(the FP8 noise floor also in float64), single-threaded and with fixed seeds, so two runs give
byte-identical files. The reference is always computed from exactly the weights that were saved:
BF16 cases reload the written checkpoint with from_pretrained(dtype=float32); the FP8 case
computes from the dequantised values (fp8 * block scale) that it wrote.
"""

import argparse
import contextlib
import copy
import functools
import importlib.util
import json
import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

PROMPT_LENS = (7, 150)  # 150 crosses the GDN chunk size (64) twice
N_NEW = 24  # greedy continuation length
MIN_MARGIN = 1e-3  # every greedy step must have top1 - top2 >= this
FP8_MAX = 448.0
BLOCK = 128

# Shared tiny text dims (cases 1-4).
TEXT_DIMS = dict(
    vocab_size=320,
    hidden_size=64,
    num_hidden_layers=4,  # default layer_types: 3 x linear_attention, then full_attention
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    max_position_embeddings=512,
    hidden_act="silu",
)
ROPE_PLAIN = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
# The VL checkpoints carry M-RoPE keys like the real ones (rotary dim 8 -> 4 frequencies = 2+1+1).
# With text-only input all three position rows are equal, so this is plain 1-D partial RoPE.
ROPE_MROPE = dict(ROPE_PLAIN, mrope_section=[2, 1, 1], mrope_interleaved=True)
MOE_DIMS = dict(
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    num_experts=8,
    num_experts_per_tok=2,
)
VISION_DIMS = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    in_channels=3,
    patch_size=4,
    temporal_patch_size=2,
    spatial_merge_size=2,
    out_hidden_size=64,  # = text hidden_size
    num_position_embeddings=16,
)
# FP8 case: large enough for 128x128 blocks, with partial blocks in the MLP (N=192 for gate/up,
# K=192 for down: blocks/groups of 128 + 64). Every other quantised matrix is a whole number of blocks.
FP8_DIMS = dict(
    TEXT_DIMS,
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    intermediate_size=192,
)
FP8_QUANTISED = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "linear_attn.in_proj_qkv",
    "linear_attn.in_proj_z",
    "linear_attn.out_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
FP8_QUANT_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [BLOCK, BLOCK],
}


# --------------------------------------------------------------------------------------------
# Random weights with a large spread, so that logits are peaky and greedy ties are unlikely.
# --------------------------------------------------------------------------------------------
def reinit_(named_params, gen):
    """Re-initialise the text-model parameters in place (deterministic given `gen`)."""

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen) * std + mean

    for name, p in named_params:
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            v = normal(shape, 1.0)
        elif name == "lm_head.weight":
            v = normal(shape, 3.0 / math.sqrt(shape[-1]))  # logits std ~3
        elif name.endswith("linear_attn.A_log"):
            v = torch.empty(shape).uniform_(0.05, 2.0, generator=gen).log()
        elif name.endswith("linear_attn.dt_bias"):
            v = torch.empty(shape).uniform_(-3.0, 0.0, generator=gen)  # decay exp(g) in ~[0.5, 0.999]
        elif name.endswith("conv1d.weight"):
            v = normal(shape, 0.5)
        elif name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: plain weight, neutral 1
            v = normal(shape, 0.1, mean=1.0)
        elif "norm" in name and len(shape) == 1:  # zero-centred RMSNorm: y = x_hat * (1 + w)
            v = normal(shape, 0.1)
        elif name.endswith("mlp.gate.weight"):  # MoE router: decisive routing
            v = normal(shape, 2.5 / math.sqrt(shape[-1]))
        elif name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            v = normal(shape, 1.5 / math.sqrt(shape[-1]))  # [E, out, in]
        elif name.endswith(".weight") and len(shape) == 2:  # nn.Linear [out, in]
            v = normal(shape, 1.5 / math.sqrt(shape[-1]))
        else:
            raise RuntimeError(f"no init rule for {name} {shape}")
        with torch.no_grad():
            p.copy_(v)


def round_to_bf16_(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))


def text_named_params(model):
    """(name, param) of the language model and lm_head; the vision tower keeps HF's init."""
    for name, p in model.named_parameters():
        if name.startswith("model.visual."):
            continue
        yield name, p


# --------------------------------------------------------------------------------------------
# Reference runs
# --------------------------------------------------------------------------------------------
class RouterGap:
    """Smallest gap between the k-th and (k+1)-th router logit seen while active (MoE only)."""

    def __init__(self, model):
        self.min_gap = math.inf
        self.handles = []
        for mod in model.modules():
            if type(mod).__name__.endswith("TopKRouter"):
                self.handles.append(mod.register_forward_hook(self._hook))

    def _hook(self, mod, inputs, output):
        logits = output[0].detach().double()
        top = logits.topk(mod.top_k + 1, dim=-1).values
        gap = (top[:, mod.top_k - 1] - top[:, mod.top_k]).min().item()
        self.min_gap = min(self.min_gap, gap)

    def reset(self):
        self.min_gap = math.inf

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def forward_logits(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0]


@torch.no_grad()
def run_prompt(model, ids, n_new=N_NEW):
    """Full-prompt logits, then greedy decoding by re-running the whole sequence each step."""
    logits = forward_logits(model, ids)
    seq = list(ids)
    greedy, margins = [], []
    last = logits[-1]
    for step in range(n_new):
        if step > 0:
            last = forward_logits(model, seq)[-1]
        top = last.double().topk(2)
        margins.append((top.values[0] - top.values[1]).item())
        nxt = int(top.indices[0])
        greedy.append(nxt)
        seq.append(nxt)
    return logits, greedy, margins


def make_prompts(seed, vocab):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENS]


def write_f32(path, t):
    t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(path)


def read_f32(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).double()


def check_logits(name, logits):
    if not torch.isfinite(logits).all():
        raise RuntimeError(f"{name}: non-finite logits")
    if logits.std().item() < 1e-2:
        raise RuntimeError(f"{name}: degenerate logits")


def reference_prompts(case, model, prompts, out_dir, prefix="logits", router=None):
    entries = []
    for i, ids in enumerate(prompts):
        if router is not None:
            router.reset()
        logits, greedy, margins = run_prompt(model, ids)
        check_logits(f"{case} prompt {i}", logits)
        fname = f"{prefix}_{i}.f32"
        write_f32(os.path.join(out_dir, fname), logits)
        m = min(margins)
        e = {
            "ids": ids,
            "logits_file": fname,
            "logits_shape": [len(ids), int(logits.shape[-1])],
            "greedy_ids": greedy,
            "min_margin": m,
            "min_margin_step": margins.index(m),
            "greedy_distinct": len(set(greedy)),
        }
        if router is not None:
            e["min_router_gap"] = router.min_gap
        entries.append(e)
        print(
            f"  [{case}] {prefix} prompt {i}: len {len(ids)}, greedy {greedy[:8]}..., "
            f"distinct {len(set(greedy))}, min margin {m:.4g}"
            + (f", min router gap {router.min_gap:.4g}" if router is not None else "")
        )
        if m < MIN_MARGIN:
            raise RuntimeError(f"{case}: greedy margin {m} < {MIN_MARGIN}; change the seed")
        if len(set(greedy)) == 1:
            raise RuntimeError(f"{case}: greedy continuation is one repeated token; change the seed")
        if router is not None and router.min_gap < MIN_MARGIN:
            raise RuntimeError(f"{case}: router top-k gap {router.min_gap} < {MIN_MARGIN}; change the seed")
    return entries


def generator_info():
    return {
        "script": "scripts/golden/make_goldens.py",
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "compute": "cpu float32, 1 thread, attn_implementation=eager, experts_implementation=eager",
        "greedy": f"{N_NEW} tokens, full forward without cache each step",
    }


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def assert_same_weights(ref_model, loaded_model):
    a, b = ref_model.state_dict(), loaded_model.state_dict()
    if a.keys() != b.keys():
        raise RuntimeError(f"reloaded keys differ: {sorted(set(a) ^ set(b))[:10]}")
    for k in a:
        if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k]):
            raise RuntimeError(f"reloaded weight differs from the one saved: {k}")


def list_tensors(out_dir):
    names = {}
    for fn in sorted(os.listdir(out_dir)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(out_dir, fn), "pt") as f:
                for k in f.keys():
                    s = f.get_slice(k)
                    names[k] = (s.get_dtype(), s.get_shape())
    return names


# --------------------------------------------------------------------------------------------
# BF16 cases
# --------------------------------------------------------------------------------------------
def bf16_case(case, cls, config, seed, out_dir, max_shard_size=None):
    torch.manual_seed(seed)
    impl = dict(attn_implementation="eager")
    if "Moe" in cls.__name__ or "Next" in cls.__name__:
        impl["experts_implementation"] = "eager"
    model = cls._from_config(config, **impl).eval()
    gen = torch.Generator().manual_seed(seed)
    reinit_(text_named_params(model), gen)
    round_to_bf16_(model)

    to_save = copy.deepcopy(model).to(torch.bfloat16)
    kw = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    to_save.save_pretrained(out_dir, **kw)
    del to_save

    # The reference uses exactly what was written: reload the checkpoint as float32.
    loaded = cls.from_pretrained(out_dir, dtype=torch.float32, **impl).eval()
    assert_same_weights(model, loaded)
    del model

    tensors = list_tensors(out_dir)
    bad = [k for k, (dt, _) in tensors.items() if dt != "BF16"]
    if bad:
        raise RuntimeError(f"{case}: non-BF16 tensors saved: {bad[:5]}")

    vocab = config.get_text_config().vocab_size
    prompts = make_prompts(seed + 1, vocab)
    router = RouterGap(loaded) if "Moe" in cls.__name__ or "Next" in cls.__name__ else None
    entries = reference_prompts(case, loaded, prompts, out_dir, router=router)
    if router is not None:
        router.close()
    ref = {
        "case": case,
        "architecture": cls.__name__,
        "seed": seed,
        "weights_dtype": "bfloat16",
        "n_new_tokens": N_NEW,
        "logits_format": "float32 little-endian, row-major [prompt_len, vocab_size]",
        "margin": "top1 - top2 logit of each greedy step; min over the steps",
        "prompts": entries,
        "generator": generator_info(),
    }
    if router is not None:
        ref["router_gap"] = "min over MoE layers/tokens/steps of (k-th - (k+1)-th) router logit"
    write_json(os.path.join(out_dir, "reference.json"), ref)


def case_qwen3_5_dense(out_dir):
    cfg = Qwen3_5TextConfig(**TEXT_DIMS, intermediate_size=128, rope_parameters=dict(ROPE_PLAIN))
    bf16_case("qwen3_5_dense", Qwen3_5ForCausalLM, cfg, 1001, out_dir)


def case_qwen3_5_yarn(out_dir):
    # YaRN over an original context of 32 positions, so the 150-token prompt runs far past it
    # (rotary dim 8: pair 0 keeps its frequency, pairs 1-3 are interpolated).
    rope = dict(ROPE_PLAIN, rope_type="yarn", factor=4.0, original_max_position_embeddings=32)
    cfg = Qwen3_5TextConfig(**TEXT_DIMS, intermediate_size=128, rope_parameters=rope)
    bf16_case("qwen3_5_yarn", Qwen3_5ForCausalLM, cfg, 1009, out_dir)


def case_qwen3_5_vl(out_dir):
    text = dict(TEXT_DIMS, intermediate_size=128, rope_parameters=dict(ROPE_MROPE))
    cfg = Qwen3_5Config(text_config=text, vision_config=dict(VISION_DIMS))
    bf16_case("qwen3_5_vl", Qwen3_5ForConditionalGeneration, cfg, 2002, out_dir)


def case_qwen3_5_moe(out_dir):
    text = dict(TEXT_DIMS, **MOE_DIMS, rope_parameters=dict(ROPE_MROPE))
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=dict(VISION_DIMS))
    bf16_case("qwen3_5_moe", Qwen3_5MoeForConditionalGeneration, cfg, 3203, out_dir)


def case_qwen3_next(out_dir):
    cfg = Qwen3NextConfig(
        **TEXT_DIMS,
        **MOE_DIMS,
        intermediate_size=128,  # the dense MLP of mlp_only_layers
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[1],
        rope_parameters=dict(ROPE_PLAIN),
    )
    bf16_case("qwen3_next", Qwen3NextForCausalLM, cfg, 4004, out_dir, max_shard_size="200KB")


# --------------------------------------------------------------------------------------------
# FP8 case
# --------------------------------------------------------------------------------------------
def quantise_weight_blocks(w):
    """[N, K] float32 -> (fp8 [N, K], float32 scale [ceil(N/128), ceil(K/128)]); dequant = fp8 * scale."""
    n, k = w.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    wp = F.pad(w, (0, kb * BLOCK - k, 0, nb * BLOCK - n))
    blocks = wp.reshape(nb, BLOCK, kb, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))  # [nb, kb]
    scale = (amax.clamp(min=1e-12) / FP8_MAX).to(torch.float32)
    s_full = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    q = (w / s_full).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def dequantise_weight_blocks(q, scale):
    n, k = q.shape
    s_full = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
    return q.to(torch.float32) * s_full


def act_quant(x):
    """Per token, groups of 128 along K (last group partial): x -> fp8 -> back, in x's dtype."""
    parts = []
    for xs in torch.split(x, BLOCK, dim=-1):
        amax = xs.abs().amax(dim=-1, keepdim=True)
        scale = amax.clamp(min=1e-10) / FP8_MAX
        q = (xs / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        parts.append(q.to(x.dtype) * scale)
    return torch.cat(parts, dim=-1)


def _w8a8_forward(mod, x):
    return F.linear(act_quant(x), mod.weight, mod.bias)


def quantised_linears(model):
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.endswith(FP8_QUANTISED):
            yield name, mod


def enable_w8a8_(model):
    for _, mod in quantised_linears(model):
        mod.forward = functools.partial(_w8a8_forward, mod)


@contextlib.contextmanager
def float64_mode(model):
    """Keep a .double() model in float64 end to end: HF upcasts to float32 in several places
    (RMSNorm .float(), GDN kernel .to(float32), softmax(dtype=float32), RoPE .float()); inside
    this context those casts leave float64 tensors alone. RoPE frequencies are recomputed in float64."""
    for mod in model.modules():
        if hasattr(mod, "inv_freq") and hasattr(mod, "rope_type"):
            cfg = mod.config
            rp = cfg.rope_parameters
            dim = int(cfg.head_dim * rp.get("partial_rotary_factor", 1.0))
            inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            mod.inv_freq = inv
            mod.original_inv_freq = inv.clone()

    orig_float, orig_to, orig_softmax = torch.Tensor.float, torch.Tensor.to, F.softmax

    def _keep(dt, t):
        return torch.float64 if (dt == torch.float32 and t.dtype == torch.float64) else dt

    def _float(self, *a, **k):  # float64 and integer tensors (e.g. RoPE positions) -> float64
        if self.dtype == torch.float64 or not (self.is_floating_point() or self.is_complex()):
            return orig_to(self, torch.float64)
        return orig_float(self, *a, **k)

    def _to(self, *args, **kwargs):
        if args and isinstance(args[0], torch.dtype):
            args = (_keep(args[0], self),) + tuple(args[1:])
        elif len(args) >= 2 and isinstance(args[1], torch.dtype):
            args = (args[0], _keep(args[1], self)) + tuple(args[2:])
        if kwargs.get("dtype") is not None:
            kwargs["dtype"] = _keep(kwargs["dtype"], self)
        return orig_to(self, *args, **kwargs)

    def _softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None:
            dtype = _keep(dtype, input)
        return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax = _float, _to, _softmax
    try:
        yield
    finally:
        torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax = orig_float, orig_to, orig_softmax


def check_all_float64(model, ids):
    """Sanity: under float64_mode every floating module output is float64."""
    bad = []

    def hook(mod, inp, out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for o in outs:
            if torch.is_tensor(o) and o.is_floating_point() and o.dtype != torch.float64:
                bad.append((type(mod).__name__, o.dtype))

    hs = [m.register_forward_hook(hook) for m in model.modules()]
    forward_logits(model, ids)
    for h in hs:
        h.remove()
    if bad:
        raise RuntimeError(f"float64 mode leaks lower precision: {bad[:5]}")


def noise_floor(model32, model64, ids):
    l32, g32, _ = run_prompt(model32, ids)
    with float64_mode(model64):
        check_all_float64(model64, ids)
        l64, g64, _ = run_prompt(model64, ids)
    rel = ((l32.double() - l64).norm() / l64.norm()).item()
    first = next((i for i, (a, b) in enumerate(zip(g32, g64)) if a != b), None)
    argmax_pos = int((l32.argmax(-1) != l64.argmax(-1)).sum())
    return {
        "prompt_index": PROMPT_LENS.index(len(ids)),
        "logits_rel_l2_f32_vs_f64": rel,
        "logits_max_abs_diff": (l32.double() - l64).abs().max().item(),
        "prompt_positions_argmax_differs": argmax_pos,
        "greedy_ids_f64": g64,
        "first_greedy_diff": first,
    }


def case_qwen3_5_fp8(out_dir):
    case, seed = "qwen3_5_fp8", 5005
    cfg = Qwen3_5TextConfig(**FP8_DIMS, rope_parameters=dict(ROPE_PLAIN))
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed)
    reinit_(model.named_parameters(), gen)
    round_to_bf16_(model)

    # Quantise; the model then holds exactly the dequantised values.
    tensors = {}
    qnames = set()
    for name, mod in quantised_linears(model):
        q, s = quantise_weight_blocks(mod.weight.data)
        with torch.no_grad():
            mod.weight.copy_(dequantise_weight_blocks(q, s))
        tensors[f"{name}.weight"] = q.contiguous()
        tensors[f"{name}.weight_scale_inv"] = s.contiguous()
        qnames.add(f"{name}.weight")
    for name, p in model.named_parameters():
        if name not in qnames:
            tensors[name] = p.data.to(torch.bfloat16).contiguous()
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    cfg_d = json.loads(cfg.to_json_string(use_diff=True))  # the keys save_pretrained would write
    cfg_d["dtype"] = "bfloat16"
    cfg_d["quantization_config"] = dict(FP8_QUANT_CONFIG)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=2, sort_keys=True)
        f.write("\n")

    # Read back what was written and check it is what the model computes with.
    params = dict(model.named_parameters())
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        for name, p in params.items():
            if name in qnames:
                w = dequantise_weight_blocks(f.get_tensor(name), f.get_tensor(name + "_scale_inv"))
            else:
                w = f.get_tensor(name).to(torch.float32)
            if not torch.equal(w, p.data):
                raise RuntimeError(f"fp8 case: saved {name} differs from the reference weight")
        if keys != set(params) | {n + "_scale_inv" for n in qnames}:
            raise RuntimeError("fp8 case: unexpected tensor set")

    prompts = make_prompts(seed + 1, cfg.vocab_size)
    long_ids = prompts[PROMPT_LENS.index(150)]
    model64 = copy.deepcopy(model).double().eval()

    modes = {}
    modes["weight_only"] = {
        "description": "float32 forward with dequantised weights (fp8 * block scale); activations unquantised",
        "prompts": reference_prompts(case, model, prompts, out_dir, prefix="logits_weight_only"),
    }
    floor = {"weight_only": noise_floor(model, model64, long_ids)}

    enable_w8a8_(model)
    enable_w8a8_(model64)
    modes["w8a8"] = {
        "description": (
            "as weight_only, but every quantised Linear first quantises its input per token in groups of "
            "128 along K (last group partial): amax = |x|.amax(group); scale = max(amax, 1e-10) / 448 "
            "(float32); q = clamp(x / scale, -448, 448) -> float8_e4m3fn (round to nearest even); "
            "x_dq = float(q) * scale; y = x_dq @ W_dequant^T"
        ),
        "prompts": reference_prompts(case, model, prompts, out_dir, prefix="logits_w8a8"),
    }
    floor["w8a8"] = noise_floor(model, model64, long_ids)
    for i in range(len(prompts)):
        lw = read_f32(os.path.join(out_dir, f"logits_weight_only_{i}.f32"))
        la = read_f32(os.path.join(out_dir, f"logits_w8a8_{i}.f32"))
        modes["w8a8"]["prompts"][i]["logits_rel_l2_vs_weight_only"] = ((la - lw).norm() / lw.norm()).item()
    for k, v in floor.items():
        print(
            f"  [{case}] noise floor {k}: rel L2 {v['logits_rel_l2_f32_vs_f64']:.3g}, "
            f"first greedy diff {v['first_greedy_diff']}, prompt argmax diffs {v['prompt_positions_argmax_differs']}"
        )

    quantised = sorted(qnames)
    ref = {
        "case": case,
        "architecture": "Qwen3_5ForCausalLM",
        "seed": seed,
        "weights_dtype": "float8_e4m3fn block-scaled (128x128, float32 weight_scale_inv) + bfloat16",
        "quantised_weights": quantised,
        "n_new_tokens": N_NEW,
        "logits_format": "float32 little-endian, row-major [prompt_len, vocab_size]",
        "margin": "top1 - top2 logit of each greedy step; min over the steps",
        "modes": modes,
        "noise_floor": {
            "description": (
                "same math in float64 (model.double(); HF's internal float32 upcasts kept in float64; "
                "the fp8 casts are the only rounding left) vs the float32 reference, on the 150-token prompt"
            ),
            **floor,
        },
        "generator": generator_info(),
    }
    write_json(os.path.join(out_dir, "reference.json"), ref)


CASES = {
    "qwen3_5_dense": case_qwen3_5_dense,
    "qwen3_5_yarn": case_qwen3_5_yarn,
    "qwen3_5_vl": case_qwen3_5_vl,
    "qwen3_5_moe": case_qwen3_5_moe,
    "qwen3_next": case_qwen3_next,
    "qwen3_5_fp8": case_qwen3_5_fp8,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden", help="output folder (default tests/golden)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ",".join(CASES))
    args = ap.parse_args()

    for pkg in ("fla", "causal_conv1d", "kernels"):
        if importlib.util.find_spec(pkg) is not None:
            print(f"warning: {pkg} is importable; HF may use it instead of the torch reference path")

    for case in args.cases.split(","):
        if case not in CASES:
            sys.exit(f"unknown case {case}")
        out_dir = os.path.join(args.out, case)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        print(f"{case} -> {out_dir}")
        CASES[case](out_dir)


if __name__ == "__main__":
    main()
