//! The trace: one RAG request (question, retrieved contexts, answer, metadata) as ragwatch sees it,
//! and the decoder that turns raw message bytes into one ([`otlp`]: spans assembled into one).

pub mod config;
mod decode;
pub(crate) mod metadata;
pub mod otlp;

pub use decode::Decoder;
pub(crate) use decode::{DecodeError, RejectReason};
pub(crate) use metadata::{Metadata, MetadataField};

use serde::Serialize;

/// One retrieved passage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Context {
    /// The document id, when the trace gives one (used to check citations).
    pub id: Option<String>,
    /// The passage text.
    pub text: String,
    /// The retriever's score, when given.
    pub score: Option<f64>,
}

/// A decoded, validated trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Trace {
    /// Unique per request; the sampling hash key.
    pub trace_id: String,
    /// Event time in ms since the epoch, from the trace or the transport.
    pub(crate) timestamp_ms: Option<i64>,
    /// The user's question.
    pub query: String,
    /// Retrieved contexts, in rank order.
    pub contexts: Vec<Context>,
    /// The generated answer.
    pub answer: String,
    /// The stratum the trace names itself, before validation against the declared list.
    pub stratum: Option<String>,
    /// Free-form metadata (generator model, prompt version, route, usage).
    pub metadata: Metadata,
    /// A human label, when the trace comes from a golden set: true means no hallucination.
    pub label_faithful: Option<bool>,
    /// Gold relevance, when the trace comes from a golden set: context ids that are relevant, and
    /// optionally graded relevance (0..3) per id.
    pub gold: Option<Gold>,
    /// The span whose answer was judged (its 8-byte id, big-endian), when the trace was assembled
    /// from OTLP spans: verdict export annotates that span.
    #[serde(skip)]
    pub span_id: Option<u64>,
}

#[cfg(test)]
impl Trace {
    /// A trace of `query`, `(id, text)` contexts and `answer`, everything else empty: for unit tests.
    pub(crate) fn of(query: &str, contexts: &[(&str, &str)], answer: &str) -> Trace {
        Trace {
            trace_id: "t".into(),
            timestamp_ms: None,
            query: query.into(),
            contexts: contexts
                .iter()
                .map(|(id, text)| Context {
                    id: Some((*id).into()),
                    text: (*text).into(),
                    score: None,
                })
                .collect(),
            answer: answer.into(),
            stratum: None,
            metadata: Metadata::default(),
            label_faithful: None,
            gold: None,
            span_id: None,
        }
    }
}

/// Gold retrieval labels of a golden-set trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Gold {
    /// Ids of the relevant documents.
    #[serde(default)]
    pub relevant_ids: Vec<String>,
    /// Graded relevance per id (0 = not relevant .. 3 = perfect).
    #[serde(default)]
    pub relevance: std::collections::BTreeMap<String, f64>,
}
