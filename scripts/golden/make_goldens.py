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
# Deterministic cuBLAS on a GPU (scripts/golden/make_real_width_goldens.py); read at its first use.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

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
    "mlp.shared_expert.gate_proj",  # MoE (as the published FP8 checkpoints; the router and the
    "mlp.shared_expert.up_proj",  # shared expert's gate stay BF16); the routed experts: see
    "mlp.shared_expert.down_proj",  # expert_modules
)
FP8_WEIGHTS_DTYPE = "float8_e4m3fn block-scaled (128x128, float32 weight_scale_inv) + bfloat16"
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
    """Re-initialise the text-model parameters in place (deterministic given `gen`, drawn on its device)."""

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, device=gen.device) * std + mean

    def uniform(shape, low, high):
        return torch.empty(shape, device=gen.device).uniform_(low, high, generator=gen)

    for name, p in named_params:
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            v = normal(shape, 1.0)
        elif name == "lm_head.weight":
            v = normal(shape, 3.0 / math.sqrt(shape[-1]))  # logits std ~3
        elif name.endswith("linear_attn.A_log"):
            v = uniform(shape, 0.05, 2.0).log()
        elif name.endswith("linear_attn.dt_bias"):
            v = uniform(shape, -3.0, 0.0)  # decay exp(g) in ~[0.5, 0.999]
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
    device = next(model.parameters()).device
    out = model(input_ids=torch.tensor([ids], dtype=torch.long, device=device), use_cache=False)
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


def make_prompts(seed, vocab, lens=PROMPT_LENS):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lens]


def write_f32(path, t):
    t.detach().to(torch.float32).cpu().contiguous().numpy().astype("<f4").tofile(path)


def read_f32(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).double()


def check_logits(name, logits):
    if not torch.isfinite(logits).all():
        raise RuntimeError(f"{name}: non-finite logits")
    if logits.std().item() < 1e-2:
        raise RuntimeError(f"{name}: degenerate logits")


def reference_prompts(case, model, prompts, out_dir, prefix="logits", router=None, strict=True, runs=None):
    """Each prompt's logits file and reference entry. strict: a near-tied greedy step or router
    choice, or a one-token continuation, is an error (change the seed); otherwise every step's
    margin is recorded for the test to judge. runs: collects each prompt's (logits, greedy, margins)."""
    entries = []
    for i, ids in enumerate(prompts):
        if router is not None:
            router.reset()
        logits, greedy, margins = run_prompt(model, ids)
        if runs is not None:
            runs.append((logits, greedy, margins))
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
        if not strict:
            e["margins"] = margins
        entries.append(e)
        print(
            f"  [{case}] {prefix} prompt {i}: len {len(ids)}, greedy {greedy[:8]}..., "
            f"distinct {len(set(greedy))}, min margin {m:.4g}"
            + (f", min router gap {router.min_gap:.4g}" if router is not None else "")
        )
        if not strict:
            continue
        if m < MIN_MARGIN:
            raise RuntimeError(f"{case}: greedy margin {m} < {MIN_MARGIN}; change the seed")
        if len(set(greedy)) == 1:
            raise RuntimeError(f"{case}: greedy continuation is one repeated token; change the seed")
        if router is not None and router.min_gap < MIN_MARGIN:
            raise RuntimeError(f"{case}: router top-k gap {router.min_gap} < {MIN_MARGIN}; change the seed")
    return entries


