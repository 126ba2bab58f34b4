#!/usr/bin/env python3
"""How often the shipped rollout gate fails a healthy canary, and how fast it fails a worse one: a
seeded simulation of the rules' comparison of a candidate release with the baseline
(`ragwatch:comparison_verdict{stratum="*", metric="faithfulness"}`, group ragwatch.comparison in
deploy/prometheus/rules.yaml), read by a rollout controller every 5 minutes for a whole rollout (6 hours, --hours).

The rules' arithmetic, as shipped. Per arm (candidate, baseline), over the LLM judge's verdicts y
in [0, 1] since the rollout started, each weighted w = 1/pi (pi: the trace's sampling probability):
n = count, W = sum w, A = sum w*y, B = sum w^2, C = sum w^2*y, D = sum w^2*y^2;
m = A/W, var_m = (D - 2 m C + m^2 B + 0.25 B/n) / W^2; delta = m_candidate - m_baseline,
V = var_m(candidate) + var_m(baseline). With strata, stratum "*" is the traffic-weighted sum of the
strata's delta (weights T_s / sum T, T = arrived traces of both arms) and V* = sum weight^2 V_s.
Half-width of the anytime-valid mixture-SPRT confidence sequence (tau = 0.1, alpha = 0.05):
h = sqrt(2 V (V + tau^2) / tau^2 * ln(sqrt((V + tau^2) / V) / alpha)). Verdict: worse when
delta + h < -margin, not worse when delta - h > -margin (margin 0.05), undecided otherwise, or while
either arm has fewer than 30 verdicts, or on a sample ratio mismatch (coverage z > 5 or share z > 5).

The judge: the verdict model of tests/it/common/judge/labels.rs (as benches/page_power.rs). It reads an
answer as the human labels do 90 % of the time; a faithful reading scores 1 (70 %) or uniform in
[0.6, 1], an unfaithful one uniform in [0.2, 0.7]; the score is realised as the share of 2-6 claims
supported. A stream 90 % faithful scores 0.852 on average, 85 % 0.832, 75 % 0.793, 60 % 0.734: so
90 -> 85 % is a drop of 0.020 on the judge's scale, inside the 0.05 margin, which the gate is built
not to call worse, and 90 -> 75 % (0.059) is just past it. The simulation draws each look's
verdicts per arm and weight class from that model's exact distribution over the 13 possible scores
(a multinomial; checked against direct draws at start-up), so a rollout costs a few arrays.

The sampler and the budget, as shipped (config/ragwatch.toml and config/llm.toml [sample] and
[budget], [variants] candidate_boost, src/sample/sampler.rs, docs/judges.md, docs/operations.md).
Each trace is sampled with probability pi, by a hash of its trace id: the stratum's rate
(default_rate 0.05), times uncertain_boost 3 for the traces the offline judge is unsure about
(--uncertain, 20 % of traces by default, independent of faithfulness), times candidate_boost
(--candidate-boost, 4 by default) for the candidate's traces, capped at 1; its weight is 1/pi. So
the baseline's traces are sampled at 0.05 and 0.15 (weights 20 and 6.67) and the canary's at 0.2
and 0.6 (weights 5 and 1.67). Each stratum's first min_per_window (20) traces of every 5 minutes, of
either arm, are taken with pi = 1 (weight 1). The LLM budget decides how many of the
sampled traces get a verdict: 60 requests a minute at about 2.5 requests a judged trace (one
faithfulness call, one answer-relevancy call and its embeddings call, some traces fewer;
docs/operations.md) is
24 judged traces a minute, 120 per 5 minutes for the whole install; the 200,000 tokens a minute at
about 1,300 tokens a trace would allow 150, so requests bind. 20 % of every limit (reserve_ratio) is
the reserve only the guaranteed samples may spend: 24 verdicts per 5 minutes for them, 96 for the
rate-sampled traces, which get them at random among those sampled (the budget skips the rest,
independently of arm and score). With one stratum that is 20 + 96 = 116 verdicts per 5 minutes.
--traffic (3,000 traces a minute by default) is high enough that the budget binds at 4x; the
canary takes --canary-share (10 %) of the traffic and, sampled at 4 times the rate, about 31 % of
the sampled traces: about 32 of the 116 verdicts (12 with --candidate-boost 1).

Printed: for healthy rollouts (both arms 90 % faithful), the canary's verdicts per 5 minutes, the
share that ever reach `worse` at any look (a false fail, with its standard error), the share that
has reached `not worse` at some look by 2, 4 and 6 hours, the share whose verdict at the look at 2,
4 and 6 hours is `not worse` (the verdict is recomputed at each look and can fall back to
undecided), and the minutes to the first `not worse` (median, p90, p99): candidates for
deadline_secs, after which Flagger counts an undecided check as failed. For canaries that are less
faithful from the start: the share reaching `worse` by 2, 4 and 6 hours, and the judged canary
traces and minutes to the first `worse` (median and p90 over all rollouts; `>` when that share of
rollouts had not reached it by the end). Each at the shipped budget and at 2x and 4x
the verdict rate. A verbose canary that is as faithful (more claims per answer, more uncertain
offline scores) is a healthy canary to the LLM judge: it scores the share of claims supported, so
the mean is unchanged; it is run as one more healthy row (6-12 claims, 1.5 times as many uncertain
traces). The last column of the healthy table checks the confidence sequence itself: the share of
rollouts whose interval ever leaves out the true difference, 0, at a look that gives a verdict (at
most 5 % if it is anytime-valid at alpha = 0.05). `ever not worse`, for a worse canary, is the share
the gate passes at some look (for 90 -> 85 %, inside the margin, that is the right answer).

    python3 benches/variant_gate.py [--healthy 10000] [--worse 2000] [--hours 6] [--seed 1]
        [--strata 1|4] [--traffic 3000] [--canary-share 0.1] [--uncertain 0.2]
        [--candidate-boost 4] [--budgets 1,2,4] [--drops 0.6,0.75,0.85]

Needs numpy. Not part of the test suite: a measurement, reported in docs/rollouts.md.
"""

