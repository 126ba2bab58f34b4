#!/usr/bin/env python3
"""Runs the RAGAS library's own metrics (ragas 0.4 collections: Faithfulness, AnswerRelevancy with
strictness 3, and optionally ContextPrecisionWithoutReference) on the first N traces of a JSONL file,
against an OpenAI-compatible server (benches/judge_stub.py), one trace at a time.

Usage: ragas_cost.py BASE_URL TRACES.jsonl N [--context-precision]
Prints one JSON line: traces scored, failures, and the mean scores.
"""
import asyncio
import json
import math
import os
import sys

os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")

from openai import AsyncOpenAI  # noqa: E402
from ragas.embeddings.base import embedding_factory  # noqa: E402
from ragas.llms.base import llm_factory  # noqa: E402
from ragas.metrics.collections import (  # noqa: E402
    AnswerRelevancy,
    ContextPrecisionWithoutReference,
    Faithfulness,
)


async def main():
    base_url, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with_cp = "--context-precision" in sys.argv
    client = AsyncOpenAI(base_url=base_url, api_key="stub", max_retries=0)
    llm = llm_factory("judge-stub", client=client)
    emb = embedding_factory("openai", model="embed-stub", client=client)
    metrics = {
        "faithfulness": Faithfulness(llm=llm),
        "answer_relevancy": AnswerRelevancy(llm=llm, embeddings=emb, strictness=3),
    }
    if with_cp:
        metrics["context_precision"] = ContextPrecisionWithoutReference(llm=llm)
    sums = {k: 0.0 for k in metrics}
    counts = {k: 0 for k in metrics}
    failures = {k: 0 for k in metrics}
    traces = 0
    with open(path) as f:
        for line in f:
            if traces >= n:
                break
            t = json.loads(line)
            contexts = [c if isinstance(c, str) else c["text"] for c in t["contexts"]]
            traces += 1
            for name, m in metrics.items():
                kwargs = {"user_input": t["query"], "response": t["answer"]}
                if name != "answer_relevancy":
                    kwargs["retrieved_contexts"] = contexts
                try:
                    v = (await m.ascore(**kwargs)).value
                except Exception as e:  # counted, as RAGAS users meet them
                    failures[name] += 1
                    print(f"{name} failed on {t['trace_id']}: {e}", file=sys.stderr)
                    continue
                if v is not None and not math.isnan(v):
                    sums[name] += v
                    counts[name] += 1
    print(json.dumps({
        "traces": traces,
        "scored": counts,
        "failures": failures,
        "mean": {k: (sums[k] / counts[k] if counts[k] else None) for k in metrics},
    }))


asyncio.run(main())
