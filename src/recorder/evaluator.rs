//! The evaluator: turns window state into gauges (mean, samples, confidence bounds), the combined
//! estimate and drift state, every `windows.evaluate_interval_ms`. Window gauges are removed while
//! their window is empty, so no NaN is ever exported.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::clock::now_ms;
use crate::dimensions::{JudgeKind, Quality};
use crate::metrics::Metrics;
use crate::window::estimate::Estimate;
use crate::window::{
    DriftState, EstimateSums, RuleKind, STAGES, WindowStats, diagnose, window_label,
};

/// Sets the threshold gauges once: per (metric, stratum, judge), only the rules that are on.
pub fn export_thresholds(shared: &Shared) {
    let config = &*shared.setup;
    let m = &shared.metrics;
    m.drift.threshold_confidence_z.set(config.windows.z);
    m.drift.threshold_page_llr.set(config.windows.page_llr);
    for stratum in shared.stratifier.names() {
        for metric in Quality::ALL {
            for judge in config.ruled_judges() {
                let rule = config.drift_rule(metric, judge, stratum);
                let labels = [metric.name(), stratum.as_str(), judge.name()];
                for (kind, value) in [
                    (RuleKind::Floor, rule.floor),
                    (RuleKind::Drop, rule.max_drop),
                ] {
                    let l = [labels[0], labels[1], labels[2], kind.name()];
                    match value {
                        Some(v) => m.drift.threshold.with_label_values(&l).set(v),
                        None => {
                            let _ = m.drift.threshold.remove_label_values(&l);
                        }
                    }
                }
                if let Some(shift) = rule.shift {
                    m.drift
                        .threshold_shift_sd
                        .with_label_values(&labels)
                        .set(shift.min_sd);
                    m.drift
                        .threshold_shift_z
                        .with_label_values(&labels)
                        .set(shift.z);
                }
                if rule.any() {
                    m.drift
                        .min_samples
                        .with_label_values(&labels)
                        .set(rule.min_samples as i64);
                }
            }
        }
    }
}

/// Recomputes every window gauge, estimate and drift flag at `now`. `judges` are the judges that
/// produce verdicts in this process; the combined estimate is added when the recorder keeps it.
pub fn evaluate_once(shared: &Shared, judges: &[JudgeKind], now: u64) {
    let config = &*shared.setup;
    export_label_auroc(shared, now);
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
        if shared.setup.llm_samples() {
            let judge = JudgeKind::Combined;
            let mut low = Vec::new();
            for metric in Quality::ALL {
                let sums = |secs| windows.estimate_sums(metric, stratum_id, secs, now);
                let baseline_sums = sums(w.baseline_secs);
                for &secs in &w.window_secs {
                    let window = window_label(secs);
                    let labels = [metric.name(), stratum.as_str(), judge.name(), &window];
                    let est = sums(secs).and_then(|s| {
                        cross_fitted(&s, baseline_sums.as_ref(), w.z, secs == w.baseline_secs)
                    });
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
                let short_sums = sums(w.short_secs).unwrap_or_default();
                // The baseline without the short window: a drop does not dilute its own reference.
                let base = baseline_sums
                    .as_ref()
                    .and_then(|b| b.minus(&short_sums).estimate(w.z));
                // The short window takes the baseline's lambda (cross-fitted), as the rules do.
                let short = match &base {
                    Some(b) => short_sums.estimate_with_lambda(w.z, b.lambda),
                    None => short_sums.estimate(w.z),
                };
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
                m.drift
                    .diagnosis
                    .with_label_values(&[stratum, judge.name(), stage])
                    .set(i64::from(blamed == Some(stage)));
            }
        }
    }
}

/// A window's combined estimate: the baseline tunes its own `lambda`; a shorter window takes the
/// `lambda` of the baseline without it (cross-fitted), so a slope fitted on a few dozen pairs adds
/// no noise of its own.
fn cross_fitted(
    window: &EstimateSums,
    baseline: Option<&EstimateSums>,
    z: f64,
    is_baseline: bool,
) -> Option<Estimate> {
    let reference = baseline
        .filter(|_| !is_baseline)
        .and_then(|b| b.minus(window).estimate(z));
    match reference {
        Some(r) => window.estimate_with_lambda(z, r.lambda),
        None => window.estimate(z),
    }
}

