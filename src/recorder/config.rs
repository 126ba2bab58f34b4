//! Human labels joined to recent traces (`[labels]`).

use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

/// Human labels (reviewer verdicts, user feedback) joined to recent traces, for judge agreement.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelsConfig {
    /// Accept labels on `POST /v1/labels` and remember recent traces' scores to join them to.
    #[serde(default)]
    pub enabled: bool,
    /// Traces remembered (about 40 bytes each); the oldest are forgotten first.
    #[serde(default = "default_label_max_traces")]
    pub max_traces: usize,
    /// A label for a trace older than this is counted as `expired`.
    #[serde(default = "default_label_ttl_secs")]
    pub ttl_secs: u64,
    /// The LLM judge's faithfulness at or above which it calls an answer faithful (1.0: every claim
    /// supported, as a reviewer who marks any unsupported span means).
    #[serde(default = "default_llm_faithful_threshold")]
    pub llm_faithful_threshold: f64,
    /// A Kafka topic of label messages (same shape as the POST body's lines), read with the
    /// `kafka` section's brokers and client settings. Off when absent.
    #[serde(default)]
    pub topic: Option<String>,
    /// The label consumer's group (default: `kafka.group_id` + `-labels`). Give each replica its
    /// own group to have every replica read every label (see docs/judges.md, "Human labels").
    #[serde(default)]
    pub group_id: Option<String>,
    /// The window of the in-process label AUROC (the recording rule uses 1h).
    #[serde(default = "default_label_auroc_window_secs")]
    pub auroc_window_secs: u64,
    /// Labels of each class (faithful, unfaithful) in the window before the AUROC is exported.
    #[serde(default = "default_label_auroc_min_per_class")]
    pub auroc_min_per_class: u64,
    /// The AUROC below which a judge is flagged as disagreeing with people (0: no flag, no alert).
    #[serde(default)]
    pub auroc_floor: f64,
    /// User feedback (thumbs, escalations, regenerations, ratings) as its own signal.
    #[serde(default)]
    pub feedback: UserFeedbackConfig,
}

/// Whether a feedback kind says the user was unhappy (`negative`) or content (`positive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Polarity {
    /// The user was unhappy with the answer.
    Negative,
    /// The user was content with the answer.
    Positive,
}

impl Polarity {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Polarity::Negative => "negative",
            Polarity::Positive => "positive",
        }
    }
}

/// A numeric rating's scale: values in `[min, max]`, negative below `negative_below`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatingScale {
    /// The lowest rating.
    pub min: f64,
    /// The highest rating.
    pub max: f64,
    /// A rating below this is negative feedback, at or above it positive.
    pub negative_below: f64,
}

/// User feedback events joined to recent traces (`[labels.feedback]`): never faithfulness labels.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserFeedbackConfig {
    /// Accept feedback events (label lines with a `kind`) and count them per stratum and kind.
    #[serde(default)]
    pub enabled: bool,
    /// Declared kinds and their polarity; an undeclared kind counts as `other`, outside the AUROC.
    #[serde(default = "default_feedback_kinds")]
    pub kinds: std::collections::BTreeMap<String, Polarity>,
    /// The scale of the `rating` kind (off when absent: a rating then counts as `other`).
    #[serde(default)]
    pub rating: Option<RatingScale>,
    /// A JSON pointer into a trace's metadata where services attach feedback to the trace itself
    /// (a kind, `{"kind": ..., "value": ...}`, or a list of them). Off when absent.
    #[serde(default)]
    pub trace_field: Option<String>,
    /// Feedback events of each polarity in the window before the feedback AUROC is exported.
    #[serde(default = "default_label_auroc_min_per_class")]
    pub auroc_min_per_class: u64,
    /// The feedback AUROC below which a judge is flagged as missing what users say (0: off).
    #[serde(default)]
    pub auroc_floor: f64,
}

impl Default for UserFeedbackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            kinds: default_feedback_kinds(),
            rating: None,
            trace_field: None,
            auroc_min_per_class: default_label_auroc_min_per_class(),
            auroc_floor: 0.0,
        }
    }
}

/// Most declared kinds (each is a label value of every feedback family).
pub const MAX_FEEDBACK_KINDS: usize = 16;

