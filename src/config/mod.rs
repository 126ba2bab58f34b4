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

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod drift;
mod kafka;
mod otlp;
mod write;

pub use drift::{DriftConfig, DriftRule, RuleOverride, ShiftRule};
pub use otlp::{AssemblyConfig, OtlpConfig, Preset, TraceFormat};
pub use write::{ClientAuth, RateLimitConfig, WriteAuthConfig, WriteConfig, WriteTlsConfig};

/// Why a configuration could not be loaded. Each variant names the offending field or file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse or had an unknown or wrong-typed field.
    #[error("invalid config: {0}")]
    Parse(String),
    /// An environment override could not be applied.
    #[error("invalid environment override {var}: {reason}")]
    Env {
        /// The variable name.
        var: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Values out of range or inconsistent with others: every problem found, each naming its field.
    #[error("invalid config:{}", .0.iter().map(|p| format!("\n  `{}`: {}", p.field, p.reason)).collect::<String>())]
    Invalid(Vec<FieldProblem>),
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

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
    /// Judges and their work queue.
    #[serde(default)]
    pub judge: JudgeConfig,
    /// Rolling windows.
    #[serde(default)]
    pub windows: WindowsConfig,
    /// Drift rules per metric, with per-stratum overrides.
    #[serde(default)]
    pub drift: DriftConfig,
    /// The LLM judge's API, used when `judge.sampled = "llm"`.
    #[serde(default)]
    pub llm: LlmConfig,
    /// The LLM judge's budget for the whole fleet.
    #[serde(default)]
    pub budget: BudgetConfig,
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
}

/// How a redacted match is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedactMode {
    /// `[REDACTED:<pattern>]`.
    Mask,
    /// `[<pattern>:<12 hex>]`, a keyed hash: the same text gives the same token.
    Hash,
}

/// A pattern of the config's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactPattern {
    /// The label value of its count (lowercase letters, digits, `_`).
    pub name: String,
    /// The regex (Rust `regex` syntax).
    pub regex: String,
}

/// Redaction of question, contexts and answer before the LLM judge's API and the verdict records
/// (the offline judge reads the original in memory).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactConfig {
    /// Built-in patterns on: `email`, `phone`, `card` (Luhn-checked), `secret` (API keys, tokens,
    /// private keys), `ip` (IPv4, IPv6). `[]` turns them all off.
    #[serde(default = "default_redact_builtins")]
    pub builtins: Vec<String>,
    /// Patterns of your own, each with a name.
    #[serde(default)]
    pub patterns: Vec<RedactPattern>,
    /// `mask` or `hash`.
    #[serde(default = "default_redact_mode")]
    pub mode: RedactMode,
    /// The environment variable holding the key of `hash` (share it across replicas for tokens
    /// that match fleet-wide; without it, a random key per process).
    #[serde(default = "default_redact_hash_key_env")]
    pub hash_key_env: String,
}

/// Model families: a judge may prefer answers of its own family (self-preference), so LLM verdicts
/// on answers whose generator (`metadata.model`) is of the judge's family are counted.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Family name -> name prefixes. A model is of a family when its name, lowercased and after
    /// the last `/` (`openai/gpt-4o` -> `gpt-4o`), starts with one of the family's prefixes.
    #[serde(default = "default_families")]
    pub families: BTreeMap<String, Vec<String>>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            families: default_families(),
        }
    }
}

impl AuditConfig {
    /// The family of `model`, if any of the prefixes matches.
    pub fn family(&self, model: &str) -> Option<&str> {
        let lower = model.to_lowercase();
        let name = lower.rsplit('/').next().unwrap_or_default();
        self.families
            .iter()
            .find(|(_, prefixes)| {
                prefixes
                    .iter()
                    .any(|p| !p.is_empty() && name.starts_with(&p.to_lowercase()))
            })
            .map(|(family, _)| family.as_str())
    }
}

fn default_families() -> BTreeMap<String, Vec<String>> {
    [
        ("claude", &["claude"][..]),
        ("gemini", &["gemini"]),
        ("gemma", &["gemma"]),
        ("gpt", &["gpt-", "chatgpt", "o1", "o3", "o4"]),
        ("llama", &["llama", "meta-llama"]),
        ("mistral", &["mistral", "mixtral", "ministral"]),
        ("qwen", &["qwen"]),
    ]
    .into_iter()
    .map(|(f, p)| (f.to_owned(), p.iter().map(|p| (*p).to_owned()).collect()))
    .collect()
}

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

/// The kind of trace source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A JSONL file, optionally paced and looped.
    File,
    /// JSONL on standard input.
    Stdin,
    /// A Kafka topic, read as a consumer group.
    Kafka,
    /// OTLP/HTTP requests pushed to `[otlp] listen`.
    Otlp,
}

