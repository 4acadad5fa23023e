#!/usr/bin/env python3
"""scripts/gpu/gemm_acceptance.py on rows of a real `vt bench gemm` table and torch._scaled_mm
peer table (H200, 2026-12-03): the chosen rows, their floor and cuBLASLt peers, the ratios, and the
refused M = 1 peer; the bench's fair cuBLASLt peer preferred where present."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu"))
import gemm_acceptance  # noqa: E402

BENCH = """qwen3.5-27b, read bandwidth 4466 GB/s; us per GEMM in a graph of 40

| shape | N x K | M | backend | us | GB/s | of bw | of read | x cuBLASLt bf16 | x cuBLASLt fp8 | kernel ran |
|---|---|---|---|---|---|---|---|---|---|---|
| attn.o_proj | 5120 x 6144 | 1 | fp8_gemv_splitk * | 9.7 | 3232 | 72% | 91% | 1.85 | - | 40/40 |
| attn.o_proj | 5120 x 6144 | 1 | read_floor | 8.9 | 3547 | 79% | 100% | 2.03 | - | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | fp8_wgmma | 12.2 | 2584 | 58% | 72% | 1.47 | 1.29 | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | fp8_wgmma_cluster * | 11.9 | 2635 | 59% | 73% | 1.50 | 1.32 | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | fp8_cublaslt | 15.7 | 2003 | 45% | 56% | 1.14 | 1.00 | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | cublaslt_bf16 | 18.0 | 3503 | 78% | 49% | 1.00 | 0.87 | (not counted) |
| attn.o_proj | 5120 x 6144 | 16 | read_floor | 8.7 | 3597 | 81% | 100% | 2.05 | 1.80 | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | fp8_cublaslt+norm | 15.4 | 2042 | 46% | 57% | 1.17 | 1.00 | 40/40 |
| attn.o_proj | 5120 x 6144 | 16 | fp8_wgmma_partials+norm * | 11.9 | 2655 | 59% | 74% | 1.52 | 1.29 | 40/40 |
| attn.o_proj | 5120 x 6144 | 32 | fp8_wgmma_cluster * | 14.6 | 2150 | 48% | 60% | 1.24 | 1.30 | 40/40 |
"""
PEER = """torch 2.11.0+cu130, NVIDIA H200
| shape | N x K | M | torch._scaled_mm block 1x128/128x128 us | GB/s | per-tensor us | GB/s |
|---|---|---|---|---|---|---|
| attn.o_proj | 5120 x 6144 | 1 | refused (RuntimeError) | - | 10.4 | 3015 |
| attn.o_proj | 5120 x 6144 | 16 | 14.4 | 2183 | 10.2 | 3097 |
"""


def main():
    rows = gemm_acceptance.acceptance(BENCH, PEER, (1, 16))
    got = [(r["m"], r["backend"]) for r in rows]
    assert got == [(1, "fp8_gemv_splitk"), (16, "fp8_wgmma_cluster"), (16, "fp8_wgmma_partials+norm")], got
    m1, plain, norm = rows
    assert m1["cublaslt_fp8_us"] is None and m1["scaled_mm_us"] is None and m1["read_floor_us"] == 8.9, m1
    assert plain["of_read"] == 73 and plain["of_bw"] == 59 and plain["read_floor_us"] == 8.7, plain
    assert abs(plain["x_cublaslt_fp8"] - 15.7 / 11.9) < 1e-9 and abs(plain["x_scaled_mm"] - 14.4 / 11.9) < 1e-9, plain
    # With the norm: its peer is cuBLASLt with the same norm; torch._scaled_mm has no such row.
    assert abs(norm["x_cublaslt_fp8"] - 15.4 / 11.9) < 1e-9 and norm["scaled_mm_us"] is None, norm
    table = gemm_acceptance.markdown(rows).splitlines()
    assert len(table) == 5 and "| 1.32 | 14.4 | 1.21 |" in table[3], table
    assert gemm_acceptance.acceptance(BENCH, PEER, (64,)) == []
    # A bench with the fair peer rows (cuBLASLt's fastest algorithm, its own scale layout): those
    # are the peer, not vt's fp8_cublaslt backend (made-up numbers).
    fair = BENCH.replace(
        "| attn.o_proj | 5120 x 6144 | 16 | read_floor |",
        "| attn.o_proj | 5120 x 6144 | 16 | cublaslt_fp8 | 13.0 | 2420 | 54% | 67% | 1.38 | 1.00 | (not counted) |\n"
        "| attn.o_proj | 5120 x 6144 | 16 | cublaslt_fp8+norm | 13.5 | 2330 | 52% | 64% | 1.33 | 1.00 | (not counted) |\n"
        "| attn.o_proj | 5120 x 6144 | 16 | read_floor |")
    _, plain, norm = gemm_acceptance.acceptance(fair, PEER, (1, 16))
    assert plain["cublaslt_fp8_us"] == 13.0 and norm["cublaslt_fp8_us"] == 13.5, (plain, norm)
    print("gemm_acceptance: ok")


if __name__ == "__main__":
    main()
