//! Configuration: TOML read once at start-up, overridden by `RAGWATCH__SECTION__KEY` environment
//! variables (passed in as a map so tests never touch the process environment), then `validate()`d.
//!
//! Every struct rejects unknown keys, so a typo is an error rather than a silent default. Secrets never
//! live here: the config names the environment variable or file that holds them.
//!
//! Sources: `source.kind` = `file`, `stdin`, `kafka` or `otlp` (the OTLP/HTTP receiver of `[otlp]`).
//! Judges: the offline judge scores every trace; `judge.sampled` = `none`, `offline` or `llm` picks
//! the judge of the sample (`llm`: the OpenAI-compatible API of `[llm]`, under `[budget]`).
//! `docs/configuration.md` lists every key with its default.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::section::problems::{ConfigError, FieldProblem};

use crate::section::fields::default_from_serde;
use crate::section::problems::Problems;

use crate::audit::config::AuditConfig;
use crate::changes::config::ChangesConfig;
use crate::export::config::ExportConfig;
use crate::fleet::config::FleetConfig;
use crate::http::config::HttpConfig;
use crate::http::write::config::WriteConfig;
use crate::judge::classifier::config::ClassifierConfig;
use crate::judge::config::{JudgeConfig, SampledJudge};
use crate::judge::llm::config::{BudgetConfig, LlmConfig};
use crate::metrics::config::MetricsConfig;
use crate::recorder::config::LabelsConfig;
use crate::redact::config::RedactConfig;
use crate::review::config::ReviewConfig;
use crate::sample::config::{SampleConfig, StrataConfig};
use crate::sample::variant::config::VariantsConfig;
use crate::source::config::{SourceConfig, SourceKind};
use crate::source::kafka::config::KafkaConfig;
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::{AssemblyConfig, OtlpConfig, TraceFormat, default_otlp_format};
use crate::window::config::{DriftConfig, WindowsConfig};

/// The whole configuration of one ragwatch process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where traces come from.
    #[serde(default)]
    pub source: SourceConfig,
    /// Kafka consumer settings, used when `source.kind = "kafka"`.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// How raw messages become traces.
    #[serde(default)]
    pub decode: DecodeConfig,
    /// Which strata exist and how a trace is assigned to one.
    #[serde(default)]
    pub strata: StrataConfig,
    /// Which traces go to the sampled (costly) judge.
    #[serde(default)]
    pub sample: SampleConfig,
    /// Which release served a trace, and how each candidate is compared with the baseline.
    #[serde(default)]
    pub variants: VariantsConfig,
    /// Judges and their work queue.
    #[serde(default)]
    pub judge: JudgeConfig,
    /// What changed: suspect documents and sources, question novelty, retrieval coverage.
    #[serde(default)]
    pub changes: ChangesConfig,
    /// The review queue and the reviewer estimate.
    #[serde(default)]
    pub review: ReviewConfig,
    /// Rolling windows.
    #[serde(default)]
    pub windows: WindowsConfig,
    /// Drift rules per metric, with per-stratum overrides.
    #[serde(default)]
    pub drift: DriftConfig,
    /// The LLM judge's API, used when `judge.sampled = "llm"`.
    #[serde(default)]
    pub llm: LlmConfig,
    /// The classifier judge, used when `judge.sampled = "classifier"`.
    #[serde(default)]
    pub classifier: ClassifierConfig,
    /// The LLM judge's budget for the whole fleet.
    #[serde(default)]
    pub budget: BudgetConfig,
    /// How this replica learns its share of that budget.
    #[serde(default)]
    pub fleet: FleetConfig,
    /// The admin HTTP server (`/metrics`, `/livez`, `/readyz`): read-only.
    #[serde(default)]
    pub http: HttpConfig,
    /// The write listener (`POST /v1/traces`, `POST /v1/labels`): credentials, TLS, rate limit.
    #[serde(default)]
    pub write: WriteConfig,
    /// What the exported metrics measure on scales the config declares.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Shutdown behaviour.
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Log output.
    #[serde(default)]
    pub log: LogConfig,
    /// Human labels joined to recent traces (`POST /v1/labels` on the write listener).
    #[serde(default)]
    pub labels: LabelsConfig,
    /// Span assembly, for the OTLP formats.
    #[serde(default)]
    pub assembly: AssemblyConfig,
    /// The OTLP/HTTP receiver's limits, used when `source.kind = "otlp"` (its address: `[write]`).
    #[serde(default)]
    pub otlp: OtlpConfig,
    /// The judge audit's live part: model families, for the self-preference count.
    #[serde(default)]
    pub audit: AuditConfig,
    /// What is replaced in a trace's texts before they leave the process or are written.
    #[serde(default)]
    pub redact: RedactConfig,
    /// Verdicts sent to where people read traces (OpenTelemetry, Phoenix); off by default.
    #[serde(default)]
    pub export: ExportConfig,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines; ANSI colour only when stderr is a terminal and `NO_COLOR` is unset.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Log output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    #[serde(default = "default_log_format")]
    pub format: LogFormat,
}

