//! The variant comparison's families: each candidate's arm and the baseline's arm over the same
//! span (the candidate's comparison on this replica), as sums the rules pool across replicas, and
//! the traffic of every variant.
//!
//! The arms' sums are gauges, not counters: each is what this replica counted since the
//! candidate's comparison started here, and starts again at zero when the comparison restarts (the
//! candidate returns after an idle spell: a new rollout). Summed across replicas they are the
//! install's sums since the rollout began; a replica that restarts drops out of the sums, which
//! widens the interval and never biases it.

use prometheus::{Gauge, GaugeVec, IntCounter, IntGauge, Registry};

use super::family::{counter, gauge, single};
use crate::dimensions::{JudgeKind, Quality};

/// Label values of `arm`: the candidate's own traces, and the baseline's traces over the same span.
pub(crate) const ARMS: [&str; 2] = ["candidate", "baseline"];
/// Index of the candidate arm in [`ARMS`].
pub(crate) const CANDIDATE: usize = 0;
/// Index of the baseline arm in [`ARMS`].
pub(crate) const BASELINE: usize = 1;

/// Label values of `term` of `ragwatch_comparison_terms`: with w = 1/(inclusion probability) and
/// y the score, `n` = count, `w` = sum w, `wy` = sum w*y, `ww` = sum w^2, `wwy` = sum w^2*y,
/// `wwyy` = sum w^2*y^2. The weighted mean and its variance follow from them.
pub(crate) const TERMS: [&str; 6] = ["n", "w", "wy", "ww", "wwy", "wwyy"];

/// One arm's series, resolved at start.
#[derive(Debug, Clone)]
pub(crate) struct ArmSeries {
    /// Traces arrived (`state="arrived"`).
    pub arrived: Gauge,
    /// Sum of 1/(inclusion probability) of the traces the sampled judge judged (`state="judged_weight"`).
    pub judged_weight: Gauge,
    /// By [`Quality::ALL`], then [`TERMS`].
    pub terms: Vec<[Gauge; TERMS.len()]>,
}

impl ArmSeries {
    /// The series of one arm, `[stratum, variant, arm]`, of `traces` and `terms` (the families of
    /// [`ComparisonMetrics::register`]).
    fn of(
        traces: &GaugeVec,
        terms: &GaugeVec,
        d: &Dimensions<'_>,
        [stratum, variant, arm]: [&str; 3],
    ) -> Self {
        let state = |st: &str| traces.with_label_values(&[stratum, variant, arm, st]);
        ArmSeries {
            arrived: state("arrived"),
            judged_weight: state("judged_weight"),
            terms: Quality::ALL
                .iter()
                .map(|metric| {
                    TERMS.map(|term| {
                        terms.with_label_values(&[
                            stratum,
                            variant,
                            arm,
                            metric.name(),
                            d.judge.name(),
                            d.judge_model,
                            term,
                        ])
                    })
                })
                .collect(),
        }
    }

    /// Adds one judged score `y` of weight `w` for `metric`.
    pub fn add_score(&self, metric: Quality, w: f64, y: f64) {
        let Some(i) = Quality::ALL.iter().position(|m| *m == metric) else {
            return;
        };
        let values = [1.0, w, w * y, w * w, w * w * y, w * w * y * y];
        for (g, v) in self.terms[i].iter().zip(values) {
            g.add(v);
        }
    }

    /// Sets every sum to zero (a comparison starts again).
    pub fn reset(&self) {
        self.arrived.set(0.0);
        self.judged_weight.set(0.0);
        for g in self.terms.iter().flatten() {
            g.set(0.0);
        }
    }
}

/// The families and every series of the declared strata and candidates.
#[derive(Debug, Clone)]
pub(crate) struct ComparisonMetrics {
    /// By stratum, then candidate (declared order), then [`ARMS`].
    arms: Vec<Vec<[ArmSeries; 2]>>,
    /// By candidate.
    pub started: Vec<Gauge>,
    /// By stratum, then variant label value.
    traffic: Vec<Vec<IntCounter>>,
}

/// What the families are made for.
pub(crate) struct Dimensions<'a> {
    pub strata: &'a [String],
    /// Every `variant` label value (declared, `other`, `unknown`).
    pub variants: &'a [String],
    /// The candidates, as label values.
    pub candidates: &'a [String],
    /// The sampled judge, whose verdicts the arms hold.
    pub judge: JudgeKind,
    /// Its identity (`ragwatch_judge_info{model}`).
    pub judge_model: &'a str,
}

