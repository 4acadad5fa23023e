"""HF transformers decode speed at the synthetic Qwen3.5-27B shape (random weights), the peer vt's
`bench decode --synthetic qwen3.5-27b --weights bf16|fp8` is compared with in the same call
(scripts/gpu/peers_round.sh). Run on the GPU machine:
    python3 scripts/gpu/hf_decode.py --batch 1,16 --context 1024 --steps 10 --rounds 5
The fair way: the same precision as vt's run and HF's fastest kernels available there.
- --precision bf16: bf16 weights and activations (vt `--weights bf16`).
- --precision fp8: HF's own FP8 path, FineGrainedFP8 (the weights in float8_e4m3fn 128x128 blocks with
  fp32 `weight_scale_inv`, activations quantised per token in 1x128 groups inside the kernel, W8A8 as
  vt runs; lm_head, in_proj_a/b in bf16 as vt's synthetic FP8 model and the checkpoints have them).
  The model is built from its config with random weights, so nothing is quantised on load: the
  Linear modules are swapped for FP8Linear with transformers' own replace_with_fp8_linear (what
  from_pretrained does for a pre-quantized checkpoint) and filled with random FP8 codes and scales.
  (FP8 quantisation on load only exists in from_pretrained; from_config never quantises, and saving
  the 54 GB bf16 model to quantise it on load would take minutes and most of the disk.)
  What it needs (checked before anything is allocated; exit status 3 and the reason on stderr when
  missing): a CUDA GPU of compute capability >= 8.9, triton, and in transformers >= 5 the Triton
  kernel `kernels-community/finegrained-fp8` (version 4) from the Hugging Face Hub, loaded through
  the `kernels` package (0.16.x); DeepGEMM (`kernels-community/deep-gemm`) is preferred on sm_90
  where it loads. The Hub is not reachable from the lent GPU machine (nor from the dev machine, which
  reaches PyPI only), and neither the lent image nor PyPI has that kernel, so there it stops at the
  check (HF_HUB_OFFLINE=1 is set unless given, so the check fails at once instead of retrying).
- --gdn: the Gated DeltaNet kernels. `fla`: flash-linear-attention's Triton kernels (the fla-core
  wheel, carried in .whl; HF's fast path; the first prefill and decode step compile them), `torch`:
  HF's reference PyTorch path (what a machine without fla runs), `auto` (default): fla where it
  imports. The causal conv1d runs HF's torch path (the causal-conv1d package is a CUDA build).
- SDPA attention; the median of --rounds timed rounds (each --steps decode steps, continuing the same
  sequences) with their min..max.
Prints one row per batch size, then the rows as JSON (also written to --json-out).
--layers / --device shrink it for a dry run on the CPU."""
import argparse
import importlib
import json
import os
import statistics
import sys
import time

UNAVAILABLE = 3  # exit status: the configuration asked for cannot run on this machine (reason on stderr)
# Linears vt's synthetic FP8 model (and the published FP8 checkpoints) keep in bf16.
FP8_SKIP = ["lm_head", "in_proj_a", "in_proj_b"]


def unavailable(message):
    print(f"hf_decode.py: unavailable: {message}", file=sys.stderr, flush=True)
    sys.exit(UNAVAILABLE)


def choose_gdn(wanted):
    """Makes HF's Qwen3.5 module pick the GDN kernels asked for; must run before transformers'
    modeling_qwen3_5 is imported (its decorators resolve fla at import). Returns the name used."""
    if wanted == "torch":
        sys.modules["fla"] = None  # import fla -> ImportError: HF takes its torch path
        return "torch fallback"
    try:
        importlib.import_module("fla.ops.gated_delta_rule")
        import fla
        return f"fla {getattr(fla, '__version__', '?')}"
    except Exception as error:  # not installed, or its triton does not import
        if wanted == "fla":
            unavailable(f"--gdn fla: flash-linear-attention does not import ({type(error).__name__}: {error}); "
                        "carry the fla-core wheel (.whl, see scripts/gpu/peers_round.sh)")
        sys.modules["fla"] = None
        return "torch fallback"


