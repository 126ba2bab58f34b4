//! The OTLP/HTTP route, `POST /v1/traces`: content type and encoding checked, the body bounded by
//! `otlp.max_body_bytes` before and after gzip and read within the memory budget, decoded, handed
//! off, and answered in the request's own encoding (the answers are listed in the receiver's
//! module doc).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tokio::sync::mpsc;

use super::budget::{MemoryBudget, ReadError, gunzip, read_body};
use super::handoff::{Job, NotTaken, partial_success, submit};
use crate::metrics::Metrics;
use crate::metrics::otlp::Outcome;
use crate::trace::otlp::config::TraceFormat;
use crate::trace::otlp::decode_request;

/// What the handlers share.
#[derive(Clone)]
pub(super) struct Receiver {
    pub(super) jobs_tx: mpsc::Sender<Job>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) budget: Arc<MemoryBudget>,
    pub(super) max_body_bytes: usize,
    pub(super) max_spans: usize,
    pub(super) retry_after: HeaderValue,
}

impl Receiver {
    /// The route `POST /v1/traces`.
    pub(super) fn routes(self) -> Router {
        Router::new()
            .route("/v1/traces", post(export))
            .with_state(self)
    }
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error answer.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

async fn export(State(r): State<Receiver>, request: Request) -> Response {
    // Ended in one outcome below; dropped unanswered (the client hung up, so the server dropped
    // this future), it counts `client_gone`.
    let count = r.metrics.otlp.request("http");
    let outcome = |o: Outcome| {
        count.end(o);
    };
    let (parts, body) = request.into_parts();
    let Some(format) = content_format(&parts.headers) else {
        outcome(Outcome::Unsupported);
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            TraceFormat::OtlpJson,
            "Content-Type must be application/x-protobuf or application/json",
        );
    };
    let encoding = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .unwrap_or("identity");
    let gzip = match encoding {
        "" | "identity" => false,
        "gzip" => true,
        other => {
            outcome(Outcome::Unsupported);
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format,
                &format!("Content-Encoding {other} is not supported (gzip is)"),
            );
        }
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let mut reservation = r.budget.reservation();
    let read = match read_body(
        Body::new(body),
        declared,
        r.max_body_bytes,
        &mut reservation,
    )
    .await
    {
        Ok(raw) if gzip => {
            let out = gunzip(&raw, r.max_body_bytes, &mut reservation);
            reservation.shrink(raw.capacity());
            out
        }
        other => other,
    };
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge) => {
            outcome(Outcome::TooLarge);
            return too_large(format, r.max_body_bytes);
        }
        Err(ReadError::OverBudget) => {
            outcome(Outcome::Memory);
            return retry_later(StatusCode::TOO_MANY_REQUESTS, format, &r.retry_after);
        }
        Err(ReadError::Broken(e)) => {
            outcome(Outcome::BadRequest);
            return error(StatusCode::BAD_REQUEST, format, &e);
        }
        Err(ReadError::Gone(e)) => {
            // Nobody reads this answer; hyper closes the connection.
            outcome(Outcome::ClientGone);
            return error(StatusCode::BAD_REQUEST, format, &e);
        }
    };
    // The decoded message is built while the bytes are still held: reserve as much again for it.
    if reservation.grow(bytes.len()).is_err() {
        outcome(Outcome::Memory);
        return retry_later(StatusCode::TOO_MANY_REQUESTS, format, &r.retry_after);
    }
    let request = if bytes.trim_ascii().is_empty() {
        ExportTraceServiceRequest::default()
    } else {
        match decode_request(&bytes, format, r.max_body_bytes, r.max_spans) {
            Ok(req) => req,
            Err(e) => {
                crate::events::trace_rejected(&r.metrics, &e, "otlp/http");
                outcome(Outcome::BadRequest);
                return error(StatusCode::BAD_REQUEST, format, &e.to_string());
            }
        }
    };
    drop(bytes);
    let stats = match submit(&r.jobs_tx, request, reservation, &count).await {
        Ok(stats) => stats,
        Err(NotTaken::Full) => {
            outcome(Outcome::Throttled);
            return retry_later(StatusCode::TOO_MANY_REQUESTS, format, &r.retry_after);
        }
        Err(NotTaken::OverBudget) => {
            outcome(Outcome::Memory);
            return retry_later(StatusCode::TOO_MANY_REQUESTS, format, &r.retry_after);
        }
        Err(NotTaken::Closed) => {
            outcome(Outcome::Unavailable);
            return retry_later(StatusCode::SERVICE_UNAVAILABLE, format, &r.retry_after);
        }
    };
    // Counted `ok` or `partial` where its spans were taken (`Job::answer`).
    let partial_success = partial_success(&stats);
    let body = ExportTraceServiceResponse { partial_success };
    match format {
        TraceFormat::OtlpJson => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec()),
        )
            .into_response(),
        _ => (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            body.encode_to_vec(),
        )
            .into_response(),
    }
}