/// The comparison's settings, exported for the rules and the rollout gates.
pub(crate) struct Settings<'a> {
    pub margin: f64,
    pub min_judged: u64,
    pub deadline_secs: u64,
    /// Declared traffic shares, by candidate label value.
    pub shares: &'a [(String, f64)],
}

impl ComparisonMetrics {
    /// Registers the families on `r` and creates every series at zero.
    pub fn register(r: &Registry, d: &Dimensions<'_>, s: &Settings<'_>) -> Self {
        register_settings(r, s);
        let traces = gauge(
            r,
            "ragwatch_comparison_traces",
            "Traces in an arm of a variant comparison since it started on this replica: state=arrived (every trace), judged_weight (sum of 1/inclusion probability over the traces the sampled judge judged). variant: the candidate compared; arm: its own traces or the baseline's over the same span. Sum across replicas.",
            &["stratum", "variant", "arm", "state"],
        );
        let terms = gauge(
            r,
            "ragwatch_comparison_terms",
            "Sums of the sampled judge's scores in an arm of a variant comparison since it started on this replica, by term (n, w, wy, ww, wwy, wwyy; w = 1/inclusion probability, y = score). Sum across replicas.",
            &[
                "stratum",
                "variant",
                "arm",
                "metric",
                "judge",
                "judge_model",
                "term",
            ],
        );
        let started = gauge(
            r,
            "ragwatch_comparison_started_timestamp_seconds",
            "When this replica's comparison of a candidate variant with the baseline started (its first trace, or its return after variants.restart_after_idle_secs); 0 before.",
            &["variant"],
        );
        let traffic = counter(
            r,
            "ragwatch_variant_traces_total",
            "Traces by variant (declared, other: an undeclared value, unknown: none) and stratum.",
            &["stratum", "variant"],
        );
        let arms = d
            .strata
            .iter()
            .map(|stratum| {
                d.candidates
                    .iter()
                    .map(|variant| {
                        ARMS.map(|arm| ArmSeries::of(&traces, &terms, d, [stratum, variant, arm]))
                    })
                    .collect()
            })
            .collect();
        let started = d
            .candidates
            .iter()
            .map(|v| started.with_label_values(&[v.as_str()]))
            .collect();
        let traffic = d
            .strata
            .iter()
            .map(|stratum| {
                d.variants
                    .iter()
                    .map(|v| traffic.with_label_values(&[stratum.as_str(), v.as_str()]))
                    .collect()
            })
            .collect();
        Self {
            arms,
            started,
            traffic,
        }
    }

    /// The arms of candidate number `candidate` (declared order) in `stratum`.
    pub fn arms(&self, stratum: usize, candidate: usize) -> Option<&[ArmSeries; 2]> {
        self.arms.get(stratum)?.get(candidate)
    }

    /// Counts one trace of `variant` (index into the variant label values) in `stratum`.
    pub fn count_traffic(&self, stratum: usize, variant: usize) {
        if let Some(c) = self.traffic.get(stratum).and_then(|t| t.get(variant)) {
            c.inc();
        }
    }

    /// Sets every sum of every arm of candidate number `candidate` to zero.
    pub fn reset_candidate(&self, candidate: usize) {
        for stratum in &self.arms {
            if let Some(arms) = stratum.get(candidate) {
                arms.iter().for_each(ArmSeries::reset);
            }
        }
    }
}

/// Registers the comparison's settings, for the rules and the rollout gates, and sets them.
fn register_settings(r: &Registry, s: &Settings<'_>) {
    let margin = single(
        r,
        Gauge::new(
            "ragwatch_comparison_margin_ratio",
            "variants.margin: a candidate is worse when confidently worse than the baseline by more than this.",
        ),
    );
    let min_judged = single(
        r,
        IntGauge::new(
            "ragwatch_comparison_min_judged",
            "variants.min_judged: judged traces each arm needs before a verdict.",
        ),
    );
    let deadline = single(
        r,
        IntGauge::new(
            "ragwatch_comparison_deadline_seconds",
            "variants.deadline_secs: how long a rollout gate waits on an undecided comparison.",
        ),
    );
    margin.set(s.margin);
    min_judged.set(i64::try_from(s.min_judged).unwrap_or(i64::MAX));
    deadline.set(i64::try_from(s.deadline_secs).unwrap_or(i64::MAX));
    if !s.shares.is_empty() {
        let share: GaugeVec = gauge(
            r,
            "ragwatch_comparison_expected_share_ratio",
            "variants.share: a candidate's declared share of the traffic (candidate and baseline).",
            &["variant"],
        );
        for (v, x) in s.shares {
            share.with_label_values(&[v.as_str()]).set(*x);
        }
    }
}