fn set_window(m: &Metrics, labels: [&str; 4], s: &WindowStats) {
    m.window
        .samples
        .with_label_values(&labels)
        .set(s.count as i64);
    match (s.mean, s.ci_lower, s.ci_upper) {
        (Some(mean), Some(lo), Some(hi)) => {
            m.window.mean.with_label_values(&labels).set(mean);
            m.window.ci_lower.with_label_values(&labels).set(lo);
            m.window.ci_upper.with_label_values(&labels).set(hi);
        }
        _ => clear_window(m, labels),
    }
}

fn clear_window(m: &Metrics, labels: [&str; 4]) {
    let _ = m.window.mean.remove_label_values(&labels);
    let _ = m.window.ci_lower.remove_label_values(&labels);
    let _ = m.window.ci_upper.remove_label_values(&labels);
}

fn set_drift(m: &Metrics, metric: Quality, stratum: &str, judge: JudgeKind, state: &DriftState) {
    for rule in RuleKind::ALL {
        m.drift
            .active
            .with_label_values(&[metric.name(), stratum, judge.name(), rule.name()])
            .set(i64::from(state.active(rule)));
    }
}

/// Runs [`evaluate_once`] on an interval until `stop` is cancelled.
pub(crate) async fn run_evaluator(shared: Shared, judges: Vec<JudgeKind>, stop: CancellationToken) {
    evaluate_on_interval(shared, judges, stop, now_ms).await;
}

/// [`run_evaluator`] with the windows' time read from `now_ms`: the wall clock in production, a
/// clock that follows tokio's paused time in the tests. A tick that comes late (a busy runtime, a
/// stalled mutex) is not made up for with a burst: the next one is an interval after it.
async fn evaluate_on_interval(
    shared: Shared,
    judges: Vec<JudgeKind>,
    stop: CancellationToken,
    now_ms: impl Fn() -> u64,
) {
    export_thresholds(&shared);
    let interval = shared.setup.windows.evaluate_interval_ms;
    let mut tick = tokio::time::interval(Duration::from_millis(interval));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => evaluate_once(&shared, &judges, now_ms()),
        }
    }
}

