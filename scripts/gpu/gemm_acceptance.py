#!/usr/bin/env python3
"""Issue 6's GEMM acceptance table from one call's logs: `vt bench gemm` (markdown, as
scripts/gpu/gemm_round.sh saves it) and scripts/gpu/scaled_mm_peer.py's table, measured in the
same call. Per decode shape and M (default 1, 8, 16): the chosen FP8 backend (the fastest in the
bench; for the output projections also the fastest with the norm after it), its us, its share of
the read bandwidth vt measured at start-up ("of bw"), its share of a pure read of the same weights
launched the same way ("of read"), and its speedup over cuBLASLt's block-scaled GEMM (the bench's
cublaslt_fp8 peer: the fastest of its algorithms, scales in its own layout; vt's fp8_cublaslt
backend in older logs; and torch._scaled_mm with the same scales) in that call.

usage: gemm_acceptance.py GEMM_MD [SCALED_MM_MD] [--m 1,8,16]"""
import argparse
import re
import sys


def table_rows(text):
    """The rows of every markdown table in text as dicts keyed by the header's names."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r"-+", c) for c in cells):
            rows.append(dict(zip(header, cells)))
    return rows


def number(text):
    try:
        return float(str(text).rstrip("%"))
    except ValueError:
        return None


def acceptance(gemm_text, peer_text="", ms=(1, 8, 16)):
    """The acceptance rows: one per chosen backend (marked '*' by the bench) at each M in ms."""
    bench = [r for r in table_rows(gemm_text) if "backend" in r]
    peers = {(r["shape"], r["M"]): r for r in table_rows(peer_text) if "shape" in r and "M" in r}
    scaled_mm_column = next((c for r in peers.values() for c in r if c.startswith("torch._scaled_mm")), None)
    out = []
    for row in bench:
        if not row["backend"].endswith(" *") or int(row["M"]) not in ms:
            continue
        backend = row["backend"][:-2]
        with_norm = backend.endswith("+norm")
        same = [r for r in bench if r["shape"] == row["shape"] and r["M"] == row["M"]]
        # The bench's fair peer (cuBLASLt's fastest algorithm, scales in its own layout) where it has
        # one; older logs only have vt's fp8_cublaslt backend.
        suffix = "+norm" if with_norm else ""
        cublas = next((r for r in same if r["backend"] == "cublaslt_fp8" + suffix), None) or next(
            (r for r in same if r["backend"] == "fp8_cublaslt" + suffix), None)
        floor = next((r for r in same if r["backend"] == "read_floor"), None)
        us = number(row["us"])
        cublas_us = number(cublas["us"]) if cublas else None
        peer = peers.get((row["shape"], row["M"]))
        scaled_us = number(peer[scaled_mm_column]) if peer and scaled_mm_column and not with_norm else None
        out.append({
            "shape": row["shape"], "n_x_k": row["N x K"], "m": int(row["M"]), "backend": backend, "us": us,
            "of_bw": number(row["of bw"]), "of_read": number(row["of read"]),
            "read_floor_us": number(floor["us"]) if floor else None,
            "cublaslt_fp8_us": cublas_us, "x_cublaslt_fp8": cublas_us / us if cublas_us else None,
            "scaled_mm_us": scaled_us, "x_scaled_mm": scaled_us / us if scaled_us else None,
        })
    return out


def markdown(rows):
    def cell(value, form):
        return "-" if value is None else form.format(value)
    lines = ["| shape | N x K | M | chosen backend | us | of bw | of read | read_floor us | fp8_cublaslt us | "
             "x fp8_cublaslt | torch._scaled_mm us | x _scaled_mm |", "|" + "---|" * 12]
    for r in rows:
        lines.append("| " + " | ".join([
            r["shape"], r["n_x_k"], str(r["m"]), r["backend"], cell(r["us"], "{:.1f}"), cell(r["of_bw"], "{:.0f}%"),
            cell(r["of_read"], "{:.0f}%"), cell(r["read_floor_us"], "{:.1f}"), cell(r["cublaslt_fp8_us"], "{:.1f}"),
            cell(r["x_cublaslt_fp8"], "{:.2f}"), cell(r["scaled_mm_us"], "{:.1f}"), cell(r["x_scaled_mm"], "{:.2f}")
        ]) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gemm_md")
    parser.add_argument("scaled_mm_md", nargs="?")
    parser.add_argument("--m", default="1,8,16")
    args = parser.parse_args()
    ms = tuple(int(m) for m in args.m.split(","))
    peer = open(args.scaled_mm_md).read() if args.scaled_mm_md else ""
    rows = acceptance(open(args.gemm_md).read(), peer, ms)
    if not rows:
        sys.exit(f"gemm_acceptance.py: no chosen rows at M = {args.m} in {args.gemm_md}")
    print(markdown(rows))


if __name__ == "__main__":
    main()
