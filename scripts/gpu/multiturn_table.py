#!/usr/bin/env python3
"""The multiturn workload's table from `vt bench serve --json` reports: per concurrency, a row for each
prefix-cache setting (prompt and cached tokens, hit rates, TTFT p50/p90 by turn, the cache's snapshot
memory after the run) and the off/on TTFT ratio. Markdown on stdout.

  multiturn_table.py [LABEL=]REPORT.json ...    (REPORT.json "-": stdin)

A report from a server at --url labels its runs "server": LABEL= names its setting (on, off);
a report from the in-process server (--prefix-cache on,off) labels its own runs."""
import json
import sys


def load_runs(arguments):
    runs = []
    for argument in arguments:
        label, _, path = argument.rpartition("=")
        try:
            report = json.load(sys.stdin if path == "-" else open(path))
        except (OSError, ValueError) as error:
            print(f"no report {path}: {error}")
            continue
        for run in report.get("runs", []):
            if run.get("workload") != "multiturn" or "multiturn" not in run:
                continue
            setting = run.get("prefix_cache", {}).get("setting", "server")
            runs.append((label if label and setting == "server" else setting, run))
    return runs


def ttft(turn):
    if not turn or turn["ok"] == 0:
        return "-"
    return f"{turn['ttft_ms']['p50']:.1f} / {turn['ttft_ms']['p90']:.1f}"


def ratio(slow, fast):
    return f"{slow / fast:.2f}x" if fast > 0 else "-"


def main():
    runs = load_runs(sys.argv[1:])
    if not runs:
        print("no multiturn runs")
        return
    print("| cache | clients | sessions x turns | prompt tok | cached tok | hit rate | of reusable | "
          "TTFT turn 1 p50/p90 ms | turn 2 | turn 3+ | snapshots MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for concurrency in sorted({run["concurrency"] for _, run in runs}):
        at = {label: run for label, run in runs if run["concurrency"] == concurrency}
        for label, run in at.items():
            multiturn = run["multiturn"]
            by_turn = multiturn["by_turn"]
            print(f"| {label} | {concurrency} | {multiturn['sessions']} x {multiturn['turns']} | "
                  f"{multiturn['prompt_tokens']} | {multiturn['cached_tokens']} | {100 * multiturn['hit_rate']:.1f}% | "
                  f"{100 * multiturn['reusable_hit_rate']:.1f}% | {ttft(by_turn[0] if by_turn else None)} | "
                  f"{ttft(by_turn[1] if len(by_turn) > 1 else None)} | "
                  f"{ttft(multiturn['turns_3plus'] if len(by_turn) > 2 else None)} | "
                  f"{run['prefix_cache']['snapshot_bytes'] / 2**20:.1f} |")
        if "on" in at and "off" in at:
            on, off = at["on"]["multiturn"]["turns_3plus"], at["off"]["multiturn"]["turns_3plus"]
            print(f"| off/on | {concurrency} | | | | | | | | {ratio(off['ttft_ms']['p50'], on['ttft_ms']['p50'])} / "
                  f"{ratio(off['ttft_ms']['p90'], on['ttft_ms']['p90'])} | |")


if __name__ == "__main__":
    main()
