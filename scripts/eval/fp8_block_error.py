#!/usr/bin/env python3
"""The FP8 (e4m3) rounding error of a GGUF model's output layer under each scale-block shape.

Usage: fp8_block_error.py MODEL.gguf [ROWSxCOLS ...]   (default: the shapes of the drift report)
Needs numpy, gguf and ml_dtypes (PyPI). The output layer is `output.weight`, or the tied
`token_embd.weight`, dequantized as stored. Each block's scale is max|w| / 448 (vt's rule, as
in src/model/linear.cpp), every weight is rounded to e4m3 (round to nearest even) and back. Prints,
per block shape: the relative L2 error of the whole matrix, the median and 99th percentile of the
rows' relative errors, the share of rows whose error exceeds 5%, the share of non-zero weights that
land below e4m3's smallest normal (2^-6 after scaling) or round to zero, then the relative error of
the columns (input dimensions) with the largest norms, how much of the matrix they hold, and
their error per block shape.
"""
import sys

import gguf
import ml_dtypes
import numpy as np

DEFAULT_SHAPES = ["128x128", "16x128", "4x128", "2x128", "1x128", "1x576"]
TOP_COLUMNS = 6  # columns by norm, relative to the median column's
RANKS = (1, 4, 8, 16, 32, 64, 128)


def output_layer(path):
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    tensor = tensors.get("output.weight") or tensors["token_embd.weight"]
    rows, cols = int(tensor.shape[1]), int(tensor.shape[0])  # GGUF lists the fastest dimension first
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(rows, cols).astype(np.float32)
    return tensor.name, tensor.tensor_type.name, values


def quantize(w, block_rows, block_cols):
    rows, cols = w.shape
    block_rows, block_cols = min(block_rows, rows), min(block_cols, cols)
    out = np.empty_like(w)
    subnormal = zeroed = 0
    for r in range(0, rows, block_rows):
        for c in range(0, cols, block_cols):
            block = w[r:r + block_rows, c:c + block_cols]
            scale = max(float(np.abs(block).max()), 1e-10) / 448.0
            scaled = block / scale
            codes = scaled.astype(ml_dtypes.float8_e4m3fn)
            out[r:r + block_rows, c:c + block_cols] = codes.astype(np.float32) * scale
            nonzero = block != 0
            subnormal += int(np.count_nonzero(nonzero & (np.abs(scaled) < 2.0 ** -6)))
            zeroed += int(np.count_nonzero(nonzero & (codes.astype(np.float32) == 0)))
    return out, subnormal, zeroed


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    name, kind, w = output_layer(sys.argv[1])
    shapes = sys.argv[2:] or DEFAULT_SHAPES
    nonzero = int(np.count_nonzero(w))
    print(f"{name} ({kind}, {w.shape[0]} x {w.shape[1]})")
    print("| block | rel L2 | row error median | row error p99 | rows > 5% | below normal | zeroed |")
    print("|---|---|---|---|---|---|---|")
    row_norms = np.linalg.norm(w, axis=1)
    column_norms = np.linalg.norm(w, axis=0)
    top = np.argsort(-column_norms)[:TOP_COLUMNS]
    column_errors = {}
    for shape in shapes:
        block_rows, block_cols = (int(x) for x in shape.split("x"))
        q, subnormal, zeroed = quantize(w, block_rows, block_cols)
        error = np.linalg.norm(q - w) / np.linalg.norm(w)
        row_error = np.linalg.norm(q - w, axis=1) / np.maximum(row_norms, 1e-30)
        column_errors[shape] = np.linalg.norm(q - w, axis=0)[top] / np.maximum(column_norms[top], 1e-30)
        print(f"| {shape} | {error:.4%} | {np.median(row_error):.3%} | {np.percentile(row_error, 99):.3%} | "
              f"{np.mean(row_error > 0.05):.3%} | {subnormal / nonzero:.3%} | {zeroed / nonzero:.4%} |")
    ranked = np.sort(column_norms)[::-1]
    squares = ranked ** 2
    print()
    print("| largest columns | " + " | ".join(str(r) for r in RANKS) + " |")
    print("|---|" + "---|" * len(RANKS))
    print("| the r-th's norm / the median column's | " +
          " | ".join(f"{ranked[r - 1] / np.median(column_norms):.2f}" for r in RANKS) + " |")
    print("| share of the squared norm in the r largest | " +
          " | ".join(f"{squares[:r].sum() / squares.sum():.1%}" for r in RANKS) + " |")
    print()
    print("| block | " + " | ".join(f"column {c} ({column_norms[c] / np.median(column_norms):.1f}x)" for c in top) + " |")
    print("|---|" + "---|" * len(top))
    for shape, errors in column_errors.items():
        print(f"| {shape} | " + " | ".join(f"{e:.2%}" for e in errors) + " |")


if __name__ == "__main__":
    main()
