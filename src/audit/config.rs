//! The judge audit's live part (`[audit]`): model families, for the self-preference count.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
