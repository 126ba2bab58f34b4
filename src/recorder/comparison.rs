//! The variant comparison: each trace's variant counted, and each candidate's traces and the
//! baseline's over the same span summed into the candidate's two arms, from the candidate's first
//! trace on this replica (or its return after `variants.restart_after_idle_secs`: a new rollout).
//! The sampled judge's scores enter with the inverse of their inclusion probability as weight, so
//! tiered sampling (uncertain traces sampled more) biases neither arm. The rules pool the arms
//! across replicas and decide worse, undecided or not worse.

use std::sync::Mutex;

use prometheus::Registry;

use crate::dimensions::{JudgeKind, Quality, StratumId};
use crate::judge::Verdict;
use crate::metrics::comparison::{
    ArmSeries, BASELINE, CANDIDATE, ComparisonMetrics, Dimensions, Settings,
};
use crate::sample::variant::config::VariantsConfig;
use crate::sample::{VariantId, Variants};
use crate::trace::Trace;

/// Variants on: who served each trace, and the arms of every candidate's comparison.
#[derive(Debug)]
pub(crate) struct Comparisons {
    variants: Variants,
    /// The candidates' variant ids, in declared order (the metrics' candidate index).
    candidates: Vec<VariantId>,
    metrics: ComparisonMetrics,
    restart_after_ms: u64,
    /// By candidate: when its comparison started here and when it was last seen (ms).
    epochs: Mutex<Vec<Option<Epoch>>>,
}

#[derive(Debug, Clone, Copy)]
struct Epoch {
    last_seen_ms: u64,
}

impl Comparisons {
    /// Registers the comparison's families on `registry`; `None` when variants are off.
    pub fn new(
        config: &VariantsConfig,
        strata: &[String],
        judge: JudgeKind,
        judge_model: &str,
        registry: &Registry,
    ) -> Option<Self> {
        let variants = Variants::new(config)?;
        let candidates: Vec<VariantId> = variants.candidates().collect();
        let names: Vec<String> = candidates
            .iter()
            .map(|&v| variants.name(v).to_owned())
            .collect();
        let shares: Vec<(String, f64)> =
            config.share.iter().map(|(v, s)| (v.clone(), *s)).collect();
        let metrics = ComparisonMetrics::register(
            registry,
            &Dimensions {
                strata,
                variants: variants.names(),
                candidates: &names,
                judge,
                judge_model,
            },
            &Settings {
                margin: config.margin,
                min_judged: config.min_judged,
                deadline_secs: config.deadline_secs,
                shares: &shares,
            },
        );
        Some(Self {
            epochs: Mutex::new(vec![None; candidates.len()]),
            candidates,
            variants,
            metrics,
            restart_after_ms: config.restart_after_idle_secs.saturating_mul(1000),
        })
    }

    /// The variant of `trace`.
    fn variant(&self, trace: &Trace) -> VariantId {
        self.variants.assign(trace)
    }

    /// One trace arrived (every trace, once): its variant's traffic, and the arrivals of the arms
    /// it belongs to. A candidate's first trace, or its first after an idle spell, starts its
    /// comparison: both arms from zero. Returns whether the trace is a candidate's (sampled at
    /// the boost).
    pub fn arrive(&self, stratum: StratumId, trace: &Trace, now_ms: u64) -> bool {
        let variant = self.variant(trace);
        self.metrics.count_traffic(stratum, variant);
        let mut epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = self.candidates.iter().position(|&c| c == variant) {
            let idle = epochs[k]
                .is_none_or(|e| now_ms.saturating_sub(e.last_seen_ms) > self.restart_after_ms);
            if idle {
                self.metrics.reset_candidate(k);
                self.metrics.started[k].set(now_ms as f64 / 1000.0);
            }
            epochs[k] = Some(Epoch {
                last_seen_ms: now_ms,
            });
        }
        for arm in self.arms_of(&epochs, stratum, variant) {
            arm.arrived.inc();
        }
        self.variants.is_candidate(variant)
    }

    /// The sampled judge's verdict on `trace`, sampled with `probability`: into the arms the trace
    /// belongs to, weighted by 1/probability.
    pub fn judged(&self, stratum: StratumId, trace: &Trace, verdict: &Verdict, probability: f64) {
        if !(probability > 0.0 && probability <= 1.0) {
            return;
        }
        let w = 1.0 / probability;
        let variant = self.variant(trace);
        let epochs = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        for arm in self.arms_of(&epochs, stratum, variant) {
            arm.judged_weight.add(w);
            for metric in Quality::ALL {
                if let Some(y) = verdict.score(metric) {
                    arm.add_score(metric, w, y);
                }
            }
        }
    }

