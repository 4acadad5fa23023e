#!/usr/bin/env python3
"""Real-width FP8 goldens: random Qwen3.5 models at the layer widths of Qwen3.5-27B and
Qwen3.5-35B-A3B (a few layers, a 4096-token vocabulary) with HF transformers W8A8 references and
their noise floors. Too large to commit (1.6 GB each): scripts/gpu/real_width.sh makes them on the
GPU machine from the fixed seeds below; tests/cuda/test_cuda_real_width.cpp reads them.

Usage:  python3 scripts/golden/make_real_width_goldens.py --out tests/golden/real_width
            [--cases qwen3_5_27b_fp8,qwen3_5_35b_a3b_fp8] [--device cuda]

One folder per case: model.safetensors and config.json written as make_goldens.py's qwen3_5_fp8
(128x128 e4m3 blocks; the routed experts per expert, as the published FP8 checkpoints), and per
prompt (lengths 1, 7, 150) the logits of two reference modes:
  w8a8       float32 W8A8 (make_goldens.py's w8a8 mode): the reference vt is checked against.
  w8a8_bf16  the served arithmetic: bf16 activations, each quantised GEMM summing exact e4m3
             products in float32 and rounding its output to bf16.
and two noise floors per prompt: w8a8 (float32 vs the same math in float64) and w8a8_bf16 (bf16 vs
float32), the floor vt's served configuration is held to (docs/numerics.md).
"""

import argparse
import copy
import importlib.util
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig  # noqa: E402

import make_goldens as mg  # noqa: E402

SCRIPT = "scripts/golden/make_real_width_goldens.py"
PROMPT_LENS = (1, 7, 150)  # decode-like, a short prompt, one crossing the GDN chunk size twice
# As the published checkpoints (their M-RoPE sections reduce to this for text).
ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
COMMON_DIMS = dict(
    vocab_size=4096,  # the real 248320 would make the embedding and lm_head most of the file
    head_dim=256,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    max_position_embeddings=4096,
    hidden_act="silu",
)
# The widths of synthetic_config("qwen3.5-27b") (src/models/qwen3_5/cuda_weights.cpp); 4 layers:
# 3 x linear_attention, then full_attention (the default layer_types).
QWEN3_5_27B_DIMS = dict(
    COMMON_DIMS,
    hidden_size=5120,
    num_hidden_layers=4,
    num_attention_heads=24,
    num_key_value_heads=4,
    linear_num_key_heads=16,
    linear_num_value_heads=48,
    intermediate_size=17408,
)
# synthetic_config("qwen3.5-35b-a3b"): 256 experts of 512, top 8, a shared expert of 512; two
# layers, one of each kind (each layer's experts are 0.8 G weights).
QWEN3_5_35B_A3B_DIMS = dict(
    COMMON_DIMS,
    hidden_size=2048,
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    num_attention_heads=16,
    num_key_value_heads=2,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
)
BF16_DESCRIPTION = (
    "the served arithmetic: the model in bfloat16 (every weight outside the quantised GEMMs is bf16-exact "
    "already), HF's bf16 forward between the GEMMs; each quantised GEMM (linears and routed experts) takes "
    "its bf16 input to float32, quantises it as in w8a8, multiplies with the float32 dequantised weights "
    "(exact e4m3 products, float32 sums) and rounds the output to bf16"
)
FLOOR_DESCRIPTION = (
    "per prompt, how far a lower precision lands from a higher one (compare_runs in make_goldens.py): "
    "w8a8: the float32 reference vs the same W8A8 math in float64 (model.double(), HF's float32 upcasts kept "
    "in float64: the fp8 casts are the only rounding left); w8a8_bf16: the w8a8_bf16 mode vs the float32 "
    "reference. first_greedy_diff: the first of the greedy steps where the two continuations part (null: none)"
)


