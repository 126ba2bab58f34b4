//! `ragwatch gate`: the CI gate. Reads a replay summary (`replay --summary`), optionally one or more
//! baseline summaries (repeated runs of the baseline), and a gate file of checks; prints every check
//! with its value, threshold and verdict; fails when any check fails.
//!
//! A `max_drop` check compares against the mean of the baselines. With two or more baselines it also
//! knows their spread: a drop beyond `max_drop` but within two standard deviations of the baseline
//! runs is reported as `noise` and passes, since the baseline itself moves that much between runs.
//!
//! The judge audit (`replay --audit-out`) is read the same way, keyed by judge instead of stratum:
//! a check names `judge = "offline"`, and `abs = true` compares the figure's absolute value (a
//! correlation must be near zero whichever its sign).
//!
//! `gate --compare` ([`compare`]) compares two variants of one replay.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

mod compare;

pub use compare::{Compare, CompareConfig, Comparison, compare, compare_table};

/// Figures per stratum (`all` pools them), as `replay --summary` writes them.
pub(crate) type Figures = BTreeMap<String, BTreeMap<String, f64>>;

/// The gate file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// The checks.
    #[serde(rename = "check", default)]
    pub checks: Vec<Check>,
    /// How `gate --compare` compares two variants.
    #[serde(default)]
    pub compare: Option<CompareConfig>,
}

/// One check on one figure of one stratum.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// The figure: `faithfulness`, `answer_relevancy`, `refusal_ratio`, `recall@5`, `ndcg@10`, `mrr`,
    /// `map`, `tokens_p95`...
    pub metric: String,
    /// The stratum, or `all`.
    #[serde(default = "default_all")]
    pub stratum: String,
    /// The figure must be at least this.
    #[serde(default)]
    pub min: Option<f64>,
    /// The figure must be at most this (cost).
    #[serde(default)]
    pub max: Option<f64>,
    /// The figure may fall at most this far below the baseline mean.
    #[serde(default)]
    pub max_drop: Option<f64>,
    /// A figure missing from the results fails unless this is true.
    #[serde(default)]
    pub(crate) optional: bool,
    /// The judge, for a check on an audit file (`replay --audit-out`): replaces `stratum`.
    #[serde(default)]
    pub judge: Option<String>,
    /// Compare the absolute value (`|length_spearman_faithful| <= 0.3`).
    #[serde(default)]
    pub abs: bool,
}

fn default_all() -> String {
    "all".into()
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `stratum/metric`.
    pub name: String,
    /// The measured figure.
    pub value: Option<f64>,
    /// What it was compared with, as text.
    pub threshold: String,
    /// `pass`, `fail`, `noise` (a drop within the baseline's spread) or `missing`.
    pub verdict: &'static str,
}

impl Outcome {
    /// Whether the check lets the change through.
    pub fn passed(&self) -> bool {
        matches!(self.verdict, "pass" | "noise")
    }
}

/// Why the gate could not run.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// A file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// A file did not parse.
    #[error("invalid {0}: {1}")]
    Parse(String, String),
    /// A max_drop check without a baseline.
    #[error("check {0} has max_drop but no --baseline was given")]
    NoBaseline(String),
    /// A comparison the summary cannot answer (no per-variant figures, an unknown variant, stratum
    /// or metric) or settings out of range.
    #[error("cannot compare: {0}")]
    Compare(String),
}

/// Reads a summary file.
pub fn read_figures(path: &Path) -> Result<Figures, GateError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| GateError::Read(shown.clone(), e))?;
    serde_json::from_str(&text).map_err(|e| GateError::Parse(shown, e.to_string()))
}

/// Reads a gate file.
pub fn read_gate(path: &Path) -> Result<GateConfig, GateError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| GateError::Read(shown.clone(), e))?;
    toml::from_str(&text).map_err(|e| GateError::Parse(shown, e.to_string()))
}