/// Exports each judge's label AUROC per stratum while both classes have
/// `labels.auroc_min_per_class` labels in the window (removed otherwise, so no thin figure is
/// shown), and flags and logs a judge whose AUROC falls below `labels.auroc_floor`.
fn export_label_auroc(shared: &Shared, now: u64) {
    let config = &shared.setup;
    let Some(feedback) = &shared.feedback else {
        return;
    };
    feedback.export_user_aurocs(now);
    let m = &shared.metrics.labelled;
    let min = config.labels.auroc_min_per_class;
    for a in feedback.aurocs(now) {
        let stratum = shared.stratifier.name(a.stratum);
        let labels = [a.judge.name(), stratum];
        let enough = a.faithful >= min.max(1) && a.unfaithful >= min.max(1);
        let auroc = a.auroc.filter(|_| enough);
        let floor = config.labels.auroc_floor;
        if super::feedback::export_floored_auroc(&m.auroc, &m.below_floor, &labels, auroc, floor) {
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
    }
}

#[cfg(test)]
mod tests {
    //! The evaluator on tokio's paused clock: the windows' time follows it (a fixed wall-clock
    //! start plus the paused time elapsed), so every tick, late tick and window slide is exact.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::clock::Instant;

    use super::*;
    use crate::judge::Verdict;
    use crate::trace::Trace;

    /// Wall-clock ms at the test's start, on a bucket boundary.
    const START_MS: u64 = 1_700_000_000_000;

    /// A wall clock that moves with tokio's paused time and counts its reads: the evaluator reads
    /// it once per evaluation.
    #[derive(Clone)]
    struct PausedClock {
        start: Instant,
        reads: Arc<AtomicU64>,
    }

    impl PausedClock {
        fn new() -> Self {
            Self {
                start: Instant::now(),
                reads: Arc::default(),
            }
        }

        fn now_ms(&self) -> u64 {
            START_MS + self.start.elapsed().as_millis() as u64
        }

        /// The evaluator's clock.
        fn reader(&self) -> impl Fn() -> u64 + use<> {
            let clock = self.clone();
            move || {
                clock.reads.fetch_add(1, Ordering::SeqCst);
                clock.now_ms()
            }
        }

        fn evaluations(&self) -> u64 {
            self.reads.load(Ordering::SeqCst)
        }

        /// Moves paused time to `secs` after the start in one step (timers due meanwhile fire once,
        /// late), then lets the woken tasks run.
        async fn advance_to(&self, secs: f64) {
            let target = self.start + Duration::from_secs_f64(secs);
            tokio::time::advance(target - Instant::now()).await;
            settle().await;
        }
    }

    async fn settle() {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Windows of 10 s and 1 min in 1-s buckets, evaluated every second; a floor of 0.5 on the
    /// offline judge's faithfulness from 5 samples.
    fn config() -> crate::recorder::RecorderSetup {
        crate::recorder::RecorderSetup::from_toml(
            "[windows]\nwindow_secs = [10, 60]\nbuckets = 10\nshort_secs = 10\nbaseline_secs = 60\n\
             evaluate_interval_ms = 1000\n\
             [drift.rules.faithfulness.offline]\nfloor = 0.5\nmin_samples = 5\n",
        )
    }

    /// An evaluator of [`config`] on a fresh [`Shared`], started and past its first tick (at once).
    struct Running {
        shared: Shared,
        clock: PausedClock,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start() -> Running {
        let shared = Shared::new(config());
        let clock = PausedClock::new();
        let stop = CancellationToken::new();
        let task = tokio::spawn(evaluate_on_interval(
            shared.clone(),
            vec![JudgeKind::Offline],
            stop.clone(),
            clock.reader(),
        ));
        settle().await;
        Running {
            shared,
            clock,
            stop,
            task,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_every_interval_a_late_tick_does_not_burst_and_cancel_stops_it() {
        let Running {
            clock, stop, task, ..
        } = start().await;
        assert_eq!(clock.evaluations(), 1, "the first tick is at once");
        for s in 1..=5u32 {
            clock.advance_to(f64::from(s)).await;
            assert_eq!(clock.evaluations(), 1 + u64::from(s), "at {s} s");
        }
        // A stall: nothing runs from 5 s to 9.5 s. The ticks of 6, 7, 8 and 9 s are one late
        // tick at 9.5 s, and the next is an interval after it (10.5 s), not at 10 s.
        clock.advance_to(9.5).await;
        assert_eq!(
            clock.evaluations(),
            7,
            "one evaluation for the stall, not four"
        );
        clock.advance_to(10.4).await;
        assert_eq!(
            clock.evaluations(),
            7,
            "the schedule moved with the late tick"
        );
        clock.advance_to(10.5).await;
        assert_eq!(clock.evaluations(), 8);
        stop.cancel();
        settle().await;
        assert!(task.is_finished(), "cancelled, it stops at once");
        task.await.unwrap();
        clock.advance_to(60.0).await;
        assert_eq!(clock.evaluations(), 8, "no evaluation after the stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_floor_raises_at_min_samples_and_clears_when_the_window_slides_past_them() {
        let Running {
            shared,
            clock,
            stop,
            task,
        } = start().await;
        let m = Arc::clone(&shared.metrics);
        let stratum = shared.stratifier.name(0).to_owned();
        let floor = || {
            m.drift
                .active
                .with_label_values(&["faithfulness", &stratum, "offline", "floor"])
                .get()
        };
        let samples = |window: &str| {
            m.window
                .samples
                .with_label_values(&["faithfulness", &stratum, "offline", window])
                .get()
        };
        let bad = Verdict::with_faithfulness(JudgeKind::Offline, 0.0);
        let trace = Trace::of("q", &[], "a");
        clock.advance_to(0.5).await;
        for _ in 0..4 {
            shared.record(0, &bad, &trace, clock.now_ms());
        }
        clock.advance_to(1.0).await;
        assert_eq!((samples("10s"), floor()), (4, 0), "4 of 5 samples: quiet");
        clock.advance_to(1.2).await;
        shared.record(0, &bad, &trace, clock.now_ms());
        assert_eq!(floor(), 0, "raised by an evaluation, not by the record");
        clock.advance_to(2.0).await;
        assert_eq!((samples("10s"), floor()), (5, 1), "the fifth bad verdict");
        for s in 3..=9 {
            clock.advance_to(f64::from(s)).await;
            assert_eq!(floor(), 1, "still in the window at {s} s");
        }
        // At 10 s the bucket of 0-1 s (four of the five) leaves the 10-s window.
        clock.advance_to(10.0).await;
        assert_eq!((samples("10s"), floor()), (1, 0), "cleared as they left");
        clock.advance_to(11.0).await;
        assert_eq!(
            (samples("10s"), samples("1m")),
            (0, 5),
            "the long window keeps them"
        );
        clock.advance_to(61.0).await;
        assert_eq!(samples("1m"), 0);
        stop.cancel();
        task.await.unwrap();
    }
}