def fp8_preflight(torch, device):
    """Everything HF's FP8 path needs, checked before the model is built. Returns the GEMM path."""
    import transformers
    if not device.startswith("cuda") or not torch.cuda.is_available():
        unavailable("--precision fp8 needs a CUDA GPU (HF's FP8 GEMMs are GPU kernels)")
    capability = torch.cuda.get_device_capability()
    if capability < (8, 9):
        unavailable(f"--precision fp8 needs compute capability >= 8.9, this GPU is {capability}")
    try:
        import triton
    except ImportError as error:
        unavailable(f"triton is not installed ({error}): HF's W8A8 block-FP8 matmul is a Triton kernel")
    from transformers.integrations import finegrained_fp8
    if not hasattr(finegrained_fp8, "load_finegrained_fp8_kernel"):
        # transformers 4.x: the Triton kernel ships inside transformers.
        return f"triton (in-tree, transformers {transformers.__version__}, triton {triton.__version__})"
    try:
        finegrained_fp8.load_finegrained_fp8_kernel()
    except Exception as error:
        unavailable(
            f"transformers {transformers.__version__} runs FP8Linear through the Hub kernel "
            f"kernels-community/finegrained-fp8 (version 4), loaded by the `kernels` package (0.16.x), and it did "
            f"not load: {type(error).__name__}: {error}. The lent GPU machine has no network (HF_HUB_OFFLINE="
            f"{os.environ.get('HF_HUB_OFFLINE')}) and no copy of it in its HF cache; PyPI has the `kernels` package "
            f"but not the kernel itself.")
    deepgemm = False
    try:
        deepgemm = bool(finegrained_fp8.is_deepgemm_loadable())
    except Exception:
        pass
    return (f"kernels-community/finegrained-fp8 (triton {triton.__version__})"
            + (", DeepGEMM where it loads" if deepgemm else ""))


def build_model(torch, layers, device, precision):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    # The 27B's layer pattern: three Gated DeltaNet layers, then one full-attention layer.
    config = Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=5120, num_hidden_layers=layers, num_attention_heads=24,
        num_key_value_heads=4, head_dim=256, intermediate_size=17408, linear_num_key_heads=16,
        linear_num_value_heads=48, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, max_position_embeddings=8192, rms_norm_eps=1e-6,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25})
    config._attn_implementation = "sdpa"
    # Built on the meta device and cast to bf16 there: materialising the float32 model first would
    # need 108 GB at the 27B (more than an H100 has).
    with torch.device("meta"):
        model = Qwen3_5ForCausalLM(config)
    model = model.to(torch.bfloat16)
    if precision == "fp8":
        from transformers import FineGrainedFP8Config
        from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear
        quantization = FineGrainedFP8Config(weight_block_size=(128, 128), modules_to_not_convert=FP8_SKIP)
        model = replace_with_fp8_linear(model, modules_to_not_convert=FP8_SKIP, quantization_config=quantization,
                                        pre_quantized=True)
    model = model.to_empty(device=device).eval()
    generator = torch.Generator(device=device).manual_seed(0)
    fp8_linears = 0
    with torch.no_grad():
        for module in model.modules():  # the RoPE buffers, left uninitialised by to_empty
            if hasattr(module, "inv_freq") and hasattr(module, "compute_default_rope_parameters"):
                inv_freq, _ = module.compute_default_rope_parameters(module.config)
                module.inv_freq = inv_freq.to(device)
                module.original_inv_freq = inv_freq.clone().to(device)
        for name, parameter in model.named_parameters():
            if parameter.dtype == torch.float8_e4m3fn:
                fp8_linears += 1
                for rows in parameter.data.split(4096):  # random codes, through a bf16 slice at a time
                    noise = torch.empty(rows.shape, dtype=torch.bfloat16, device=device)
                    rows.copy_(noise.normal_(0.0, 64.0, generator=generator).clamp_(-448.0, 448.0))
            elif name.endswith("weight_scale_inv"):
                parameter.uniform_(2e-5, 6e-5, generator=generator)  # as vt's synthetic FP8 scales
            elif parameter.dim() >= 2:
                parameter.normal_(0.0, 0.02, generator=generator)
            elif "A_log" in name:
                parameter.uniform_(0.0, 1.0, generator=generator)
            else:
                parameter.uniform_(-0.1, 0.1, generator=generator)
    if precision == "fp8" and fp8_linears == 0:
        raise RuntimeError("--precision fp8: no Linear became FP8Linear")
    return model, fp8_linears