/// Runs every check.
pub fn evaluate(
    gate: &GateConfig,
    results: &Figures,
    baselines: &[Figures],
) -> Result<Vec<Outcome>, GateError> {
    let mut out = Vec::new();
    for c in &gate.checks {
        let key = c.judge.as_ref().unwrap_or(&c.stratum);
        let name = if c.abs {
            format!("|{key}/{}|", c.metric)
        } else {
            format!("{key}/{}", c.metric)
        };
        let value = results
            .get(key)
            .and_then(|s| s.get(&c.metric))
            .map(|v| if c.abs { v.abs() } else { *v });
        let Some(v) = value else {
            out.push(Outcome {
                name,
                value: None,
                threshold: "present".into(),
                verdict: if c.optional { "pass" } else { "missing" },
            });
            continue;
        };
        if let Some(min) = c.min {
            out.push(Outcome {
                name: name.clone(),
                value,
                threshold: format!(">= {min}"),
                verdict: if v >= min { "pass" } else { "fail" },
            });
        }
        if let Some(max) = c.max {
            out.push(Outcome {
                name: name.clone(),
                value,
                threshold: format!("<= {max}"),
                verdict: if v <= max { "pass" } else { "fail" },
            });
        }
        if let Some(drop) = c.max_drop {
            let base: Vec<f64> = baselines
                .iter()
                .filter_map(|b| b.get(key).and_then(|s| s.get(&c.metric)))
                .map(|v| if c.abs { v.abs() } else { *v })
                .collect();
            if base.is_empty() {
                return Err(GateError::NoBaseline(name));
            }
            let mean = base.iter().sum::<f64>() / base.len() as f64;
            let sd = if base.len() > 1 {
                (base.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / (base.len() - 1) as f64)
                    .sqrt()
            } else {
                0.0
            };
            let floor = mean - drop;
            let verdict = if v >= floor {
                "pass"
            } else if v >= floor - 2.0 * sd {
                "noise"
            } else {
                "fail"
            };
            out.push(Outcome {
                name: name.clone(),
                value,
                threshold: format!(">= {floor:.4} (baseline {mean:.4} - {drop}; spread {sd:.4})"),
                verdict,
            });
        }
    }
    Ok(out)
}

/// The outcomes as a table.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut t = format!(
        "{:<36} {:>10}  {:<48} {}\n",
        "check", "value", "threshold", "verdict"
    );
    for o in outcomes {
        let v = o.value.map_or("-".to_owned(), |v| format!("{v:.4}"));
        t.push_str(&format!(
            "{:<36} {:>10}  {:<48} {}\n",
            o.name, v, o.threshold, o.verdict
        ));
    }
    let failed = outcomes.iter().filter(|o| !o.passed()).count();
    t.push_str(&format!("{} checks, {} failed\n", outcomes.len(), failed));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(pairs: &[(&str, &str, f64)]) -> Figures {
        let mut f = Figures::new();
        for (s, m, v) in pairs {
            f.entry((*s).into()).or_default().insert((*m).into(), *v);
        }
        f
    }

    fn gate(text: &str) -> GateConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn floors_ceilings_and_missing() {
        let g = gate(
            "[[check]]\nmetric = \"faithfulness\"\nmin = 0.8\n[[check]]\nmetric = \"tokens_p95\"\nmax = 2000\n[[check]]\nmetric = \"recall@5\"\nmin = 0.5\n[[check]]\nmetric = \"mrr\"\nmin = 0.1\noptional = true\n",
        );
        let r = figures(&[
            ("all", "faithfulness", 0.85),
            ("all", "tokens_p95", 2500.0),
            ("all", "recall@5", 0.4),
        ]);
        let o = evaluate(&g, &r, &[]).unwrap();
        let verdicts: Vec<_> = o.iter().map(|o| o.verdict).collect();
        assert_eq!(verdicts, ["pass", "fail", "fail", "pass"]);
        let missing = evaluate(&gate("[[check]]\nmetric = \"map\"\nmin = 0.1\n"), &r, &[]).unwrap();
        assert_eq!(missing[0].verdict, "missing");
        assert!(!missing[0].passed());
    }

    #[test]
    fn audit_checks_by_judge_and_absolute_value() {
        let g = gate(
            "[[check]]\njudge = \"offline\"\nmetric = \"auroc_low\"\nmin = 0.75\n[[check]]\njudge = \"llm\"\nmetric = \"length_spearman_faithful\"\nabs = true\nmax = 0.3\n",
        );
        let r = figures(&[
            ("offline", "auroc_low", 0.78),
            ("llm", "length_spearman_faithful", -0.45),
        ]);
        let o = evaluate(&g, &r, &[]).unwrap();
        assert_eq!(o[0].verdict, "pass");
        assert_eq!(o[1].name, "|llm/length_spearman_faithful|");
        assert_eq!((o[1].value, o[1].verdict), (Some(0.45), "fail"));
    }

    #[test]
    fn drops_against_baseline_and_its_spread() {
        let g = gate("[[check]]\nmetric = \"faithfulness\"\nstratum = \"tail\"\nmax_drop = 0.02\n");
        let one = [figures(&[("tail", "faithfulness", 0.90)])];
        let r = figures(&[("tail", "faithfulness", 0.85)]);
        assert_eq!(evaluate(&g, &r, &one).unwrap()[0].verdict, "fail");
        // Baseline runs at 0.86, 0.90, 0.94: mean 0.90, sd 0.04; 0.85 is within 0.88 - 2 sd.
        let noisy = [0.86, 0.90, 0.94].map(|v| figures(&[("tail", "faithfulness", v)]));
        assert_eq!(evaluate(&g, &r, &noisy).unwrap()[0].verdict, "noise");
        let far = figures(&[("tail", "faithfulness", 0.70)]);
        assert_eq!(evaluate(&g, &far, &noisy).unwrap()[0].verdict, "fail");
        assert!(matches!(
            evaluate(&g, &r, &[]),
            Err(GateError::NoBaseline(_))
        ));
    }
}
