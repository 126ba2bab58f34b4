//! Configuration of OpenTelemetry input: the trace format (`decode.format`, `decode.preset`), span
//! assembly (`[assembly]`) and the OTLP/HTTP receiver (`[otlp]`, for `source.kind = "otlp"`).

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// How a message's bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// ragwatch's own JSON trace (or another JSON shape through `decode.mapping`): one trace per message.
    Native,
    /// One serialized OTLP `ExportTraceServiceRequest` per message (the Collector's Kafka exporter
    /// default); in files, each message prefixed by its length as a big-endian u32.
    OtlpProto,
    /// The OTLP JSON form of the same request; in files, one request per line.
    OtlpJson,
}

impl TraceFormat {
    /// Whether messages carry spans that must be assembled into traces.
    pub(crate) fn is_otlp(self) -> bool {
        self != TraceFormat::Native
    }
}

/// `source.kind = "otlp"` with no `decode.format`: the format is OTLP (the receiver takes both
/// forms, so which one is set does not matter). An explicit `native` is left for `validate` to
/// refuse.
pub(crate) fn default_otlp_format(doc: &mut toml::Table) {
    let otlp_source = doc
        .get("source")
        .and_then(|s| s.get("kind"))
        .and_then(toml::Value::as_str)
        == Some("otlp");
    if !otlp_source {
        return;
    }
    let decode = doc
        .entry("decode")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let Some(t) = decode.as_table_mut() {
        t.entry("format")
            .or_insert_with(|| toml::Value::String("otlp_proto".into()));
    }
}

/// Which attribute conventions describe the RAG steps of a trace's spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Preset {
    /// OpenInference (Arize Phoenix): `openinference.span.kind` CHAIN, RETRIEVER, RERANKER, LLM.
    #[serde(rename = "openinference")]
    OpenInference,
    /// OpenLLMetry (Traceloop): `traceloop.span.kind`, `traceloop.entity.*`, `gen_ai.prompt.N.*`,
    /// vector-store results as `db.query.result` span events.
    #[serde(rename = "openllmetry")]
    OpenLlmetry,
    /// The OpenTelemetry GenAI conventions: `gen_ai.operation.name`, `gen_ai.input.messages`,
    /// `gen_ai.output.messages`, `gen_ai.retrieval.documents`.
    #[serde(rename = "gen_ai")]
    GenAi,
}

/// Span assembly: how spans become traces, and the bounds on what is held while they do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssemblyConfig {
    /// A trace whose root span has not arrived is assembled from what it has this long after its
    /// last span arrived.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Traces held at once; beyond it the least recently active one is dropped (`assembly_full`).
    #[serde(default = "default_max_pending_traces")]
    pub max_pending_traces: usize,
    /// Bytes of span content (texts kept for judging) held at once; beyond it the least recently
    /// active trace is dropped (`assembly_full`).
    #[serde(default = "default_max_pending_bytes")]
    pub max_pending_bytes: usize,
    /// Spans kept per trace; a trace with more is rejected (`too_many_spans`).
    #[serde(default = "default_max_spans_per_trace")]
    pub max_spans_per_trace: usize,
    /// Spans in one message (one OTLP request); a message with more is rejected whole
    /// (`too_many_spans`) before it is decoded.
    #[serde(default = "default_max_spans_per_message")]
    pub max_spans_per_message: usize,
    /// Recently completed trace ids remembered, so a span arriving after its trace was judged is
    /// counted as late rather than starting a new trace.
    #[serde(default = "default_completed_memory")]
    pub completed_memory: usize,
    /// The span or resource attribute that names a trace's stratum (the root-most span wins).
    #[serde(default = "default_stratum_attribute")]
    pub stratum_attribute: String,
}

/// The OTLP/HTTP receiver (`source.kind = "otlp"`), served on the write listener (`[write]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// Largest request body accepted, after gzip decompression; larger ones get 413.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Requests decoded and waiting for assembly; when full, requests get 429 with Retry-After.
    #[serde(default = "default_otlp_queue_capacity")]
    pub queue_capacity: usize,
    /// Bytes held by requests being read, decompressed, decoded and queued for assembly, all
    /// together; a request the rest cannot cover gets 429 with Retry-After before it is read.
    #[serde(default = "default_max_queued_bytes")]
    pub max_queued_bytes: usize,
    /// The Retry-After of a 429 or 503 answer.
    #[serde(default = "default_retry_after_secs")]
    pub retry_after_secs: u64,
}

impl Default for AssemblyConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field of [assembly] has a default")
    }
}

impl Default for OtlpConfig {
    fn default() -> Self {
        toml::from_str("").expect("every field of [otlp] has a default")
    }
}

pub(crate) fn default_format() -> TraceFormat {
    TraceFormat::Native
}
pub(crate) fn default_preset() -> Preset {
    Preset::OpenInference
}
fn default_idle_timeout_ms() -> u64 {
    30_000
}
fn default_max_pending_traces() -> usize {
    10_000
}
fn default_max_pending_bytes() -> usize {
    64 << 20
}
fn default_max_spans_per_trace() -> usize {
    1000
}
fn default_max_spans_per_message() -> usize {
    100_000
}
fn default_completed_memory() -> usize {
    65_536
}
fn default_stratum_attribute() -> String {
    "ragwatch.stratum".into()
}
fn default_max_body_bytes() -> usize {
    8 << 20
}
fn default_otlp_queue_capacity() -> usize {
    64
}
fn default_max_queued_bytes() -> usize {
    64 << 20
}
fn default_retry_after_secs() -> u64 {
    1
}

impl AssemblyConfig {
    /// Checks `[assembly]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        for (field, zero) in [
            ("assembly.idle_timeout_ms", self.idle_timeout_ms == 0),
            ("assembly.max_pending_traces", self.max_pending_traces == 0),
            ("assembly.max_pending_bytes", self.max_pending_bytes == 0),
            (
                "assembly.max_spans_per_trace",
                self.max_spans_per_trace == 0,
            ),
            (
                "assembly.max_spans_per_message",
                self.max_spans_per_message == 0,
            ),
        ] {
            if zero {
                p.add(field, "must be > 0");
            }
        }
        if self.stratum_attribute.trim().is_empty() {
            p.add("assembly.stratum_attribute", "must name an attribute");
        }
    }
}

impl OtlpConfig {
    /// Checks `[otlp]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        for (field, zero) in [
            ("otlp.max_body_bytes", self.max_body_bytes == 0),
            ("otlp.queue_capacity", self.queue_capacity == 0),
        ] {
            if zero {
                p.add(field, "must be > 0");
            }
        }
        if self.max_queued_bytes < self.max_body_bytes {
            p.add(
                "otlp.max_queued_bytes",
                "must be >= otlp.max_body_bytes, or a request at the size limit is never taken",
            );
        }
    }
}
