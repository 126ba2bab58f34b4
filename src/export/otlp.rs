//! The OpenTelemetry target: each verdict event as a `gen_ai.evaluation.result` log record (the
//! GenAI semantic conventions' evaluation event) whose trace and span ids are the judged span's,
//! and, with `child_spans`, a zero-length child span of the judged span with the same attributes.
//! Over OTLP/HTTP (protobuf bodies, `POST /v1/logs` and `/v1/traces`) or OTLP/gRPC, with
//! `opentelemetry-proto`'s messages and clients. Unset keys of `[export.otlp]` fall back to the
//! standard `OTEL_EXPORTER_OTLP_*` variables.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span::SpanKind};
use prost::Message;

use super::config::{OtlpExportConfig, OtlpProtocol};
use super::{ExportSetupError, SendError, VerdictEvent};

/// The event name of the GenAI semantic conventions' evaluation result.
pub(super) const EVENT_NAME: &str = "gen_ai.evaluation.result";

/// OTLP severity numbers: INFO for a verdict, WARN for a judge failure.
const SEVERITY_INFO: i32 = 9;
const SEVERITY_WARN: i32 = 13;

/// The OpenTelemetry target.
#[derive(Debug)]
pub(super) struct OtlpTarget {
    wire: Wire,
    gzip: bool,
    headers: Vec<(String, String)>,
    child_spans: bool,
    resource: Resource,
}

/// Where and how requests go.
#[derive(Debug)]
enum Wire {
    Http {
        client: reqwest::Client,
        logs_url: String,
        traces_url: String,
    },
    Grpc {
        channel: tonic::transport::Channel,
        timeout: Duration,
    },
}

