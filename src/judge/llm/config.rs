//! The LLM judge's API (`[llm]`) and its fleet-wide budget (`[budget]`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::section::fields::default_true;
use crate::section::problems::Problems;

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

crate::section::fields::default_from_serde!(LlmConfig, BudgetConfig);

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

fn default_records_max_bytes() -> u64 {
    64 << 20
}

fn default_records_keep_files() -> u32 {
    3
}

impl BudgetConfig {
    /// Checks `[budget]`: a zero limit is a judge that silently never runs, so it is refused
    /// with the way to switch the judge off.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if !(0.0..1.0).contains(&self.reserve_ratio) {
            p.add("budget.reserve_ratio", "must be in [0, 1)");
        }
        for (field, zero) in [
            ("budget.requests_per_minute", self.requests_per_minute == 0),
            ("budget.tokens_per_minute", self.tokens_per_minute == 0),
            ("budget.tokens_per_day", self.tokens_per_day == 0),
        ] {
            if zero {
                p.add(
                    field,
                    "must be > 0 (to run no LLM judge, set judge.sampled = \"none\")",
                );
            }
        }
    }
}

impl LlmConfig {
    /// Checks `[llm]`; the endpoint and models must be named when the LLM is the sampled judge.
    pub(crate) fn validate(&self, sampled_judge: bool, p: &mut Problems) {
        let llm = self;
        if sampled_judge {
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
}
