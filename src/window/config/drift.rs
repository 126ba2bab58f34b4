//! Drift rules, keyed by (metric, judge), overridable per stratum.
//!
//! Judges do not share a scale, so no rule is shared between them. The built-in defaults
//! ([`DriftRule::builtin`]):
//! - `offline`: no absolute floor or drop (its score is a model probability on a compressed scale
//!   whose calibration does not carry from one service to another); a scale-free *shift* rule
//!   instead: the short window against the stratum's own baseline, a two-sample z test on the means
//!   with a minimum effect size in the baseline's standard deviations.
//! - `combined` (the prediction-powered estimate of the LLM judge's mean): an absolute floor and a
//!   maximum drop against the baseline, both on the LLM judge's scale.
//! - `llm` (the raw, unweighted sample mean, biased toward the traces tiering boosts): no rule by
//!   default; set one explicitly if the sample is uniform.
//!
//! In TOML: `[drift.rules.faithfulness.combined] floor = 0.75` and
//! `[drift.overrides.tail.faithfulness.combined] min_samples = 10`. Only the keys given replace the
//! built-in value; `floor = 0`, `max_drop = 1` and `shift_z = 0` switch a rule off.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dimensions::{JudgeKind, Quality};

/// Rules per metric and judge, and per-stratum overrides.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftConfig {
    /// `[drift.rules.<metric>.<judge>]`: changes to the built-in rule, for every stratum.
    #[serde(default)]
    pub rules: BTreeMap<Quality, BTreeMap<JudgeKind, RuleOverride>>,
    /// `[drift.overrides.<stratum>.<metric>.<judge>]`: changes for one stratum, applied last.
    #[serde(default)]
    pub overrides: BTreeMap<String, BTreeMap<Quality, BTreeMap<JudgeKind, RuleOverride>>>,
}

/// The keys of one rule that a config section sets; absent keys keep the value below them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleOverride {
    /// Absolute floor of the short window's mean (fires when its upper confidence bound is below).
    #[serde(default)]
    pub floor: Option<f64>,
    /// Largest allowed absolute drop of the short window below the baseline's mean.
    #[serde(default)]
    pub max_drop: Option<f64>,
    /// Shift rule: minimum effect size, in baseline standard deviations.
    #[serde(default)]
    pub shift_sd: Option<f64>,
    /// Shift rule: critical z of the one-sided two-sample test.
    #[serde(default)]
    pub shift_z: Option<f64>,
    /// No rule fires with fewer samples than this in the short window (and, for drops and shifts,
    /// in the baseline). For `combined` and `llm` it counts LLM-judged samples.
    #[serde(default)]
    pub min_samples: Option<u64>,
}

/// The scale-free shift rule's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShiftRule {
    /// Minimum effect size, in baseline standard deviations.
    pub min_sd: f64,
    /// Critical z of the one-sided two-sample test.
    pub z: f64,
}

/// The effective rule of one (metric, judge, stratum); a rule that is off is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DriftRule {
    /// Absolute floor on the judge's own scale.
    pub floor: Option<f64>,
    /// Largest allowed absolute drop below the baseline mean.
    pub max_drop: Option<f64>,
    /// The scale-free shift rule.
    pub shift: Option<ShiftRule>,
    /// Minimum samples before any rule fires.
    pub min_samples: u64,
}

impl DriftRule {
    /// The built-in rule of `metric` for `judge` (see the module docs for why).
    pub(crate) fn builtin(metric: Quality, judge: JudgeKind) -> RuleOverride {
        match judge {
            // The classifier's probabilities are not on the LLM judge's scale: like the offline
            // judge, it gets the scale-free shift rule, not a floor.
            JudgeKind::Offline | JudgeKind::Classifier => RuleOverride {
                floor: None,
                max_drop: None,
                shift_sd: Some(0.1),
                shift_z: Some(4.0),
                min_samples: Some(200),
            },
            JudgeKind::Llm => RuleOverride {
                min_samples: Some(20),
                ..RuleOverride::default()
            },
            JudgeKind::Combined => RuleOverride {
                floor: Some(metric.spec().floor),
                max_drop: Some(metric.spec().max_drop),
                shift_sd: None,
                shift_z: None,
                min_samples: Some(20),
            },
        }
    }