/// Where traces come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `file`, `stdin`, `kafka` or `otlp`.
    #[serde(default = "default_source_kind")]
    pub kind: SourceKind,
    /// JSONL file for `kind = "file"`.
    #[serde(default = "default_source_path")]
    pub path: PathBuf,
    /// Traces per second for file and stdin sources; 0 reads as fast as possible.
    #[serde(default = "default_rate_per_sec")]
    pub rate_per_sec: f64,
    /// Start again at the top of the file when it ends.
    #[serde(default = "default_true", rename = "loop")]
    pub loop_file: bool,
}

/// Kafka consumer group settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma separated.
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// Topics to subscribe to.
    #[serde(default = "default_topics")]
    pub topics: Vec<String>,
    /// Consumer group id; replicas with the same id share the partitions.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// How often stored offsets are committed.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// How often librdkafka reports statistics (consumer lag per partition).
    #[serde(default = "default_stats_interval_ms")]
    pub stats_interval_ms: u64,
    /// Static group membership (KIP-345): this replica's stable name in the group, so a restarted
    /// process takes its partitions back at once, without a rebalance, if it returns within
    /// `session_timeout_ms`. Absent: `$POD_NAME`, else `$HOSTNAME`, when set; empty: dynamic
    /// membership. Two live processes must never share one (the broker fences the older).
    #[serde(default)]
    pub group_instance_id: Option<String>,
    /// How long the group waits for a silent member before moving its partitions to the others:
    /// the longest a dead replica's partitions go unread, and how long a restart may take without
    /// a rebalance under static membership.
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
    /// How often the member tells the group it is alive, and so how soon it learns of a rebalance.
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// Any librdkafka property, passed through verbatim (TLS, SASL mechanism, fetch sizes...).
    /// Secrets such as `sasl.password` must come from `KAFKA_SASL_PASSWORD` instead.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Environment variable holding the SASL password, if any.
    #[serde(default = "default_sasl_password_env")]
    pub sasl_password_env: String,
}

impl KafkaConfig {
    /// The static member name to use: `group_instance_id` when set (empty: none), else the first
    /// of `$POD_NAME` and `$HOSTNAME` that is set and valid. `env` is the process environment.
    pub fn effective_group_instance_id(&self, env: &HashMap<String, String>) -> Option<String> {
        match &self.group_instance_id {
            Some(id) => Some(id.clone()).filter(|id| !id.is_empty()),
            None => ["POD_NAME", "HOSTNAME"]
                .iter()
                .filter_map(|var| env.get(*var))
                .find(|v| !v.is_empty() && Self::check_group_instance_id(v).is_ok())
                .cloned(),
        }
    }

    /// Kafka's rule for a `group.instance.id`: at most 249 of `[A-Za-z0-9._-]`, not `.` or `..`.
    /// Empty means dynamic membership and passes.
    pub fn check_group_instance_id(id: &str) -> Result<(), String> {
        let legal = id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if id.len() > 249 || !legal || id == "." || id == ".." {
            Err(format!(
                "`{id}` is not a Kafka group instance id (at most 249 of A-Z a-z 0-9 . _ -)"
            ))
        } else {
            Ok(())
        }
    }
}

/// Limits and field mapping for decoding.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeConfig {
    /// Messages larger than this are rejected (`too_large`).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Traces with more contexts are rejected (`too_many_contexts`).
    #[serde(default = "default_max_contexts")]
    pub max_contexts: usize,
    /// Any text field longer than this is rejected (`field_too_long`).
    #[serde(default = "default_max_field_bytes")]
    pub max_field_bytes: usize,
    /// JSON pointers for non-native shapes. Absent: the native schema.
    #[serde(default)]
    pub mapping: Option<MappingConfig>,
    /// `native`, `otlp_proto` or `otlp_json`.
    #[serde(default = "otlp::default_format")]
    pub format: TraceFormat,
    /// The span conventions OTLP traces follow: `openinference`, `openllmetry` or `gen_ai`.
    #[serde(default = "otlp::default_preset")]
    pub preset: Preset,
}

/// JSON pointers (RFC 6901) locating each trace field in a foreign message shape. In `contexts`,
/// the token `{n}` stands for 0, 1, 2... until a pointer resolves to nothing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MappingConfig {
    /// Pointer to the trace id.
    pub trace_id: String,
    /// Pointer to the question.
    pub query: String,
    /// Pointer to the answer.
    pub answer: String,
    /// Pointer to one context's text, with `{n}` for its index; or to an array of contexts.
    pub contexts: String,
    /// Pointer to the stratum, if the shape carries one.
    #[serde(default)]
    pub stratum: Option<String>,
    /// Pointer to the timestamp (RFC 3339 or epoch ms).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Pointer to the generator model name, kept in metadata.
    #[serde(default)]
    pub model: Option<String>,
}

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
    pub fn is_out_of_scope(&self, stratum: &str) -> bool {
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

/// Which judge scores the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampledJudge {
    /// No second judge: the sample decision is counted only.
    None,
    /// The offline judge, run again on the sample (useful for testing the queue path).
    Offline,
    /// The LLM judge (`[llm]`, `[budget]`).
    Llm,
}

