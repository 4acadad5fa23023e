#!/usr/bin/env python3
"""`vt parse-output` on every case of tests/parsers/cases.json at chunk sizes 1, 2, 3, 7, 64 and
whole: one JSON line each, the same at every size, and the expected result."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    vt = sys.argv[1]
    cases = json.load(open(os.path.join(HERE, "cases.json"), encoding="utf-8"))
    tools = os.path.join(HERE, "tools.json")
    assert len(cases) >= 40, len(cases)
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases:
            path = os.path.join(scratch, case["name"] + ".txt")
            with open(path, "wb") as f:
                f.write(case["output"].encode("utf-8"))
            outputs = set()
            for chunk in (1, 2, 3, 7, 64, 0):
                command = [vt, "parse-output", "--format", case["format"], "--tools", tools, "--thinking",
                           case["thinking"], "--chunk-bytes", str(chunk), "--file", path, "--json"]
                run = subprocess.run(command, capture_output=True, check=True)
                lines = run.stdout.decode("utf-8").splitlines()
                assert len(lines) == 1, (case["name"], lines)
                outputs.add(lines[0])
            if len(outputs) != 1:
                failures.append(f"{case['name']}: differs by chunk size: {outputs}")
                continue
            result = json.loads(outputs.pop())
            expected = case["expected"]
            got = {"reasoning_content": result["reasoning_content"], "content": result["content"],
                   "tool_calls": [{"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
                                  for call in result["tool_calls"]]}
            if any(call["type"] != "function" for call in result["tool_calls"]) or got != expected:
                failures.append(f"{case['name']}: got {json.dumps(got)}, expected {json.dumps(expected)}")
    bad = subprocess.run([vt, "parse-output", "--format", "xml", "--file", tools], capture_output=True)
    if bad.returncode == 0:
        failures.append("--format xml was accepted")
    for failure in failures:
        print(failure)
    print(f"{len(cases)} cases x 6 chunk sizes: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