def generator_info(script="scripts/golden/make_goldens.py", compute="cpu float32, 1 thread"):
    return {
        "script": script,
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "compute": f"{compute}, attn_implementation=eager, experts_implementation=eager",
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


def quantised_linears(model):
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.endswith(FP8_QUANTISED):
            yield name, mod


def expert_modules(model):
    """MoE routed experts, fused: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I]. The
    checkpoint holds them per expert as the published FP8 ones: <name>.<e>.{gate,up,down}_proj.weight."""
    for name, mod in model.named_modules():
        if hasattr(mod, "gate_up_proj") and hasattr(mod, "down_proj") and hasattr(mod, "num_experts"):
            yield name, mod


def expert_parts(mod, e):
    """Views of expert e's three matrices inside the fused parameters."""
    gate_up, inter = mod.gate_up_proj.data[e], mod.gate_up_proj.shape[1] // 2
    return {"gate_proj": gate_up[:inter], "up_proj": gate_up[inter:], "down_proj": mod.down_proj.data[e]}


@torch.no_grad()
def quantise_model_(model):
    """Quantises every FP8 matrix to 128x128 e4m3 blocks; the model then holds exactly the
    dequantised values (fp8 * block scale). Returns the checkpoint's tensors (on the CPU) and the
    names of the parameters they replace."""
    tensors, replaced = {}, set()

    def put(name, w):
        q, s = quantise_weight_blocks(w)
        w.copy_(dequantise_weight_blocks(q, s))
        tensors[f"{name}.weight"] = q.cpu().contiguous()
        tensors[f"{name}.weight_scale_inv"] = s.cpu().contiguous()

    for name, mod in quantised_linears(model):
        put(name, mod.weight.data)
        replaced.add(f"{name}.weight")
    for name, mod in expert_modules(model):
        for e in range(mod.gate_up_proj.shape[0]):
            for part, w in expert_parts(mod, e).items():
                put(f"{name}.{e}.{part}", w)
        replaced.update({f"{name}.gate_up_proj", f"{name}.down_proj"})
    for name, p in model.named_parameters():
        if name not in replaced:
            tensors[name] = p.data.to(torch.bfloat16).cpu().contiguous()
    return tensors, replaced


def check_fp8_checkpoint(path, model):
    """Reads the checkpoint back and checks it is exactly what the model computes with, tensor for
    tensor, and that it holds nothing else."""
    device = next(model.parameters()).device
    experts = dict(expert_modules(model))
    linears = {f"{name}.weight" for name, _ in quantised_linears(model)}
    used = set()
    with safe_open(path, "pt", device=str(device)) as f:

        def get(key):
            used.add(key)
            return f.get_tensor(key)

        def fp8(name):
            return dequantise_weight_blocks(get(name + ".weight"), get(name + ".weight_scale_inv"))

        for name, p in model.named_parameters():
            owner, _, leaf = name.rpartition(".")
            if name in linears:
                w = fp8(name[: -len(".weight")])
            elif owner in experts and leaf == "gate_up_proj":
                parts = [torch.cat([fp8(f"{owner}.{e}.gate_proj"), fp8(f"{owner}.{e}.up_proj")]) for e in range(p.shape[0])]
                w = torch.stack(parts)
            elif owner in experts and leaf == "down_proj":
                w = torch.stack([fp8(f"{owner}.{e}.down_proj") for e in range(p.shape[0])])
            else:
                w = get(name).to(torch.float32)
            if not torch.equal(w, p.data):
                raise RuntimeError(f"fp8 checkpoint: saved {name} differs from the reference weight")
        if set(f.keys()) != used:
            raise RuntimeError(f"fp8 checkpoint: unexpected tensors {sorted(set(f.keys()) - used)[:5]}")


def build_fp8_model(cls, cfg, seed, out_dir, device="cpu"):
    """A random model (reinit_, bf16-exact), its FP8 checkpoint (model.safetensors + config.json)
    in out_dir, and the model holding the dequantised weights it wrote. Returns the model and the
    quantised checkpoint names (weights, not scales)."""
    torch.manual_seed(seed)
    impl = {"experts_implementation": "eager"} if "Moe" in cls.__name__ else {}
    with torch.device(device):
        model = cls._from_config(cfg, attn_implementation="eager", **impl).to(device).eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    reinit_(model.named_parameters(), gen)
    round_to_bf16_(model)

    tensors, _ = quantise_model_(model)
    path = os.path.join(out_dir, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    quantised = sorted(k[: -len("_scale_inv")] for k in tensors if k.endswith(".weight_scale_inv"))
    del tensors

    cfg_d = json.loads(cfg.to_json_string(use_diff=True))  # the keys save_pretrained would write
    cfg_d["dtype"] = "bfloat16"
    cfg_d["quantization_config"] = dict(FP8_QUANT_CONFIG)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=2, sort_keys=True)
        f.write("\n")
    check_fp8_checkpoint(path, model)
    return model, quantised


def w8a8_linear(x, w, bias=None):
    """y = act_quant(x) @ w^T in w's dtype, returned in x's dtype. A bfloat16 model whose w is the
    float32 master copy is the served arithmetic: bf16 activations, exact e4m3 products summed in
    float32, the output rounded to bf16."""
    y = F.linear(act_quant(x.to(w.dtype)), w, bias)
    return y.to(x.dtype)


def _w8a8_experts_forward(mod, gate_up, down, hidden_states, top_k_index, top_k_weights):
    """HF's eager expert loop (Qwen3NextExperts.forward) with both expert GEMMs W8A8."""
    final = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = F.one_hot(top_k_index, num_classes=mod.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        e = expert_idx[0]
        top_k_pos, token_idx = torch.where(expert_mask[e])
        gate, up = w8a8_linear(hidden_states[token_idx], gate_up[e]).chunk(2, dim=-1)
        current = w8a8_linear(mod.act_fn(gate) * up, down[e])
        current = current * top_k_weights[token_idx, top_k_pos, None]
        final.index_add_(0, token_idx, current.to(final.dtype))
    return final


def enable_w8a8_(model, master=None):
    """Every quantised GEMM (linears and routed experts) quantises its input per token
    (act_quant). master: a model of the same structure whose weights these GEMMs use instead of
    model's own (the float32 dequantised weights for a bfloat16 model)."""
    owner = dict(master.named_modules()) if master is not None else {}
    for name, mod in quantised_linears(model):
        weight = owner[name].weight if master is not None else mod.weight
        mod.forward = functools.partial(w8a8_linear, w=weight, bias=mod.bias)
    for name, mod in expert_modules(model):
        src = owner[name] if master is not None else mod
        mod.forward = functools.partial(_w8a8_experts_forward, mod, src.gate_up_proj, src.down_proj)


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
            inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64, device=mod.inv_freq.device) / dim))
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