    fn from_layers(layers: &[RuleOverride]) -> DriftRule {
        let pick = |f: fn(&RuleOverride) -> Option<f64>| layers.iter().rev().find_map(f);
        let floor = pick(|r| r.floor).filter(|&v| v > 0.0);
        let max_drop = pick(|r| r.max_drop).filter(|&v| v < 1.0);
        let shift = match (pick(|r| r.shift_sd), pick(|r| r.shift_z)) {
            (Some(min_sd), Some(z)) if z > 0.0 => Some(ShiftRule { min_sd, z }),
            (None, Some(z)) if z > 0.0 => Some(ShiftRule { min_sd: 0.0, z }),
            _ => None,
        };
        DriftRule {
            floor,
            max_drop,
            shift,
            min_samples: layers.iter().rev().find_map(|r| r.min_samples).unwrap_or(0),
        }
    }

    /// Whether any rule is on.
    pub fn any(&self) -> bool {
        self.floor.is_some() || self.max_drop.is_some() || self.shift.is_some()
    }
}

impl DriftConfig {
    /// The effective rule for (`metric`, `judge`) in `stratum`: built-in, then `drift.rules`, then
    /// `drift.overrides.<stratum>`.
    pub fn rule(&self, metric: Quality, judge: JudgeKind, stratum: &str) -> DriftRule {
        let global = self.rules.get(&metric).and_then(|m| m.get(&judge));
        let local = self
            .overrides
            .get(stratum)
            .and_then(|m| m.get(&metric))
            .and_then(|m| m.get(&judge));
        let layers: Vec<RuleOverride> = [Some(&DriftRule::builtin(metric, judge)), global, local]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        DriftRule::from_layers(&layers)
    }

    /// Every configured section with its dotted field path, for validation.
    pub fn sections(&self) -> Vec<(String, Option<&str>, &RuleOverride)> {
        let mut out = Vec::new();
        for (metric, judges) in &self.rules {
            for (judge, rule) in judges {
                out.push((
                    format!("drift.rules.{}.{}", metric.name(), judge.name()),
                    None,
                    rule,
                ));
            }
        }
        for (stratum, metrics) in &self.overrides {
            for (metric, judges) in metrics {
                for (judge, rule) in judges {
                    out.push((
                        format!(
                            "drift.overrides.{stratum}.{}.{}",
                            metric.name(),
                            judge.name()
                        ),
                        Some(stratum.as_str()),
                        rule,
                    ));
                }
            }
        }
        out
    }
}

impl RuleOverride {
    /// The problems of this section's values, as (field suffix, reason).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (name, v) in [("floor", self.floor), ("max_drop", self.max_drop)] {
            if let Some(v) = v
                && !(0.0..=1.0).contains(&v)
            {
                out.push((name, format!("{v} is not in [0, 1]")));
            }
        }
        for (name, v) in [("shift_sd", self.shift_sd), ("shift_z", self.shift_z)] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                out.push((name, format!("{v} must be finite and >= 0")));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order_and_zero_switches_off() {
        let cfg: DriftConfig = toml::from_str(
            "[rules.faithfulness.combined]\nfloor = 0.8\n\
             [overrides.tail.faithfulness.combined]\nmin_samples = 5\nmax_drop = 1\n\
             [rules.faithfulness.offline]\nshift_z = 0\n",
        )
        .unwrap();
        let head = cfg.rule(Quality::Faithfulness, JudgeKind::Combined, "head");
        assert_eq!(head.floor, Some(0.8));
        assert_eq!(head.max_drop, Some(0.05));
        assert_eq!(head.min_samples, 20);
        let tail = cfg.rule(Quality::Faithfulness, JudgeKind::Combined, "tail");
        assert_eq!(
            (tail.floor, tail.max_drop, tail.min_samples),
            (Some(0.8), None, 5)
        );
        let off = cfg.rule(Quality::Faithfulness, JudgeKind::Offline, "head");
        assert!(!off.any(), "{off:?}");
        let rel = cfg.rule(Quality::AnswerRelevancy, JudgeKind::Offline, "head");
        assert!(rel.floor.is_none() && rel.shift.is_some());
    }

    #[test]
    fn unknown_metric_or_judge_is_an_error() {
        assert!(toml::from_str::<DriftConfig>("[rules.faithfulnes.llm]\nfloor = 0.5\n").is_err());
        assert!(toml::from_str::<DriftConfig>("[rules.faithfulness.gpt]\nfloor = 0.5\n").is_err());
        assert!(toml::from_str::<DriftConfig>("[rules.faithfulness.llm]\nflor = 0.5\n").is_err());
    }
}
