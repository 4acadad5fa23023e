#!/usr/bin/env python3
"""The cuBLASLt peer for `vt bench gemm`, run ON the GPU machine in the same call: torch._scaled_mm
with the checkpoint's own FP8 format (activations 1x128, weights 128x128 blocks, fp32 scales;
layouts from shared/design/QWEN35.md) and per-tensor FP8, on the 27B decode shapes, timed like vt
(a CUDA graph of back-to-back GEMMs cycling through >= 256 MB of weight copies). Prints a table."""
import argparse
import torch

SHAPES = [("gdn.in_proj (qkv+z)", 16384, 5120), ("gdn.out_proj", 5120, 6144), ("attn.qkv (q+gate+k+v)", 14336, 5120),
          ("attn.o_proj", 5120, 6144), ("mlp.gate_up", 34816, 5120), ("mlp.down", 5120, 17408),
          ("lm_head", 248320, 5120)]


def time_graph(fn, copies, iters):
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(iters):
            fn(i % copies)
    graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return 1000.0 * start.elapsed_time(stop) / iters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", default="1,8,16,32,64,128")
    parser.add_argument("--iters", type=int, default=40)
    args = parser.parse_args()
    ms = [int(v) for v in args.m.split(",")]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| shape | N x K | M | torch._scaled_mm block 1x128/128x128 us | GB/s | per-tensor us | GB/s |")
    print("|---|---|---|---|---|---|---|")
    for name, n, k in SHAPES:
        copies = max(2, (256 << 20) // (n * k) + 1)
        weights = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
        w_scales = [torch.rand(n // 128, k // 128, device="cuda") * 1e-3 + 1e-3 for _ in range(copies)]
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            # A scales [M, K/128] column-major; B scales as the transposed view of [N/128, K/128].
            x_scales = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
            one = torch.ones((), device="cuda")

            def block(i):
                return torch._scaled_mm(x, weights[i].t(), scale_a=x_scales, scale_b=w_scales[i].t(),
                                        out_dtype=torch.bfloat16)

            def tensor(i):
                return torch._scaled_mm(x, weights[i].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            cells = []
            for fn in (block, tensor):
                try:
                    us = time_graph(fn, copies, args.iters)
                    cells += [f"{us:.1f}", f"{n * k / (us * 1e3):.0f}"]
                except Exception as error:  # cuBLASLt refuses some shapes (e.g. block scales at M = 1)
                    cells += [f"refused ({type(error).__name__})", "-"]
            print(f"| {name} | {n} x {k} | {m} | " + " | ".join(cells) + " |", flush=True)
        del weights, w_scales
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
