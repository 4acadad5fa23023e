#!/usr/bin/env python3
"""Prints the tables of `vt bench decode --json` reports: decode_table.py FILE.json... (or a folder)."""
import glob
import json
import os
import sys

paths = []
for argument in sys.argv[1:]:
    paths += sorted(glob.glob(os.path.join(argument, "*.json"))) if os.path.isdir(argument) else [argument]
for path in paths:
    try:
        report = json.load(open(path))
    except Exception as error:
        print(path, "unreadable:", error)
        continue
    if "rows" not in report:
        continue
    print(f"\n{os.path.basename(path)}: {report['model']}, TP {report.get('tensor_parallel', 1)}, "
          f"context {report.get('context')}, bw {report['bandwidth_gbps']:.0f} GB/s per GPU")
    print("| batch | ms/step | tok/s | floor ms | of floor |")
    print("|---|---|---|---|---|")
    for row in report["rows"]:
        print(f"| {row['batch']} | {row['ms_per_step']:.3f} | {row['tokens_per_second']:.1f} | "
              f"{row['floor_ms']:.3f} | {100 * row['floor_fraction']:.0f}% |")