import argparse
import math
import time

import numpy as np
from numpy.polynomial import polynomial as P

# deploy/prometheus/rules.yaml, group ragwatch.comparison, and [variants] defaults.
MARGIN = 0.05
MIN_JUDGED = 30
TAU = 0.1
ALPHA = 0.05
REGULARISE = 0.25  # the 0.25 B / n term of var_m
MISMATCH_Z = 5.0
SHARE_MIN_TRACES = 100
CANDIDATE_BOOST = 4.0
LOOK_SECS = 300  # a controller's interval (Argo Rollouts, Flagger)

# [sample] (config/ragwatch.toml, config/llm.toml) and [budget] (config/llm.toml).
DEFAULT_RATE = 0.05
UNCERTAIN_BOOST = 3.0
MIN_PER_WINDOW = 20
REQUESTS_PER_MINUTE = 60
REQUESTS_PER_TRACE = 2.5
RESERVE_RATIO = 0.2
VERDICTS_PER_LOOK = REQUESTS_PER_MINUTE / REQUESTS_PER_TRACE * LOOK_SECS / 60  # 120

# --strata 4: config/ragwatch.toml's declared strata and [sample.rates]; the traffic weights are
# an assumption (a head, a long tail, a route that fails, a little out-of-scope traffic).
STRATA = {
    1: [("default", 1.0, DEFAULT_RATE)],
    4: [
        ("head", 0.60, DEFAULT_RATE),
        ("tail", 0.25, 0.2),
        ("known_failure", 0.10, DEFAULT_RATE),
        ("out_of_scope", 0.05, 1.0),
    ],
}


def scores(rng, faithful, claims=(2, 6)):
    """Direct draws of the verdict model (as benches/page_power.rs): used to check `verdicts`."""
    n = len(faithful)
    agrees = rng.random(n) >= 0.1
    reads_faithful = faithful == agrees
    score = np.where(
        reads_faithful,
        np.where(rng.random(n) < 0.7, 1.0, 0.6 + 0.4 * rng.random(n)),
        0.2 + 0.5 * rng.random(n),
    )
    k = rng.integers(claims[0], claims[1] + 1, n)
    return rng.binomial(k, score) / k


def verdicts(faithful, claims=(2, 6)):
    """The exact distribution of one verdict of the model on a stream `faithful` faithful: the
    possible scores and their probabilities."""

    def binomial_over_uniform(c, j, lo, hi):
        # P(j of c claims supported) with the score uniform in [lo, hi].
        poly = P.polymul(P.polypow([0.0, 1.0], j), P.polypow([1.0, -1.0], c - j)) * math.comb(c, j)
        integral = P.polyint(poly)
        return (P.polyval(hi, integral) - P.polyval(lo, integral)) / (hi - lo)

    reads_faithful = 0.9 * faithful + 0.1 * (1 - faithful)
    probs = {}
    per_c = 1 / (claims[1] - claims[0] + 1)
    for c in range(claims[0], claims[1] + 1):
        for j in range(c + 1):
            p = reads_faithful * (0.7 * (j == c) + 0.3 * binomial_over_uniform(c, j, 0.6, 1.0))
            p += (1 - reads_faithful) * binomial_over_uniform(c, j, 0.2, 0.7)
            key = round(j / c, 12)
            probs[key] = probs.get(key, 0.0) + per_c * p
    values = np.array(sorted(probs))
    p = np.array([probs[v] for v in values])
    return values, p / p.sum()


