//! The sections the recorder reads, gathered from the config file above it (`Config::recorder`):
//! strata, windows and drift rules, which judges run, labels, the audit's model families, variants
//! and the change attribution. The recorder names no config file.

use crate::audit::config::AuditConfig;
use crate::changes::config::ChangesConfig;
use crate::dimensions::{JudgeKind, Quality};
use crate::judge::OfflineJudge;
use crate::judge::classifier::config::ClassifierConfig;
use crate::judge::config::{JudgeConfig, Prediction, SampledJudge};
use crate::judge::llm::config::LlmConfig;
use crate::metrics::config::MetricsConfig;
use crate::recorder::config::LabelsConfig;
use crate::sample::config::StrataConfig;
use crate::sample::variant::config::VariantsConfig;
use crate::window::config::{DriftConfig, DriftRule, WindowsConfig};

/// What the recorder and its evaluator are built from.
#[derive(Debug, Clone, Default)]
pub struct RecorderSetup {
    /// `[strata]`: the declared strata and how a trace is assigned.
    pub strata: StrataConfig,
    /// `[metrics]`: the scales the exported metrics measure on.
    pub metrics: MetricsConfig,
    /// `[windows]`: spans, buckets and the evaluation interval.
    pub windows: WindowsConfig,
    /// `[drift]`: the rules and their overrides.
    pub drift: DriftConfig,
    /// `[judge]`: which judges score what.
    pub judge: JudgeConfig,
    /// `[labels]`: the human-label join.
    pub labels: LabelsConfig,
    /// `[audit]`: model families, for the self-preference count.
    pub audit: AuditConfig,
    /// `[variants]`: the live release comparison.
    pub variants: VariantsConfig,
    /// `[changes]`: what changed when a stratum degrades.
    pub changes: ChangesConfig,
    /// The identity of the judges in use (`ragwatch_judge_info{model}`, [`judge_model`]).
    pub judge_model: String,
    /// The LLM judge's chat model, when it scores the sample.
    pub llm_chat_model: Option<String>,
}

impl RecorderSetup {
    /// The judges drift rules and thresholds exist for: the classifier's only when it runs.
    pub fn ruled_judges(&self) -> impl Iterator<Item = JudgeKind> + '_ {
        JudgeKind::RULED
            .into_iter()
            .filter(|j| *j != JudgeKind::Classifier || self.judge.classifier_runs())
    }

    /// The drift rule for `metric` as judged by `judge` in `stratum`, with overrides applied.
    pub fn drift_rule(&self, metric: Quality, judge: JudgeKind, stratum: &str) -> DriftRule {
        self.drift.rule(metric, judge, stratum)
    }

    /// Whether the combined estimate is kept: an LLM judge scores the sample.
    pub fn llm_samples(&self) -> bool {
        self.judge.sampled == SampledJudge::Llm
    }

    /// The recorder's sections of a TOML text (absent ones at their defaults), unvalidated and
    /// without environment overrides: what a test below the config builds a recorder from.
    #[cfg(test)]
    pub(crate) fn from_toml(text: &str) -> Self {
        use crate::section::fields::section;
        let judge: JudgeConfig = section(text, "judge");
        let llm: LlmConfig = section(text, "llm");
        let classifier: ClassifierConfig = section(text, "classifier");
        Self {
            strata: section(text, "strata"),
            metrics: section(text, "metrics"),
            windows: section(text, "windows"),
            drift: section(text, "drift"),
            labels: section(text, "labels"),
            audit: section(text, "audit"),
            variants: section(text, "variants"),
            changes: section(text, "changes"),
            judge_model: judge_model(&judge, &llm, &classifier),
            llm_chat_model: (judge.sampled == SampledJudge::Llm).then(|| llm.chat_model.clone()),
            judge,
        }
    }
}

/// The identity of the judges in use, for `ragwatch_judge_info{model}`.
pub fn judge_model(judge: &JudgeConfig, llm: &LlmConfig, classifier: &ClassifierConfig) -> String {
    let offline = OfflineJudge::default();
    let version = offline.model().report["version"]
        .as_str()
        .unwrap_or("dev")
        .to_owned();
    match judge.sampled {
        SampledJudge::None | SampledJudge::Offline => format!("offline-{version}"),
        SampledJudge::Llm => {
            let llm = crate::judge::llm::LlmJudge::model_id(llm);
            match judge.prediction {
                Prediction::Offline => format!("offline-{version},{llm}"),
                Prediction::Classifier => format!(
                    "offline-{version},{llm},{}",
                    crate::judge::classifier::identity(classifier)
                ),
            }
        }
        SampledJudge::Classifier => format!(
            "offline-{version},{}",
            crate::judge::classifier::identity(classifier)
        ),
    }
}