/// How faithfulness is asked of the LLM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaithfulnessMode {
    /// Extract claims and verify them in one call.
    OneCall,
    /// RAGAS's form: one call extracts claims, a second verifies them.
    TwoCall,
}

/// How the LLM judge asks the server for JSON. Servers differ: OpenAI, Azure, vLLM, Ollama and
/// llama.cpp's server take a strict JSON schema; llama-cpp-python takes `json_object` with a
/// `schema` beside it; some take only JSON mode; some take no `response_format` at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutput {
    /// Probe at start-up, in the order below: a 400 or 422 (llama-cpp-python: 500) that names
    /// `response_format` moves on to the next mode.
    Auto,
    /// `{"type": "json_schema", "json_schema": {"name", "strict": true, "schema"}}`.
    JsonSchema,
    /// `{"type": "json_object", "schema": ...}` (llama-cpp-python, which enforces it by grammar).
    JsonObjectSchema,
    /// `{"type": "json_object"}`, the reply's shape described in the prompt.
    JsonObject,
    /// No `response_format`; the reply's shape described in the prompt.
    Prompt,
}

/// How embeddings come back over the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbeddingEncoding {
    /// JSON arrays of numbers.
    Float,
    /// Base64 of little-endian f32s (a quarter of the bytes; OpenAI's own clients ask for it).
    Base64,
}

/// An OpenAI-compatible chat and embeddings API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL up to and including the version path, e.g. `https://api.openai.com/v1`.
    #[serde(default = "default_base_url")]
    pub base_url: String,
    /// Chat model, pinned to a dated version: a judge change is a metric reset.
    #[serde(default = "default_chat_model")]
    pub chat_model: String,
    /// Embedding model for answer relevancy.
    #[serde(default = "default_embedding_model")]
    pub embedding_model: String,
    /// Version of ragwatch's judge prompts; recorded with every verdict.
    #[serde(default = "default_prompt_version")]
    pub prompt_version: String,
    /// Environment variable holding the API key.
    #[serde(default = "default_api_key_env")]
    pub api_key_env: String,
    /// A mounted file holding the API key (read when the variable is unset).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Header carrying the key: `authorization` (Bearer) or e.g. `api-key` for Azure.
    #[serde(default = "default_api_key_header")]
    pub api_key_header: String,
    /// Extra headers sent with every call.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Extra query parameters (Azure's `api-version`).
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Sampling temperature; 0 for a judge.
    #[serde(default)]
    pub temperature: f64,
    /// Seed, for servers that support it.
    #[serde(default = "default_seed")]
    pub seed: Option<u64>,
    /// How to ask for JSON (`auto` probes the server at start-up). The reply is validated against
    /// the same schema in every mode.
    #[serde(default = "default_structured_output")]
    pub structured_output: StructuredOutput,
    /// `encoding_format` asked of the embeddings endpoint; pooled and per-token (mean-pooled)
    /// vectors are accepted either way.
    #[serde(default = "default_embedding_encoding")]
    pub embedding_encoding: EmbeddingEncoding,
    /// One call or RAGAS's two calls for faithfulness.
    #[serde(default = "default_faithfulness_mode")]
    pub faithfulness_mode: FaithfulnessMode,
    /// Also ask, in the faithfulness call that already carries the contexts, whether each context
    /// is relevant to the question: RAGAS context precision without reference, for a few output
    /// tokens per context.
    #[serde(default = "default_true")]
    pub context_relevance: bool,
    /// Questions generated for answer relevancy.
    #[serde(default = "default_relevancy_questions")]
    pub relevancy_questions: u32,
    /// `max_tokens` of a call; a truncated answer is retried once with twice this.
    #[serde(default = "default_max_output_tokens")]
    pub max_output_tokens: u64,
    /// TCP connect timeout.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Timeout of one HTTP request.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Everything for one trace (all calls and retries) must finish within this.
    #[serde(default = "default_trace_deadline_ms")]
    pub trace_deadline_ms: u64,
    /// Attempts per call, including the first: transport retries and the one re-ask of a
    /// malformed reply share them.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Backoff base.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// Backoff ceiling.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Identical (query, contexts, answer) within this reuse the verdict.
    #[serde(default = "default_cache_ttl_secs")]
    pub cache_ttl_secs: u64,
    /// Verdicts kept in the cache.
    #[serde(default = "default_cache_capacity")]
    pub cache_capacity: usize,
    /// Append a verdict record (claims, raw outputs, usage, latency) per judged trace to this file.
    #[serde(default)]
    pub records_path: Option<PathBuf>,
    /// The records file is rotated when it reaches this size (`path.1`, `path.2`, ...).
    #[serde(default = "default_records_max_bytes")]
    pub records_max_bytes: u64,
    /// Rotated records files kept besides the live one; older ones are deleted.
    #[serde(default = "default_records_keep_files")]
    pub records_keep_files: u32,
    /// Also publish every verdict record to this Kafka topic (brokers and properties from `[kafka]`).
    #[serde(default)]
    pub records_topic: Option<String>,
    /// Canaries: JSONL traces with `label_faithful`, judged every `canary_interval_secs` (under the
    /// budget); `ragwatch_judge_canary_agreement_ratio` shows when the judge changes under you.
    #[serde(default)]
    pub canary_path: Option<PathBuf>,
    /// How often the canaries are judged.
    #[serde(default = "default_canary_interval_secs")]
    pub canary_interval_secs: u64,
}