def compare_runs(run, ref):
    """How far `run` is from `ref` (each run_prompt's (logits, greedy, margins)): the noise floor of
    the lower precision `run` computes in."""
    (logits, greedy, _), (ref_logits, ref_greedy, _) = run, ref
    diff = logits.double() - ref_logits.double()
    return {
        "logits_rel_l2": (diff.norm() / ref_logits.double().norm()).item(),
        "last_logits_rel_l2": (diff[-1].norm() / ref_logits[-1].double().norm()).item(),
        "logits_max_abs_diff": diff.abs().max().item(),
        "prompt_positions_argmax_differs": int((logits.argmax(-1) != ref_logits.argmax(-1)).sum()),
        "first_greedy_diff": next((i for i, (a, b) in enumerate(zip(greedy, ref_greedy)) if a != b), None),
    }


def float64_run(model64, ids):
    with float64_mode(model64):
        check_all_float64(model64, ids)
        return run_prompt(model64, ids)


def noise_floor(model32, model64, ids):
    run32, run64 = run_prompt(model32, ids), float64_run(model64, ids)
    c = compare_runs(run32, run64)
    return {
        "prompt_index": PROMPT_LENS.index(len(ids)),
        "logits_rel_l2_f32_vs_f64": c["logits_rel_l2"],
        "logits_max_abs_diff": c["logits_max_abs_diff"],
        "prompt_positions_argmax_differs": c["prompt_positions_argmax_differs"],
        "greedy_ids_f64": run64[1],
        "first_greedy_diff": c["first_greedy_diff"],
    }


W8A8_DESCRIPTION = (
    "every quantised Linear first quantises its input per token in groups of 128 along K (last group "
    "partial): amax = |x|.amax(group); scale = max(amax, 1e-10) / 448 (float32); q = clamp(x / scale, "
    "-448, 448) -> float8_e4m3fn (round to nearest even); x_dq = float(q) * scale; y = x_dq @ W_dequant^T"
)


def case_qwen3_5_fp8(out_dir):
    case, seed = "qwen3_5_fp8", 5005
    cfg = Qwen3_5TextConfig(**FP8_DIMS, rope_parameters=dict(ROPE_PLAIN))
    cfg.architectures = ["Qwen3_5ForCausalLM"]
    model, quantised = build_fp8_model(Qwen3_5ForCausalLM, cfg, seed, out_dir)

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
        "description": "as weight_only, but " + W8A8_DESCRIPTION,
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

    ref = {
        "case": case,
        "architecture": "Qwen3_5ForCausalLM",
        "seed": seed,
        "weights_dtype": FP8_WEIGHTS_DTYPE,
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
