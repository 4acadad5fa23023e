#!/usr/bin/env python3
"""Issue 7's check: the FP8 GEMM rows of `vt profile decode --json` (own time per call, by shape)
against the same backend and shape timed alone by `vt bench gemm --json`. Prints a table and
fails when a row is off by more than 10%, or when the shares do not sum to the step within 2%.
Usage: profile_vs_gemm.py PROFILE.json [PROFILE.json ...] GEMM.json"""
import json
import sys

*profiles, gemm_path = sys.argv[1:]
bench = {}
for row in json.load(open(gemm_path))["rows"]:
    bench[(row["backend"], row["m"], row["n"], row["k"])] = row["us"]
failures = 0
for path in profiles:
    report = json.load(open(path))
    ok = abs(report["share_sum"] - 1.0) <= 0.02
    failures += not ok
    print(f"\n{path}: step {report['step_us']:.1f} us, shares sum to {100 * report['share_sum']:.1f}% "
          f"({'ok' if ok else 'OFF BY MORE THAN 2%'}), idle {100 * report['idle_fraction']:.1f}%")
    print("| op | backend | M x N x K | kernels | calls/step | profile us/call | bench us | diff |")
    print("|---|---|---|---|---|---|---|---|")
    # One GEMM call may be several kernels (cuBLASLt: vt's scale transpose, its GEMM, maybe a
    # split-K reduction): the rows of one shape and backend are summed, calls counted once.
    calls = {}
    for row in report["kernels"]:
        if not row["group"].startswith("gemm.") or row["calls_per_step"] <= 0:
            continue
        dims = row["where"].split("x")
        if len(dims) != 3 or not all(d.isdigit() for d in dims):
            continue
        key = (row["backend"], row["where"])
        entry = calls.setdefault(key, {"op": row["op"], "us": 0.0, "calls": 0.0, "kernels": []})
        entry["us"] += row["us_per_step"]
        entry["calls"] = max(entry["calls"], row["calls_per_step"])
        entry["kernels"].append(row["name"].split(" [")[0][:28])
    for (backend, where), entry in sorted(calls.items(), key=lambda item: -item[1]["us"]):
        m, n, k = map(int, where.split("x"))
        us = entry["us"] / entry["calls"]
        kernels = ", ".join(entry["kernels"])
        # vt's FP8 backends are "fp8_<name>" in `vt bench gemm`; cuBLASLt's dense GEMM "cublaslt_bf16".
        reference = bench.get((backend if backend.startswith("cublaslt_") else "fp8_" + backend, m, n, k))
        if reference is None:
            print(f"| {entry['op']} | {backend} | {where} | {kernels} | {entry['calls']:.0f} | {us:.1f} | - | - |")
            continue
        diff = us / reference - 1.0
        bad = abs(diff) > 0.10
        failures += bad
        print(f"| {entry['op']} | {backend} | {where} | {kernels} | {entry['calls']:.0f} | {us:.1f} | "
              f"{reference:.1f} | {100 * diff:+.0f}%{' (>10%)' if bad else ''} |")
sys.exit(1 if failures else 0)