/// Shutdown behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Time allowed to drain in-flight judge work after SIGTERM; keep it below the pod's grace.
    #[serde(default = "default_grace_secs")]
    pub grace_secs: u64,
}

default_from_serde!(Config, ShutdownConfig, LogConfig);

fn default_grace_secs() -> u64 {
    20
}
fn default_log_format() -> LogFormat {
    LogFormat::Text
}

/// The prefix of environment overrides.
pub(crate) const ENV_PREFIX: &str = "RAGWATCH__";

impl Config {
    /// Reads `path`, applies overrides from `env` (`RAGWATCH__SECTION__KEY=value`) and validates.
    pub fn load(path: &Path, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_with_env(&text, env)
    }

    /// Parses TOML text, applies environment overrides and validates.
    pub fn from_toml_with_env(
        text: &str,
        env: &HashMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let mut doc: toml::Table =
            toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let mut vars: Vec<_> = env
            .iter()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        vars.sort();
        for (var, value) in vars {
            apply_override(&mut doc, var, value)?;
        }
        default_otlp_format(&mut doc);
        let config: Config = doc
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// The source `ragwatch run` reads: it must be named, nothing is assumed (a production process
    /// with a partial config must not quietly replay a demo file).
    pub fn source_kind(&self) -> Result<SourceKind, ConfigError> {
        self.source.kind.ok_or_else(|| {
            ConfigError::Invalid(vec![FieldProblem {
                field: "source.kind".into(),
                reason: "names the source to read: file, stdin, kafka or otlp (the bundled \
                         demo: ragwatch run --config config/ragwatch.toml)"
                    .into(),
            }])
        })
    }

    /// Cross-field checks that serde cannot express. Reports every problem at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        self.validate_source(&mut p);
        self.strata.validate(&mut p);
        self.sample.validate(&self.strata, &mut p);
        self.variants.validate(&mut p);
        self.changes.validate(&mut p);
        self.review.validate(&mut p);
        if self.review.enabled && self.judge.sampled != SampledJudge::Llm {
            p.add(
                "review.enabled",
                "the queue picks among the LLM judge's verdicts: needs judge.sampled = \"llm\"",
            );
        }
        if self.review.enabled && !self.labels.enabled {
            p.add(
                "review.enabled",
                "reviewers' labels come back through labels: needs labels.enabled = true",
            );
        }
        self.judge.validate(&mut p);
        self.budget.validate(&mut p);
        self.fleet
            .validate(self.source.kind == Some(SourceKind::Kafka), &mut p);
        self.windows.validate(&mut p);
        self.validate_drift(&mut p);
        self.llm
            .validate(self.judge.sampled == SampledJudge::Llm, &mut p);
        self.classifier
            .validate(self.judge.classifier_runs(), &mut p);
        self.labels.validate(&mut p);
        self.assembly.validate(&mut p);
        self.otlp.validate(&mut p);
        self.validate_otlp(&mut p);
        self.validate_write(&mut p);
        self.write.validate(&mut p);
        self.redact.validate(&mut p);
        self.export.validate(&mut p);
        self.metrics.validate(&mut p);
        self.http.validate(&mut p);
        p.into_result()
    }