    /// The arms a trace of `variant` in `stratum` counts in: its own candidate arm, or, for the
    /// baseline, the baseline arm of every comparison under way. `other` and `unknown` count in none.
    fn arms_of<'a>(
        &'a self,
        epochs: &[Option<Epoch>],
        stratum: StratumId,
        variant: VariantId,
    ) -> Vec<&'a ArmSeries> {
        let started = |k: usize| epochs[k].is_some();
        if variant == self.variants.baseline() {
            (0..self.candidates.len())
                .filter(|&k| started(k))
                .filter_map(|k| self.metrics.arms(stratum, k).map(|a| &a[BASELINE]))
                .collect()
        } else {
            self.candidates
                .iter()
                .position(|&c| c == variant)
                .filter(|&k| started(k))
                .and_then(|k| self.metrics.arms(stratum, k))
                .map(|a| vec![&a[CANDIDATE]])
                .unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::metadata::Metadata;

    fn config(variants: &str) -> VariantsConfig {
        crate::section::fields::section(variants, "variants")
    }

    const VARIANTS: &str = r#"
        [variants]
        declared = ["stable", "canary"]
        baseline = "stable"
        fields = ["/release"]
        restart_after_idle_secs = 60
    "#;

    fn trace(release: &str) -> Trace {
        let mut t = Trace::of("q", &[("c", "x")], "a");
        t.metadata = Metadata::from_checked_text(&format!(r#"{{"release": "{release}"}}"#));
        t
    }

    fn value(r: &Registry, name: &str, labels: &[(&str, &str)]) -> f64 {
        r.gather()
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric().iter())
            .filter(|m| {
                labels.iter().all(|(k, v)| {
                    m.get_label()
                        .iter()
                        .any(|l| l.name() == *k && l.value() == *v)
                })
            })
            .map(|m| m.get_counter().value() + m.get_gauge().value())
            .sum()
    }

    #[test]
    fn arms_cover_the_same_span_and_weigh_by_inclusion_probability() {
        let r = Registry::new();
        let strata = ["head".to_owned()];
        let c = Comparisons::new(&config(VARIANTS), &strata, JudgeKind::Llm, "m1", &r).unwrap();
        let faithful = |x: f64| Verdict::with_faithfulness(JudgeKind::Llm, x);
        // Baseline traffic before the canary's first trace is in no arm.
        c.arrive(0, &trace("stable"), 1_000);
        c.judged(0, &trace("stable"), &faithful(1.0), 0.5);
        c.arrive(0, &trace("canary"), 2_000);
        c.arrive(0, &trace("stable"), 3_000);
        c.judged(0, &trace("stable"), &faithful(0.5), 0.25);
        c.judged(0, &trace("canary"), &faithful(1.0), 1.0);
        c.arrive(0, &trace("v9"), 3_000);
        let arm = |arm: &str, state: &str| {
            value(
                &r,
                "ragwatch_comparison_traces",
                &[("arm", arm), ("state", state), ("variant", "canary")],
            )
        };
        assert_eq!(arm("candidate", "arrived"), 1.0);
        assert_eq!(arm("baseline", "arrived"), 1.0);
        assert_eq!(arm("baseline", "judged_weight"), 4.0);
        let term = |arm: &str, term: &str| {
            value(
                &r,
                "ragwatch_comparison_terms",
                &[
                    ("arm", arm),
                    ("term", term),
                    ("metric", "faithfulness"),
                    ("judge", "llm"),
                    ("judge_model", "m1"),
                ],
            )
        };
        for (t, want) in [
            ("n", 1.0),
            ("w", 4.0),
            ("wy", 2.0),
            ("ww", 16.0),
            ("wwy", 8.0),
            ("wwyy", 4.0),
        ] {
            assert_eq!(term("baseline", t), want, "{t}");
        }
        assert_eq!(term("candidate", "wy"), 1.0);
        let traffic = |v: &str| value(&r, "ragwatch_variant_traces_total", &[("variant", v)]);
        assert_eq!(
            (traffic("stable"), traffic("canary"), traffic("other")),
            (2.0, 1.0, 1.0)
        );
        assert_eq!(
            value(&r, "ragwatch_comparison_started_timestamp_seconds", &[]),
            2.0
        );
        // Seen within the idle limit: the same comparison; after it, a new one from zero.
        c.arrive(0, &trace("canary"), 50_000);
        assert_eq!(arm("candidate", "arrived"), 2.0);
        c.arrive(0, &trace("canary"), 200_000);
        assert_eq!(arm("candidate", "arrived"), 1.0);
        assert_eq!(arm("baseline", "arrived"), 0.0);
        assert_eq!(term("baseline", "n"), 0.0);
        assert_eq!(
            value(&r, "ragwatch_comparison_started_timestamp_seconds", &[]),
            200.0
        );
    }

    #[test]
    fn off_without_declared_variants() {
        let r = Registry::new();
        let c = Comparisons::new(&config(""), &["head".into()], JudgeKind::Llm, "m", &r);
        assert!(c.is_none());
        assert!(r.gather().is_empty());
    }
}
