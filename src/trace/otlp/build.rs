//! Builders of OTLP messages (attributes, spans, export requests) in the shapes instrumentation
//! libraries send: one place for the unit tests, integration tests, benches and fixtures that need
//! spans, so that none of them grows its own copy.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// An attribute of any value type.
pub fn attr(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// A string attribute.
pub fn str_attr(key: &str, value: &str) -> KeyValue {
    attr(key, Value::StringValue(value.into()))
}

/// A span of trace `trace_id` (16 bytes) with span id `id` (8 bytes, big-endian) and parent
/// `parent` (0: a root span). Times, name, events: set them with `Span { .., ..span(..) }`.
pub fn span(trace_id: &[u8], id: u64, parent: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: trace_id.to_vec(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            Vec::new()
        } else {
            parent.to_be_bytes().to_vec()
        },
        attributes,
        ..Default::default()
    }
}

/// An export request carrying `spans` in one resource and one scope.
pub fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
