//! The `[export]` section: where verdicts go besides the metrics (OpenTelemetry log records and
//! child spans, Phoenix span annotations), how they queue, batch and retry, and where a native
//! trace keeps the ids of the span it answered in. Off by default.

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// Verdict export: each judged trace's scores sent to where people read traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// Each target's queue, in verdict events; a full queue drops (counted, `queue_full`) and never
    /// waits.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// Events sent in one request at most.
    #[serde(default = "default_batch_max")]
    pub batch_max: usize,
    /// How long a batch waits for more events before it is sent.
    #[serde(default = "default_batch_delay_ms")]
    pub batch_delay_ms: u64,
    /// Tries of one batch (the first and its retries) on retryable answers (HTTP 429 and 5xx, gRPC
    /// UNAVAILABLE and RESOURCE_EXHAUSTED, a transport error or timeout).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles up to `backoff_max_ms`.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// The longest wait between two tries.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// At shutdown, how long the queued events may take to be sent; what is left then is dropped
    /// (counted, `shutdown`).
    #[serde(default = "default_flush_timeout_ms")]
    pub flush_timeout_ms: u64,
    /// Send the offline judge's verdict on every trace (besides the sampled LLM judge's).
    #[serde(default = "default_true")]
    pub offline: bool,
    /// Send the LLM judge's unsupported and contradicted claims as the explanation (after
    /// redaction). Off: no text of the trace leaves with a verdict.
    #[serde(default)]
    pub explanations: bool,
    /// The explanation's length bound in bytes (cut at a character boundary, with `…`).
    #[serde(default = "default_explanation_max_bytes")]
    pub explanation_max_bytes: usize,
    /// A faithfulness score at or above this is labelled `faithful`, below `unfaithful`; relevancy
    /// scores `relevant` and `irrelevant`.
    #[serde(default = "default_label_threshold")]
    pub label_threshold: f64,
    /// Native traces: a JSON pointer into the trace's `metadata` to the W3C trace id (32 hex
    /// digits) of the answer's span. Unset: the trace's own `trace_id` when it is one.
    #[serde(default)]
    pub trace_id_field: Option<String>,
    /// Native traces: a JSON pointer into the trace's `metadata` to the W3C span id (16 hex
    /// digits) of the span whose answer was judged. OTLP input finds it among the spans.
    #[serde(default)]
    pub span_id_field: Option<String>,
    /// A JSON pointer into the trace's `metadata` to the model response's id
    /// (`gen_ai.response.id`), when the service records it.
    #[serde(default)]
    pub response_id_field: Option<String>,
    /// The OpenTelemetry target, when set.
    #[serde(default)]
    pub otlp: Option<OtlpExportConfig>,
    /// The Phoenix target, when set.
    #[serde(default)]
    pub phoenix: Option<PhoenixExportConfig>,
}

/// The wire of the OpenTelemetry target, as `OTEL_EXPORTER_OTLP_PROTOCOL` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP/HTTP with protobuf bodies: `POST {endpoint}/v1/logs` (and `/v1/traces`).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/gRPC: the logs (and trace) services.
    #[serde(rename = "grpc")]
    Grpc,
}

/// The OpenTelemetry target: `gen_ai.evaluation.result` log records on the judged span. Unset
/// keys fall back to the standard `OTEL_EXPORTER_OTLP_*` variables, then to the OTLP defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpExportConfig {
    /// Base endpoint (`http://collector:4318`, `http://collector:4317` for gRPC); else
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_ENDPOINT`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`; else `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`.
    #[serde(default)]
    pub protocol: Option<OtlpProtocol>,
    /// Request timeout; else `OTEL_EXPORTER_OTLP_TIMEOUT` (ms), else 10 s.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Gzip the requests; else `OTEL_EXPORTER_OTLP_COMPRESSION = gzip`.
    #[serde(default)]
    pub gzip: Option<bool>,
    /// Also send a zero-length child span of the judged span with the same attributes, for
    /// backends that read traces only.
    #[serde(default)]
    pub child_spans: bool,
    /// The `service.name` of the records' resource.
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

/// The Phoenix target: span annotations on the judged span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhoenixExportConfig {
    /// Phoenix's base URL (`http://phoenix:6006`); annotations go to `{base_url}/v1/span_annotations`.
    pub base_url: String,
    /// The environment variable holding Phoenix's API key (sent as `Authorization: Bearer`), when
    /// it asks for one.
    #[serde(default = "default_phoenix_key_env")]
    pub api_key_env: String,
    /// Request timeout.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How long an annotation waits for Phoenix to store its judged span, from Phoenix's first
    /// answer that it does not know the span (the service's spans reach Phoenix after its SDK's
    /// batch delay and Phoenix's ingest): re-sent until then, and dropped after it (counted,
    /// `span_not_stored`). Separate from `export.max_attempts`, which is for failed requests.
    #[serde(default = "default_span_wait_ms")]
    pub span_wait_ms: u64,
    /// Annotations waiting for their span at most; one more is dropped (counted,
    /// `span_wait_full`).
    #[serde(default = "default_span_wait_capacity")]
    pub span_wait_capacity: usize,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            queue_capacity: default_queue_capacity(),
            batch_max: default_batch_max(),
            batch_delay_ms: default_batch_delay_ms(),
            max_attempts: default_max_attempts(),
            backoff_initial_ms: default_backoff_initial_ms(),
            backoff_max_ms: default_backoff_max_ms(),
            flush_timeout_ms: default_flush_timeout_ms(),
            offline: true,
            explanations: false,
            explanation_max_bytes: default_explanation_max_bytes(),
            label_threshold: default_label_threshold(),
            trace_id_field: None,
            span_id_field: None,
            response_id_field: None,
            otlp: None,
            phoenix: None,
        }
    }
}

