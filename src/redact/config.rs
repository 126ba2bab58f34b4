//! What is replaced in a trace's texts before they leave the process (`[redact]`).

use crate::section::fields::valid_label;
use crate::section::problems::Problems;
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

crate::section::fields::default_from_serde!(RedactConfig);

fn default_redact_builtins() -> Vec<String> {
    vec!["card".into(), "secret".into()]
}

fn default_redact_mode() -> RedactMode {
    RedactMode::Mask
}

fn default_redact_hash_key_env() -> String {
    "RAGWATCH_REDACT_HASH_KEY".into()
}

/// The built-in pattern names, in the order the docs list them.
pub(crate) const BUILTIN_NAMES: [&str; 5] = ["email", "phone", "card", "secret", "ip"];

impl RedactConfig {
    /// Checks `[redact]`: known built-ins, label-safe unique names, patterns that compile.
    pub(crate) fn validate(&self, p: &mut Problems) {
        for b in &self.builtins {
            if !BUILTIN_NAMES.contains(&b.as_str()) {
                p.add(
                    "redact.builtins",
                    format!("unknown pattern {b:?} ({})", BUILTIN_NAMES.join(", ")),
                );
            }
        }
        let mut seen: Vec<&str> = self.builtins.iter().map(String::as_str).collect();
        for pat in &self.patterns {
            let field = format!("redact.patterns.{}", pat.name);
            if !valid_label(&pat.name) {
                p.add(
                    &field,
                    "name: lowercase letters, digits and _ (a label value)",
                );
            }
            if seen.contains(&pat.name.as_str()) || BUILTIN_NAMES.contains(&pat.name.as_str()) {
                p.add(&field, "name taken (by a built-in or another pattern)");
            }
            seen.push(&pat.name);
            if let Err(e) = regex::Regex::new(&pat.regex) {
                p.add(&field, e.to_string());
            }
        }
    }
}
