//! OpenTelemetry traces in: OTLP requests decoded with `opentelemetry-proto` (prost for protobuf,
//! its serde form for OTLP JSON), each span reduced to the few facts a RAG judge needs by a preset
//! (OpenInference, OpenLLMetry, GenAI conventions), and spans assembled by trace id into
//! [`Trace`](super::Trace)s.
//!
//! ```text
//! bytes ─► decode::decode_request ─► Assembler::add_request ─► preset::extract (per span)
//!                                        │  pending traces, bounded (count, bytes, spans per trace)
//!                                        ▼
//!            root span seen / idle timeout / end of input ─► build ─► Completed { outcome, tokens }
//! ```
//!
//! A message's source position (its token) is attached to every trace it carries spans of and
//! comes back with the trace once it is complete or dropped, so the caller can move a Kafka offset
//! only when every trace of a message is accounted for.

mod assemble;
pub mod build;
pub mod config;
mod decode;
mod preset;
#[cfg(test)]
mod shapes;

pub(crate) use assemble::{AddStats, Trigger};
pub use assemble::{Assembler, Completed, Outcome};
pub use decode::decode_request;

/// Why a span was not kept; label values of `ragwatch_spans_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SpanDrop {
    /// A trace id that is not 16 bytes or is all zero, or a span id that is not 8 bytes.
    InvalidId,
    /// Its trace was already completed (judged or dropped) when the span arrived.
    Late,
    /// Its trace already holds `assembly.max_spans_per_trace` spans.
    TooManySpans,
}

impl SpanDrop {
    /// Every reason, for pre-registering metric series.
    pub const ALL: [SpanDrop; 3] = [SpanDrop::InvalidId, SpanDrop::Late, SpanDrop::TooManySpans];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanDrop::InvalidId => "invalid_id",
            SpanDrop::Late => "late",
            SpanDrop::TooManySpans => "too_many_spans",
        }
    }
}