impl ExportConfig {
    /// Whether any target is configured.
    pub fn enabled(&self) -> bool {
        self.otlp.is_some() || self.phoenix.is_some()
    }

    /// Cross-field checks.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if self.queue_capacity == 0 {
            p.add("export.queue_capacity", "must be at least 1");
        }
        if self.batch_max == 0 {
            p.add("export.batch_max", "must be at least 1");
        }
        if self.max_attempts == 0 {
            p.add("export.max_attempts", "must be at least 1");
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            p.add(
                "export.backoff_initial_ms",
                "must not exceed export.backoff_max_ms",
            );
        }
        if self.explanation_max_bytes < 16 {
            p.add("export.explanation_max_bytes", "must be at least 16");
        }
        p.ratio("export.label_threshold", self.label_threshold);
        for (field, v) in [
            ("export.trace_id_field", &self.trace_id_field),
            ("export.span_id_field", &self.span_id_field),
            ("export.response_id_field", &self.response_id_field),
        ] {
            if v.as_deref().is_some_and(|v| !v.starts_with('/')) {
                p.add(field, "must be a JSON pointer (starting with /)");
            }
        }
        if let Some(ph) = &self.phoenix {
            if !(ph.base_url.starts_with("http://") || ph.base_url.starts_with("https://")) {
                p.add(
                    "export.phoenix.base_url",
                    "must be an http:// or https:// URL",
                );
            }
            if ph.span_wait_capacity == 0 {
                p.add("export.phoenix.span_wait_capacity", "must be at least 1");
            }
        }
        if let Some(o) = &self.otlp
            && o.endpoint
                .as_deref()
                .is_some_and(|e| !(e.starts_with("http://") || e.starts_with("https://")))
        {
            p.add("export.otlp.endpoint", "must be an http:// or https:// URL");
        }
    }
}

fn default_queue_capacity() -> usize {
    4096
}
fn default_batch_max() -> usize {
    256
}
fn default_batch_delay_ms() -> u64 {
    1000
}
fn default_max_attempts() -> u32 {
    5
}
fn default_backoff_initial_ms() -> u64 {
    200
}
fn default_backoff_max_ms() -> u64 {
    10_000
}
fn default_flush_timeout_ms() -> u64 {
    5000
}
fn default_true() -> bool {
    true
}
fn default_explanation_max_bytes() -> usize {
    1024
}
fn default_label_threshold() -> f64 {
    0.5
}
fn default_service_name() -> String {
    "ragwatch".into()
}
fn default_phoenix_key_env() -> String {
    "PHOENIX_API_KEY".into()
}
fn default_timeout_ms() -> u64 {
    10_000
}
pub(crate) fn default_span_wait_ms() -> u64 {
    30_000
}
pub(crate) fn default_span_wait_capacity() -> usize {
    8192
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_empty_sections_and_export_is_off() {
        let parsed: ExportConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed, ExportConfig::default());
        assert!(!parsed.enabled());
    }

    #[test]
    fn every_bad_value_is_named() {
        let toml = "[export]\nqueue_capacity = 0\nbatch_max = 0\nmax_attempts = 0\n\
                    backoff_initial_ms = 5\nbackoff_max_ms = 1\nexplanation_max_bytes = 3\n\
                    label_threshold = 2.0\nspan_id_field = \"span\"\n\
                    [export.otlp]\nendpoint = \"collector:4318\"\nprotocol = \"grpc\"\n\
                    [export.phoenix]\nbase_url = \"phoenix\"\nspan_wait_capacity = 0\n";
        let mut problems = Problems::default();
        crate::section::fields::section::<ExportConfig>(toml, "export").validate(&mut problems);
        let err = problems
            .into_result()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        for field in [
            "export.queue_capacity",
            "export.batch_max",
            "export.max_attempts",
            "export.backoff_initial_ms",
            "export.explanation_max_bytes",
            "export.label_threshold",
            "export.span_id_field",
            "export.otlp.endpoint",
            "export.phoenix.base_url",
            "export.phoenix.span_wait_capacity",
        ] {
            assert!(err.contains(field), "{field} not in: {err}");
        }
        let typo = toml::from_str::<ExportConfig>("[otlp]\nendpont = \"x\"\n");
        assert!(typo.is_err());
    }
}
