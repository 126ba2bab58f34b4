//! `[changes]`: what ragwatch keeps to say what changed when a stratum degrades: the documents and
//! sources over-represented in low-scoring traces, question novelty, retrieval coverage, and the
//! thresholds of the rules that read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::section::fields::valid_label;
use crate::section::problems::Problems;

/// The source of contexts whose raw value is not declared.
pub const OTHER_SOURCE: &str = "other";
/// The source of contexts that carry no value.
pub const UNKNOWN_SOURCE: &str = "unknown";

/// What changed: on by default; its memory is fixed by `capacity` and `novelty.capacity`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesConfig {
    /// Keeps the summaries and exports their families.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Document ids each stratum's sketch holds per epoch (Space-Saving): an id retrieved into
    /// more than 1/capacity of a window's context ids is always held.
    #[serde(default = "default_capacity")]
    pub capacity: usize,
    /// A verdict is low when its faithfulness is below this (default: `judge.faithful_threshold`).
    #[serde(default)]
    pub low_faithfulness: Option<f64>,
    /// A verdict is also low when another metric's score is below its level here, by metric
    /// (`context_relevance = 0.2`: retrieval that found nothing relevant).
    #[serde(default)]
    pub low_scores: BTreeMap<String, f64>,
    /// Traces with a document in the short window before it can be listed as a suspect.
    #[serde(default = "default_min_traces")]
    pub min_traces: u64,
    /// A suspect is listed when its lift's lower bound is above this: traces with it are at least
    /// this many times as likely to be low as the others. Documents differ a little in how hard
    /// their questions are, so a healthy stratum has lifts a little above 1; above 1.5 is a change
    /// worth reading.
    #[serde(default = "default_min_lift")]
    pub min_lift: f64,
    /// Family-wise error of the suspects' lift bounds (Bonferroni over the ids tested).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Suspects listed per stratum and judge at most (`GET /v1/suspects`).
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Where a context's source comes from, and the sources declared.
    #[serde(default)]
    pub source: SourceConfig,
    /// Question novelty.
    #[serde(default)]
    pub novelty: NoveltyConfig,
    /// Retrieval coverage.
    #[serde(default)]
    pub coverage: CoverageConfig,
    /// Thresholds of the shipped rules, exported as `ragwatch_changes_threshold{rule}`.
    #[serde(default)]
    pub rules: ChangeRules,
}

crate::section::fields::default_from_serde!(
    ChangesConfig,
    SourceConfig,
    NoveltyConfig,
    CoverageConfig,
    ChangeRules
);

/// A context's source: a collection, an index, a document's origin, as a bounded label.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The sources' label values; empty turns sources off.
    #[serde(default)]
    pub declared: Vec<String>,
    /// A regular expression on the context's id whose first capture group is the raw source
    /// (`^([^/]+)/` reads `handbook` from `handbook/leave.md#3`).
    #[serde(default)]
    pub id_pattern: Option<String>,
    /// JSON pointers into the trace's metadata (`/index`), tried in order when the id gives none:
    /// the source of every context of the trace.
    #[serde(default)]
    pub fields: Vec<String>,
    /// A raw value to a declared source; an unmapped value is itself when declared, else `other`.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
}

/// Question novelty: a bounded MinHash sample of each stratum's recent questions.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoveltyConfig {
    /// Question signatures held per stratum.
    #[serde(default = "default_novelty_capacity")]
    pub capacity: usize,
    /// A question is new when no question at least this old (and within the baseline window) is
    /// its near neighbour.
    #[serde(default = "default_known_after_secs")]
    pub known_after_secs: u64,
    /// Estimated Jaccard similarity of word shingles at or above which two questions are near
    /// neighbours.
    #[serde(default = "default_similarity")]
    pub similarity: f64,
}

/// Which retriever scores count as out of coverage.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoverageConfig {
    /// The first context's retriever score must reach this for the trace to be covered; unset
    /// leaves coverage out.
    #[serde(default)]
    pub level: Option<f64>,
    /// Whether a higher retriever score is better (`higher`, similarities) or a lower one
    /// (`lower`, distances).
    #[serde(default)]
    pub better: Better,
}