def synchronize(torch, device):
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
    parser.add_argument("--precision", choices=["bf16", "fp8"], default="bf16")
    parser.add_argument("--gdn", choices=["auto", "fla", "torch"], default="auto",
                        help="Gated DeltaNet kernels: flash-linear-attention, HF's torch path, or fla where it imports")
    parser.add_argument("--json-out", help="also write the rows as JSON here")
    args = parser.parse_args()
    if args.precision == "fp8":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network there: fail the kernel look-up at once
    gdn = choose_gdn(args.gdn)
    import torch
    import transformers
    fp8_gemm = fp8_preflight(torch, args.device) if args.precision == "fp8" else None

    started = time.perf_counter()
    model, fp8_linears = build_model(torch, args.layers, args.device, args.precision)
    synchronize(torch, args.device)
    build_s = time.perf_counter() - started
    label = (f"hf transformers {transformers.__version__} {args.precision} (torch {torch.__version__}, sdpa, "
             f"GDN {gdn}" + (f", FP8 GEMM {fp8_gemm}" if fp8_gemm else "") + ")")
    print(f"{label}: {args.layers} layers built in {build_s:.1f} s"
          + (f", {fp8_linears} FP8 weights" if fp8_gemm else ""), flush=True)
    results = []
    for batch in [int(b) for b in args.batch.split(",")]:
        prompt = torch.randint(0, 248320, (batch, args.context), device=args.device)
        rounds = []
        with torch.no_grad():
            started = time.perf_counter()
            # logits_to_keep=1: the prompt's last position only (all 1,024 x 248,320 logits per sequence
            # would take 8 GB at batch 16 for nothing).
            out = model(input_ids=prompt, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
            synchronize(torch, args.device)
            prefill_s = time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(2):  # warm-up steps (fla compiles its decode kernel in the first)
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1:].argmax(-1)
            synchronize(torch, args.device)
            warmup_s = time.perf_counter() - started
            for _ in range(args.rounds):  # each round decodes further into the same sequences
                synchronize(torch, args.device)
                start = time.perf_counter()
                for _ in range(args.steps):
                    out = model(input_ids=token, past_key_values=cache, use_cache=True)
                    token = out.logits[:, -1:].argmax(-1)
                synchronize(torch, args.device)
                rounds.append((time.perf_counter() - start) * 1e3 / args.steps)
        ms = statistics.median(rounds)
        row = {"engine": "hf", "precision": args.precision, "batch": batch, "layers": args.layers,
               "context": args.context, "steps": args.steps, "ms_per_step": ms, "min_ms": min(rounds),
               "max_ms": max(rounds), "rounds": rounds, "tokens_per_second": batch * 1e3 / ms,
               "prefill_s": prefill_s, "warmup_s": warmup_s, "build_s": build_s, "attention": "sdpa",
               "gated_deltanet": gdn, "fp8_gemm": fp8_gemm, "torch": torch.__version__,
               "transformers": transformers.__version__}
        if args.device.startswith("cuda"):
            row["max_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
        results.append(row)
        print(f"| {label} | {batch} | {ms:.2f} ({min(rounds):.2f}..{max(rounds):.2f}) | {batch * 1e3 / ms:.1f} | "
              f"prefill {prefill_s:.1f} s, warm-up {warmup_s:.1f} s |", flush=True)
        del cache, out
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    if args.json_out:
        with open(args.json_out, "w") as out_file:
            json.dump(results, out_file)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
