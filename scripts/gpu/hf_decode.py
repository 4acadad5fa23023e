"""HF transformers decode speed at the synthetic Qwen3.5-27B shape (BF16 weights, random), the
peer vt's `bench decode --weights bf16` is compared with in the same run. Run on the GPU machine:
    python3 scripts/gpu/hf_decode.py --batch 1,16 --context 1024 --steps 16 --rounds 5
The fair way: the same precision as vt's run (bf16 weights and activations), HF's fastest kernels
available there (SDPA attention; the Gated DeltaNet on flash-linear-attention's kernels when `fla`
is installed, else HF's torch fallback, which the output names), and the median of --rounds timed
rounds with their spread. Prints one row per batch size: the median ms/step, its min..max over
the rounds, and tokens/s; then the rows as JSON. --layers / --device shrink it for a dry run here."""
import argparse
import importlib.util
import json
import statistics
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig


def build_model(layers, device):
    # The 27B's layer pattern: three Gated DeltaNet layers, then one full-attention layer.
    config = Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=5120, num_hidden_layers=layers, num_attention_heads=24,
        num_key_value_heads=4, head_dim=256, intermediate_size=17408, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, max_position_embeddings=8192, rms_norm_eps=1e-6,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25})
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    model = model.to_empty(device=device).to(torch.bfloat16).eval()
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() >= 2:
                parameter.normal_(0.0, 0.02, generator=generator)
            elif "A_log" in name:
                parameter.uniform_(0.0, 1.0, generator=generator)
            else:
                parameter.uniform_(-0.1, 0.1, generator=generator)
    return model


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", default="1")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=16, help="decode steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (median and min..max reported)")
    parser.add_argument("--layers", type=int, default=64, help="64: the 27B; fewer for a dry run")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    model = build_model(args.layers, args.device)
    kernels = "fla" if importlib.util.find_spec("fla") else "torch fallback"
    results = []
    for batch in [int(b) for b in args.batch.split(",")]:
        prompt = torch.randint(0, 248320, (batch, args.context), device=args.device)
        rounds = []
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            for _ in range(2):  # warm-up steps
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1:].argmax(-1)
            for _ in range(args.rounds):  # each round decodes further into the same sequences
                synchronize(args.device)
                start = time.perf_counter()
                for _ in range(args.steps):
                    out = model(input_ids=token, past_key_values=cache, use_cache=True)
                    token = out.logits[:, -1:].argmax(-1)
                synchronize(args.device)
                rounds.append((time.perf_counter() - start) * 1e3 / args.steps)
        ms = statistics.median(rounds)
        results.append({"batch": batch, "ms_per_step": ms, "min_ms": min(rounds), "max_ms": max(rounds),
                        "rounds": rounds, "tokens_per_second": batch * 1e3 / ms, "attention": "sdpa",
                        "gated_deltanet": kernels, "torch": torch.__version__})
        print(f"| hf transformers {torch.__version__} bf16 (sdpa, GDN {kernels}) | {batch} | {ms:.2f} "
              f"({min(rounds):.2f}..{max(rounds):.2f}) | {batch * 1e3 / ms:.1f} |", flush=True)
        del cache, out
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
