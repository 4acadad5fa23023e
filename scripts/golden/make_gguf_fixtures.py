#!/usr/bin/env python3
"""Small GGUF fixtures for vt's GGUF reader and Llama model (deterministic; needs gguf, torch, transformers).

Usage:  python3 scripts/golden/make_gguf_fixtures.py [--out tests/golden/gguf]

quants.gguf        one tensor per ggml type vt dequantises (random blocks with sane f16 scales), each
                   followed by '<name>.expected': gguf-py's dequantisation of it, in F32.
tiny_llama.gguf    a random Llama (2 layers, GQA 4/2, untied LM head; matrices Q8_0, embedding F16) written
                   as llama.cpp's convert_hf_to_gguf writes it: q and k rows permuted for GPT-J RoPE.
tiny_llama.json    HF LlamaForCausalLM (float32, eager) on the ORIGINAL (unpermuted) weights: logits
                   of one prompt at every position, and 16 greedy ids; so the test checks that vt
                   undoes the permutation, independently of transformers' own GGUF loader.
"""

import argparse
import json
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize
from transformers import LlamaConfig, LlamaForCausalLM

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

# type, bytes per block, byte offsets of f16 scales inside a block
QUANT_TYPES = [
    (Q.Q4_0, 18, [0]),
    (Q.Q4_1, 20, [0, 2]),
    (Q.Q5_0, 22, [0]),
    (Q.Q5_1, 24, [0, 2]),
    (Q.Q8_0, 34, [0]),
    (Q.Q4_K, 144, [0, 2]),
    (Q.Q5_K, 176, [0, 2]),
    (Q.Q6_K, 210, [208]),
]


def quant_blocks(rng, qtype, block_bytes, scale_offsets, rows, row_blocks):
    data = rng.integers(0, 256, size=(rows * row_blocks, block_bytes), dtype=np.uint8)
    for offset in scale_offsets:
        scales = (rng.standard_normal(rows * row_blocks) * 0.05).astype(np.float16)
        data[:, offset:offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return data.reshape(rows, row_blocks * block_bytes)


def write_quants(path):
    rng = np.random.default_rng(4242)
    writer = GGUFWriter(path, "vt-fixture")
    rows = 3
    for qtype, block_bytes, scale_offsets in QUANT_TYPES:
        block = 256 if qtype.name.endswith("_K") else 32
        row_blocks = 2
        raw = quant_blocks(rng, qtype, block_bytes, scale_offsets, rows, row_blocks)
        name = qtype.name.lower()
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        writer.add_tensor(name + ".expected", dequantize(raw, qtype).astype(np.float32))
    f16 = (rng.standard_normal((rows, 8)) * 3).astype(np.float16)
    writer.add_tensor("f16", f16)
    writer.add_tensor("f16.expected", f16.astype(np.float32))
    f32 = rng.standard_normal((rows, 8)).astype(np.float32)
    writer.add_tensor("f32", f32)
    writer.add_tensor("f32.expected", f32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def permute(weights, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute."""
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


THETA = 50000.0


def write_tiny_llama(gguf_path, json_path):
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": THETA}, max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(77)
    model = LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    generator = torch.Generator().manual_seed(77)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=generator))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=generator))
            else:
                # Matrices are stored as Q8_0: the reference uses exactly the dequantised values.
                w = (torch.randn(p.shape, generator=generator) * (1.5 / p.shape[1] ** 0.5)).numpy()
                p.copy_(torch.from_numpy(dequantize(quantize(w, Q.Q8_0), Q.Q8_0)))
            if "embed_tokens" in name:
                p.copy_(p.half().float())  # stored as F16

    writer = GGUFWriter(gguf_path, "llama")
    writer.add_name("vt tiny llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(THETA)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_vocab_size(config.vocab_size)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    state = {k: v.numpy().astype(np.float32) for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"].astype(np.float16))
    for i in range(config.num_hidden_layers):
        for hf, gg in names.items():
            w = state[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = permute(w, config.num_attention_heads)
            elif gg == "attn_k":
                w = permute(w, config.num_key_value_heads)
            if gg.endswith("norm"):
                writer.add_tensor(f"blk.{i}.{gg}.weight", w)
            else:
                q8 = quantize(np.ascontiguousarray(w), Q.Q8_0)
                writer.add_tensor(f"blk.{i}.{gg}.weight", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    q8 = quantize(state["lm_head.weight"], Q.Q8_0)
    writer.add_tensor("output.weight", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    ids = [int(i) for i in torch.randint(0, config.vocab_size, (40,), generator=generator)]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        greedy, margins, sequence = [], [], list(ids)
        for _ in range(16):
            step = model(torch.tensor([sequence])).logits[0, -1]
            top = torch.topk(step, 2)
            greedy.append(int(top.indices[0]))
            margins.append(float(top.values[0] - top.values[1]))
            sequence.append(greedy[-1])
    if min(margins) < 1e-3:
        raise RuntimeError(f"tiny llama: greedy margin {min(margins)} too small; change the seed")
    with open(json_path, "w") as f:
        json.dump({"ids": ids, "logits": [[round(float(v), 6) for v in row] for row in logits],
                   "greedy_ids": greedy, "min_margin": min(margins)}, f)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden/gguf")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    write_quants(os.path.join(args.out, "quants.gguf"))
    write_tiny_llama(os.path.join(args.out, "tiny_llama.gguf"), os.path.join(args.out, "tiny_llama.json"))
    for name in sorted(os.listdir(args.out)):
        print(f"{args.out}/{name}: {os.path.getsize(os.path.join(args.out, name))} bytes")


if __name__ == "__main__":
    main()
