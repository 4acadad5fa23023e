#!/usr/bin/env python3
"""`vt bench serve --workload multiturn` against the in-process server on SmolLM2 (CPU), with the
prefix cache on and off (a fresh server each): 4 sessions x 3 turns after a shared ~200-token
system prompt. Every request ends with a status (200 here); each turn's prompt holds the previous
one (prompt tokens grow turn by turn, reusable tokens are counted from turn 2); the report has the
per-turn fields (tokens, hit rates, TTFT p50/p90/p99), the server's prefix-cache counters, the
on/off comparison, and each server holds nothing once the load is gone. The cache serves tokens:
cached tokens and server hits with it on, none with it off.

  test_bench_serve_multiturn.py VT_BINARY [MODEL.gguf]

Exits 77 (skipped) when the model is not fetched, unless VT_REQUIRE_SMOLLM2=1."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SESSIONS, TURNS = 4, 3
TURN_FIELDS = ("turn", "requests", "ok", "prompt_tokens", "cached_tokens", "reusable_tokens", "hit_rate", "ttft_ms")


def main():
    vt = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cache/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        if os.environ.get("VT_REQUIRE_SMOLLM2") == "1":
            sys.exit(f"{model} is missing (scripts/fetch-smollm2.sh)")
        print(f"skipped: {model} is missing (scripts/fetch-smollm2.sh)")
        sys.exit(77)
    result = subprocess.run([vt, "--threads", "2", "bench", "serve", "--model", model, "--workload", "multiturn",
                             "--concurrency", str(SESSIONS), "--turns", str(TURNS), "--system-tokens", "160",
                             "--user-tokens", "24", "--multiturn-tokens", "4", "--think-time", "0.1",
                             "--prefix-cache", "on,off", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        sys.exit(f"vt bench serve failed ({result.returncode}):\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    failures = []

    def check(condition, message):
        if not condition:
            failures.append(message)

    runs = {run["prefix_cache"]["setting"]: run for run in report["runs"]}
    check(sorted(runs) == ["off", "on"], f"runs for prefix cache {sorted(runs)}, expected on and off")
    for setting, run in runs.items():
        where = f"cache {setting}"
        check(run["requests"] == SESSIONS * TURNS and run["status_counts"] == {"200": SESSIONS * TURNS},
              f"{where}: {run['requests']} requests, statuses {run['status_counts']}")
        for field in ("queries", "hits", "snapshot_bytes"):
            check(field in run["prefix_cache"], f"{where}: no prefix_cache.{field}")
        multiturn = run["multiturn"]
        check(multiturn["sessions"] == SESSIONS and multiturn["turns"] == TURNS,
              f"{where}: {multiturn['sessions']} sessions of {multiturn['turns']} turns")
        for field in ("prompt_tokens", "cached_tokens", "hit_rate", "reusable_tokens", "reusable_cached_tokens",
                      "reusable_hit_rate", "by_turn", "turns_3plus"):
            check(field in multiturn, f"{where}: no multiturn.{field}")
        by_turn = multiturn["by_turn"]
        check([turn["turn"] for turn in by_turn] == list(range(1, TURNS + 1)), f"{where}: turns {by_turn}")
        for turn in by_turn + [multiturn["turns_3plus"]]:
            missing = [field for field in TURN_FIELDS if field not in turn]
            check(not missing, f"{where}, turn {turn.get('turn')}: no {missing}")
            if missing:
                continue
            check(turn["requests"] == turn["ok"] > 0, f"{where}, turn {turn['turn']}: {turn['ok']} of {turn['requests']} ok")
            check(all(turn["ttft_ms"][p] > 0 for p in ("p50", "p90", "p99")),
                  f"{where}, turn {turn['turn']}: TTFT {turn['ttft_ms']}")
        if len(by_turn) == TURNS:
            # Each turn resends the history: prompts grow, and from turn 2 the previous turn's prompt
            # and completion are reusable (no more than the prompt itself).
            prompts = [turn["prompt_tokens"] for turn in by_turn]
            check(prompts[0] > 0 and prompts == sorted(set(prompts)), f"{where}: prompt tokens by turn {prompts}")
            check(by_turn[0]["reusable_tokens"] == 0, f"{where}: turn 1 has reusable tokens")
            for turn in by_turn[1:]:
                check(0 < turn["reusable_tokens"] <= turn["prompt_tokens"],
                      f"{where}, turn {turn['turn']}: {turn['reusable_tokens']} reusable of {turn['prompt_tokens']}")
        if setting == "on":
            # The prefix-cache issue's acceptance: >= 90% of the reusable prompt tokens hit (99.7%
            # measured here: the cache point at each prompt's end, so only the new message misses).
            check(multiturn["cached_tokens"] > 0 and multiturn["reusable_hit_rate"] >= 0.9,
                  f"{where}: {multiturn['cached_tokens']} cached tokens, reusable hit rate {multiturn['reusable_hit_rate']}")
            check(run["prefix_cache"]["hits"] > 0, f"{where}: server hits {run['prefix_cache']}")
        if setting == "off":
            check(multiturn["cached_tokens"] == 0, f"{where}: {multiturn['cached_tokens']} cached tokens")
    comparison = report["prefix_cache_comparison"]
    check(len(comparison) == 1 and all(p in comparison[0]["ttft_3plus_off_over_on"] for p in ("p50", "p90", "p99")),
          f"prefix_cache_comparison: {comparison}")
    # Turns 3+ are faster to their first token with the cache: 6.2x at p50 measured on 2 shared
    # cores (2026-12-05; the 8K-history GPU run: 32x). With ~200-token histories the ratio is bounded
    # by the prompt sizes, and queueing on a loaded CI machine moves it: 2x catches a cache that
    # does not serve (~1x) without failing on that noise.
    if comparison:
        ratio = comparison[0]["ttft_3plus_off_over_on"].get("p50", 0)
        check(ratio >= 2, f"TTFT p50 of turns 3+ only {ratio}x lower with the cache on")
        print(f"reusable hit rate {runs['on']['multiturn']['reusable_hit_rate']:.3f}, "
              f"TTFT p50 turns 3+ {ratio}x lower with the cache on")
    check([server["prefix_cache"] for server in report["servers"]] == ["on", "off"], f"servers: {report['servers']}")
    for server in report["servers"]:
        after = server["server_after"]
        for gauge in ("vt_requests_running", "vt_requests_waiting", "vt_state_slots_used",
                      "vt_http_requests_in_flight"):
            check(after.get(gauge, -1) == 0, f"cache {server['prefix_cache']}: {gauge} = {after.get(gauge)} after the load")
        # KV blocks left are those only the prefix cache holds (saved prompts share their blocks).
        check(after.get("vt_kv_blocks_used", -1) == after.get("vt_prefix_cache_blocks", 0),
              f"cache {server['prefix_cache']}: KV blocks held by requests after the load: {after}")
    # scripts/gpu/serve_bench.sh's last table, from this report.
    table = subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gpu/multiturn_table.py"), "-"],
                           input=result.stdout, capture_output=True, text=True)
    for row in ("| on | 4 |", "| off | 4 |", "| off/on | 4 |"):
        check(row in table.stdout, f"multiturn_table.py has no row '{row}':\n{table.stdout}{table.stderr}")
    for failure in failures:
        print("FAIL:", failure)
    summary = ", ".join(f"cache {s}: hit rate {r['multiturn']['hit_rate']}, turn 3+ TTFT p50 "
                        f"{r['multiturn']['turns_3plus']['ttft_ms']['p50']} ms" for s, r in sorted(runs.items()))
    print(f"multiturn {SESSIONS} x {TURNS} ({summary}): {'ok' if not failures else 'FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
