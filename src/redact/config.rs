//! What is replaced in a trace's texts before they leave the process (`[redact]`).

use serde::{Deserialize, Serialize};

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

crate::config::default_from_serde!(RedactConfig);

fn default_redact_builtins() -> Vec<String> {
    vec!["card".into(), "secret".into()]
}

fn default_redact_mode() -> RedactMode {
    RedactMode::Mask
}

fn default_redact_hash_key_env() -> String {
    "RAGWATCH_REDACT_HASH_KEY".into()
}
