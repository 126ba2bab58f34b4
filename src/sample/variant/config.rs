//! `[variants]`: the releases a trace can come from (a generator model, a prompt, an index), where a
//! trace names its own, which one is the baseline, and how two are compared.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::section::fields::valid_label;
use crate::section::problems::Problems;

/// The variant of traces whose value is not declared.
pub const OTHER_VARIANT: &str = "other";
/// The variant of traces that carry no value, with `missing = "unknown"`.
pub const UNKNOWN_VARIANT: &str = "unknown";

/// Variants and their comparison. Off (no `declared`) by default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantsConfig {
    /// The variants' label values; empty turns variants off.
    #[serde(default)]
    pub declared: Vec<String>,
    /// The variant every other one is compared with; one of `declared`.
    #[serde(default)]
    pub baseline: String,
    /// JSON pointers into the trace's metadata (`/release`, `/deployment/role`), tried in order.
    #[serde(default)]
    pub fields: Vec<String>,
    /// OpenTelemetry resource or span attributes (`service.version`, `gen_ai.request.model`),
    /// tried after `fields`; OTLP span assembly copies them into the trace's metadata.
    #[serde(default)]
    pub attributes: Vec<String>,
    /// A raw value to a declared variant (`"v1.5.0" = "canary"`); an unmapped value is itself when
    /// declared, else `other`.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
    /// What a trace without a value is: `baseline` or `unknown`.
    #[serde(default)]
    pub missing: Missing,
    /// A candidate's declared share of the traffic (0..1): a split far from it makes its
    /// comparison undecided and raises a sample-ratio-mismatch warning.
    #[serde(default)]
    pub share: BTreeMap<String, f64>,
    /// A candidate's traces are sampled for the sampled judge at this multiple of their rate
    /// (capped at 1), so a canary serving a tenth of the traffic gets enough verdicts to be
    /// compared within a rollout; their weights (1/inclusion probability) keep every mean unbiased.
    #[serde(default = "default_candidate_boost")]
    pub candidate_boost: f64,
    /// A candidate is worse when it is confidently worse than the baseline by more than this.
    #[serde(default = "default_margin")]
    pub margin: f64,
    /// LLM-judged traces each arm needs before any verdict.
    #[serde(default = "default_min_judged")]
    pub min_judged: u64,
    /// A candidate not seen this long starts a new comparison when it returns (a new rollout).
    #[serde(default = "default_restart_after_idle_secs")]
    pub restart_after_idle_secs: u64,
    /// How long a rollout gate waits on an undecided comparison before it counts as a failed check
    /// (Flagger's MetricTemplate; Argo Rollouts pauses instead).
    #[serde(default = "default_deadline_secs")]
    pub deadline_secs: u64,
}

/// What a trace that names no variant counts as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// The baseline: services that only tag their candidates.
    #[default]
    Baseline,
    /// `unknown`: counted, never compared.
    Unknown,
}

impl Default for VariantsConfig {
    fn default() -> Self {
        Self {
            declared: Vec::new(),
            baseline: String::new(),
            fields: Vec::new(),
            attributes: Vec::new(),
            map: BTreeMap::new(),
            missing: Missing::default(),
            share: BTreeMap::new(),
            candidate_boost: default_candidate_boost(),
            margin: default_margin(),
            min_judged: default_min_judged(),
            restart_after_idle_secs: default_restart_after_idle_secs(),
            deadline_secs: default_deadline_secs(),
        }
    }
}

fn default_candidate_boost() -> f64 {
    4.0
}

fn default_margin() -> f64 {
    0.05
}

fn default_min_judged() -> u64 {
    30
}

fn default_restart_after_idle_secs() -> u64 {
    3600
}

fn default_deadline_secs() -> u64 {
    21600
}

impl VariantsConfig {
    /// Whether variants are on.
    pub fn enabled(&self) -> bool {
        !self.declared.is_empty()
    }

    /// The sampling boost of candidates' traces: 1 when variants are off.
    pub fn candidate_sample_boost(&self) -> f64 {
        if self.enabled() {
            self.candidate_boost
        } else {
            1.0
        }
    }

    /// The OpenTelemetry attributes span assembly copies into a trace's metadata: `attributes`
    /// when variants are on, else none.
    pub fn metadata_attributes(&self) -> &[String] {
        if self.enabled() {
            &self.attributes
        } else {
            &[]
        }
    }

    /// The declared variants other than the baseline, in declared order.
    pub fn candidates(&self) -> impl Iterator<Item = &str> {
        self.declared
            .iter()
            .map(String::as_str)
            .filter(|v| *v != self.baseline)
    }

    /// Checks `[variants]`: label-safe, unique names, a declared baseline, at least one candidate,
    /// somewhere to read the value, maps and shares onto declared variants, a margin in [0, 1).
    pub(crate) fn validate(&self, p: &mut Problems) {
        if !self.enabled() {
            return;
        }
        let mut seen = std::collections::HashSet::new();
        for (i, v) in self.declared.iter().enumerate() {
            let field = format!("variants.declared[{i}]");
            if !valid_label(v) {
                p.add(&field, format!("`{v}` must match [a-z0-9_]{{1,64}}"));
            }
            if v == OTHER_VARIANT || v == UNKNOWN_VARIANT {
                p.add(&field, format!("`{v}` is reserved"));
            }
            if !seen.insert(v) {
                p.add(&field, format!("`{v}` is declared twice"));
            }
        }
        if !self.declared.contains(&self.baseline) {
            p.add(
                "variants.baseline",
                format!("`{}` is not declared", self.baseline),
            );
        }
        if self.candidates().next().is_none() {
            p.add("variants.declared", "needs a variant besides the baseline");
        }
        if self.fields.is_empty() && self.attributes.is_empty() {
            p.add(
                "variants.fields",
                "name where a trace's variant is read (fields or attributes)",
            );
        }
        for (i, f) in self.fields.iter().enumerate() {
            if !f.starts_with('/') || f.len() < 2 {
                p.add(
                    &format!("variants.fields[{i}]"),
                    format!("`{f}` is not a JSON pointer (`/release`)"),
                );
            }
        }
        for (raw, v) in &self.map {
            if !self.declared.contains(v) {
                p.add(
                    &format!("variants.map.{raw}"),
                    format!("`{v}` is not declared"),
                );
            }
        }
        for (v, share) in &self.share {
            let field = format!("variants.share.{v}");
            if !self.candidates().any(|c| c == v) {
                p.add(&field, format!("`{v}` is not a declared candidate"));
            }
            if !(*share > 0.0 && *share < 1.0) {
                p.add(&field, format!("{share} is not in (0, 1)"));
            }
        }
        if !(self.candidate_boost >= 1.0 && self.candidate_boost.is_finite()) {
            p.add("variants.candidate_boost", "must be >= 1");
        }
        if !(0.0..1.0).contains(&self.margin) {
            p.add(
                "variants.margin",
                format!("{} is not in [0, 1)", self.margin),
            );
        }
        if self.min_judged == 0 {
            p.add("variants.min_judged", "must be > 0");
        }
        if self.restart_after_idle_secs == 0 {
            p.add("variants.restart_after_idle_secs", "must be > 0");
        }
    }
}
