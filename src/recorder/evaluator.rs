//! The evaluator: turns window state into gauges (mean, samples, confidence bounds), the combined
//! estimate and drift state, every `windows.evaluate_interval_ms`. Window gauges are removed while
//! their window is empty, so no NaN is ever exported.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::clock::now_ms;
use crate::config::Config;
use crate::dimensions::{JudgeKind, Quality};
use crate::metrics::Metrics;
use crate::window::{DriftState, RuleKind, STAGES, WindowStats, diagnose, window_label};

/// Sets the threshold gauges once: per (metric, stratum, judge), only the rules that are on.
pub fn export_thresholds(config: &Config, shared: &Shared) {
    let m = &shared.metrics;
    m.threshold_confidence_z.set(config.windows.z);
    for stratum in shared.stratifier.names() {
        for metric in Quality::ALL {
            for judge in JudgeKind::RULED {
                let rule = config.drift_rule(metric, judge, stratum);
                let labels = [metric.name(), stratum.as_str(), judge.name()];
                for (kind, value) in [
                    (RuleKind::Floor, rule.floor),
                    (RuleKind::Drop, rule.max_drop),
                ] {
                    let l = [labels[0], labels[1], labels[2], kind.name()];
                    match value {
                        Some(v) => m.threshold.with_label_values(&l).set(v),
                        None => {
                            let _ = m.threshold.remove_label_values(&l);
                        }
                    }
                }
                if let Some(shift) = rule.shift {
                    m.threshold_shift_sd
                        .with_label_values(&labels)
                        .set(shift.min_sd);
                    m.threshold_shift_z.with_label_values(&labels).set(shift.z);
                }
                if rule.any() {
                    m.min_samples
                        .with_label_values(&labels)
                        .set(rule.min_samples as i64);
                }
            }
        }
    }
}

/// Recomputes every window gauge, estimate and drift flag at `now`. `judges` are the judges that
/// produce verdicts in this process; the combined estimate is added when the recorder keeps it.
pub fn evaluate_once(config: &Config, shared: &Shared, judges: &[JudgeKind], now: u64) {
    export_label_auroc(config, shared, now);
    let m = &shared.metrics;
    let w = &config.windows;
    let windows = shared.windows.lock().unwrap_or_else(|p| p.into_inner());
    for (stratum_id, stratum) in shared.stratifier.names().iter().enumerate() {
        let mut evaluated: Vec<(JudgeKind, Vec<(Quality, bool)>)> = Vec::new();
        for &judge in judges {
            let mut low = Vec::new();
            for metric in Quality::ALL {
                for &secs in &w.window_secs {
                    if let Some(s) = windows.stats(metric, judge, stratum_id, secs, now, w.z) {
                        let window = window_label(secs);
                        set_window(m, [metric.name(), stratum, judge.name(), &window], &s);
                    }
                }
                let rule = config.drift_rule(metric, judge, stratum);
                let short = windows.stats(metric, judge, stratum_id, w.short_secs, now, w.z);
                let base = windows.stats(metric, judge, stratum_id, w.baseline_secs, now, w.z);
                if let (Some(short), Some(base)) = (short, base) {
                    let state = DriftState::evaluate(&rule, &short, &base, w.z);
                    set_drift(m, metric, stratum, judge, &state);
                    if short.count >= rule.min_samples {
                        low.push((metric, state.any()));
                    }
                }
            }
            evaluated.push((judge, low));
        }
        if shared.estimate {
            let judge = JudgeKind::Combined;
            let mut low = Vec::new();
            for metric in Quality::ALL {
                for &secs in &w.window_secs {
                    let window = window_label(secs);
                    let labels = [metric.name(), stratum.as_str(), judge.name(), &window];
                    let est = windows
                        .estimate_sums(metric, stratum_id, secs, now)
                        .and_then(|s| s.estimate(w.z));
                    let stats = est.map(|e| WindowStats {
                        count: e.pairs,
                        mean: Some(e.mean),
                        ci_lower: Some(e.lower),
                        ci_upper: Some(e.upper),
                        moments: Default::default(),
                    });
                    match stats {
                        Some(s) => set_window(m, labels, &s),
                        None => clear_window(m, labels),
                    }
                }
                let rule = config.drift_rule(metric, judge, stratum);
                let sums = |secs| windows.estimate_sums(metric, stratum_id, secs, now);
                let short_sums = sums(w.short_secs).unwrap_or_default();
                let short = short_sums.estimate(w.z);
                // The baseline without the short window: a drop does not dilute its own reference.
                let base = sums(w.baseline_secs).and_then(|b| b.minus(&short_sums).estimate(w.z));
                let state = DriftState::evaluate_estimate(&rule, short.as_ref(), base.as_ref());
                set_drift(m, metric, stratum, judge, &state);
                if short.is_some_and(|s| s.pairs >= rule.min_samples) {
                    low.push((metric, state.any()));
                }
            }
            evaluated.push((judge, low));
        }
        for (judge, low) in evaluated {
            let blamed = diagnose(&low);
            for stage in STAGES {
                m.diagnosis
                    .with_label_values(&[stratum, judge.name(), stage])
                    .set(i64::from(blamed == Some(stage)));
            }
        }
    }
}