impl OtlpTarget {
    /// Builds the target from `config`, filling unset keys from `env`'s `OTEL_EXPORTER_OTLP_*`.
    pub(super) fn try_new(
        config: &OtlpExportConfig,
        env: &HashMap<String, String>,
    ) -> Result<Self, ExportSetupError> {
        let var = |k: &str| env.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let err = |m: String| ExportSetupError::Client("otlp", m);
        let protocol = match config.protocol {
            Some(p) => p,
            None => match var("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL")
                .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            {
                None | Some("http/protobuf") => OtlpProtocol::HttpProtobuf,
                Some("grpc") => OtlpProtocol::Grpc,
                Some(other) => {
                    return Err(err(format!(
                        "OTEL_EXPORTER_OTLP_PROTOCOL={other}: http/protobuf or grpc"
                    )));
                }
            },
        };
        let timeout = Duration::from_millis(
            config
                .timeout_ms
                .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT").and_then(|v| v.parse().ok()))
                .unwrap_or(10_000),
        );
        let gzip = config.gzip.unwrap_or_else(|| {
            var("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION")
                .or_else(|| var("OTEL_EXPORTER_OTLP_COMPRESSION"))
                .is_some_and(|c| c.eq_ignore_ascii_case("gzip"))
        });
        let mut headers = parse_headers(var("OTEL_EXPORTER_OTLP_HEADERS").unwrap_or(""));
        headers.extend(parse_headers(
            var("OTEL_EXPORTER_OTLP_LOGS_HEADERS").unwrap_or(""),
        ));
        let base = config
            .endpoint
            .clone()
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT").map(str::to_owned));
        let wire = match protocol {
            OtlpProtocol::HttpProtobuf => {
                let base = base.unwrap_or_else(|| "http://localhost:4318".into());
                let base = base.trim_end_matches('/');
                let signal = |explicit: Option<&str>, path: &str| match (&config.endpoint, explicit)
                {
                    (None, Some(url)) => url.to_owned(),
                    _ => format!("{base}{path}"),
                };
                let client = reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .build()
                    .map_err(|e| err(e.to_string()))?;
                Wire::Http {
                    client,
                    logs_url: signal(var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"), "/v1/logs"),
                    traces_url: signal(var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "/v1/traces"),
                }
            }
            OtlpProtocol::Grpc => {
                let url = base
                    .or_else(|| var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").map(str::to_owned))
                    .unwrap_or_else(|| "http://localhost:4317".into());
                if url.starts_with("https://") {
                    return Err(err(format!(
                        "{url}: OTLP/gRPC export is plaintext; use http/protobuf for TLS"
                    )));
                }
                let channel = tonic::transport::Endpoint::from_shared(url.clone())
                    .map_err(|e| err(format!("{url}: {e}")))?
                    .connect_timeout(timeout)
                    .timeout(timeout)
                    .connect_lazy();
                Wire::Grpc { channel, timeout }
            }
        };
        Ok(OtlpTarget {
            wire,
            gzip,
            headers,
            child_spans: config.child_spans,
            resource: Resource {
                attributes: vec![kv("service.name", string(&config.service_name))],
                ..Default::default()
            },
        })
    }

    /// Sends the batch's log records, then (with `child_spans`) its child spans.
    pub(super) async fn send(&self, batch: &[Arc<VerdictEvent>]) -> Result<(), SendError> {
        let logs = logs_request(&self.resource, batch);
        match &self.wire {
            Wire::Http {
                client, logs_url, ..
            } => self.post(client, logs_url, logs.encode_to_vec()).await?,
            Wire::Grpc { channel, timeout } => {
                let mut client = LogsServiceClient::new(channel.clone());
                if self.gzip {
                    client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                client
                    .export(self.grpc_request(logs, *timeout))
                    .await
                    .map_err(grpc_error)?;
            }
        }
        if !self.child_spans {
            return Ok(());
        }
        let spans = spans_request(&self.resource, batch);
        match &self.wire {
            Wire::Http {
                client, traces_url, ..
            } => self.post(client, traces_url, spans.encode_to_vec()).await,
            Wire::Grpc { channel, timeout } => {
                let mut client = TraceServiceClient::new(channel.clone());
                if self.gzip {
                    client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
                }
                client
                    .export(self.grpc_request(spans, *timeout))
                    .await
                    .map(|_| ())
                    .map_err(grpc_error)
            }
        }
    }

    fn grpc_request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        for (k, v) in &self.headers {
            if let (Ok(k), Ok(v)) = (
                tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()),
                tonic::metadata::MetadataValue::try_from(v.as_str()),
            ) {
                request.metadata_mut().insert(k, v);
            }
        }
        request
    }

    async fn post(
        &self,
        client: &reqwest::Client,
        url: &str,
        body: Vec<u8>,
    ) -> Result<(), SendError> {
        let mut request = client
            .post(url)
            .header("content-type", "application/x-protobuf");
        let body = if self.gzip {
            request = request.header("content-encoding", "gzip");
            gzip(&body)
        } else {
            body
        };
        for (k, v) in &self.headers {
            request = request.header(k.as_str(), v.as_str());
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| SendError::Transport(e.without_url().to_string()))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let after = crate::judge::llm::retry_after(response.headers());
        Err(SendError::Status(status.as_u16(), after))
    }
}

fn grpc_error(status: tonic::Status) -> SendError {
    match status.code() {
        // A connection that could not be made is the transport's, not the server's answer.
        tonic::Code::Unknown if status.message().contains("transport") => {
            SendError::Transport(status.message().to_owned())
        }
        code => SendError::Grpc(code),
    }
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs, comma-separated, values percent-decoded.
fn parse_headers(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn string(s: &str) -> Value {
    Value::StringValue(s.to_owned())
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "ragwatch".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

/// The event's attributes: the GenAI evaluation attributes and ragwatch's provenance.
pub(super) fn attributes(e: &VerdictEvent) -> Vec<KeyValue> {
    let mut a = vec![
        kv("gen_ai.evaluation.name", string(e.metric.name())),
        kv("gen_ai.evaluation.score.label", string(e.label.name())),
    ];
    if let Some(s) = e.score {
        a.push(kv("gen_ai.evaluation.score.value", Value::DoubleValue(s)));
    }
    if let Some(x) = &e.explanation {
        a.push(kv("gen_ai.evaluation.explanation", string(x)));
    }
    if let Some(id) = &e.response_id {
        a.push(kv("gen_ai.response.id", string(id)));
    }
    if let Some(t) = e.error_type {
        a.push(kv("error.type", string(t)));
    }
    a.push(kv("ragwatch.judge", string(e.judge.name())));
    a.push(kv("ragwatch.judge.model", string(&e.judge_model)));
    if let Some(p) = &e.prompt_version {
        a.push(kv("ragwatch.judge.prompt_version", string(p)));
    }
    a.push(kv("ragwatch.stratum", string(&e.stratum)));
    if let Some(v) = &e.variant {
        a.push(kv("ragwatch.variant", string(v)));
    }
    a.push(kv("ragwatch.trace_id", string(&e.ragwatch_trace_id)));
    a
}

/// One `gen_ai.evaluation.result` log record per event, on the judged span.
pub(super) fn logs_request(
    resource: &Resource,
    batch: &[Arc<VerdictEvent>],
) -> ExportLogsServiceRequest {
    let records = batch
        .iter()
        .map(|e| LogRecord {
            time_unix_nano: e.time_unix_nano,
            observed_time_unix_nano: e.time_unix_nano,
            severity_number: if e.error_type.is_some() {
                SEVERITY_WARN
            } else {
                SEVERITY_INFO
            },
            severity_text: if e.error_type.is_some() {
                "WARN"
            } else {
                "INFO"
            }
            .into(),
            attributes: attributes(e),
            // Sampled: the judged span was recorded.
            flags: 1,
            trace_id: e.trace_id.to_vec(),
            span_id: e.span_id.to_vec(),
            event_name: EVENT_NAME.into(),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource.clone()),
            scope_logs: vec![ScopeLogs {
                scope: Some(scope()),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// One zero-length child span of the judged span per event, its id derived from the event's
/// identity (the same verdict sent again is the same span).
pub(super) fn spans_request(
    resource: &Resource,
    batch: &[Arc<VerdictEvent>],
) -> ExportTraceServiceRequest {
    let spans = batch
        .iter()
        .map(|e| {
            let mut key = Vec::with_capacity(40);
            key.extend_from_slice(&e.trace_id);
            key.extend_from_slice(&e.span_id);
            key.extend_from_slice(e.metric.name().as_bytes());
            key.extend_from_slice(e.judge.name().as_bytes());
            key.extend_from_slice(&e.time_unix_nano.to_be_bytes());
            let id = xxhash_rust::xxh3::xxh3_64(&key).max(1);
            Span {
                trace_id: e.trace_id.to_vec(),
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: e.span_id.to_vec(),
                flags: 1,
                name: EVENT_NAME.into(),
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: e.time_unix_nano,
                end_time_unix_nano: e.time_unix_nano,
                attributes: attributes(e),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_pairs_with_percent_decoded_values() {
        assert_eq!(
            parse_headers("api-key=a%20b, x-tenant = t1,bad,=v"),
            [
                ("api-key".to_owned(), "a b".to_owned()),
                ("x-tenant".to_owned(), "t1".to_owned())
            ]
        );
    }

    #[test]
    fn the_standard_variables_fill_what_the_config_leaves_unset() {
        let env: HashMap<String, String> = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://tempo:4318/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20k"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let config: OtlpExportConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        let t = OtlpTarget::try_new(&config, &env).unwrap_or_else(|e| panic!("{e}"));
        let Wire::Http {
            logs_url,
            traces_url,
            ..
        } = &t.wire
        else {
            panic!("http")
        };
        assert_eq!(logs_url, "http://collector:4318/v1/logs");
        assert_eq!(traces_url, "http://tempo:4318/v1/traces");
        assert!(t.gzip);
        assert_eq!(
            t.headers,
            [("authorization".to_owned(), "Bearer k".to_owned())]
        );
        let grpc: OtlpExportConfig =
            toml::from_str("protocol = \"grpc\"\nendpoint = \"https://c:4317\"")
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(OtlpTarget::try_new(&grpc, &env).is_err());
    }
}