/// The LLM judge's budget, for the whole fleet; each replica spends its share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// Judge requests per minute.
    #[serde(default = "default_rpm")]
    pub requests_per_minute: u32,
    /// Tokens per minute (input plus output).
    #[serde(default = "default_tpm")]
    pub tokens_per_minute: u64,
    /// Tokens per day.
    #[serde(default = "default_tpd")]
    pub tokens_per_day: u64,
    /// Share of every limit that only priority traces may spend: each stratum's guaranteed
    /// `sample.min_per_window` samples (and canaries). Head traffic sampled by rate stops at the
    /// reserve, so small strata such as out-of-scope still get judged when the budget runs short.
    #[serde(default = "default_reserve_ratio")]
    pub reserve_ratio: f64,
}

/// Judges and their bounded work queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeConfig {
    /// The judge that runs on sampled traces.
    #[serde(default = "default_sampled_judge")]
    pub sampled: SampledJudge,
    /// Sampled traces waiting for a judge; when full, a trace is skipped with reason `queue_full`.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// Concurrent sampled-judge workers.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Answers whose offline faithfulness is below this count as unfaithful in labelled evaluation.
    #[serde(default = "default_threshold")]
    pub faithful_threshold: f64,
}

/// Rolling windows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsConfig {
    /// Window lengths in seconds, shortest first. Each is a ring of `buckets` buckets.
    #[serde(default = "default_window_secs")]
    pub window_secs: Vec<u64>,
    /// Buckets per window (resolution: window / buckets).
    #[serde(default = "default_buckets")]
    pub buckets: u32,
    /// The window drift rules watch (must be one of `window_secs`).
    #[serde(default = "default_short_window")]
    pub short_secs: u64,
    /// The baseline window the short one is compared with.
    #[serde(default = "default_baseline_window")]
    pub baseline_secs: u64,
    /// How often window gauges and drift state are recomputed.
    #[serde(default = "default_evaluate_interval_ms")]
    pub evaluate_interval_ms: u64,
    /// z-score of the confidence bound (1.645 is one-sided 95 %).
    #[serde(default = "default_z")]
    pub z: f64,
}

/// The admin HTTP server: read-only (metrics and probes); writes go to `[write]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address; port 0 picks a free port (logged, and written to `port_file` if set).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Write the bound address here once listening (used by tests and scripts).
    #[serde(default)]
    pub port_file: Option<PathBuf>,
}

/// The scale of the retriever's scores, which sets the buckets of `ragwatch_retrieval_score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreScale {
    /// 0 to 1: a similarity clipped at zero, a reranker's probability. Buckets 0.1 to 1.0.
    Unit,
    /// -1 to 1: cosine similarity of unnormalised embeddings. Buckets -0.8 to 1.0.
    Signed,
    /// 0 and up, unbounded: BM25, inner products, distances. Buckets 0.25 to 256, doubling.
    Unbounded,
}

impl ScoreScale {
    /// The histogram's upper bounds for this scale (`+Inf` is implicit).
    pub fn buckets(self) -> Vec<f64> {
        match self {
            ScoreScale::Unit => (1..=10).map(|i| f64::from(i) / 10.0).collect(),
            ScoreScale::Signed => (-4..=5).map(|i| f64::from(i) / 5.0).collect(),
            ScoreScale::Unbounded => (-2..=8).map(|i| 2f64.powi(i)).collect(),
        }
    }
}

/// What the exported metrics measure on scales the config declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// The scale of the retriever's scores (`contexts[].score`, or the retriever span's document
    /// scores): `unit`, `signed` or `unbounded`.
    #[serde(default = "default_retrieval_score_scale")]
    pub retrieval_score_scale: ScoreScale,
    /// Upper bounds of `ragwatch_retrieval_score`'s buckets, ascending; replaces the scale's.
    #[serde(default)]
    pub retrieval_score_buckets: Option<Vec<f64>>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            retrieval_score_scale: default_retrieval_score_scale(),
            retrieval_score_buckets: None,
        }
    }
}