/// The direction of the retriever's scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Similarities, reranker probabilities, BM25.
    #[default]
    Higher,
    /// Distances.
    Lower,
}

/// Thresholds of the shipped rules.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeRules {
    /// Total variation distance between the short window's question mix (stratum, new or not) and
    /// the baseline's above which `RagwatchQuestionMixShift` warns.
    #[serde(default = "default_mix_distance")]
    pub mix_distance: f64,
    /// Rise of a stratum's share of new questions over its baseline share that warns.
    #[serde(default = "default_novelty_rise")]
    pub novelty_rise: f64,
    /// Questions in the short window before the mix and novelty rules judge.
    #[serde(default = "default_min_questions")]
    pub min_questions: u64,
    /// Rise of the out-of-coverage share over its baseline that warns.
    #[serde(default = "default_coverage_rise")]
    pub coverage_rise: f64,
    /// Traces with a retriever score in the short window before the coverage rule judges.
    #[serde(default = "default_min_coverage_traces")]
    pub min_coverage_traces: u64,
    /// Shift of the retriever's top score, in baseline standard deviations, that warns.
    #[serde(default = "default_retrieval_shift_sd")]
    pub retrieval_shift_sd: f64,
    /// z of that shift at which it warns.
    #[serde(default = "default_retrieval_shift_z")]
    pub retrieval_shift_z: f64,
    /// Lower bound of a source's lift above which `RagwatchSourceSuspect` warns.
    #[serde(default = "default_source_min_lift")]
    pub source_min_lift: f64,
    /// Verdicts on a source's traces in the short window before its lift is judged.
    #[serde(default = "default_source_min_verdicts")]
    pub source_min_verdicts: u64,
    /// z of the source-lift and coverage-rise bounds.
    #[serde(default = "default_rules_z")]
    pub z: f64,
}

impl ChangeRules {
    /// The `rule` label values and their thresholds, as exported.
    pub fn exported(&self) -> [(&'static str, f64); 10] {
        [
            ("mix_distance", self.mix_distance),
            ("novelty_rise", self.novelty_rise),
            ("min_questions", self.min_questions as f64),
            ("coverage_rise", self.coverage_rise),
            ("min_coverage_traces", self.min_coverage_traces as f64),
            ("retrieval_shift_sd", self.retrieval_shift_sd),
            ("retrieval_shift_z", self.retrieval_shift_z),
            ("source_min_lift", self.source_min_lift),
            ("source_min_verdicts", self.source_min_verdicts as f64),
            ("z", self.z),
        ]
    }
}

fn default_enabled() -> bool {
    true
}
fn default_capacity() -> usize {
    512
}
fn default_min_traces() -> u64 {
    20
}
fn default_min_lift() -> f64 {
    1.5
}
fn default_alpha() -> f64 {
    0.05
}
fn default_limit() -> usize {
    20
}
fn default_novelty_capacity() -> usize {
    2048
}
fn default_known_after_secs() -> u64 {
    3600
}
fn default_similarity() -> f64 {
    0.5
}
fn default_mix_distance() -> f64 {
    0.15
}
fn default_novelty_rise() -> f64 {
    0.15
}
fn default_min_questions() -> u64 {
    200
}
fn default_coverage_rise() -> f64 {
    0.10
}
fn default_min_coverage_traces() -> u64 {
    100
}
fn default_retrieval_shift_sd() -> f64 {
    0.5
}
fn default_retrieval_shift_z() -> f64 {
    4.0
}
fn default_source_min_lift() -> f64 {
    1.5
}
fn default_source_min_verdicts() -> u64 {
    30
}
fn default_rules_z() -> f64 {
    3.0
}

/// The most document ids a sketch may hold: the memory bound stays a few megabytes per stratum.
const MAX_CAPACITY: usize = 65_536;

impl ChangesConfig {
    /// Checks `[changes]`: bounded capacities, ratios in range, label-safe sources, a pattern
    /// with a capture group, pointers that are pointers.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if !(16..=MAX_CAPACITY).contains(&self.capacity) {
            p.add("changes.capacity", format!("must be 16 to {MAX_CAPACITY}"));
        }
        if !(16..=MAX_CAPACITY).contains(&self.novelty.capacity) {
            p.add(
                "changes.novelty.capacity",
                format!("must be 16 to {MAX_CAPACITY}"),
            );
        }
        if let Some(t) = self.low_faithfulness {
            p.ratio("changes.low_faithfulness", t);
        }
        for (metric, level) in &self.low_scores {
            let field = format!("changes.low_scores.{metric}");
            if !crate::dimensions::Quality::ALL
                .iter()
                .any(|m| m.name() == metric)
            {
                p.add(&field, "is not a quality metric");
            }
            p.ratio(&field, *level);
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            p.add("changes.alpha", "must be in (0, 1)");
        }
        if !(self.min_lift >= 0.0 && self.min_lift.is_finite()) {
            p.add("changes.min_lift", "must be >= 0");
        }
        if self.min_traces == 0 {
            p.add("changes.min_traces", "must be > 0");
        }
        if !(1..=100).contains(&self.limit) {
            p.add("changes.limit", "must be 1 to 100");
        }
        if !(self.novelty.similarity > 0.0 && self.novelty.similarity <= 1.0) {
            p.add("changes.novelty.similarity", "must be in (0, 1]");
        }
        if self.novelty.known_after_secs == 0 {
            p.add("changes.novelty.known_after_secs", "must be > 0");
        }
        if let Some(level) = self.coverage.level
            && !level.is_finite()
        {
            p.add("changes.coverage.level", "must be finite");
        }
        self.source.validate(p);
        self.rules.validate(p);
    }
}

