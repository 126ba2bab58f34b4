"""Cross-validated AUROC of a small head on all-MiniLM-L6-v2 vectors against human labels, beside the
offline (lexical) judge's out-of-fold AUROC on the very same folds, with cluster-bootstrap intervals
(resampling questions, so answers to one question move together) for each and for the difference.

    nice -n 19 cargo bench --bench lexical_folds -- ../shared/data/ragtruth_qa_train.jsonl /tmp/lexical_folds.csv
    nice -n 19 $HOME/.cache/ragwatch/classifier-venv/bin/python benches/classifier_cv.py \\
        ../shared/data/ragtruth_qa_train.jsonl /tmp/lexical_folds.csv $HOME/.cache/ragwatch/all-MiniLM-L6-v2 \\
        --head $HOME/.cache/ragwatch/minilm-head.json

Folds are `ragwatch train-offline`'s (grouped by question, dealt by mean answer length), read from the
lexical file; the comparison runs on the traces the offline judge scores. Vectors come from
tests/minilm_reference.py (numpy forward pass, windows of TOKENS tokens) and are cached beside the head
as .npz (numbers only, no text). Features are src/judge/classifier's `pair_features`. The head is a
standardised L2 logistic regression whose C is picked by an inner grouped cross-validation on each
training part; `--head` writes the head fitted on every scored trace, in the Rust head's JSON format.
"""

import argparse
import csv
import hashlib
import json
import os
import sys
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from minilm_reference import Reference  # noqa: E402


def unit(v):
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def pair_features(a, q, cs):
    """The same features as src/judge/classifier/mod.rs `pair_features`."""
    a, q = unit(a), unit(q)
    cs = [unit(c) for c in cs]
    cos = [float(a @ c) for c in cs]
    mx = max(cos) if cos else 0.0
    mean = float(np.mean(cos)) if cos else 0.0
    c = unit(np.sum(cs, axis=0)) if cs else np.zeros_like(a)
    return np.concatenate([[a @ q, mx, mean], a * c, np.abs(a - c)])


