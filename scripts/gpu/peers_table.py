#!/usr/bin/env python3
"""The table of one scripts/gpu/peers_round.sh call, from its log folder: decode of the synthetic
Qwen3.5-27B, vt (`vt bench decode --json`, the batch list repeated once per round, so each batch
has one row per round) beside HF transformers (scripts/gpu/hf_decode.py --json-out) at the same
precision, each cell the median ms/step of the rounds with their min..max and tok/s; vt over the
fastest HF at the same precision; the GEMM peers (`vt bench gemm` and torch._scaled_mm through
gemm_acceptance.py: the chosen backend's speedup over cuBLASLt's block-scaled FP8, range over the
27B's decode shapes, per M); and each part's result and wall time.

usage: peers_table.py LOGS_DIR"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gemm_acceptance  # noqa: E402  (beside this file)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def load_json(text):
    """A JSON document, or the last one in text (after any log lines)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    for start in [i for i, c in enumerate(text) if c in "{[" and (i == 0 or text[i - 1] == "\n")][::-1]:
        try:
            return json.loads(text[start:])
        except ValueError:
            continue
    return None


def cell_text(text):
    return str(text).replace("|", "/").replace("\n", " ")


def summarize(rows):
    """{batch: (median ms, min, max, rounds, median floor fraction or None)} from per-round rows."""
    by_batch = {}
    for row in rows:
        by_batch.setdefault(int(row["batch"]), []).append(row)
    out = {}
    for batch, group in by_batch.items():
        if "rounds" in group[0]:  # hf_decode.py: one row per batch holding its rounds
            times = [t for r in group for t in r["rounds"]]
        else:  # vt: one row per round
            times = [r["ms_per_step"] for r in group]
        floors = [r["floor_fraction"] for r in group if "floor_fraction" in r]
        out[batch] = (statistics.median(times), min(times), max(times), len(times),
                      statistics.median(floors) if floors else None)
    return out


def decode_cell(stats, batch):
    if batch not in stats:
        return "-"
    ms, low, high, _, floor = stats[batch]
    rate = batch * 1e3 / ms
    text = f"{ms:.2f} ({low:.2f}..{high:.2f}) ms, {rate:,.0f} tok/s" if rate >= 100 else \
        f"{ms:.2f} ({low:.2f}..{high:.2f}) ms, {rate:.1f} tok/s"
    return text + (f", {100 * floor:.0f}% of floor" if floor else "")


def parts(logs):
    rows = []
    for line in (read(os.path.join(logs, "parts.tsv")) or "").splitlines():
        fields = line.split("\t")
        if len(fields) >= 3:
            rows.append(fields[:3])
    return rows


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    logs = sys.argv[1]
    results = {name: result for name, result, _ in parts(logs)}
    gpu = (read(os.path.join(logs, "gpu.txt")) or "GPU ?").strip().splitlines()[0]
    commit = (read(os.path.join(logs, "commit.txt")) or "?").strip()
    settings = load_json(read(os.path.join(logs, "settings.json"))) or {}
    batches = sorted({int(b) for key in ("vt_batches", "hf_batches") for b in str(settings.get(key, "1,16")).split(",")})

    engines = []  # (model, precision, engine, kernels, stats or None, note)
    for name, model, precision, kernels in (
            ("vt_fp8", "Qwen3.5-27B", "FP8", "W8A8 128x128 blocks, tuned GEMM plan, CUDA graphs"),
            ("vt_bf16", "Qwen3.5-27B", "BF16", "cuBLASLt BF16, CUDA graphs"),
            ("vt_35b_fp8", "Qwen3.5-35B-A3B", "FP8", "W8A8 128x128 blocks, tuned GEMM plan, CUDA graphs")):
        report = load_json(read(os.path.join(logs, f"{name}.out")))
        if isinstance(report, dict) and report.get("rows"):
            engines.append((model, precision, f"vt {commit}", kernels, summarize(report["rows"]), None))
        elif name in results:
            engines.append((model, precision, f"vt {commit}", kernels, None, results[name]))
    for name in ("hf_fp8", "hf_bf16_fla", "hf_bf16_torch", "hf_bf16"):
        rows = load_json(read(os.path.join(logs, f"{name}.json")))
        precision = "FP8" if "fp8" in name else "BF16"
        if isinstance(rows, list) and rows:
            first = rows[0]
            kernels = f"sdpa, GDN {first['gated_deltanet']}" + (f", {first['fp8_gemm']}" if first.get("fp8_gemm") else "")
            engines.append(("Qwen3.5-27B", precision, f"HF transformers {first['transformers']} (torch {first['torch']})",
                            kernels, summarize(rows), None))
        elif name in results:
            engines.append(("Qwen3.5-27B", precision, "HF transformers", "", None, results[name]))
    # The 27B's FP8 rows, then its BF16 rows, vt over HF, then the other models.
    engines.sort(key=lambda e: (e[0] != "Qwen3.5-27B", e[1] != "FP8"))

    steps = f"vt {settings.get('vt_steps', '?')} steps a round, HF {settings.get('hf_steps', '?')}"
    print(f"\n## Peers in one call: {gpu}, vt {commit}, context {settings.get('context', '?')}")
    if engines:
        decode_table(engines, batches, settings, steps)
    gemm_table(logs)
    print("\n| part | result | wall s |\n|---|---|---|")
    for name, result, seconds in parts(logs):
        print(f"| {name} | {cell_text(result)} | {seconds} |")


