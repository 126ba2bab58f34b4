#!/usr/bin/env python3
"""How often the shipped faithfulness page fires, and how fast: a seeded simulation of the
RagwatchFaithfulnessDrift rule (deploy/prometheus/rules.yaml) on the LLM judge's verdicts.

The rule pages when the 5-minute mean is below

    baseline mean - max_drop - z * sqrt(var_5m + var_baseline)

for `for` minutes, with at least min_samples verdicts in both windows (the baseline is the rest
of the last 24 hours, here a healthy sample of the same size). Scores follow the verdict model of
tests/common/label_judge.rs: the judge reads an answer as the human labels do 90 % of the time; a
faithful reading scores 1 (70 %) or uniform in [0.6, 1], an unfaithful one uniform in [0.2, 0.7];
each score is realised as the share of 2-6 claims supported. A stream 90 % faithful scores 0.85 on
average, 50 % faithful 0.70, 75 % faithful 0.79.

Printed, per `for` and per number of LLM verdicts a stratum gets in 5 minutes (the shipped budget,
60 requests a minute at about 2.5 requests a trace, gives about 120 verdicts per 5 minutes to
share among the strata): the share of drops paged within 15 and 30 minutes, the median time to
the page, and false pages per day of healthy traffic; first, how many new deployments page in
their first 6 hours, while the baseline is only what the stream has seen so far.

    python3 benches/page_power.py [--days 10] [--drops 100] [--deploys 100] [--seed 1]

Needs numpy. Not part of the test suite: a measurement, reported in docs/runbook.md (RagwatchFaithfulnessDrift).
"""

import argparse

import numpy as np

MAX_DROP = 0.05  # config/ragwatch.toml [drift.rules.faithfulness.combined]
Z = 1.645  # [windows] z
MIN_SAMPLES = 20
WINDOW = 300  # seconds
EVAL_EVERY = 30  # Prometheus's evaluation interval, seconds


def scores(rng, faithful):
    n = len(faithful)
    agrees = rng.random(n) >= 0.1
    reads_faithful = faithful == agrees
    score = np.where(
        reads_faithful,
        np.where(rng.random(n) < 0.7, 1.0, 0.6 + 0.4 * rng.random(n)),
        0.2 + 0.5 * rng.random(n),
    )
    claims = rng.integers(2, 7, n)
    return rng.binomial(claims, score) / claims


def pages(rng, per_5m, seconds, share, for_min, fresh=False):
    """Times (s) at which the rule starts firing on a stream whose faithful share at second t is
    share(t); verdicts arrive as a Poisson stream of per_5m per 5 minutes. The baseline is a full
    day of healthy verdicts, or with `fresh` (a new deployment) only the stream's own verdicts
    before the last 5 minutes, as the rule's `rest of 24h` is in the first day."""
    counts = rng.poisson(per_5m / WINDOW, seconds)
    times = np.repeat(np.arange(seconds), counts)
    values = scores(rng, rng.random(len(times)) < share(times))
    baseline = scores(rng, rng.random(per_5m * 288) < 0.9)
    base_mean, base_var = baseline.mean(), baseline.var() / len(baseline)
    sums = np.concatenate([[0.0], np.cumsum(values)])
    squares = np.concatenate([[0.0], np.cumsum(values**2)])
    held, hold, fired = 0, for_min * 60 // EVAL_EVERY, []
    for t in range(WINDOW, seconds, EVAL_EVERY):
        a, b = np.searchsorted(times, [t - WINDOW, t], side="right")
        k = b - a
        below = False
        if fresh:
            # The rest of the day so far; at least min_samples and at least the window's count.
            kb = a
            if kb < max(MIN_SAMPLES, k):
                held = 0
                continue
            base_mean = sums[a] / kb
            base_var = (squares[a] / kb - base_mean**2) / kb
        if k >= MIN_SAMPLES:
            mean = (sums[b] - sums[a]) / k
            var = ((squares[b] - squares[a]) / k - mean * mean) / k
            below = mean < base_mean - MAX_DROP - Z * np.sqrt(var + base_var)
        held = held + 1 if below else 0
        if held == hold + 1:
            fired.append(t)
    return fired


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--days", type=int, default=10, help="healthy days per setting")
    p.add_argument("--drops", type=int, default=100, help="simulated drops per setting")
    p.add_argument("--deploys", type=int, default=100, help="new deployments per setting")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    onset = 1800
    print("false pages in the first 6 hours of a new deployment (the baseline grows from nothing):")
    for for_min in (5, 10):
        for per_5m in (30, 60, 120):
            runs = [
                pages(rng, per_5m, 6 * 3600, lambda t: np.full(len(t), 0.9), for_min, fresh=True)
                for _ in range(args.deploys)
            ]
            paged = sum(1 for r in runs if r)
            print(f"  for {for_min:>2}m, {per_5m:>3} verdicts/5m: {paged} of {args.deploys} deployments paged")
    print("for   verdicts/5m  drop      paged<=15m  paged<=30m  median  false pages/day")
    for for_min in (5, 10):
        for per_5m in (30, 60, 120):
            false = sum(
                len(pages(rng, per_5m, 86400, lambda t: np.full(len(t), 0.9), for_min))
                for _ in range(args.days)
            ) / args.days
            for after in (0.5, 0.75):
                delays = []
                for _ in range(args.drops):
                    fired = pages(
                        rng, per_5m, onset + 3600,
                        lambda t: np.where(t < onset, 0.9, after), for_min,
                    )
                    fired = [f - onset for f in fired if f >= onset]
                    delays.append(fired[0] / 60 if fired else np.inf)
                delays = np.array(delays)
                print(
                    f"{for_min:>2}m  {per_5m:>11}  90->{int(after * 100)}%  "
                    f"{np.mean(delays <= 15):>10.0%}  {np.mean(delays <= 30):>10.0%}  "
                    f"{np.median(delays):>5.1f}m  {false:>15.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
