//! Strata and sampling: which strata exist, how a trace joins one, which traces the sampled judge sees.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dimensions::{DEFAULT_STRATUM, OTHER_STRATUM};
use crate::section::fields::valid_label;
use crate::section::problems::Problems;
use crate::window::config::WindowsConfig;

/// Strata declaration and assignment rules.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrataConfig {
    /// Strata this deployment knows about. A trace naming any other stratum is counted as `other`.
    /// `default` (traces with no stratum and no matching rule) is always present.
    #[serde(default = "default_declared")]
    pub declared: Vec<String>,
    /// Rules tried in order when a trace carries no stratum; the first match wins.
    #[serde(default)]
    pub rules: Vec<StratumRule>,
    /// Declared strata whose questions the service should decline: their answer and context
    /// relevance are low by design, so those alerts skip them and the refusal alert watches them
    /// (exported as `ragwatch_stratum_info{scope="out_of_scope"}`). Absent: the declared stratum
    /// named `out_of_scope`, if there is one.
    #[serde(default)]
    pub out_of_scope: Option<Vec<String>>,
}

impl StrataConfig {
    /// Whether `stratum` is declared out of scope.
    pub(crate) fn is_out_of_scope(&self, stratum: &str) -> bool {
        match &self.out_of_scope {
            Some(list) => list.iter().any(|s| s == stratum),
            None => stratum == "out_of_scope" && self.declared.iter().any(|s| s == stratum),
        }
    }
}

/// One stratum assignment rule: a metadata field equality or a query regex (or both, all must match).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StratumRule {
    /// The stratum assigned on a match; must be declared.
    pub stratum: String,
    /// Metadata key to compare (top-level key of `metadata`).
    #[serde(default)]
    pub metadata_field: Option<String>,
    /// The value that `metadata_field` must equal.
    #[serde(default)]
    pub equals: Option<String>,
    /// Regex matched against the query.
    #[serde(default)]
    pub query_regex: Option<String>,
}

/// Sampling for the costly judge.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleConfig {
    /// Probability that a trace is sampled, for strata without their own rate.
    #[serde(default = "default_sample_rate")]
    pub default_rate: f64,
    /// Per-stratum probability.
    #[serde(default)]
    pub rates: BTreeMap<String, f64>,
    /// Each stratum gets at least this many samples per `min_window_secs`, whatever its rate.
    #[serde(default = "default_min_per_window")]
    pub min_per_window: u32,
    /// Window of the per-stratum minimum. Absent: `windows.short_secs`, so every short window of
    /// every stratum holds `min_per_window` LLM verdicts, enough for its rules' `min_samples`.
    #[serde(default)]
    pub min_window_secs: Option<u64>,
    /// Traces the offline judge is unsure about are sampled at this multiple of the rate.
    #[serde(default = "default_uncertain_boost")]
    pub uncertain_boost: f64,
}

impl SampleConfig {
    /// The window of the per-stratum minimum, resolved against the windows config.
    pub fn min_window_secs(&self, windows: &WindowsConfig) -> u64 {
        self.min_window_secs.unwrap_or(windows.short_secs).max(1)
    }
}

crate::section::fields::default_from_serde!(StrataConfig, SampleConfig);

fn default_declared() -> Vec<String> {
    vec![
        "head".into(),
        "tail".into(),
        "known_failure".into(),
        "out_of_scope".into(),
    ]
}

fn default_sample_rate() -> f64 {
    0.05
}

fn default_min_per_window() -> u32 {
    20
}

fn default_uncertain_boost() -> f64 {
    3.0
}

impl StrataConfig {
    /// Checks `[strata]`: label-safe, unique names; rules that name a declared stratum and a
    /// complete condition; out-of-scope strata that are declared.
    pub(crate) fn validate(&self, p: &mut Problems) {
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.declared.iter().enumerate() {
            let field = format!("strata.declared[{i}]");
            if !valid_label(s) {
                p.add(&field, format!("`{s}` must match [a-z0-9_]{{1,64}}"));
            }
            if s == OTHER_STRATUM {
                p.add(&field, "`other` is reserved for undeclared strata");
            }
            if !seen.insert(s) {
                p.add(&field, format!("`{s}` is declared twice"));
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let field = format!("strata.rules[{i}]");
            if !self.declared.contains(&rule.stratum) && rule.stratum != DEFAULT_STRATUM {
                p.add(
                    &format!("{field}.stratum"),
                    format!("`{}` is not declared", rule.stratum),
                );
            }
            if rule.metadata_field.is_none() && rule.query_regex.is_none() {
                p.add(&field, "needs metadata_field+equals or query_regex");
            }
            if rule.metadata_field.is_some() != rule.equals.is_some() {
                let missing = if rule.equals.is_none() {
                    "equals"
                } else {
                    "metadata_field"
                };
                p.add(
                    &format!("{field}.{missing}"),
                    "metadata_field and equals go together",
                );
            }
            if let Some(re) = &rule.query_regex
                && let Err(e) = regex::Regex::new(re)
            {
                p.add(&format!("{field}.query_regex"), e.to_string());
            }
        }
        for (i, s) in self.out_of_scope.iter().flatten().enumerate() {
            if !self.declared.contains(s) {
                p.add(
                    &format!("strata.out_of_scope[{i}]"),
                    format!("`{s}` is not declared"),
                );
            }
        }
    }

    /// Adds a problem at `field` unless `stratum` is declared, `default` or `other`.
    pub(crate) fn check_stratum(&self, p: &mut Problems, field: &str, stratum: &str) {
        if !(self.declared.iter().any(|s| s == stratum)
            || stratum == DEFAULT_STRATUM
            || stratum == OTHER_STRATUM)
        {
            p.add(field, format!("stratum `{stratum}` is not declared"));
        }
    }
}

impl SampleConfig {
    /// Checks `[sample]`: rates in [0, 1] for declared strata, the boost and the window.
    pub(crate) fn validate(&self, strata: &StrataConfig, p: &mut Problems) {
        p.ratio("sample.default_rate", self.default_rate);
        for (stratum, rate) in &self.rates {
            let field = format!("sample.rates.{stratum}");
            p.ratio(&field, *rate);
            strata.check_stratum(p, &field, stratum);
        }
        if !(self.uncertain_boost >= 1.0 && self.uncertain_boost.is_finite()) {
            p.add("sample.uncertain_boost", "must be >= 1");
        }
        if self.min_window_secs == Some(0) {
            p.add("sample.min_window_secs", "must be > 0");
        }
    }
}
