//! Drift: the rules that turn window statistics into "this stratum's answers stopped being grounded".
//!
//! Both rules compare a confidence bound, not the raw mean, so a noisy small window does not page
//! anyone, and both stay quiet below the minimum sample count.

use super::WindowStats;
use crate::config::DriftRule;

/// A drift rule; a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// The short window is confidently below the floor.
    Floor,
    /// The short window is confidently more than `max_drop` below the baseline window.
    Drop,
}

impl RuleKind {
    /// Both rules.
    pub const ALL: [RuleKind; 2] = [RuleKind::Floor, RuleKind::Drop];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Floor => "floor",
            RuleKind::Drop => "max_drop",
        }
    }
}

/// The evaluated drift state of one series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriftState {
    /// The floor rule fires.
    pub below_floor: bool,
    /// The drop rule fires.
    pub dropped: bool,
    /// The drop threshold as an absolute score: baseline mean minus `max_drop` (absent without a
    /// baseline).
    pub drop_threshold: Option<f64>,
}

impl DriftState {
    /// Evaluates `rule` on the short and baseline windows.
    pub fn evaluate(rule: &DriftRule, short: &WindowStats, baseline: &WindowStats) -> DriftState {
        let enough = short.count >= rule.min_samples;
        let below_floor = enough && short.ci_upper.is_some_and(|u| u < rule.floor);
        let drop_threshold = baseline
            .mean
            .filter(|_| baseline.count >= rule.min_samples)
            .map(|m| (m - rule.max_drop).max(0.0));
        let dropped =
            enough && matches!((short.ci_upper, drop_threshold), (Some(u), Some(t)) if u < t);
        DriftState {
            below_floor,
            dropped,
            drop_threshold,
        }
    }

    /// Whether `kind` fires.
    pub fn active(&self, kind: RuleKind) -> bool {
        match kind {
            RuleKind::Floor => self.below_floor,
            RuleKind::Drop => self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Ring;

    const RULE: DriftRule = DriftRule {
        floor: 0.7,
        max_drop: 0.1,
        min_samples: 30,
    };

    fn stats(values: &[f64]) -> WindowStats {
        let mut r = Ring::new(60_000, 6);
        for v in values {
            r.record(*v, 0);
        }
        r.stats(0, 1.645)
    }

    #[test]
    fn floor_needs_samples_and_confidence() {
        let base = stats(&[0.9; 100]);
        assert!(
            !DriftState::evaluate(&RULE, &stats(&[0.2; 10]), &base).below_floor,
            "too few"
        );
        assert!(DriftState::evaluate(&RULE, &stats(&[0.2; 40]), &base).below_floor);
        // A mean just under the floor with a wide spread is not confidently below.
        let noisy: Vec<f64> = (0..30)
            .map(|i| if i % 2 == 0 { 0.3 } else { 1.0 })
            .collect();
        assert!(!DriftState::evaluate(&RULE, &stats(&noisy), &base).below_floor);
    }

    #[test]
    fn drop_compares_against_baseline() {
        let base = stats(&[0.95; 200]);
        let s = DriftState::evaluate(&RULE, &stats(&[0.75; 50]), &base);
        assert!(s.dropped && !s.below_floor);
        assert!((s.drop_threshold.unwrap() - 0.85).abs() < 1e-9);
        assert!(!DriftState::evaluate(&RULE, &stats(&[0.9; 50]), &base).dropped);
        // No baseline yet: no drop rule.
        assert!(!DriftState::evaluate(&RULE, &stats(&[0.1; 50]), &stats(&[])).dropped);
    }
}