impl MetricsConfig {
    /// The buckets of `ragwatch_retrieval_score`: the explicit list, else the scale's.
    pub fn retrieval_buckets(&self) -> Vec<f64> {
        self.retrieval_score_buckets
            .clone()
            .unwrap_or_else(|| self.retrieval_score_scale.buckets())
    }
}

fn default_retrieval_score_scale() -> ScoreScale {
    ScoreScale::Unit
}

/// Shutdown behaviour.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Time allowed to drain in-flight judge work after SIGTERM; keep it below the pod's grace.
    #[serde(default = "default_grace_secs")]
    pub grace_secs: u64,
}

fn default_true() -> bool {
    true
}
fn default_source_kind() -> SourceKind {
    SourceKind::File
}
fn default_source_path() -> PathBuf {
    PathBuf::from("config/sample-traces.jsonl")
}
fn default_rate_per_sec() -> f64 {
    20.0
}
fn default_brokers() -> String {
    "127.0.0.1:9092".into()
}
fn default_topics() -> Vec<String> {
    vec!["rag-traces".into()]
}
fn default_group_id() -> String {
    "ragwatch".into()
}
fn default_commit_interval_ms() -> u64 {
    1000
}
fn default_stats_interval_ms() -> u64 {
    5000
}
// With static membership a restarted sidecar keeps its partitions if it is back within the session:
// 30 s covers the first restarts of a crash loop (Kubernetes waits 10 s, then 20 s) and rides out broker
// or network blips shorter than that without a rebalance (Kafka raised its own default from 10 s to
// 45 s for the blips, KIP-735), while a replica that leaves for good (a rolling update renames the pod)
// holds its partitions 30 s rather than 45. Brokers refuse less than 6 s.
fn default_session_timeout_ms() -> u64 {
    30_000
}
// Members hear of a rebalance at their next heartbeat, so the whole group waits for the slowest: 1 s
// keeps rebalances short, at one small request a second per replica.
fn default_heartbeat_interval_ms() -> u64 {
    1_000
}
fn default_sasl_password_env() -> String {
    "KAFKA_SASL_PASSWORD".into()
}
fn default_max_message_bytes() -> usize {
    1 << 20
}
fn default_max_contexts() -> usize {
    64
}
fn default_max_field_bytes() -> usize {
    256 * 1024
}
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
fn default_sampled_judge() -> SampledJudge {
    SampledJudge::None
}
fn default_queue_capacity() -> usize {
    256
}
fn default_workers() -> usize {
    4
}
fn default_threshold() -> f64 {
    0.5
}
fn default_window_secs() -> Vec<u64> {
    vec![300, 3600, 86400]
}
fn default_buckets() -> u32 {
    60
}
fn default_short_window() -> u64 {
    300
}
fn default_baseline_window() -> u64 {
    86400
}
fn default_evaluate_interval_ms() -> u64 {
    1000
}
fn default_z() -> f64 {
    1.645
}
fn default_base_url() -> String {
    "https://api.openai.com/v1".into()
}
fn default_chat_model() -> String {
    "gpt-4o-mini-2024-07-18".into()
}
fn default_embedding_model() -> String {
    "text-embedding-3-small".into()
}
fn default_prompt_version() -> String {
    // rw-2: the faithfulness prompts can carry per-context relevance verdicts.
    // rw-3: without a schema in `response_format`, the prompt describes the reply's shape (not the
    // raw schema, which small models echo back); a malformed reply is re-asked once with its error.
    "rw-3".into()
}
fn default_api_key_env() -> String {
    "RAGWATCH_LLM_API_KEY".into()
}
fn default_api_key_header() -> String {
    "authorization".into()
}
fn default_seed() -> Option<u64> {
    Some(7)
}
fn default_structured_output() -> StructuredOutput {
    StructuredOutput::Auto
}
fn default_embedding_encoding() -> EmbeddingEncoding {
    EmbeddingEncoding::Float
}
fn default_faithfulness_mode() -> FaithfulnessMode {
    FaithfulnessMode::OneCall
}
fn default_relevancy_questions() -> u32 {
    3
}
fn default_max_output_tokens() -> u64 {
    1024
}
fn default_connect_timeout_ms() -> u64 {
    3000
}
fn default_request_timeout_ms() -> u64 {
    30_000
}
fn default_trace_deadline_ms() -> u64 {
    60_000
}
fn default_max_attempts() -> u32 {
    4
}
fn default_backoff_base_ms() -> u64 {
    250
}
fn default_backoff_max_ms() -> u64 {
    10_000
}
fn default_cache_ttl_secs() -> u64 {
    3600
}
fn default_cache_capacity() -> usize {
    10_000
}
fn default_canary_interval_secs() -> u64 {
    3600
}
fn default_rpm() -> u32 {
    60
}
fn default_tpm() -> u64 {
    200_000
}
fn default_tpd() -> u64 {
    20_000_000
}
fn default_reserve_ratio() -> f64 {
    0.2
}
fn default_listen() -> String {
    "0.0.0.0:9464".into()
}
fn default_grace_secs() -> u64 {
    20
}
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
fn default_log_format() -> LogFormat {
    LogFormat::Text
}
fn default_records_max_bytes() -> u64 {
    64 << 20
}
fn default_redact_builtins() -> Vec<String> {
    vec!["card".into(), "secret".into()]
}
fn default_redact_mode() -> RedactMode {
    RedactMode::Mask
}
fn default_redact_hash_key_env() -> String {
    "RAGWATCH_REDACT_HASH_KEY".into()
}
fn default_records_keep_files() -> u32 {
    3
}

