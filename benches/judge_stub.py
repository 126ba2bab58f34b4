#!/usr/bin/env python3
"""An OpenAI-compatible stand-in judge for cost comparisons: ragwatch and the RAGAS library send it
their real prompts, and it bills every request the same way (UTF-8 bytes / 4 for every message and
every returned content, bytes / 4 for embedding inputs), so the token counts compare the two
algorithms, not two servers.

It answers both request shapes deterministically:
- ragwatch: `response_format.json_schema.name` in {faithfulness, claims, relevancy} (or JSON mode with
  the schema in the system message);
- RAGAS 0.4 (instructor JSON mode): the output model is recognised from the JSON schema instructor
  puts in the messages, and the data from the `input:` JSON at the end of RAGAS's prompt.

Its "model" follows the same rules as tests/it/common/judge/rule.rs: sentences of three words or
more are claims; a claim is supported when its words of four letters or more are all in the contexts;
a context is relevant when it shares a word of five letters or more with the question. RAGAS's outputs carry a
`reason` string, which a real model writes; the stub writes one short sentence (about 12 words), which
understates RAGAS's completion tokens if anything.

Usage: judge_stub.py PORT. GET /stats returns billed tokens and request counts; POST /reset zeroes them.
"""
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATS = {}


def reset():
    with LOCK:
        STATS.clear()
        STATS.update(prompt_tokens=0, completion_tokens=0, embedding_tokens=0, chat_requests=0,
                     embedding_requests=0)


def tokens(text):
    return len(text.encode()) // 4


def words(s):
    return [w.lower() for w in re.split(r"[^\w]+", s) if w]


def sentences(text):
    return [s.strip() for s in re.split(r"[.!?]", text) if len(s.split()) >= 3]


def supported(claim, contexts):
    ctx = set(words(contexts))
    return all(w in ctx for w in words(claim) if len(w) >= 4)


def relevant(context, question):
    q = {w for w in words(question) if len(w) >= 5}
    return any(w in q for w in words(context))


NONCOMMITTAL = ("sorry", "cannot", "do not contain", "unable", "does not provide", "not mentioned")


def gist(answer):
    return " ".join([w for w in words(answer) if len(w) >= 4][:8])


def between(text, open_tag, close):
    out = []
    for m in re.finditer(re.escape(open_tag) + r"[^>]*>(.*?)" + re.escape(close), text, re.S):
        out.append(m.group(1))
    return out


def ragwatch_content(name, system, user):
    contexts = between(user, "<context", "</context>")
    answers = between(user, "<answer", "</answer>")
    answer = answers[0] if answers else ""
    if name == "faithfulness":
        claims_tag = between(user, "<claims", "</claims>")
        claims = json.loads(claims_tag[0]) if claims_tag else sentences(answer)
        joined = " ".join(contexts)
        out = {"claims": [{"claim": c, "verdict": "supported" if supported(c, joined) else "unsupported"}
                          for c in claims]}
        if "Also judge each context" in system:
            q = between(user, "<question", "</question>")
            out["contexts"] = [{"n": i + 1, "relevant": relevant(c, q[0] if q else "")}
                               for i, c in enumerate(contexts)]
        return out
    if name == "claims":
        return {"claims": sentences(answer)}
    n = int(re.search(r"Write (\d+)", system).group(1)) if re.search(r"Write (\d+)", system) else 3
    nc = any(p in answer.lower() for p in NONCOMMITTAL)
    return {"questions": [{"question": f"what {gist(answer)} {i}", "noncommittal": nc} for i in range(n)]}


def ragas_input(text):
    """The data of RAGAS's prompt: the JSON after the last `input:`."""
    i = text.rfind("input:")
    if i < 0:
        i = text.rfind("Input:")
    body = text[i + 6:]
    end = body.rfind("Output")
    candidate = body[:end] if end > 0 else body
    start = candidate.find("{")
    dec = json.JSONDecoder()
    obj, _ = dec.raw_decode(candidate[start:])
    return obj


def ragas_content(text):
    data = ragas_input(text)
    props = text[text.rfind("json_schema"):] if "json_schema" in text else text
    if "statements" in data and "context" in data:  # NLI
        return {"statements": [
            {"statement": s, "reason": "The context " + (
                "states this directly in its own words." if supported(s, data["context"])
                else "does not mention this anywhere, so it cannot be inferred."),
             "verdict": 1 if supported(s, data["context"]) else 0}
            for s in data["statements"]]}
    if "answer" in data and "question" in data and "context" not in data and '"statements"' in props:
        return {"statements": sentences(data["answer"])}
    if "response" in data and "context" not in data:  # answer relevance
        nc = any(p in data["response"].lower() for p in NONCOMMITTAL)
        return {"question": f"what {gist(data['response'])}", "noncommittal": 1 if nc else 0}
    if "context" in data:  # context precision
        q = data.get("question", "")
        rel = relevant(data["context"], q)
        return {"reason": "The context " + ("holds information useful for answering the question."
                                            if rel else "is about something else than the question."),
                "verdict": 1 if rel else 0}
    raise ValueError(f"unrecognised RAGAS prompt: {sorted(data)}")


def embed(text):
    v = [0.0] * 64
    for w in words(text):
        if len(w) >= 4:
            h = 1469598103934665603
            for b in w.encode():
                h = ((h ^ b) * 1099511628211) % (1 << 64)
            v[h % 64] += 1.0
    return v


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            self.reply(200, dict(STATS))

    def do_POST(self):
        n = int(self.headers.get("content-length", 0))
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path.endswith("/reset"):
            reset()
            return self.reply(200, {})
        if self.path.endswith("/embeddings"):
            inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
            t = sum(tokens(s) for s in inputs)
            with LOCK:
                STATS["embedding_tokens"] += t
                STATS["embedding_requests"] += 1
            return self.reply(200, {"object": "list", "model": req.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": embed(s)} for i, s in enumerate(inputs)],
                "usage": {"prompt_tokens": t, "total_tokens": t}})
        messages = req.get("messages", [])
        text = "\n".join(m.get("content") or "" for m in messages if isinstance(m.get("content"), str))
        name = ((req.get("response_format") or {}).get("json_schema") or {}).get("name")
        system = messages[0].get("content", "") if messages else ""
        user = messages[-1].get("content", "") if messages else ""
        try:
            if name or "<answer" in text:
                if not name:
                    name = ("relevancy" if '"noncommittal"' in system else
                            "faithfulness" if '"verdict"' in system else "claims")
                content = json.dumps(ragwatch_content(name, system, user))
            else:
                content = json.dumps(ragas_content(text))
        except Exception as e:  # an unrecognised prompt is a bug in the stub: say so loudly
            return self.reply(400, {"error": {"message": f"stub: {e}"}})
        p, c = tokens(text), tokens(content)
        n_choices = int(req.get("n") or 1)
        with LOCK:
            STATS["prompt_tokens"] += p
            STATS["completion_tokens"] += c * n_choices
            STATS["chat_requests"] += 1
        return self.reply(200, {
            "id": "stub", "object": "chat.completion", "created": 0, "model": req.get("model"),
            "choices": [{"index": i, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"} for i in range(n_choices)],
            "usage": {"prompt_tokens": p, "completion_tokens": c * n_choices,
                      "total_tokens": p + c * n_choices}})


if __name__ == "__main__":
    reset()
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