def embed_all(model_dir, tokens, texts, key, vectors):
    """Windows as tests/minilm_reference.py cuts them; the forward pass by transformers (torch, the
    reference implementation the numpy one is held to) when installed, numpy otherwise."""
    ref = Reference(model_dir, dtype=np.float32)
    windows = [(i, w) for i, s in enumerate(texts) for w in ref.inputs(s, tokens)]
    sums = np.zeros((len(texts), ref.config["hidden_size"]), dtype=np.float64)
    counts = np.zeros(len(texts))
    start = time.time()
    try:
        import torch
        from transformers import AutoModel

        model = AutoModel.from_pretrained(model_dir).eval()
        order = sorted(range(len(windows)), key=lambda j: len(windows[j][1]))
        with torch.no_grad():
            for b in range(0, len(order), 32):
                batch = [windows[j] for j in order[b : b + 32]]
                t = max(len(w) for _, w in batch)
                ids = torch.tensor([w + [0] * (t - len(w)) for _, w in batch])
                mask = torch.tensor([[1] * len(w) + [0] * (t - len(w)) for _, w in batch])
                h = model(input_ids=ids, attention_mask=mask).last_hidden_state
                pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                for (i, _), v in zip(batch, pooled.numpy()):
                    sums[i] += v
                    counts[i] += 1
                if (b // 32) % 40 == 0:
                    print(f"  {b}/{len(order)} windows ({time.time() - start:.0f} s)", file=sys.stderr)
    except ImportError:
        for i, w in windows:
            sums[i] += ref.hidden(w).mean(0)
            counts[i] += 1
    for i, s in enumerate(texts):
        vectors[key(s)] = (sums[i] / counts[i]).astype(np.float32)


def cluster_bootstrap(groups, y, scores, n=2000, seed=7):
    """95 % intervals of each score's AUROC and of the first minus the second, resampling groups."""
    rng = np.random.default_rng(seed)
    uniq = np.unique(groups)
    idx_of = {g: np.flatnonzero(groups == g) for g in uniq}
    stats = []
    for _ in range(n):
        pick = rng.choice(uniq, size=len(uniq), replace=True)
        idx = np.concatenate([idx_of[g] for g in pick])
        if y[idx].min() == y[idx].max():
            continue
        aucs = [roc_auc_score(y[idx], s[idx]) for s in scores]
        stats.append(aucs + [aucs[0] - aucs[1]] if len(aucs) > 1 else aucs)
    stats = np.array(stats)
    return [tuple(np.percentile(stats[:, j], [2.5, 97.5])) for j in range(stats.shape[1])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("lexical_csv")
    ap.add_argument("model_dir")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per window (special tokens aside)")
    ap.add_argument("--head", help="write the head fitted on all scored traces here")
    ap.add_argument("--cache", help="vector cache (.npz); default beside --head or in $HOME/.cache/ragwatch")
    args = ap.parse_args()

    traces = [json.loads(line) for line in open(args.data)]
    texts = set()
    for t in traces:
        texts.add(t["answer"])
        texts.add(t["query"])
        texts.update(c if isinstance(c, str) else c["text"] for c in t["contexts"])
    texts = sorted(texts)
    key = lambda s: hashlib.sha256(s.encode()).hexdigest()[:24]  # noqa: E731
    cache = args.cache or os.path.join(
        os.path.dirname(args.head) if args.head else os.path.expanduser("~/.cache/ragwatch"),
        f"minilm-vectors-{args.tokens}.npz",
    )
    vectors = {}
    if os.path.exists(cache):
        z = np.load(cache)
        vectors = dict(zip(z["keys"], z["vectors"]))
    todo = [s for s in texts if key(s) not in vectors]
    if todo:
        embed_all(args.model_dir, args.tokens, todo, key, vectors)
        keys = np.array(list(vectors.keys()))
        np.savez(cache, keys=keys, vectors=np.stack([vectors[k] for k in keys]))

    lex = {r["trace_id"]: r for r in csv.DictReader(open(args.lexical_csv))}
    rows = []
    for t in traces:
        r = lex.get(t["trace_id"])
        if r is None or r["fold"] == "":
            continue
        cs = [vectors[key(c if isinstance(c, str) else c["text"])] for c in t["contexts"]]
        rows.append(
            (
                pair_features(vectors[key(t["answer"])], vectors[key(t["query"])], cs),
                int(r["label"]),
                int(r["fold"]),
                float(r["lexical"]),
                t["query"].strip().lower(),
            )
        )
    X = np.stack([r[0] for r in rows])
    y = np.array([r[1] for r in rows])
    fold = np.array([r[2] for r in rows])
    lexical = np.array([r[3] for r in rows])
    groups = np.array([r[4] for r in rows])
    folds = sorted(set(fold))

    def model():
        pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        return pipe

    grid = {"logisticregression__C": [0.0003, 0.001, 0.003, 0.01, 0.03, 0.1]}
    variants = {"head (all features)": slice(None), "three cosines only": slice(0, 3)}
    oof = {name: np.zeros(len(y)) for name in variants}
    chosen = {name: [] for name in variants}
    for k in folds:
        tr, te = fold != k, fold == k
        for name, cols in variants.items():
            search = GridSearchCV(model(), grid, scoring="roc_auc", cv=GroupKFold(n_splits=4))
            search.fit(X[tr][:, cols], y[tr], groups=groups[tr])
            chosen[name].append(search.best_params_["logisticregression__C"])
            oof[name][te] = search.predict_proba(X[te][:, cols])[:, 1]

    def logit(p):
        p = np.clip(p, 1e-6, 1 - 1e-6)
        return np.log(p / (1 - p))

    # Scale-free blend of the two judges' out-of-fold scores: the mean of their standardised logits.
    z = lambda v: (v - v.mean()) / v.std()  # noqa: E731
    oof["mean of head and lexical logits"] = z(logit(oof["head (all features)"])) + z(logit(lexical))

    print(f"{len(y)} traces scored by the offline judge ({y.sum()} faithful), {len(set(groups))} questions, "
          f"{len(folds)} folds")
    lex_auc = roc_auc_score(y, lexical)
    lo, hi = cluster_bootstrap(groups, y, [lexical])[0]
    per = [roc_auc_score(y[fold == k], lexical[fold == k]) for k in folds]
    print(f"lexical (offline judge): AUROC {lex_auc:.3f} [{lo:.3f}, {hi:.3f}]  folds "
          + ", ".join(f"{v:.3f}" for v in per))
    for name, s in oof.items():
        auc = roc_auc_score(y, s)
        (lo, hi), _, (dlo, dhi) = cluster_bootstrap(groups, y, [s, lexical])
        per = [roc_auc_score(y[fold == k], s[fold == k]) for k in folds]
        extra = f"  C per fold {chosen[name]}" if name in chosen else ""
        print(f"{name}: AUROC {auc:.3f} [{lo:.3f}, {hi:.3f}]  minus lexical {auc - lex_auc:+.3f} "
              f"[{dlo:+.3f}, {dhi:+.3f}]  folds " + ", ".join(f"{v:.3f}" for v in per) + extra)
    # The combined estimate's power grows with the square of the cheap judge's correlation with the
    # sampled judge's verdicts; the label stand-in judge's verdicts follow the human labels.
    for name, v in [("lexical", lexical), ("head", oof["head (all features)"])]:
        print(f"Pearson r({name}, human label) out of fold: {np.corrcoef(v, y)[0, 1]:.3f}")
    print(f"Spearman(head, lexical) out of fold: "
          f"{np.corrcoef(np.argsort(np.argsort(oof['head (all features)'])), np.argsort(np.argsort(lexical)))[0, 1]:.3f}")

    if args.head:
        search = GridSearchCV(model(), grid, scoring="roc_auc", cv=GroupKFold(n_splits=5))
        search.fit(X, y, groups=groups)
        pipe = search.best_estimator_
        scaler, lr = pipe[0], pipe[1]
        head = {
            "window_tokens": args.tokens,
            "mean": scaler.mean_.tolist(),
            "std": scaler.scale_.tolist(),
            "weights": lr.coef_[0].tolist(),
            "bias": float(lr.intercept_[0]),
            "report": {
                "encoder": os.path.basename(os.path.normpath(args.model_dir)),
                "data": os.path.basename(args.data),
                "examples": int(len(y)),
                "C": search.best_params_["logisticregression__C"],
                "cv_auroc_pooled": round(float(roc_auc_score(y, oof["head (all features)"])), 4),
                "lexical_cv_auroc_pooled_same_folds": round(float(lex_auc), 4),
            },
        }
        with open(args.head, "w") as f:
            json.dump(head, f)
        print(f"head written to {args.head}")


if __name__ == "__main__":
    main()