def check_verdicts(rng):
    for faithful, claims in ((0.9, (2, 6)), (0.6, (2, 6)), (0.9, (6, 12))):
        values, p = verdicts(faithful, claims)
        drawn = scores(rng, rng.random(1_000_000) < faithful, claims)
        freq = np.array([np.mean(np.isclose(drawn, v)) for v in values])
        assert np.abs(freq - p).max() < 0.003, (faithful, claims, freq - p)
        assert abs(drawn.mean() - values @ p) < 0.002


def simulate(
    rng, rollouts, looks, strata, traffic, share, uncertain, budget, canary, boost, chunk=1000
):
    """Verdicts at every look of `rollouts` rollouts: an int8 array (rollouts, looks) of -1 worse,
    0 undecided, 1 not worse; the candidate's n at each look; and per rollout whether the interval
    ever left out 0 once decided. `canary` = (faithful, claims, uncertain share) of the candidate;
    the baseline is 90 % faithful, 2-6 claims. `boost` = candidate_boost: the candidate's traces
    are sampled at that many times their rate (capped at 1) and weighted by the inverse."""
    n_s = len(strata)
    weights = np.array([s[1] for s in strata])
    rates = np.array([s[2] for s in strata])
    arms = [canary, (0.9, (2, 6), uncertain)]  # arm 0 = candidate, 1 = baseline
    unsure = np.array([[1 - a[2], a[2]] for a in arms])  # (arm, class)
    # Sampling probability by (stratum, arm, class): the stratum's rate, times uncertain_boost for
    # an unsure trace, times candidate_boost for the candidate's, capped at 1.
    by_class = np.array([1.0, UNCERTAIN_BOOST])
    by_arm = np.array([boost, 1.0])
    pi = np.minimum(1.0, rates[:, None, None] * by_arm[None, :, None] * by_class[None, None, :])
    # Classes: certain, unsure, guaranteed.
    w = np.concatenate([1 / pi, np.ones((n_s, 2, 1))], axis=2)
    arm_share = np.array([share, 1 - share])
    lam = traffic * LOOK_SECS / 60 * weights[:, None, None] * arm_share[None, :, None] * unsure[None]
    dists = [verdicts(a[0], a[1]) for a in arms]
    reserve = RESERVE_RATIO * budget
    by_rate = budget - reserve
    out_v, out_n, out_miss = [], [], []
    for start in range(0, rollouts, chunk):
        r = min(chunk, rollouts - start)
        shape = (r, looks, n_s, 2, 2)  # rollout, look, stratum, arm, class
        arrived = rng.poisson(lam, size=shape)
        sampled = rng.binomial(arrived, pi[None, None])
        # Guaranteed: each stratum's first min_per_window traces of the window, from the reserve.
        per_stratum = arrived.sum(axis=(3, 4))
        guaranteed = np.minimum(MIN_PER_WINDOW, per_stratum)
        total = guaranteed.sum(axis=2, keepdims=True)
        guaranteed = rng.binomial(guaranteed, np.minimum(1.0, reserve / np.maximum(total, 1)))
        canary_share = arrived[..., 0, :].sum(axis=-1) / np.maximum(per_stratum, 1)
        g_canary = rng.binomial(guaranteed, canary_share)
        g = np.stack([g_canary, guaranteed - g_canary], axis=3)  # (r, looks, strata, arm)
        # Rate-sampled: the rest of the budget, at random among the sampled traces.
        total = sampled.sum(axis=(2, 3, 4), keepdims=True)
        judged = rng.binomial(sampled, np.minimum(1.0, by_rate / np.maximum(total, 1)))
        k = np.concatenate([judged, g[..., None]], axis=4)  # (r, looks, strata, arm, 3 classes)
        sy = np.empty(k.shape)
        syy = np.empty(k.shape)
        for a, (values, p) in enumerate(dists):
            counts = rng.multinomial(k[:, :, :, a, :], p)  # (..., len(values))
            sy[:, :, :, a, :] = counts @ values
            syy[:, :, :, a, :] = counts @ (values * values)
        wc = w[None, None]
        terms = [
            k.sum(axis=4),
            (wc * k).sum(axis=4),
            (wc * sy).sum(axis=4),
            (wc**2 * k).sum(axis=4),
            (wc**2 * sy).sum(axis=4),
            (wc**2 * syy).sum(axis=4),
        ]
        n, W, A, B, C, D = (np.cumsum(t, axis=1) for t in terms)  # (r, looks, strata, arm)
        T = np.cumsum(arrived.sum(axis=4), axis=1)
        v, nc, miss = verdict(n, W, A, B, C, D, T, share)
        out_v.append(v)
        out_n.append(nc)
        out_miss.append(miss.any(axis=1))
    return np.concatenate(out_v), np.concatenate(out_n), np.concatenate(out_miss)


