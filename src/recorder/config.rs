//! Human labels joined to recent traces (`[labels]`).

use crate::config::problems::Problems;
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
}

crate::config::fields::default_from_serde!(LabelsConfig);

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
        if self.topic.as_deref() == Some("") {
            p.add(
                "labels.topic",
                "must not be empty (leave it out for no topic)",
            );
        }
    }
}
