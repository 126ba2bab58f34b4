#!/usr/bin/env python3
"""Generates synthetic RAG traces in ragwatch's native schema (deterministic for a seed).

Used to build the bundled sample (config/sample-traces.jsonl) and by tests and benchmarks that need
traffic. Each trace is built from a small fact table: the contexts state facts, a faithful answer
restates them, an unfaithful one changes a number or invents a name, an out-of-scope question gets a
refusal (or, when `--bad-strata` names it, a confident made-up answer).

usage: gen_traces.py N [--seed S] [--unfaithful-share F] [--strata a,b] [--bad-strata x]
                       [--malformed K] [--pad BYTES] [--prefix P]
"""
import argparse
import json
import random

PRODUCTS = ["Aurora router", "Beacon camera", "Cinder kettle", "Delta drill", "Ember lamp",
            "Falcon drone", "Glacier fridge", "Harbor speaker", "Iris monitor", "Juniper desk"]
CITIES = ["Lisbon", "Osaka", "Denver", "Tallinn", "Porto", "Leeds", "Quito", "Perth"]
NAMES = ["Maria Keller", "Tomas Ruiz", "Ana Silva", "Kenji Mori", "Lena Novak", "Omar Haddad"]
FILLER = ("Customers can find further details in the product manual, which also covers cleaning, "
          "storage and safe disposal of the packaging materials. ")


def facts(rng, product):
    years = rng.randint(1, 5)
    price = rng.randint(20, 900)
    city = rng.choice(CITIES)
    founder = rng.choice(NAMES)
    return {
        "warranty": (f"How long is the warranty on the {product}?",
                     f"The {product} comes with a warranty of {years} years covering parts and labour.",
                     f"The warranty on the {product} lasts {years} years and covers parts and labour.",
                     f"The warranty on the {product} lasts {years + 3} years and covers accidental damage."),
        "price": (f"What does the {product} cost?",
                  f"The list price of the {product} is {price} dollars including tax.",
                  f"The {product} costs {price} dollars including tax.",
                  f"The {product} costs {price * 2 + 7} dollars before tax, according to {rng.choice(NAMES)}."),
        "factory": (f"Where is the {product} made?",
                    f"The {product} is assembled in our factory in {city}, which was opened by {founder}.",
                    f"The {product} is assembled in the factory in {city}.",
                    f"The {product} is assembled in {rng.choice([c for c in CITIES if c != city])} by contractors."),
    }


OUT_OF_SCOPE = ["What will the weather be in Paris tomorrow?", "Who won the football match last night?",
                "Can you write me a poem about the sea?", "What is the stock price of ACME today?"]
REFUSALS = ["I'm sorry, the provided documents do not contain information about that.",
            "I cannot answer that question from the available documentation.",
            "The documents do not mention this, so I am unable to answer."]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--unfaithful-share", type=float, default=0.1)
    ap.add_argument("--strata", default="head,tail,known_failure,out_of_scope")
    ap.add_argument("--bad-strata", default="")
    ap.add_argument("--malformed", type=int, default=0)
    ap.add_argument("--pad", type=int, default=0, help="add filler to contexts up to about this many bytes")
    ap.add_argument("--prefix", default="t")
    ap.add_argument("--gold", action="store_true", help="add relevant_ids and graded relevance (the fact's passage is relevant)")
    ap.add_argument("--bad-retrieval", action="store_true", help="rank the relevant passage last")
    ap.add_argument("--answer-everything", action="store_true", help="out-of-scope questions get confident answers")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    strata = a.strata.split(",")
    bad = set(filter(None, a.bad_strata.split(",")))
    weights = [8 if s == "head" else 2 for s in strata]
    lines = []
    for i in range(a.n):
        stratum = rng.choices(strata, weights)[0]
        product = rng.choice(PRODUCTS)
        table = facts(rng, product)
        key = rng.choice(list(table))
        q, ctx, good, wrong = table[key]
        others = [table[k][1] for k in table if k != key]
        contexts = [{"id": f"doc_{j}", "text": t, "score": round(0.9 - 0.1 * j, 2)}
                    for j, t in enumerate([ctx] + others)]
        relevant = ["doc_0"]
        if a.bad_retrieval:
            contexts = contexts[1:] + contexts[:1]
        if a.pad:
            for c in contexts:
                while len(c["text"]) < a.pad // 3:
                    c["text"] += " " + FILLER
        unfaithful = stratum in bad or rng.random() < a.unfaithful_share
        if stratum == "out_of_scope":
            q = rng.choice(OUT_OF_SCOPE)
            answer = (f"Tomorrow {rng.choice(NAMES)} expects {rng.randint(10, 99)} percent in {rng.choice(CITIES)}."
                      if unfaithful or a.answer_everything else rng.choice(REFUSALS))
        else:
            answer = (wrong if unfaithful else good) + (" [doc_0]" if rng.random() < 0.3 else "")
        trace = {"trace_id": f"{a.prefix}{a.seed}-{i}", "timestamp": "2026-11-29T10:00:00Z",
                 "query": q, "contexts": contexts, "answer": answer, "stratum": stratum,
                 "metadata": {"model": "gen-1", "prompt_version": "v1",
                              "usage": {"prompt_tokens": 40 * len(contexts), "completion_tokens": 30}},
                 "label_faithful": not unfaithful}
        if a.gold:
            trace["relevant_ids"] = relevant
            trace["relevance"] = {c["id"]: (3 if c["id"] in relevant else 0) for c in contexts}
        lines.append(json.dumps(trace))
    for k in range(a.malformed):
        pos = rng.randrange(len(lines) + 1)
        lines.insert(pos, ['{"trace_id": "broken", "query": ', '{"trace_id": 5, "query": "q", "contexts": [], "answer": 3}',
                           'not json at all', '{"query": "no id", "contexts": [], "answer": "a"}'][k % 4])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