    fn validate_source(&self, p: &mut Problems) {
        self.source.validate(p);
        self.kafka
            .validate(self.source.kind == Some(SourceKind::Kafka), p);
        self.decode.validate(p);
    }

    fn validate_drift(&self, p: &mut Problems) {
        for (field, stratum, rule) in self.drift.sections() {
            if let Some(stratum) = stratum {
                self.strata
                    .check_stratum(p, &format!("drift.overrides.{stratum}"), stratum);
            }
            for (key, reason) in rule.problems() {
                p.add(&format!("{field}.{key}"), reason);
            }
        }
        if self.judge.sampled != SampledJudge::Llm {
            return;
        }
        // Guaranteed LLM samples of a stratum in one short window: a minimum above this means
        // the rule can never fire for a small stratum.
        let per_window = self.sample.min_window_secs(&self.windows);
        let guaranteed =
            u64::from(self.sample.min_per_window) * self.windows.short_secs / per_window.max(1);
        for stratum in self.strata.declared.iter() {
            for metric in crate::dimensions::Quality::ALL {
                let judge = crate::dimensions::JudgeKind::Combined;
                let rule = self.drift.rule(metric, judge, stratum);
                if rule.any() && rule.min_samples > guaranteed.max(1) {
                    p.add(
                        &format!("drift.rules.{}.{}.min_samples", metric.name(), judge.name()),
                        format!(
                            "{} is more than the {guaranteed} guaranteed samples per short window \
                             (sample.min_per_window = {} per {per_window} s): a small stratum's rule \
                             could never fire",
                            rule.min_samples, self.sample.min_per_window
                        ),
                    );
                    return;
                }
            }
        }
    }

    /// The Kafka client settings of the LLM judge's records topic producer (`[kafka]`, with `env`'s
    /// secrets), when `llm.records_topic` is set.
    pub fn records_kafka(&self, env: &HashMap<String, String>) -> Option<rdkafka::ClientConfig> {
        self.llm
            .records_topic
            .as_ref()
            .map(|_| self.kafka.client_config(env))
    }

    /// The sections the recorder reads, with the judges' identity.
    pub fn recorder_setup(&self) -> crate::recorder::RecorderSetup {
        crate::recorder::RecorderSetup {
            strata: self.strata.clone(),
            metrics: self.metrics.clone(),
            windows: self.windows.clone(),
            drift: self.drift.clone(),
            judge: self.judge.clone(),
            labels: self.labels.clone(),
            audit: self.audit.clone(),
            variants: self.variants.clone(),
            changes: self.changes.clone(),
            judge_model: crate::recorder::judge_model(&self.judge, &self.llm, &self.classifier),
            llm_chat_model: (self.judge.sampled == SampledJudge::Llm)
                .then(|| self.llm.chat_model.clone()),
        }
    }