fn content_format(headers: &HeaderMap) -> Option<TraceFormat> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mime = ct.split(';').next()?.trim().to_ascii_lowercase();
    match mime.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(TraceFormat::OtlpProto),
        "application/json" => Some(TraceFormat::OtlpJson),
        _ => None,
    }
}

fn too_large(format: TraceFormat, max: usize) -> Response {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format,
        &format!("body over otlp.max_body_bytes ({max} bytes)"),
    )
}

fn retry_later(code: StatusCode, format: TraceFormat, retry_after: &HeaderValue) -> Response {
    let mut r = error(
        code,
        format,
        "ragwatch cannot take this request now; retry later",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, retry_after.clone());
    r
}

/// An error answer: a `google.rpc.Status` in the request's own encoding.
fn error(code: StatusCode, format: TraceFormat, message: &str) -> Response {
    // gRPC codes: INVALID_ARGUMENT 3, RESOURCE_EXHAUSTED 8, UNAVAILABLE 14.
    let grpc = match code {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE => 8,
        StatusCode::SERVICE_UNAVAILABLE => 14,
        _ => 3,
    };
    let status = Status {
        code: grpc,
        message: message.to_owned(),
    };
    match format {
        TraceFormat::OtlpJson => (
            code,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::json!({"code": grpc, "message": message}).to_string(),
        )
            .into_response(),
        _ => (
            code,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            status.encode_to_vec(),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use futures::StreamExt;

    use super::*;
    use crate::trace::otlp::AddStats;

    fn receiver(jobs_tx: mpsc::Sender<Job>) -> Receiver {
        Receiver {
            jobs_tx,
            metrics: Arc::new(Metrics::new(&[], "test")),
            budget: MemoryBudget::new(1 << 20),
            max_body_bytes: 1000,
            max_spans: 10,
            retry_after: HeaderValue::from(7u64),
        }
    }

    fn post(body: &[u8]) -> Request {
        Request::builder()
            .method("POST")
            .uri("/v1/traces")
            .header(header::CONTENT_TYPE, "application/x-protobuf")
            .body(Body::from(body.to_vec()))
            .unwrap()
    }

    #[tokio::test]
    async fn full_queue_is_429_and_closed_queue_503_both_with_retry_after() {
        let (tx, rx) = mpsc::channel(1);
        let r = receiver(tx.clone());
        let (reply, _answer) = oneshot::channel();
        tx.try_send(Job {
            request: ExportTraceServiceRequest::default(),
            reply,
            reservation: r.budget.reservation(),
            count: r.metrics.otlp.request("http"),
        })
        .unwrap();
        let resp = export(State(r.clone()), post(b"")).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        drop(rx);
        let resp = export(State(r.clone()), post(b"")).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        let m = &r.metrics;
        assert_eq!(
            m.otlp
                .requests
                .with_label_values(&["http", "throttled"])
                .get(),
            1
        );
        assert_eq!(
            m.otlp
                .requests
                .with_label_values(&["http", "unavailable"])
                .get(),
            1
        );
    }

    #[tokio::test]
    async fn an_answer_reports_the_spans_not_kept() {
        let (tx, mut rx) = mpsc::channel::<Job>(1);
        let r = receiver(tx);
        tokio::spawn(async move {
            let job = rx.recv().await.unwrap();
            Job::answer(
                job.reply,
                &job.count,
                AddStats {
                    spans: 3,
                    dropped: [1, 1, 0],
                    attached: 1,
                },
            );
        });
        let resp = export(State(r), post(b"")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let answer = ExportTraceServiceResponse::decode(body).unwrap();
        let partial = answer.partial_success.unwrap();
        assert_eq!(partial.rejected_spans, 2);
        assert!(partial.error_message.contains("1 with invalid ids"));
    }

    #[tokio::test]
    async fn oversized_and_gzip_bombs_are_413() {
        let (tx, _rx) = mpsc::channel(1);
        let r = receiver(tx);
        let resp = export(State(r.clone()), post(&[0u8; 2000])).await;
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &[0u8; 100_000]).unwrap();
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 1000);
        let mut req = post(&bomb);
        req.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let resp = export(State(r), req).await;
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// A request the memory budget cannot cover is refused before its body is read: 429 with
    /// Retry-After, counted as `memory`; its bytes are given back, and the budget's bytes are held
    /// by a queued request until span assembly takes it.
    #[tokio::test]
    async fn a_request_over_the_memory_budget_is_429_before_it_is_read() {
        let (tx, mut rx) = mpsc::channel::<Job>(4);
        let body = crate::trace::otlp::build::request(vec![crate::trace::otlp::build::span(
            &[1; 16],
            1,
            0,
            vec![crate::trace::otlp::build::str_attr("k", &"v".repeat(600))],
        )])
        .encode_to_vec();
        // Room for one queued request, not for a second one's body (a 1001-byte buffer).
        let decoded = super::super::budget::decoded_size(
            &ExportTraceServiceRequest::decode(&body[..]).unwrap(),
        );
        let r = Receiver {
            budget: MemoryBudget::new(decoded.max(1001 + body.len()) + 1000),
            ..receiver(tx)
        };
        let first = tokio::spawn(export(State(r.clone()), post(&body)));
        let queued = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv());
        let job = queued.await.expect("the first request queued").unwrap();
        let held = r.budget.used();
        assert!(held >= 600, "{held}");
        // The queued request holds the budget: the next one is refused.
        let resp = export(State(r.clone()), post(&body)).await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "7");
        assert_eq!(r.budget.used(), held);
        Job::answer(job.reply, &job.count, AddStats::default());
        drop(job.reservation);
        assert_eq!(first.await.unwrap().status(), StatusCode::OK);
        assert_eq!(r.budget.used(), 0);
        let resp = tokio::spawn(export(State(r.clone()), post(&body)));
        let job = rx.recv().await.unwrap();
        Job::answer(job.reply, &job.count, AddStats::default());
        drop(job.reservation);
        assert_eq!(resp.await.unwrap().status(), StatusCode::OK);
        assert_eq!(
            r.metrics
                .otlp
                .requests
                .with_label_values(&["http", "memory"])
                .get(),
            1
        );
    }

    /// One kind of request for the partition test, and the outcome it must end in.
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Taken,
        Partial,
        /// Its client left after the request was queued, before the answer: taken all the same.
        LeftAfterQueued,
        Undecodable,
        CorruptGzip,
        TooLarge,
        UnsupportedType,
        UnsupportedEncoding,
        OverBudget,
        QueueFull,
        ShuttingDown,
        /// The body broke off: the client reset the connection mid-body.
        BrokenOff,
        /// The client stalled mid-body and hung up: the server dropped the handler.
        HungUpMidBody,
    }

    impl Kind {
        const ALL: [Kind; 13] = [
            Kind::Taken,
            Kind::Partial,
            Kind::LeftAfterQueued,
            Kind::Undecodable,
            Kind::CorruptGzip,
            Kind::TooLarge,
            Kind::UnsupportedType,
            Kind::UnsupportedEncoding,
            Kind::OverBudget,
            Kind::QueueFull,
            Kind::ShuttingDown,
            Kind::BrokenOff,
            Kind::HungUpMidBody,
        ];

        fn outcome(self) -> Outcome {
            match self {
                Kind::Taken | Kind::LeftAfterQueued => Outcome::Ok,
                Kind::Partial => Outcome::Partial,
                Kind::Undecodable | Kind::CorruptGzip => Outcome::BadRequest,
                Kind::TooLarge => Outcome::TooLarge,
                Kind::UnsupportedType | Kind::UnsupportedEncoding => Outcome::Unsupported,
                Kind::OverBudget => Outcome::Memory,
                Kind::QueueFull => Outcome::Throttled,
                Kind::ShuttingDown => Outcome::Unavailable,
                Kind::BrokenOff | Kind::HungUpMidBody => Outcome::ClientGone,
            }
        }
    }

    /// Sends one request of `kind` to a receiver of its own that counts on `metrics`.
    async fn send(kind: Kind, metrics: &Arc<Metrics>) {
        let (tx, mut rx) = mpsc::channel::<Job>(1);
        let r = Receiver {
            metrics: Arc::clone(metrics),
            ..receiver(tx.clone())
        };
        let one_span = crate::trace::otlp::build::request(vec![crate::trace::otlp::build::span(
            &[1; 16],
            1,
            0,
            vec![],
        )])
        .encode_to_vec();
        let with_body = |body: Body| {
            Request::builder()
                .method("POST")
                .uri("/v1/traces")
                .header(header::CONTENT_TYPE, "application/x-protobuf")
                .body(body)
                .unwrap()
        };
        match kind {
            Kind::Taken | Kind::Partial => {
                let handler = tokio::spawn(export(State(r), post(&one_span)));
                let job = rx.recv().await.unwrap();
                let dropped = if matches!(kind, Kind::Partial) {
                    [1, 0, 0]
                } else {
                    [0, 0, 0]
                };
                let stats = AddStats {
                    spans: 1,
                    dropped,
                    attached: 0,
                };
                Job::answer(job.reply, &job.count, stats);
                assert_eq!(handler.await.unwrap().status(), StatusCode::OK);
            }
            Kind::LeftAfterQueued => {
                let handler = tokio::spawn(export(State(r), post(&one_span)));
                let job = rx.recv().await.unwrap();
                handler.abort();
                let _ = handler.await;
                Job::answer(job.reply, &job.count, AddStats::default());
            }
            Kind::Undecodable => {
                let resp = export(State(r), post(&[0xff; 40])).await;
                assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
            }
            Kind::CorruptGzip => {
                let mut req = post(&[0x1f, 0x8b, 8, 0, 1, 2, 3, 4, 5, 6, 7]);
                req.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                let resp = export(State(r), req).await;
                assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
            }
            Kind::TooLarge => {
                let resp = export(State(r), post(&[0u8; 2000])).await;
                assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
            }
            Kind::UnsupportedType => {
                let mut req = post(&one_span);
                req.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                let resp = export(State(r), req).await;
                assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            Kind::UnsupportedEncoding => {
                let mut req = post(&one_span);
                req.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
                let resp = export(State(r), req).await;
                assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            Kind::OverBudget => {
                let r = Receiver {
                    budget: MemoryBudget::new(100),
                    ..r
                };
                let resp = export(State(r), post(&[0u8; 600])).await;
                assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
            }
            Kind::QueueFull => {
                let (reply, _answer) = oneshot::channel();
                let count = metrics.otlp.request("http");
                tx.try_send(Job {
                    request: ExportTraceServiceRequest::default(),
                    reply,
                    reservation: r.budget.reservation(),
                    count: count.clone(),
                })
                .unwrap();
                let resp = export(State(r), post(&one_span)).await;
                assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
                // The request that filled the queue is taken.
                let job = rx.recv().await.unwrap();
                Job::answer(job.reply, &job.count, AddStats::default());
            }
            Kind::ShuttingDown => {
                drop(rx);
                let resp = export(State(r), post(&one_span)).await;
                assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
            }
            Kind::BrokenOff => {
                let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
                    Ok(one_span[..4].to_vec()),
                    Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
                ];
                let body = Body::from_stream(futures::stream::iter(chunks));
                let resp = export(State(r), with_body(body)).await;
                assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
            }
            Kind::HungUpMidBody => {
                let first: Result<Vec<u8>, std::io::Error> = Ok(one_span[..4].to_vec());
                let stalled = futures::stream::iter([first]).chain(futures::stream::pending());
                let handler = tokio::spawn(export(State(r), with_body(Body::from_stream(stalled))));
                // The handler runs until it waits for the rest of the body.
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                handler.abort();
                assert!(handler.await.unwrap_err().is_cancelled());
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// The outcomes are a partition of the requests: whatever the mix (taken, refused, broken
        /// off, abandoned at any stage), each request is counted once, in the outcome of its kind,
        /// and the outcomes sum to the requests sent (the one that filled the queue included).
        #[test]
        fn every_request_ends_in_exactly_one_outcome(
            kinds in proptest::collection::vec(proptest::sample::select(Kind::ALL.to_vec()), 1..40)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let metrics = Arc::new(Metrics::new(&[], "test"));
            runtime.block_on(async {
                for &kind in &kinds {
                    send(kind, &metrics).await;
                }
            });
            let count = |o: Outcome| {
                metrics
                    .otlp
                    .requests
                    .with_label_values(&["http", o.as_str()])
                    .get()
            };
            let fillers = kinds.iter().filter(|k| matches!(k, Kind::QueueFull)).count() as u64;
            for o in Outcome::ALL {
                let expected = kinds.iter().filter(|k| k.outcome() == o).count() as u64
                    + if o == Outcome::Ok { fillers } else { 0 };
                proptest::prop_assert_eq!(count(o), expected, "{}", o.as_str());
            }
            let total: u64 = Outcome::ALL.iter().map(|&o| count(o)).sum();
            proptest::prop_assert_eq!(total, kinds.len() as u64 + fillers);
        }
    }
}