def verdict(n, W, A, B, C, D, T, share):
    """The rules, on cumulative sums shaped (rollout, look, stratum, arm)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        m = A / W
        var = (D - 2 * m * C + m * m * B + REGULARISE * B / n) / (W * W)
        valid = (n > 0).all(axis=3)  # (r, looks, strata)
        delta_s = np.where(valid, m[..., 0] - m[..., 1], 0.0)
        v_s = np.where(valid, var[..., 0] + var[..., 1], 0.0)
        t_s = np.where(valid, T.sum(axis=3), 0)
        weight = t_s / t_s.sum(axis=2, keepdims=True)
        delta = (weight * delta_s).sum(axis=2)
        V = (weight**2 * v_s).sum(axis=2)
        h = np.sqrt(2 * V * (V + TAU**2) / TAU**2 * np.log(np.sqrt((V + TAU**2) / V) / ALPHA))
        upper, lower = delta + h, delta - h
        n_arm = n.sum(axis=2)  # (r, looks, arm)
        # Sample ratio mismatch on the pooled sums: judging coverage, and the declared share.
        cov = W.sum(axis=2) / T.sum(axis=2)
        z_cov = np.abs(cov[..., 0] - cov[..., 1]) / np.sqrt((cov**2 / n_arm).sum(axis=2))
        coverage = (z_cov > MISMATCH_Z) & (n_arm >= MIN_JUDGED).all(axis=2)
        arrived = T.sum(axis=2)
        N = arrived.sum(axis=2)
        z_share = np.abs(arrived[..., 0] / N - share) / np.sqrt(share * (1 - share) / N)
        share_off = (z_share > MISMATCH_Z) & (N >= SHARE_MIN_TRACES)
    out = np.where(upper < -MARGIN, -1, np.where(lower > -MARGIN, 1, 0)).astype(np.int8)
    undecided = (n_arm.min(axis=2) < MIN_JUDGED) | ~valid.any(axis=2) | coverage | share_off
    out[undecided] = 0
    # Where the interval leaves out a difference of 0 (the truth for a healthy canary).
    miss = ~undecided & ((lower > 0) | (upper < 0))
    return out, n_arm[..., 0], miss


def quantiles(first, values, beyond, qs=(50, 90)):
    """Quantiles `qs` of `values` at each rollout's first hit (`first` = look index, -1 none);
    `beyond` (a string) where that quantile falls among the rollouts with no hit."""
    x = np.where(first >= 0, values, np.inf)
    out = []
    for q in qs:
        v = np.percentile(x, q, method="inverted_cdf")
        out.append(f"{v:.0f}" if np.isfinite(v) else beyond)
    return ", ".join(out)


def first_look(mask):
    hit = mask.any(axis=1)
    return np.where(hit, mask.argmax(axis=1), -1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--healthy", type=int, default=10000, help="healthy rollouts per budget")
    p.add_argument("--worse", type=int, default=2000, help="worse rollouts per setting")
    p.add_argument("--hours", type=float, default=6, help="length of a rollout")
    p.add_argument("--strata", type=int, choices=sorted(STRATA), default=1)
    p.add_argument("--traffic", type=float, default=3000, help="traces a minute, both arms")
    p.add_argument("--canary-share", type=float, default=0.1, help="the canary's share of traffic")
    p.add_argument("--uncertain", type=float, default=0.2, help="share of traces sampled 3x")
    p.add_argument(
        "--candidate-boost", type=float, default=CANDIDATE_BOOST,
        help="[variants] candidate_boost: the canary's traces sampled at this many times the rate",
    )
    p.add_argument("--budgets", default="1,2,4", help="multiples of the shipped verdict rate")
    p.add_argument("--drops", default="0.6,0.75,0.85", help="canary faithful shares (from 0.9)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    check_verdicts(rng)
    looks = int(round(args.hours * 3600 / LOOK_SECS))
    # Checkpoints every 2 hours and at the end: the look at each (a deadline_secs to choose from).
    hours = sorted({*range(2, math.ceil(args.hours), 2), args.hours})
    marks = [int(round(h * 3600 / LOOK_SECS)) - 1 for h in hours]
    at_hours = " / ".join(f"{h:g} h" for h in hours)
    strata = STRATA[args.strata]
    budgets = [float(b) for b in args.budgets.split(",")]
    drops = [float(d) for d in args.drops.split(",")]
    boost = args.candidate_boost

    def run(count, budget, canary):
        return simulate(
            rng, count, looks, strata, args.traffic, args.canary_share, args.uncertain,
            budget * VERDICTS_PER_LOOK, canary, boost,
        )

    def shares(mask_at_look):
        return " / ".join(f"{np.mean(mask_at_look[:, m]):.1%}" for m in marks)

    minutes = (np.arange(looks) + 1) * LOOK_SECS / 60
    print(
        f"{args.hours:g} h rollouts, a look every {LOOK_SECS // 60} min, canary "
        f"{args.canary_share:.0%} of {args.traffic:.0f} traces/min, strata "
        f"{', '.join(f'{name} {weight:.0%}' for name, weight, _ in strata)}, "
        f"{args.uncertain:.0%} of traces sampled 3x, candidate_boost {boost:g}, seed {args.seed}"
    )
    print()
    print("healthy canary (both arms 90 % faithful)")
    print(
        "| verdicts/5m | boost | canary | canary's verdicts/5m | rollouts | "
        f"ever worse (false fail) | reached not worse by {at_hours} | not worse at {at_hours} | "
        "minutes to not worse (median, p90, p99) | interval ever leaves out 0 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    healthy_cases = [("as baseline", (0.9, (2, 6), args.uncertain))]
    healthy_cases.append(("verbose, as faithful", (0.9, (6, 12), min(1.0, 1.5 * args.uncertain))))
    for budget in budgets:
        for name, canary in healthy_cases:
            if name.startswith("verbose") and budget != 1:
                continue
            v, n_c, miss = run(args.healthy, budget, canary)
            fail = (v == -1).any(axis=1)
            rate = fail.mean()
            se = math.sqrt(rate * (1 - rate) / len(fail))
            shown = f"{rate:.2%} ± {se:.2%}" if rate > 0 else f"0 (95 % bound {3 / len(fail):.2%})"
            passed = first_look(v == 1)
            reached = (passed[:, None] >= 0) & (passed[:, None] <= np.arange(looks)[None, :])
            mins = quantiles(passed, minutes[passed.clip(0)], f">{minutes[-1]:.0f}", (50, 90, 99))
            print(
                f"| {budget * VERDICTS_PER_LOOK:.0f} ({budget:g}x) | {boost:g} | {name} | "
                f"{n_c[:, -1].mean() / looks:.1f} | {len(v)} | {shown} | {shares(reached)} | "
                f"{shares(v == 1)} | {mins} | {miss.mean():.2%} |",
                flush=True,
            )
    print()
    print("worse canary (90 % faithful baseline; the canary's share from the rollout's start)")
    print(
        f"| verdicts/5m | boost | canary | score drop | rollouts | worse by {at_hours} | "
        "judged canary traces to worse (median, p90) | minutes to worse (median, p90) | "
        "ever not worse |"
    )
    print("|---|---|---|---|---|---|---|---|---|")

    def mean(faithful):
        values, p = verdicts(faithful)
        return values @ p

    for drop in drops:
        for budget in budgets:
            v, n_c, _ = run(args.worse, budget, (drop, (2, 6), args.uncertain))
            first = first_look(v == -1)
            at = first.clip(0)
            n_at = n_c[np.arange(len(v)), at]
            caught = (first[:, None] >= 0) & (first[:, None] <= np.arange(looks)[None, :])
            traces = quantiles(first, n_at, f">{np.median(n_c[:, -1]):.0f}")
            mins = quantiles(first, minutes[at], f">{minutes[-1]:.0f}")
            print(
                f"| {budget * VERDICTS_PER_LOOK:.0f} ({budget:g}x) | {boost:g} | "
                f"90 -> {drop:.0%} | {mean(0.9) - mean(drop):.3f} | {len(v)} | {shares(caught)} | "
                f"{traces} | {mins} | {(v == 1).any(axis=1).mean():.1%} |",
                flush=True,
            )
    print()
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