    /// The sections the review queue reads.
    pub fn review_setup(&self) -> crate::review::ReviewSetup<'_> {
        crate::review::ReviewSetup {
            review: &self.review,
            redact: &self.redact,
            faithful_at: self.labels.llm_faithful_threshold,
        }
    }

    /// The sections verdict export reads.
    pub fn export_setup(&self) -> crate::export::ExportSetup<'_> {
        crate::export::ExportSetup {
            export: &self.export,
            variants: &self.variants,
            llm: &self.llm,
        }
    }

    /// Whether the write listener is bound: the OTLP receiver or the labels endpoint is on.
    pub(crate) fn write_listener_needed(&self) -> bool {
        self.source.kind == Some(SourceKind::Otlp) || self.labels.enabled
    }

    /// Checks the write listener's addresses when a source or the labels endpoint binds it.
    fn validate_write(&self, p: &mut Problems) {
        if !self.write_listener_needed() {
            return;
        }
        let w = &self.write;
        if let Some(Err(e)) = w
            .grpc_listen
            .as_ref()
            .map(|l| l.parse::<std::net::SocketAddr>())
        {
            p.add("write.grpc_listen", e.to_string());
        }
        if let Err(e) = w.listen.parse::<std::net::SocketAddr>() {
            p.add("write.listen", e.to_string());
        }
        if w.listen == self.http.listen && !w.listen.ends_with(":0") {
            p.add(
                "write.listen",
                "must differ from http.listen: writes and metrics are separate listeners",
            );
        }
    }

    /// Checks that the source and the decode format agree about OTLP.
    fn validate_otlp(&self, p: &mut Problems) {
        if self.source.kind == Some(SourceKind::Otlp) && !self.decode.format.is_otlp() {
            p.add(
                "decode.format",
                "source.kind = \"otlp\" receives OTLP: set otlp_proto or otlp_json, or leave \
                 it unset (the receiver takes both whichever is set)",
            );
        }
        if self.source.kind == Some(SourceKind::Stdin)
            && self.decode.format == TraceFormat::OtlpProto
        {
            p.add(
                "decode.format",
                "otlp_proto is read from files and Kafka; stdin takes otlp_json lines",
            );
        }
    }

    /// The effective config as TOML, secrets redacted, for `check-config`.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        for (key, value) in shown.kafka.properties.iter_mut() {
            if key.starts_with("ssl.key") || key.contains("sasl.username") {
                *value = "<redacted>".into();
            }
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render: {e}"))
    }
}

