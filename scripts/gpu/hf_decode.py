"""HF transformers decode speed at the synthetic Qwen3.5-27B shape (BF16 weights, random), the
peer vt's `bench decode --weights bf16` is compared with in the same run. Run on the GPU machine:
    python3 scripts/gpu/hf_decode.py --batch 1,16 --context 1024 --steps 16
Prints one line per batch size: ms/step and tokens/s of the decode loop (prefill excluded)."""
import argparse
import json
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig


def build_model():
    config = Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=5120, num_hidden_layers=64, num_attention_heads=24,
        num_key_value_heads=4, head_dim=256, intermediate_size=17408, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, max_position_embeddings=8192, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25})
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    model = model.to_empty(device="cuda").to(torch.bfloat16).eval()
    generator = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, 0.02, generator=generator)
            elif "A_log" in name:
                parameter.uniform_(0.0, 1.0, generator=generator)
            else:
                parameter.uniform_(-0.1, 0.1, generator=generator)
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", default="1")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    model = build_model()
    results = []
    for batch in [int(b) for b in args.batch.split(",")]:
        prompt = torch.randint(0, 248320, (batch, args.context), device="cuda")
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            for _ in range(2):  # warm-up steps
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.steps):
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3 / args.steps
        results.append({"batch": batch, "ms_per_step": ms, "tokens_per_second": batch * 1e3 / ms})
        print(f"| hf transformers {torch.__version__} bf16 | {batch} | {ms:.2f} | {batch * 1e3 / ms:.1f} |", flush=True)
        del cache, out
        torch.cuda.empty_cache()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