def real_width_case(case, cls, cfg, seed, out_dir, device):
    cfg.architectures = [cls.__name__]
    model, quantised = mg.build_fp8_model(cls, cfg, seed, out_dir, device)
    prompts = mg.make_prompts(seed + 1, cfg.vocab_size, PROMPT_LENS)
    model64 = copy.deepcopy(model).double().eval()
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
    mg.enable_w8a8_(model)
    mg.enable_w8a8_(model64)
    mg.enable_w8a8_(model_bf16, master=model)
    moe = any(True for _ in mg.expert_modules(model))
    router = mg.RouterGap(model) if moe else None

    runs32, runs_bf16 = [], []
    modes = {
        "w8a8": {
            "description": "float32 forward with dequantised weights (fp8 * block scale); " + mg.W8A8_DESCRIPTION,
            "prompts": mg.reference_prompts(
                case, model, prompts, out_dir, prefix="logits_w8a8", router=router, strict=False, runs=runs32
            ),
        },
        "w8a8_bf16": {
            "description": BF16_DESCRIPTION,
            "prompts": mg.reference_prompts(
                case, model_bf16, prompts, out_dir, prefix="logits_w8a8_bf16", strict=False, runs=runs_bf16
            ),
        },
    }
    if router is not None:
        router.close()
    floor = {"w8a8": [], "w8a8_bf16": []}
    for i, ids in enumerate(prompts):
        floor["w8a8"].append(dict(prompt_index=i, **mg.compare_runs(runs32[i], mg.float64_run(model64, ids))))
        floor["w8a8_bf16"].append(dict(prompt_index=i, **mg.compare_runs(runs_bf16[i], runs32[i])))
        for k in floor:
            v = floor[k][-1]
            print(
                f"  [{case}] noise floor {k}, prompt {i} ({len(ids)} tokens): rel L2 {v['logits_rel_l2']:.3g} "
                f"(last position {v['last_logits_rel_l2']:.3g}), max |d logit| {v['logits_max_abs_diff']:.3g}, "
                f"prompt argmax diffs {v['prompt_positions_argmax_differs']}, first greedy diff {v['first_greedy_diff']}"
            )

    ref = {
        "case": case,
        "architecture": cls.__name__,
        "seed": seed,
        "weights_dtype": mg.FP8_WEIGHTS_DTYPE,
        "quantised_weights": quantised,
        "n_new_tokens": mg.N_NEW,
        "logits_format": "float32 little-endian, row-major [prompt_len, vocab_size]",
        "margin": "top1 - top2 logit of a greedy step: min_margin over the steps, margins every step",
        "modes": modes,
        "noise_floor": {"description": FLOOR_DESCRIPTION, **floor},
        "generator": mg.generator_info(SCRIPT, f"{device}: float32 without TF32, bfloat16 with float32 sums"),
    }
    mg.write_json(os.path.join(out_dir, "reference.json"), ref)


def case_qwen3_5_27b_fp8(out_dir, device):
    cfg = Qwen3_5TextConfig(**QWEN3_5_27B_DIMS, rope_parameters=dict(ROPE))
    real_width_case("qwen3_5_27b_fp8", Qwen3_5ForCausalLM, cfg, 27027, out_dir, device)


def case_qwen3_5_35b_a3b_fp8(out_dir, device):
    cfg = Qwen3_5MoeTextConfig(**QWEN3_5_35B_A3B_DIMS, rope_parameters=dict(ROPE))
    real_width_case("qwen3_5_35b_a3b_fp8", Qwen3_5MoeForCausalLM, cfg, 35035, out_dir, device)


CASES = {
    "qwen3_5_27b_fp8": case_qwen3_5_27b_fp8,
    "qwen3_5_35b_a3b_fp8": case_qwen3_5_35b_a3b_fp8,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden/real_width", help="output folder (default tests/golden/real_width)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of: " + ",".join(CASES))
    ap.add_argument("--device", default="cuda", help="torch device (default cuda; the CPU takes hours)")
    args = ap.parse_args()

    # The torch reference path of the Gated DeltaNet, not fla's Triton kernels (no float64 there).
    for pkg in ("fla", "causal_conv1d"):
        if importlib.util.find_spec(pkg) is not None:
            sys.exit(f"{pkg} is importable: HF would run its kernels instead of the torch reference path")
    if args.device.startswith("cuda"):
        # float32 means float32: no TF32 in matmuls or convolutions; bf16 GEMMs sum in float32 as vt's.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        # A CUDA op without a deterministic kernel warns rather than stops the run.
        torch.use_deterministic_algorithms(True, warn_only=True)

    for case in args.cases.split(","):
        if case not in CASES:
            sys.exit(f"unknown case {case}")
        out_dir = os.path.join(args.out, case)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        print(f"{case} -> {out_dir}", flush=True)
        with torch.no_grad():
            CASES[case](out_dir, args.device)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
