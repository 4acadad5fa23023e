#!/usr/bin/env python3
"""Write an FP8 block-scaled copy of a trained small model's folder, in the published layout.

Usage:  python3 scripts/golden/write_fp8_checkpoint.py --dir tests/golden/qwen3_5_moe_trained
            --out .cache/fp8/qwen3_5_moe_trained

Qwen's FP8 checkpoints store each quantised linear as `<name>.weight` (float8_e4m3fn) plus
`<name>.weight_scale_inv` (float32, one per 128x128 block: dequant = fp8 * scale_inv) and say so in
config.json's quantization_config (quant_method fp8, e4m3, dynamic activations, weight_block_size
[128, 128], modules_to_not_convert). This works on the safetensors directly, so it covers the dense
model, the MoE twin (its experts are stored per expert) and the MTP head alike.

Quantised: every projection of attention, gated delta net and MLP / experts / shared expert, the
MTP layer's included. Kept as stored (bf16), as in Qwen's published FP8 checkpoints: embeddings and
the tied output layer, norms and the GDN's small tensors, the router (mlp.gate), the shared-expert
gate, in_proj_a / in_proj_b (out dims = value heads, far below one block) and mtp.fc (the head's
input projection over [embedding | hidden]). Blocks are partial where a dimension is not a multiple
of 128 (192, 320, 48 ...), with make_goldens.py's rounding (scale = block amax / 448).

The output folder holds model.safetensors, config.json and the tokenizer / generation files; it is
meant for a git-ignored place (.cache/...), not for tests/golden.
"""

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import make_goldens as goldens  # noqa: E402

# The last name component of the linears that are quantised.
QUANTISED = ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
             "gate_proj", "up_proj", "down_proj")
COPIED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def is_quantised(name, shape):
    if not name.endswith(".weight") or len(shape) != 2:
        return False
    return name[: -len(".weight")].rsplit(".", 1)[-1] in QUANTISED


def is_unconverted_linear(name, shape):
    """A 2-D weight of a linear kept in bf16 (listed in modules_to_not_convert); embeddings are not linears."""
    return (name.endswith(".weight") and len(shape) == 2 and not is_quantised(name, shape)
            and not name.endswith("embed_tokens.weight"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="trained model folder (bf16 model.safetensors)")
    ap.add_argument("--out", required=True, help="output folder (git-ignored, e.g. .cache/fp8/NAME)")
    args = ap.parse_args()

    tensors, quantised, not_converted = {}, [], []
    with safe_open(os.path.join(args.dir, "model.safetensors"), "pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if is_quantised(name, t.shape):
                q, scale = goldens.quantise_weight_blocks(t.to(torch.float32))
                # The stored codes must give back the weight that was quantised, block for block.
                back = goldens.dequantise_weight_blocks(q, scale)
                err = ((back - t.float()).norm() / t.float().norm().clamp(min=1e-30)).item()
                if not err < 0.07:  # e4m3 has 3 mantissa bits: relative rounding <= 2^-4 per element
                    raise RuntimeError(f"{name}: FP8 round trip relative L2 {err:.3g}")
                tensors[name] = q.contiguous()
                tensors[name + "_scale_inv"] = scale.contiguous()
                quantised.append(name[: -len(".weight")])
            else:
                tensors[name] = t.contiguous()
                if is_unconverted_linear(name, t.shape):
                    not_converted.append(name[: -len(".weight")])

    with open(os.path.join(args.dir, "config.json")) as f:
        cfg = json.load(f)
    quant = dict(goldens.FP8_QUANT_CONFIG)
    if cfg.get("tie_word_embeddings"):
        not_converted.append("lm_head")
    quant["modules_to_not_convert"] = sorted(not_converted)
    cfg["quantization_config"] = quant

    os.makedirs(args.out, exist_ok=True)
    save_file(tensors, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in COPIED:
        if os.path.exists(os.path.join(args.dir, name)):
            shutil.copy(os.path.join(args.dir, name), args.out)
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out}: {len(quantised)} linears in FP8 (128x128 blocks), "
          f"{len(not_converted)} kept as stored; model.safetensors {size:,} bytes")


if __name__ == "__main__":
    main()