/// Applies `RAGWATCH__A__B=value` to `doc["a"]["b"]`. The value is parsed as a TOML value when it
/// parses (numbers, booleans, arrays), else taken as a string.
fn apply_override(doc: &mut toml::Table, var: &str, value: &str) -> Result<(), ConfigError> {
    let path: Vec<String> = var[ENV_PREFIX.len()..]
        .split("__")
        .map(|p| p.to_ascii_lowercase())
        .collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::Env {
            var: var.into(),
            reason: "empty path segment".into(),
        });
    }
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.into()));
    // A comma-separated list for an array field (`RAGWATCH__KAFKA__TOPICS=a,b`).
    let parsed = match (&parsed, path.last().map(String::as_str)) {
        (toml::Value::String(s), Some("topics" | "declared")) => toml::Value::Array(
            s.split(',')
                .map(|p| toml::Value::String(p.trim().into()))
                .collect(),
        ),
        _ => parsed,
    };
    // librdkafka properties are strings whatever they look like.
    let parsed = match (
        &parsed,
        path.get(path.len().saturating_sub(2)).map(String::as_str),
    ) {
        (toml::Value::String(_), _) => parsed,
        (_, Some("properties")) => toml::Value::String(value.to_owned()),
        _ => parsed,
    };
    let (last, parents) = path.split_last().expect("path has at least one segment");
    let mut table = doc;
    for part in parents {
        let entry = table
            .entry(part.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = entry.as_table_mut().ok_or_else(|| ConfigError::Env {
            var: var.into(),
            reason: format!("`{part}` is not a section"),
        })?;
    }
    table.insert(last.clone(), parsed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retrieval_score_scales_and_buckets() {
        let env = HashMap::new();
        let unit = Config::from_toml_with_env("", &env).unwrap().metrics;
        assert_eq!(unit.retrieval_buckets().first(), Some(&0.1));
        assert_eq!(unit.retrieval_buckets().last(), Some(&1.0));
        let signed = crate::metrics::config::ScoreScale::Signed.buckets();
        assert_eq!((signed[0], signed[signed.len() - 1]), (-0.8, 1.0));
        let unbounded =
            Config::from_toml_with_env("[metrics]\nretrieval_score_scale = \"unbounded\"\n", &env)
                .unwrap()
                .metrics
                .retrieval_buckets();
        assert_eq!(
            (unbounded[0], unbounded[unbounded.len() - 1]),
            (0.25, 256.0)
        );
        let mine = Config::from_toml_with_env(
            "[metrics]\nretrieval_score_buckets = [-10.0, 0.0, 10.0]\n",
            &env,
        )
        .unwrap();
        assert_eq!(mine.metrics.retrieval_buckets(), [-10.0, 0.0, 10.0]);
        for bad in ["[]", "[1.0, 1.0]", "[2.0, 1.0]"] {
            let err = Config::from_toml_with_env(
                &format!("[metrics]\nretrieval_score_buckets = {bad}\n"),
                &env,
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("metrics.retrieval_score_buckets"),
                "{bad}: {err}"
            );
        }
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_config_is_valid_with_defaults() {
        let c = Config::from_toml_with_env("", &env(&[])).unwrap();
        assert_eq!(c.source.kind, None);
        assert!(c.source_kind().is_err(), "a source is never assumed");
        assert_eq!(c.windows.window_secs, vec![300, 3600, 86400]);
    }

    #[test]
    fn env_overrides_apply_with_types() {
        let c = Config::from_toml_with_env(
            "",
            &env(&[
                ("RAGWATCH__SOURCE__KIND", "kafka"),
                ("RAGWATCH__KAFKA__BROKERS", "127.0.0.1:1234"),
                ("RAGWATCH__KAFKA__TOPICS", "a,b"),
                ("RAGWATCH__HTTP__LISTEN", "127.0.0.1:0"),
                ("RAGWATCH__SAMPLE__DEFAULT_RATE", "0.5"),
                ("RAGWATCH__KAFKA__PROPERTIES__FETCH.WAIT.MAX.MS", "5"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.source.kind, Some(SourceKind::Kafka));
        assert_eq!(c.kafka.brokers, "127.0.0.1:1234");
        assert_eq!(c.kafka.topics, vec!["a", "b"]);
        assert_eq!(c.sample.default_rate, 0.5);
        assert_eq!(c.kafka.properties["fetch.wait.max.ms"], "5");
    }

    #[test]
    fn unknown_field_is_an_error_naming_it() {
        let e = Config::from_toml_with_env("[source]\nkindd = \"file\"\n", &env(&[])).unwrap_err();
        assert!(e.to_string().contains("kindd"), "{e}");
    }

    #[test]
    fn validation_names_the_field() {
        let e =
            Config::from_toml_with_env("[sample]\ndefault_rate = 1.5\n", &env(&[])).unwrap_err();
        assert!(e.to_string().contains("sample.default_rate"), "{e}");
        let e = Config::from_toml_with_env(
            "[[strata.rules]]\nstratum = \"nope\"\nquery_regex = \"x\"\n",
            &env(&[]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("strata.rules[0].stratum"), "{e}");
        let e = Config::from_toml_with_env(
            "[kafka.properties]\n\"sasl.password\" = \"hunter2\"\n",
            &env(&[]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("sasl.password"), "{e}");
    }

    #[test]
    fn a_label_topic_needs_labels_on_and_a_floor_is_a_ratio() {
        let e = Config::from_toml_with_env("[labels]\ntopic = \"l\"\n", &env(&[])).unwrap_err();
        assert!(e.to_string().contains("labels.topic"), "{e}");
        let e =
            Config::from_toml_with_env("[labels]\nenabled = true\nauroc_floor = 1.5\n", &env(&[]))
                .unwrap_err();
        assert!(e.to_string().contains("labels.auroc_floor"), "{e}");
        let c = Config::from_toml_with_env(
            "[labels]\nenabled = true\n",
            &env(&[("RAGWATCH__LABELS__TOPIC", "ragwatch_labels")]),
        )
        .unwrap();
        assert_eq!(c.labels.topic.as_deref(), Some("ragwatch_labels"));
        assert_eq!(
            (c.labels.auroc_window_secs, c.labels.auroc_min_per_class),
            (3600, 20)
        );
    }

    #[test]
    fn group_instance_id_defaults_to_the_pod_name() {
        let c = Config::from_toml_with_env("", &env(&[])).unwrap();
        assert_eq!(c.kafka.session_timeout_ms, 30_000);
        assert_eq!(c.kafka.heartbeat_interval_ms, 1_000);
        let k = &c.kafka;
        assert_eq!(k.effective_group_instance_id(&env(&[])), None);
        let pod = env(&[("POD_NAME", "rag-7f9c-x2k9p"), ("HOSTNAME", "node-1")]);
        assert_eq!(
            k.effective_group_instance_id(&pod).as_deref(),
            Some("rag-7f9c-x2k9p")
        );
        let host = env(&[("HOSTNAME", "node-1")]);
        assert_eq!(
            k.effective_group_instance_id(&host).as_deref(),
            Some("node-1")
        );
        // A name Kafka would refuse is skipped rather than making the consumer fail.
        let odd = env(&[("POD_NAME", "a b"), ("HOSTNAME", "node-1")]);
        assert_eq!(
            k.effective_group_instance_id(&odd).as_deref(),
            Some("node-1")
        );
        // Set explicitly, it wins; set empty, membership is dynamic whatever the environment.
        let c = Config::from_toml_with_env("", &env(&[("RAGWATCH__KAFKA__GROUP_INSTANCE_ID", "")]))
            .unwrap();
        assert_eq!(c.kafka.effective_group_instance_id(&pod), None);
        let c = Config::from_toml_with_env("[kafka]\ngroup_instance_id = \"rw-0\"\n", &env(&[]))
            .unwrap();
        assert_eq!(
            c.kafka.effective_group_instance_id(&pod).as_deref(),
            Some("rw-0")
        );
    }

    #[test]
    fn group_membership_settings_are_checked() {
        for (toml, field) in [
            (
                "[kafka]\ngroup_instance_id = \"a/b\"\n",
                "kafka.group_instance_id",
            ),
            (
                "[kafka]\nsession_timeout_ms = 0\n",
                "kafka.session_timeout_ms",
            ),
            (
                "[kafka]\nheartbeat_interval_ms = 30000\n",
                "kafka.heartbeat_interval_ms",
            ),
            (
                "[kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n",
                "kafka.properties.session.timeout.ms",
            ),
            (
                "[kafka.properties]\n\"group.instance.id\" = \"x\"\n",
                "kafka.properties.group.instance.id",
            ),
        ] {
            let e = Config::from_toml_with_env(toml, &env(&[])).unwrap_err();
            assert!(e.to_string().contains(field), "{toml}: {e}");
        }
    }

    #[test]
    fn shipped_configs_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml")
                && !path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("gate")
            {
                Config::load(&path, &HashMap::new())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 2, "expected the shipped configs, found {n}");
    }
}

#[cfg(test)]
mod audit_tests {
    use super::*;

    #[test]
    fn model_families_by_prefix_after_the_provider() {
        let a = AuditConfig::default();
        assert_eq!(a.family("gpt-4o-mini-2024-07-18"), Some("gpt"));
        assert_eq!(a.family("openai/GPT-4o"), Some("gpt"));
        assert_eq!(a.family("o3-mini"), Some("gpt"));
        assert_eq!(a.family("google/gemma-2-9b-it"), Some("gemma"));
        assert_eq!(a.family("llama-2-13b-chat"), Some("llama"));
        assert_eq!(a.family("mistral-7B-Instruct"), Some("mistral"));
        assert_eq!(a.family("judge-2026-01-01"), None);
        assert_eq!(a.family(""), None);
        let c = Config::from_toml_with_env(
            "[audit]\nfamilies = { acme = [\"acme-\"] }\n",
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(c.audit.family("acme-7b"), Some("acme"));
        assert_eq!(
            c.audit.family("gpt-4o"),
            None,
            "the table replaces the default"
        );
    }
}

#[cfg(test)]
mod fleet_tests {
    //! `[fleet]` as a config file and the environment set it.
    use std::collections::HashMap;

    use super::Config;
    use crate::fleet::config::Membership;

    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_toml_with_env(toml, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn auto_is_partitions_with_kafka_then_peers_when_named_else_replicas() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.fleet.membership, Membership::Auto);
        assert_eq!((c.fleet.replicas, c.fleet.peers_refresh_secs), (1, 10));
        assert_eq!(c.fleet.resolved(false), Membership::Replicas);
        let peers = load("[fleet]\npeers = \"ragwatch-peers\"\n", &[]).unwrap();
        assert_eq!(peers.fleet.resolved(false), Membership::Peers);
        assert_eq!(
            peers.fleet.resolved(true),
            Membership::Partitions,
            "a Kafka replica's share is its partitions, peers or not"
        );
        let fixed = load("[fleet]\nmembership = \"replicas\"\nreplicas = 4\n", &[]).unwrap();
        assert_eq!(fixed.fleet.resolved(true), Membership::Replicas);
        assert_eq!(fixed.fleet.initial_share(), 0.25);
    }

    #[test]
    fn environment_overrides_reach_the_fleet_section() {
        let c = load(
            "[source]\nkind = \"otlp\"\n",
            &[
                (
                    "RAGWATCH__FLEET__PEERS",
                    "ragwatch-peers.rag.svc.cluster.local",
                ),
                ("RAGWATCH__FLEET__PEERS_REFRESH_SECS", "3"),
                ("RAGWATCH__FLEET__REPLICAS", "2"),
                ("RAGWATCH__FLEET__MEMBERSHIP", "peers"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.fleet.peers.as_deref(),
            Some("ragwatch-peers.rag.svc.cluster.local")
        );
        assert_eq!((c.fleet.peers_refresh_secs, c.fleet.replicas), (3, 2));
        assert_eq!(c.fleet.membership, Membership::Peers);
        // A name that TOML would read as dotted keys stays a string.
        let c = load("", &[("RAGWATCH__FLEET__PEERS", "peers.ragwatch.test")]).unwrap();
        assert_eq!(c.fleet.peers.as_deref(), Some("peers.ragwatch.test"));
    }

    #[test]
    fn validation_names_the_field() {
        for (toml, field) in [
            (
                "[source]\nkind = \"otlp\"\n[fleet]\nmembership = \"partitions\"\n",
                "fleet.membership",
            ),
            ("[fleet]\nmembership = \"peers\"\n", "fleet.peers"),
            ("[fleet]\npeers = \" \"\n", "fleet.peers"),
            ("[fleet]\nreplicas = 0\n", "fleet.replicas"),
            (
                "[fleet]\npeers_refresh_secs = 0\n",
                "fleet.peers_refresh_secs",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err();
            assert!(e.contains(&format!("`{field}`")), "{toml}: {e}");
        }
        assert!(load("[fleet]\nmembershp = \"auto\"\n", &[]).is_err());
        load(
            "[source]\nkind = \"kafka\"\n[fleet]\nmembership = \"partitions\"\n",
            &[],
        )
        .unwrap();
    }
}

#[cfg(test)]
mod otlp_source_tests {
    //! An OTLP source's decode format, as the file and the environment set it.
    use std::collections::HashMap;

    use super::Config;
    use crate::trace::otlp::config::TraceFormat;

    #[test]
    fn an_otlp_source_needs_no_format_but_refuses_native() {
        let c = Config::from_toml_with_env("[source]\nkind = \"otlp\"\n", &HashMap::new()).unwrap();
        assert_eq!(c.decode.format, TraceFormat::OtlpProto);
        let c = Config::from_toml_with_env(
            "[source]\nkind = \"otlp\"\n[decode]\nformat = \"otlp_json\"\n",
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(c.decode.format, TraceFormat::OtlpJson);
        let env = HashMap::from([("RAGWATCH__SOURCE__KIND".to_owned(), "otlp".to_owned())]);
        let c = Config::from_toml_with_env("", &env).unwrap();
        assert_eq!(c.decode.format, TraceFormat::OtlpProto);
        let e = Config::from_toml_with_env(
            "[source]\nkind = \"otlp\"\n[decode]\nformat = \"native\"\n",
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("decode.format"), "{e}");
        let c = Config::from_toml_with_env("", &HashMap::new()).unwrap();
        assert_eq!(c.decode.format, TraceFormat::Native);
    }
}
