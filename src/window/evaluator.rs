//! The evaluator: turns window state into gauges (mean, samples, confidence bounds) and drift state,
//! every `windows.evaluate_interval_ms`. Window gauges are removed while their window is empty, so no
//! NaN is ever exported.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{DriftState, RuleKind};
use crate::config::Config;
use crate::judge::{JudgeKind, Metric};
use crate::pipeline::{Shared, now_ms};

/// Sets the static threshold gauges once.
pub fn export_thresholds(config: &Config, shared: &Shared) {
    let m = &shared.metrics;
    for stratum in shared.stratifier.names() {
        for metric in Metric::ALL {
            let rule = config.drift_rule(metric, stratum);
            m.threshold
                .with_label_values(&[metric.name(), stratum, RuleKind::Floor.name()])
                .set(rule.floor);
            m.threshold
                .with_label_values(&[metric.name(), stratum, RuleKind::Drop.name()])
                .set(rule.max_drop);
            m.min_samples
                .with_label_values(&[metric.name(), stratum])
                .set(rule.min_samples as i64);
        }
    }
}

/// Recomputes every window gauge and drift flag at `now_ms`.
pub fn evaluate_once(config: &Config, shared: &Shared, judges: &[JudgeKind], now: u64) {
    let m = &shared.metrics;
    let w = &config.windows;
    let windows = shared.windows.lock().unwrap_or_else(|p| p.into_inner());
    for (stratum_id, stratum) in shared.stratifier.names().iter().enumerate() {
        for &judge in judges {
            // (metric, below its floor) for the metrics with enough samples in the short window.
            let mut low: Vec<(Metric, bool)> = Vec::new();
            for metric in Metric::ALL {
                for &secs in &w.window_secs {
                    let Some(s) = windows.stats(metric, judge, stratum_id, secs, now, w.z) else {
                        continue;
                    };
                    let window = super::window_label(secs);
                    let labels = [
                        metric.name(),
                        stratum.as_str(),
                        judge.name(),
                        window.as_str(),
                    ];
                    m.window_samples
                        .with_label_values(&labels)
                        .set(s.count as i64);
                    match (s.mean, s.ci_lower, s.ci_upper) {
                        (Some(mean), Some(lo), Some(hi)) => {
                            m.window_mean.with_label_values(&labels).set(mean);
                            m.window_ci_lower.with_label_values(&labels).set(lo);
                            m.window_ci_upper.with_label_values(&labels).set(hi);
                        }
                        _ => {
                            let _ = m.window_mean.remove_label_values(&labels);
                            let _ = m.window_ci_lower.remove_label_values(&labels);
                            let _ = m.window_ci_upper.remove_label_values(&labels);
                        }
                    }
                }
                let short = windows.stats(metric, judge, stratum_id, w.short_secs, now, w.z);
                let rule = config.drift_rule(metric, stratum);
                if let Some(s) = short.filter(|s| s.count >= rule.min_samples) {
                    low.push((metric, s.mean.is_some_and(|m| m < rule.floor)));
                }
                let base = windows.stats(metric, judge, stratum_id, w.baseline_secs, now, w.z);
                if let (Some(short), Some(base)) = (short, base) {
                    let state =
                        DriftState::evaluate(&config.drift_rule(metric, stratum), &short, &base);
                    for rule in RuleKind::ALL {
                        m.drift_active
                            .with_label_values(&[metric.name(), stratum, judge.name(), rule.name()])
                            .set(i64::from(state.active(rule)));
                    }
                }
            }
            let blamed = diagnose(&low);
            for stage in STAGES {
                m.diagnosis
                    .with_label_values(&[stratum, judge.name(), stage])
                    .set(i64::from(blamed == Some(stage)));
            }
        }
    }
}

/// The `stage` label values of `ragwatch_diagnosis`.
pub const STAGES: [&str; 3] = ["retrieval", "generation", "prompt"];

/// Which stage to look at, from which metrics are below their floor (only metrics with enough samples
/// are in `low`): contexts irrelevant to the question point at retrieval; relevant contexts with an
/// unfaithful answer point at generation; both fine with an off-topic answer points at the prompt.
pub fn diagnose(low: &[(Metric, bool)]) -> Option<&'static str> {
    let state = |m: Metric| low.iter().find(|(x, _)| *x == m).map(|(_, below)| *below);
    let retrieval_ok = state(Metric::ContextRelevance) != Some(true);
    if state(Metric::ContextRelevance) == Some(true) {
        Some("retrieval")
    } else if retrieval_ok && state(Metric::Faithfulness) == Some(true) {
        Some("generation")
    } else if retrieval_ok
        && state(Metric::Faithfulness) == Some(false)
        && state(Metric::AnswerRelevancy) == Some(true)
    {
        Some("prompt")
    } else {
        None
    }
}

/// Runs [`evaluate_once`] on an interval until `stop` is cancelled.
pub async fn run_evaluator(
    config: Config,
    shared: Shared,
    judges: Vec<JudgeKind>,
    stop: CancellationToken,
) {
    export_thresholds(&config, &shared);
    let mut tick =
        tokio::time::interval(Duration::from_millis(config.windows.evaluate_interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => evaluate_once(&config, &shared, &judges, now_ms()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Metric::*;

    #[test]
    fn diagnosis_blames_the_first_failing_stage() {
        assert_eq!(
            diagnose(&[(ContextRelevance, true), (Faithfulness, true)]),
            Some("retrieval")
        );
        assert_eq!(
            diagnose(&[(ContextRelevance, false), (Faithfulness, true)]),
            Some("generation")
        );
        assert_eq!(
            diagnose(&[
                (ContextRelevance, false),
                (Faithfulness, false),
                (AnswerRelevancy, true)
            ]),
            Some("prompt")
        );
        assert_eq!(
            diagnose(&[
                (ContextRelevance, false),
                (Faithfulness, false),
                (AnswerRelevancy, false)
            ]),
            None
        );
        // Too few samples of faithfulness: no claim about the prompt.
        assert_eq!(diagnose(&[(AnswerRelevancy, true)]), None);
        assert_eq!(diagnose(&[]), None);
    }
}