def decode_table(engines, batches, settings, steps):
    print(f"Decode, synthetic models at the real shapes (random weights): ms/step, median of {settings.get('rounds', '?')} "
          f"rounds (min..max; {steps}), tok/s, vt's share of its floor. vt: `vt bench decode`; HF: its forward loop "
          "with its cache after a 1,024-token prefill (scripts/gpu/hf_decode.py). Parts that did not run: the last "
          "table.\n")
    print("| model | engine | weights | kernels | " + " | ".join(f"batch {b}" for b in batches) + " |")
    print("|---|---|---|---|" + "---|" * len(batches))

    def print_row(model, precision, engine, kernels, stats, note):
        if stats is None:
            short = cell_text(note)
            cells = [short if len(short) <= 90 else short[:87] + "..."] + ["-"] * (len(batches) - 1)
        else:
            cells = [decode_cell(stats, b) for b in batches]
        print(f"| {model} | {engine} | {precision} | {cell_text(kernels)} | " + " | ".join(cells) + " |")
    for engine in engines:
        if engine[0] == "Qwen3.5-27B":
            print_row(*engine)
    for precision in ("FP8", "BF16"):
        same = [e for e in engines if e[0] == "Qwen3.5-27B" and e[1] == precision and e[4]]
        vt = next((e[4] for e in same if e[2].startswith("vt")), None)
        hf = [e[4] for e in same if e[2].startswith("HF")]
        if not vt or not hf:
            continue
        cells = []
        for b in batches:
            fastest = min((s[b][0] for s in hf if b in s), default=None)
            cells.append(f"{fastest / vt[b][0]:.1f}x" if fastest and b in vt else "-")
        print(f"| Qwen3.5-27B | vt over the fastest HF | {precision} | same weights and shape | " + " | ".join(cells) + " |")
    for engine in engines:
        if engine[0] != "Qwen3.5-27B":
            print_row(*engine)


def gemm_table(logs):
    gemm_md = read(os.path.join(logs, "gemm", "gemm_27b.md"))
    if gemm_md:
        peer_md = read(os.path.join(logs, "gemm", "scaled_mm_peer.md")) or ""
        try:
            rows = gemm_acceptance.acceptance(gemm_md, peer_md, (1, 8, 16))
        except Exception as error:  # a log cut short: say so, keep the other tables
            print(f"\nGEMM: gemm/gemm_27b.md unreadable ({type(error).__name__}: {error})")
            return
        print("\nGEMM, the 27B's decode shapes (`vt bench gemm`): the chosen FP8 backend per shape and M, its speedup "
              "over cuBLASLt's block-scaled FP8 (the fastest of up to 16 of its algorithms, scales in its own layout) "
              "and over torch._scaled_mm, and its share of a pure read of the same weights; range over the shapes "
              "(full table above and in gemm/acceptance.md).\n")
        print("| M | rows | x cuBLASLt fp8 | x torch._scaled_mm | of read |")
        print("|---|---|---|---|---|")

        def span(values, form):
            values = [v for v in values if v is not None]
            return f"{form.format(min(values))}..{form.format(max(values))}" if values else "-"
        for m in (1, 8, 16):
            at = [r for r in rows if r["m"] == m]
            print(f"| {m} | {len(at)} | {span([r['x_cublaslt_fp8'] for r in at], '{:.2f}')} | "
                  f"{span([r['x_scaled_mm'] for r in at], '{:.2f}')} | {span([r['of_read'] for r in at], '{:.0f}%')} |")


if __name__ == "__main__":
    main()