fn default_feedback_kinds() -> std::collections::BTreeMap<String, Polarity> {
    [
        ("thumbs_up", Polarity::Positive),
        ("thumbs_down", Polarity::Negative),
        ("escalation", Polarity::Negative),
        ("regenerate", Polarity::Negative),
    ]
    .into_iter()
    .map(|(k, p)| (k.to_owned(), p))
    .collect()
}

crate::section::fields::default_from_serde!(LabelsConfig);

fn default_label_max_traces() -> usize {
    100_000
}

fn default_label_ttl_secs() -> u64 {
    3600
}

fn default_llm_faithful_threshold() -> f64 {
    1.0
}

fn default_label_auroc_window_secs() -> u64 {
    3600
}

fn default_label_auroc_min_per_class() -> u64 {
    20
}

impl LabelsConfig {
    /// Checks `[labels]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if self.enabled && self.max_traces == 0 {
            p.add("labels.max_traces", "must be > 0");
        }
        p.ratio("labels.llm_faithful_threshold", self.llm_faithful_threshold);
        p.ratio("labels.auroc_floor", self.auroc_floor);
        if self.auroc_window_secs == 0 {
            p.add("labels.auroc_window_secs", "must be > 0");
        }
        if self.topic.is_some() && !self.enabled {
            p.add("labels.topic", "needs labels.enabled = true");
        }
        self.feedback.validate(self.enabled, p);
        if self.topic.as_deref() == Some("") {
            p.add(
                "labels.topic",
                "must not be empty (leave it out for no topic)",
            );
        }
    }
}

impl UserFeedbackConfig {
    fn validate(&self, labels: bool, p: &mut Problems) {
        if self.enabled && !labels {
            p.add("labels.feedback.enabled", "needs labels.enabled = true");
        }
        if self.kinds.len() > MAX_FEEDBACK_KINDS {
            p.add(
                "labels.feedback.kinds",
                format!("at most {MAX_FEEDBACK_KINDS} kinds"),
            );
        }
        for kind in self.kinds.keys() {
            let word = !kind.is_empty()
                && kind.len() <= 32
                && kind
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !word || kind == "other" || kind == "rating" {
                p.add(
                    "labels.feedback.kinds",
                    format!(
                        "{kind:?}: a kind is 1 to 32 of a-z, 0-9 and _, and not `other` or `rating`"
                    ),
                );
            }
        }
        if let Some(r) = &self.rating
            && !(r.min.is_finite()
                && r.max.is_finite()
                && r.min < r.max
                && r.min < r.negative_below
                && r.negative_below <= r.max)
        {
            p.add(
                "labels.feedback.rating",
                "needs min < negative_below <= max",
            );
        }
        if let Some(f) = &self.trace_field
            && !f.starts_with('/')
        {
            p.add(
                "labels.feedback.trace_field",
                "must be a JSON pointer (starting with /)",
            );
        }
        p.ratio("labels.feedback.auroc_floor", self.auroc_floor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_feedback_validation_names_every_problem() {
        let labels: LabelsConfig = toml::from_str(
            r#"[feedback]
               enabled = true
               kinds = { thumbs_down = "negative", other = "positive", "Bad Kind" = "negative" }
               rating = { min = 5, max = 1, negative_below = 3 }
               trace_field = "feedback"
               auroc_floor = 1.5"#,
        )
        .unwrap();
        let mut p = Problems::default();
        labels.validate(&mut p);
        let text = format!("{p:?}");
        for field in [
            "labels.feedback.enabled",
            r#"\"other\""#,
            r#"\"Bad Kind\""#,
            "labels.feedback.rating",
            "labels.feedback.trace_field",
            "labels.feedback.auroc_floor",
        ] {
            assert!(text.contains(field), "{field} missing from {text}");
        }
        let mut ok = Problems::default();
        LabelsConfig {
            enabled: true,
            feedback: UserFeedbackConfig {
                enabled: true,
                ..UserFeedbackConfig::default()
            },
            ..LabelsConfig::default()
        }
        .validate(&mut ok);
        assert!(!format!("{ok:?}").contains("field"), "{ok:?}");
        // An unknown polarity does not parse.
        assert!(toml::from_str::<LabelsConfig>("feedback.kinds = { x = \"meh\" }").is_err());
    }
}