fn set_window(m: &Metrics, labels: [&str; 4], s: &WindowStats) {
    m.window_samples
        .with_label_values(&labels)
        .set(s.count as i64);
    match (s.mean, s.ci_lower, s.ci_upper) {
        (Some(mean), Some(lo), Some(hi)) => {
            m.window_mean.with_label_values(&labels).set(mean);
            m.window_ci_lower.with_label_values(&labels).set(lo);
            m.window_ci_upper.with_label_values(&labels).set(hi);
        }
        _ => clear_window(m, labels),
    }
}

fn clear_window(m: &Metrics, labels: [&str; 4]) {
    let _ = m.window_mean.remove_label_values(&labels);
    let _ = m.window_ci_lower.remove_label_values(&labels);
    let _ = m.window_ci_upper.remove_label_values(&labels);
}

fn set_drift(m: &Metrics, metric: Quality, stratum: &str, judge: JudgeKind, state: &DriftState) {
    for rule in RuleKind::ALL {
        m.drift_active
            .with_label_values(&[metric.name(), stratum, judge.name(), rule.name()])
            .set(i64::from(state.active(rule)));
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

/// Exports each judge's label AUROC per stratum while both classes have
/// `labels.auroc_min_per_class` labels in the window (removed otherwise, so no thin figure is
/// shown), and flags and logs a judge whose AUROC falls below `labels.auroc_floor`.
fn export_label_auroc(config: &Config, shared: &Shared, now: u64) {
    let Some(feedback) = &shared.feedback else {
        return;
    };
    let m = &shared.metrics.labelled;
    let min = config.labels.auroc_min_per_class;
    for a in feedback.aurocs(now) {
        let stratum = shared.stratifier.name(a.stratum);
        let labels = [a.judge.name(), stratum];
        let enough = a.faithful >= min.max(1) && a.unfaithful >= min.max(1);
        let auroc = a.auroc.filter(|_| enough);
        let below =
            auroc.is_some_and(|v| config.labels.auroc_floor > 0.0 && v < config.labels.auroc_floor);
        match auroc {
            Some(v) => m.auroc.with_label_values(&labels).set(v),
            None => {
                let _ = m.auroc.remove_label_values(&labels);
            }
        }
        let flag = m.below_floor.with_label_values(&labels);
        if below && flag.get() == 0 {
            tracing::warn!(
                judge = a.judge.name(),
                stratum,
                auroc = auroc.unwrap_or_default(),
                floor = config.labels.auroc_floor,
                faithful = a.faithful,
                unfaithful = a.unfaithful,
                "judge disagrees with human labels: its scores barely separate faithful from unfaithful answers"
            );
        }
        flag.set(i64::from(below));
    }
}