/// Implements `Default` through serde's field defaults, so the two can never disagree.
macro_rules! default_from_serde {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                toml::from_str("").expect("every field of this section has a default")
            }
        }
    )*};
}
default_from_serde!(
    Config,
    SourceConfig,
    KafkaConfig,
    DecodeConfig,
    StrataConfig,
    SampleConfig,
    JudgeConfig,
    WindowsConfig,
    LlmConfig,
    BudgetConfig,
    HttpConfig,
    ShutdownConfig,
    LogConfig,
    LabelsConfig,
    RedactConfig
);

/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "RAGWATCH__";

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
        otlp::default_otlp_format(&mut doc);
        let config: Config = doc
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Parse(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Cross-field checks that serde cannot express. Reports every problem at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut p = Problems::default();
        self.validate_source(&mut p);
        self.validate_strata(&mut p);
        self.validate_sampling(&mut p);
        self.validate_windows(&mut p);
        self.validate_drift(&mut p);
        self.validate_llm(&mut p);
        if self.labels.enabled && self.labels.max_traces == 0 {
            p.add("labels.max_traces", "must be > 0");
        }
        p.ratio(
            "labels.llm_faithful_threshold",
            self.labels.llm_faithful_threshold,
        );
        p.ratio("labels.auroc_floor", self.labels.auroc_floor);
        if self.labels.auroc_window_secs == 0 {
            p.add("labels.auroc_window_secs", "must be > 0");
        }
        if self.labels.topic.is_some() && !self.labels.enabled {
            p.add("labels.topic", "needs labels.enabled = true");
        }
        if self.labels.topic.as_deref() == Some("") {
            p.add(
                "labels.topic",
                "must not be empty (leave it out for no topic)",
            );
        }
        self.validate_otlp(&mut p);
        self.validate_write(&mut p);
        self.validate_redact(&mut p);
        if let Some(b) = &self.metrics.retrieval_score_buckets {
            if b.is_empty() || b.len() > 40 {
                p.add("metrics.retrieval_score_buckets", "needs 1 to 40 bounds");
            } else if b.iter().any(|x| !x.is_finite()) || b.windows(2).any(|w| w[0] >= w[1]) {
                p.add(
                    "metrics.retrieval_score_buckets",
                    "must be finite and strictly ascending (+Inf is implicit)",
                );
            }
        }
        if let Err(e) = self.http.listen.parse::<std::net::SocketAddr>() {
            p.add("http.listen", e.to_string());
        }
        p.into_result()
    }

    fn validate_redact(&self, p: &mut Problems) {
        let r = &self.redact;
        let builtins = ["email", "phone", "card", "secret", "ip"];
        for b in &r.builtins {
            if !builtins.contains(&b.as_str()) {
                p.add(
                    "redact.builtins",
                    format!("unknown pattern {b:?} (email, phone, card, secret, ip)"),
                );
            }
        }
        let mut seen: Vec<&str> = r.builtins.iter().map(String::as_str).collect();
        for pat in &r.patterns {
            let field = format!("redact.patterns.{}", pat.name);
            if !valid_label(&pat.name) {
                p.add(
                    &field,
                    "name: lowercase letters, digits and _ (a label value)",
                );
            }
            if seen.contains(&pat.name.as_str()) || builtins.contains(&pat.name.as_str()) {
                p.add(&field, "name taken (by a built-in or another pattern)");
            }
            seen.push(&pat.name);
            if let Err(e) = regex::Regex::new(&pat.regex) {
                p.add(&field, e.to_string());
            }
        }
    }

    fn validate_source(&self, p: &mut Problems) {
        if self.source.rate_per_sec < 0.0 || !self.source.rate_per_sec.is_finite() {
            p.add("source.rate_per_sec", "must be >= 0");
        }
        if self.source.kind == SourceKind::Kafka {
            if self.kafka.brokers.trim().is_empty() {
                p.add("kafka.brokers", "must not be empty");
            }
            if self.kafka.topics.is_empty() {
                p.add("kafka.topics", "must name at least one topic");
            }
            if self.kafka.group_id.trim().is_empty() {
                p.add("kafka.group_id", "must not be empty");
            }
        }
        if let Some(id) = &self.kafka.group_instance_id
            && let Err(e) = KafkaConfig::check_group_instance_id(id)
        {
            p.add("kafka.group_instance_id", e);
        }
        if self.kafka.session_timeout_ms == 0 {
            p.add("kafka.session_timeout_ms", "must be > 0");
        }
        if self.kafka.heartbeat_interval_ms == 0
            || self.kafka.heartbeat_interval_ms >= self.kafka.session_timeout_ms
        {
            p.add(
                "kafka.heartbeat_interval_ms",
                "must be > 0 and below kafka.session_timeout_ms (a third of it or less is usual)",
            );
        }
        for key in self.kafka.properties.keys() {
            let field = format!("kafka.properties.{key}");
            if key.contains("password") || key.contains("secret") {
                p.add(
                    &field,
                    format!(
                        "secrets are read from the environment (${}), never from the config file",
                        self.kafka.sasl_password_env
                    ),
                );
            }
            if key == "enable.auto.offset.store" || key == "group.id" {
                p.add(&field, "is managed by ragwatch");
            }
            let own_key = match key.as_str() {
                "group.instance.id" => Some("group_instance_id"),
                "session.timeout.ms" => Some("session_timeout_ms"),
                "heartbeat.interval.ms" => Some("heartbeat_interval_ms"),
                _ => None,
            };
            if let Some(own) = own_key {
                p.add(&field, format!("is set by kafka.{own}"));
            }
        }
        for (field, v) in [
            ("decode.max_message_bytes", self.decode.max_message_bytes),
            ("decode.max_field_bytes", self.decode.max_field_bytes),
            ("decode.max_contexts", self.decode.max_contexts),
        ] {
            if v == 0 {
                p.add(field, "must be > 0");
            }
        }
    }

    fn validate_strata(&self, p: &mut Problems) {
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.strata.declared.iter().enumerate() {
            let field = format!("strata.declared[{i}]");
            if !valid_label(s) {
                p.add(&field, format!("`{s}` must match [a-z0-9_]{{1,64}}"));
            }
            if s == crate::labels::OTHER_STRATUM {
                p.add(&field, "`other` is reserved for undeclared strata");
            }
            if !seen.insert(s) {
                p.add(&field, format!("`{s}` is declared twice"));
            }
        }
        for (i, rule) in self.strata.rules.iter().enumerate() {
            let field = format!("strata.rules[{i}]");
            if !self.strata.declared.contains(&rule.stratum)
                && rule.stratum != crate::labels::DEFAULT_STRATUM
            {
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
        for (i, s) in self.strata.out_of_scope.iter().flatten().enumerate() {
            if !self.strata.declared.contains(s) {
                p.add(
                    &format!("strata.out_of_scope[{i}]"),
                    format!("`{s}` is not declared"),
                );
            }
        }
    }

    fn validate_sampling(&self, p: &mut Problems) {
        p.ratio("sample.default_rate", self.sample.default_rate);
        for (stratum, rate) in &self.sample.rates {
            let field = format!("sample.rates.{stratum}");
            p.ratio(&field, *rate);
            self.check_stratum(p, &field, stratum);
        }
        if !(self.sample.uncertain_boost >= 1.0 && self.sample.uncertain_boost.is_finite()) {
            p.add("sample.uncertain_boost", "must be >= 1");
        }
        if self.sample.min_window_secs == Some(0) {
            p.add("sample.min_window_secs", "must be > 0");
        }
        if self.judge.queue_capacity == 0 {
            p.add("judge.queue_capacity", "must be > 0");
        }
        if self.judge.workers == 0 {
            p.add("judge.workers", "must be > 0");
        }
        p.ratio("judge.faithful_threshold", self.judge.faithful_threshold);
        if !(0.0..1.0).contains(&self.budget.reserve_ratio) {
            p.add("budget.reserve_ratio", "must be in [0, 1)");
        }
        // A zero limit is a judge that silently never runs: refuse it, say how to switch off.
        for (field, zero) in [
            (
                "budget.requests_per_minute",
                self.budget.requests_per_minute == 0,
            ),
            (
                "budget.tokens_per_minute",
                self.budget.tokens_per_minute == 0,
            ),
            ("budget.tokens_per_day", self.budget.tokens_per_day == 0),
        ] {
            if zero {
                p.add(
                    field,
                    "must be > 0 (to run no LLM judge, set judge.sampled = \"none\")",
                );
            }
        }
    }

    fn validate_windows(&self, p: &mut Problems) {
        let w = &self.windows;
        if w.window_secs.is_empty() || w.window_secs.contains(&0) {
            p.add(
                "windows.window_secs",
                "needs at least one window, each > 0 s",
            );
        }
        if w.buckets < 2 || w.buckets > 10_000 {
            p.add("windows.buckets", "must be in 2..=10000");
        }
        for (name, secs) in [
            ("windows.short_secs", w.short_secs),
            ("windows.baseline_secs", w.baseline_secs),
        ] {
            if !w.window_secs.contains(&secs) {
                p.add(name, format!("{secs} is not in windows.window_secs"));
            }
        }
        if w.short_secs > w.baseline_secs {
            p.add(
                "windows.short_secs",
                "must not be longer than baseline_secs",
            );
        }
        if w.evaluate_interval_ms == 0 {
            p.add("windows.evaluate_interval_ms", "must be > 0");
        }
        if !(w.z.is_finite() && w.z >= 0.0) {
            p.add("windows.z", "must be finite and >= 0");
        }
    }

    fn validate_drift(&self, p: &mut Problems) {
        for (field, stratum, rule) in self.drift.sections() {
            if let Some(stratum) = stratum {
                self.check_stratum(p, &format!("drift.overrides.{stratum}"), stratum);
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
            for metric in crate::labels::Metric::ALL {
                let judge = crate::labels::JudgeKind::Combined;
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

    fn validate_llm(&self, p: &mut Problems) {
        let llm = &self.llm;
        if self.judge.sampled == SampledJudge::Llm {
            if !(llm.base_url.starts_with("http://") || llm.base_url.starts_with("https://")) {
                p.add("llm.base_url", "must be an http(s) URL");
            }
            if llm.chat_model.trim().is_empty() {
                p.add("llm.chat_model", "must be named");
            }
            if llm.embedding_model.trim().is_empty() {
                p.add("llm.embedding_model", "must be named");
            }
        }
        if !(1..=10).contains(&llm.relevancy_questions) {
            p.add("llm.relevancy_questions", "must be in 1..=10");
        }
        for (field, zero) in [
            ("llm.max_attempts", llm.max_attempts == 0),
            ("llm.max_output_tokens", llm.max_output_tokens == 0),
            ("llm.trace_deadline_ms", llm.trace_deadline_ms == 0),
            ("llm.request_timeout_ms", llm.request_timeout_ms == 0),
            ("llm.canary_interval_secs", llm.canary_interval_secs == 0),
            ("llm.records_max_bytes", llm.records_max_bytes == 0),
        ] {
            if zero {
                p.add(field, "must be > 0");
            }
        }
        if !(0.0..=2.0).contains(&llm.temperature) {
            p.add("llm.temperature", "must be in [0, 2]");
        }
        for key in llm.headers.keys() {
            let k = key.to_ascii_lowercase();
            if k == "authorization" || k == "api-key" || k.contains("secret") || k.contains("token")
            {
                p.add(
                    &format!("llm.headers.{key}"),
                    format!(
                        "credentials come from ${} or llm.api_key_file",
                        llm.api_key_env
                    ),
                );
            }
        }
    }

    /// The drift rule for `metric` as judged by `judge` in `stratum`, with overrides applied.
    pub fn drift_rule(
        &self,
        metric: crate::labels::Metric,
        judge: crate::labels::JudgeKind,
        stratum: &str,
    ) -> DriftRule {
        self.drift.rule(metric, judge, stratum)
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

    fn check_stratum(&self, p: &mut Problems, field: &str, stratum: &str) {
        if !(self.strata.declared.iter().any(|s| s == stratum)
            || stratum == crate::labels::DEFAULT_STRATUM
            || stratum == crate::labels::OTHER_STRATUM)
        {
            p.add(field, format!("stratum `{stratum}` is not declared"));
        }
    }
}

/// Problems found while validating, in the order found.
#[derive(Debug, Default)]
struct Problems(Vec<FieldProblem>);

impl Problems {
    fn add(&mut self, field: &str, reason: impl Into<String>) {
        self.0.push(FieldProblem {
            field: field.into(),
            reason: reason.into(),
        });
    }

    fn ratio(&mut self, field: &str, v: f64) {
        if !(0.0..=1.0).contains(&v) {
            self.add(field, format!("{v} is not in [0, 1]"));
        }
    }

    fn into_result(self) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(self.0))
        }
    }
}

/// Whether `s` can be a stratum label value: short, lowercase, no surprises in PromQL.
pub fn valid_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
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
        let signed = ScoreScale::Signed.buckets();
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
        assert_eq!(c.source.kind, SourceKind::File);
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
        assert_eq!(c.source.kind, SourceKind::Kafka);
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