impl SourceConfig {
    /// Whether sources are on.
    pub fn enabled(&self) -> bool {
        !self.declared.is_empty()
    }

    fn validate(&self, p: &mut Problems) {
        if !self.enabled() {
            return;
        }
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.declared.iter().enumerate() {
            let field = format!("changes.source.declared[{i}]");
            if !valid_label(s) {
                p.add(&field, format!("`{s}` must match [a-z0-9_]{{1,64}}"));
            }
            if s == OTHER_SOURCE || s == UNKNOWN_SOURCE {
                p.add(&field, format!("`{s}` is reserved"));
            }
            if !seen.insert(s) {
                p.add(&field, format!("`{s}` is declared twice"));
            }
        }
        if self.declared.len() > 64 {
            p.add("changes.source.declared", "at most 64 sources");
        }
        match &self.id_pattern {
            Some(pattern) => match regex::Regex::new(pattern) {
                Ok(re) if re.captures_len() < 2 => {
                    p.add("changes.source.id_pattern", "needs a capture group");
                }
                Ok(_) => {}
                Err(e) => p.add("changes.source.id_pattern", e.to_string()),
            },
            None if self.fields.is_empty() => p.add(
                "changes.source",
                "name where a context's source is read (id_pattern or fields)",
            ),
            None => {}
        }
        for (i, f) in self.fields.iter().enumerate() {
            if !f.starts_with('/') || f.len() < 2 {
                p.add(
                    &format!("changes.source.fields[{i}]"),
                    format!("`{f}` is not a JSON pointer (`/index`)"),
                );
            }
        }
        for (raw, s) in &self.map {
            if !self.declared.contains(s) {
                p.add(
                    &format!("changes.source.map.{raw}"),
                    format!("`{s}` is not declared"),
                );
            }
        }
    }
}

impl ChangeRules {
    fn validate(&self, p: &mut Problems) {
        p.ratio("changes.rules.mix_distance", self.mix_distance);
        p.ratio("changes.rules.novelty_rise", self.novelty_rise);
        p.ratio("changes.rules.coverage_rise", self.coverage_rise);
        for (field, v) in [
            ("changes.rules.retrieval_shift_sd", self.retrieval_shift_sd),
            ("changes.rules.retrieval_shift_z", self.retrieval_shift_z),
            ("changes.rules.source_min_lift", self.source_min_lift),
            ("changes.rules.z", self.z),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                p.add(field, "must be > 0");
            }
        }
    }
}
