//! The structured-output mode of the LLM judge: fixed by `llm.structured_output`, or, with `auto`,
//! found by asking the server. The modes are tried from the strictest down
//! (`json_schema`, `json_object_schema`, `json_object`, `prompt`); a 400 or 422 that names
//! `response_format` moves to the next (so does llama-cpp-python's 500, which wraps the same
//! validation error). The first mode a server answers is kept for the process's
//! life: it is part of the judge identity, so it must not drift under a running judge.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::judge::llm::config::StructuredOutput;

/// The modes `auto` tries, in order.
pub const CHAIN: [StructuredOutput; 4] = [
    StructuredOutput::JsonSchema,
    StructuredOutput::JsonObjectSchema,
    StructuredOutput::JsonObject,
    StructuredOutput::Prompt,
];

/// The config and label spelling of a mode.
pub(crate) fn mode_name(mode: StructuredOutput) -> &'static str {
    match mode {
        StructuredOutput::Auto => "auto",
        StructuredOutput::JsonSchema => "json_schema",
        StructuredOutput::JsonObjectSchema => "json_object_schema",
        StructuredOutput::JsonObject => "json_object",
        StructuredOutput::Prompt => "prompt",
    }
}

/// The mode in use, shared by every call of one judge.
#[derive(Debug)]
pub(crate) struct ModeState {
    configured: StructuredOutput,
    /// Index into [`CHAIN`] of the mode calls use now.
    index: AtomicUsize,
    /// A server answered a call made in the current mode (always true for a fixed mode).
    resolved: AtomicBool,
}

impl ModeState {
    /// The state for `configured`: a fixed mode is resolved from the start.
    pub fn new(configured: StructuredOutput) -> Self {
        let index = CHAIN.iter().position(|m| *m == configured).unwrap_or(0);
        Self {
            configured,
            index: AtomicUsize::new(index),
            resolved: AtomicBool::new(configured != StructuredOutput::Auto),
        }
    }

    /// The mode calls use now.
    pub fn current(&self) -> StructuredOutput {
        CHAIN[self.index.load(Ordering::Acquire).min(CHAIN.len() - 1)]
    }

    /// Whether the mode is settled (fixed, or `auto` found one the server takes).
    pub(crate) fn is_resolved(&self) -> bool {
        self.resolved.load(Ordering::Acquire)
    }

    /// After the server refused `from`: moves on to the next mode while `auto` is still looking.
    /// True when the caller should send again (in [`Self::current`]); false when the mode is
    /// fixed, settled, or there is nothing left to try.
    pub(crate) fn fall_back(&self, from: StructuredOutput) -> bool {
        if self.is_resolved() {
            return false;
        }
        let Some(i) = CHAIN.iter().position(|m| *m == from) else {
            return false;
        };
        if i + 1 >= CHAIN.len() {
            return false;
        }
        // Concurrent calls refused in the same mode move the index once; a call that lost the race
        // finds the index already past its mode and simply sends again.
        let _ = self
            .index
            .compare_exchange(i, i + 1, Ordering::AcqRel, Ordering::Acquire);
        true
    }

    /// After the server answered a call made in `mode`. True the first time `auto` settles, so
    /// the caller logs and exports the choice once.
    pub(crate) fn confirm(&self, mode: StructuredOutput) -> bool {
        self.configured == StructuredOutput::Auto
            && mode == self.current()
            && !self.resolved.swap(true, Ordering::AcqRel)
    }
}

/// The probe `auto` sends at start-up in each mode until the server takes one: a tiny request
/// whose answer does not matter, only whether the server accepts its `response_format`.
pub struct Probe {
    /// System message.
    pub system: &'static str,
    /// User message.
    pub user: &'static str,
    /// Its schema.
    pub schema: Value,
    /// Its shape in words.
    pub shape: &'static str,
}

impl Probe {
    /// The probe.
    pub fn new() -> Self {
        Self {
            system: "You answer with JSON only.",
            user: "Is this service up? Answer in JSON.",
            schema: json!({"type": "object", "additionalProperties": false, "required": ["ok"],
                "properties": {"ok": {"type": "boolean"}}}),
            shape: r#"{"ok": true | false}"#,
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_walks_the_chain_once_and_settles_on_the_first_mode_answered() {
        let s = ModeState::new(StructuredOutput::Auto);
        assert_eq!(s.current(), StructuredOutput::JsonSchema);
        assert!(!s.is_resolved());
        assert!(s.fall_back(StructuredOutput::JsonSchema));
        assert!(
            s.fall_back(StructuredOutput::JsonSchema),
            "a racing call refused in the same mode sends again without moving twice"
        );
        assert_eq!(s.current(), StructuredOutput::JsonObjectSchema);
        assert!(
            !s.confirm(StructuredOutput::JsonSchema),
            "a stale answer settles nothing"
        );
        assert!(s.confirm(StructuredOutput::JsonObjectSchema));
        assert!(!s.confirm(StructuredOutput::JsonObjectSchema), "only once");
        assert!(!s.fall_back(StructuredOutput::JsonObjectSchema), "settled");
        assert_eq!(s.current(), StructuredOutput::JsonObjectSchema);
    }

    #[test]
    fn a_fixed_mode_never_moves_and_prompt_is_the_end_of_the_chain() {
        let s = ModeState::new(StructuredOutput::JsonObject);
        assert!(s.is_resolved());
        assert!(!s.fall_back(StructuredOutput::JsonObject));
        assert!(!s.confirm(StructuredOutput::JsonObject));
        let s = ModeState::new(StructuredOutput::Auto);
        for m in &CHAIN[..3] {
            assert!(s.fall_back(*m));
        }
        assert_eq!(s.current(), StructuredOutput::Prompt);
        assert!(!s.fall_back(StructuredOutput::Prompt));
    }
}
