#!/usr/bin/env python3
"""The Python peer of `ragwatch replay` in benches/replay_vs_python.sh: decode with field checks, stratify, and one
lexical support score (share of the answer's words found in the contexts) per trace of a JSONL file."""
import json, re, sys, time

WORD, DECLARED = re.compile(r"[a-z0-9]+"), {"head", "tail", "known_failure", "out_of_scope"}
start, n, total = time.perf_counter(), 0, 0.0
for line in open(sys.argv[1], "rb"):
    t = json.loads(line)
    q, ctx, ans = t["query"], t["contexts"], t["answer"]
    assert isinstance(q, str) and isinstance(ans, str) and isinstance(ctx, list) and isinstance(t["trace_id"], str)
    stratum = t.get("stratum") if t.get("stratum") in DECLARED else "other"
    words = set(WORD.findall(" ".join(c if isinstance(c, str) else c.get("text", "") for c in ctx).lower()))
    a = WORD.findall(ans.lower())
    total, n = total + (sum(w in words for w in a) / len(a) if a else 0.0), n + 1
elapsed = time.perf_counter() - start
print(f"python: {n} traces in {elapsed:.2f} s = {n / elapsed:.0f} traces/s (mean support {total / max(n, 1):.3f})")
