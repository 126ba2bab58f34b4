//! Decoding limits and the field mapping from a message to a trace.

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;
use crate::trace::otlp::config::{Preset, TraceFormat};

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
    #[serde(default = "crate::trace::otlp::config::default_format")]
    pub format: TraceFormat,
    /// The span conventions OTLP traces follow: `openinference`, `openllmetry` or `gen_ai`.
    #[serde(default = "crate::trace::otlp::config::default_preset")]
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

crate::section::fields::default_from_serde!(DecodeConfig);

fn default_max_message_bytes() -> usize {
    1 << 20
}

fn default_max_contexts() -> usize {
    64
}

fn default_max_field_bytes() -> usize {
    256 * 1024
}

impl DecodeConfig {
    /// Checks `[decode]`: nonzero limits; a mapping only for the native format.
    pub(crate) fn validate(&self, p: &mut Problems) {
        for (field, v) in [
            ("decode.max_message_bytes", self.max_message_bytes),
            ("decode.max_field_bytes", self.max_field_bytes),
            ("decode.max_contexts", self.max_contexts),
        ] {
            if v == 0 {
                p.add(field, "must be > 0");
            }
        }
        if self.format.is_otlp() && self.mapping.is_some() {
            p.add(
                "decode.mapping",
                "applies to the native format only; OTLP spans are read through decode.preset",
            );
        }
    }
}
