//! The OTLP/gRPC receiver: the unary `opentelemetry.proto.collector.trace.v1.TraceService/Export`
//! that the OpenTelemetry Collector's `otlp` and `loadbalancing` exporters and the SDKs' gRPC
//! exporters call, gzip-compressed or not. It is a route of the write listener (HTTP/2, its
//! credentials, TLS and rate limit), which also binds `write.grpc_listen` (4317 by convention).
//!
//! It shares everything past the wire with the OTLP/HTTP receiver: the message arrives as raw
//! bytes (a codec of its own, so tonic never decodes it) and goes through the same
//! `decode_request` (span count checked before decoding, rejections counted by reason), the same
//! bounded queue to span assembly, and the same answer (`partialSuccess` for spans not kept).
//! Every request is counted in `ragwatch_otlp_requests_total{protocol="grpc"}`, those tonic turns
//! away before the handler too (over the size limit, an unknown compression, a broken frame); a
//! call refused by the write listener's guard is counted there, as an HTTP 401/403/429, which gRPC
//! clients read as UNAUTHENTICATED, PERMISSION_DENIED and UNAVAILABLE.
//! The message is read (and gunzipped) here, within the memory budget, before tonic sees the call.
//! Status codes follow the OTLP specification: a full queue or a receiver shutting down is
//! UNAVAILABLE, which exporters retry; a spent memory budget is RESOURCE_EXHAUSTED with a
//! `RetryInfo`, which they retry too; an undecodable message is INVALID_ARGUMENT, which they do not.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::{Buf, Bytes};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tokio::sync::mpsc;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, UnaryService};
use tonic::{Code, Status};

use super::budget::{MemoryBudget, ReadError, Reservation, gunzip, read_body};
use super::handoff::{Job, NotTaken, partial_success, submit};
use crate::metrics::Metrics;
use crate::trace::otlp::config::TraceFormat;
use crate::trace::otlp::decode_request;

/// The gRPC path of the one method served.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// What the gRPC handlers share.
#[derive(Clone)]
pub(super) struct GrpcReceiver {
    pub(super) jobs_tx: mpsc::Sender<Job>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) budget: Arc<MemoryBudget>,
    pub(super) max_body_bytes: usize,
    pub(super) max_spans: usize,
    pub(super) retry_after_secs: u64,
}

impl GrpcReceiver {
    fn outcome(&self, outcome: &str) {
        self.metrics
            .otlp
            .requests
            .with_label_values(&["grpc", outcome])
            .inc();
    }

    /// RESOURCE_EXHAUSTED with a `RetryInfo` (which OTLP exporters need to retry it): the memory
    /// budget cannot cover the request now.
    fn over_budget(&self) -> Status {
        self.outcome("memory");
        let retry = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: i64::try_from(self.retry_after_secs).unwrap_or(i64::MAX),
                nanos: 0,
            }),
        };
        let message = "ragwatch's OTLP memory budget (otlp.max_queued_bytes) is spent; retry later";
        let details = RpcStatus {
            code: Code::ResourceExhausted as i32,
            message: message.to_owned(),
            details: vec![ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".to_owned(),
                value: retry.encode_to_vec(),
            }],
        };
        Status::with_details(
            Code::ResourceExhausted,
            message,
            Bytes::from(details.encode_to_vec()),
        )
    }

    /// Reads the request's message within the memory budget and hands it to [`Export`] through the
    /// request's extensions (as an empty message in its place, so tonic neither copies nor
    /// decompresses it again). A request with an encoding other than gzip, or whose framing is not
    /// one message, goes to tonic as it came (its answer says why; its bytes stay reserved until
    /// it answers). Err: the answer to a request refused here.
    async fn prepare(&self, request: http::Request<Body>) -> Result<http::Request<Body>, Status> {
        let (mut parts, body) = request.into_parts();
        let gzip = match parts.headers.get("grpc-encoding").map(|v| v.as_bytes()) {
            None | Some(b"identity") => false,
            Some(b"gzip") => true,
            Some(_) => return Ok(http::Request::from_parts(parts, body)),
        };
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let too_large = || {
            self.outcome("too_large");
            Status::out_of_range(format!(
                "message over otlp.max_body_bytes ({} bytes)",
                self.max_body_bytes
            ))
        };
        let failed = |e: ReadError| match e {
            ReadError::TooLarge => too_large(),
            ReadError::OverBudget => self.over_budget(),
            ReadError::Broken(e) => {
                self.outcome("bad_request");
                Status::internal(e)
            }
        };
        let mut reservation = self.budget.reservation();
        let raw = read_body(body, declared, self.max_body_bytes + 5, &mut reservation)
            .await
            .map_err(failed)?;
        let framed = raw.len() >= 5 && {
            let len = u32::from_be_bytes([raw[1], raw[2], raw[3], raw[4]]) as usize;
            len == raw.len() - 5 && (raw[0] == 0 || (raw[0] == 1 && gzip))
        };
        if !framed {
            let prepared = Prepared::new(None, reservation);
            parts.extensions.insert(prepared);
            return Ok(http::Request::from_parts(parts, Body::from(raw)));
        }
        if raw.len() - 5 > self.max_body_bytes {
            return Err(too_large());
        }
        let message = if raw[0] == 1 {
            let out = gunzip(&raw[5..], self.max_body_bytes, &mut reservation);
            reservation.shrink(raw.capacity());
            drop(raw);
            Bytes::from(out.map_err(failed)?)
        } else {
            Bytes::from(raw).slice(5..)
        };
        parts.headers.remove("grpc-encoding");
        parts.headers.remove(http::header::CONTENT_LENGTH);
        parts
            .extensions
            .insert(Prepared::new(Some(message), reservation));
        Ok(http::Request::from_parts(
            parts,
            Body::from(Bytes::from_static(&[0, 0, 0, 0, 0])),
        ))
    }

    /// The route of `TraceService/Export`, to serve on an HTTP/2 listener (the write listener).
    pub(super) fn routes(self) -> axum::Router {
        axum::Router::new().route_service(EXPORT_PATH, TraceService(self))
    }
}

/// The message as bytes in, the answer as protobuf out.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = ExportTraceServiceResponse;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = ExportTraceServiceResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the answer: {e}")))
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// The service behind `TraceService/Export`.
#[derive(Clone)]
struct TraceService(GrpcReceiver);

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl tower::Service<http::Request<Body>> for TraceService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // Mounted on EXPORT_PATH only (`routes`): another method never reaches here.
        let receiver = self.0.clone();
        Box::pin(async move {
            let request = match receiver.prepare(request).await {
                Ok(request) => request,
                Err(status) => return Ok(status.into_http()),
            };
            let reached = Arc::new(AtomicBool::new(false));
            let mut grpc = Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(receiver.max_body_bytes);
            let export = Export {
                receiver: receiver.clone(),
                reached: reached.clone(),
            };
            let response = grpc.unary(export, request).await;
            if !reached.load(Ordering::SeqCst) {
                // Tonic answered before the handler ran: count why.
                receiver.outcome(match grpc_status(&response) {
                    Some(Code::OutOfRange | Code::ResourceExhausted) => "too_large",
                    Some(Code::Unimplemented) => "unsupported",
                    _ => "bad_request",
                });
            }
            Ok(response)
        })
    }
}

/// A request's message read by [`GrpcReceiver::prepare`] (`None`: left in the body for tonic) and
/// the bytes of the memory budget it holds; taken once, by [`Export`].
#[derive(Clone)]
struct Prepared(Arc<Mutex<Option<Read>>>);

/// A message read (`None`: left in the body) and its reservation.
type Read = (Option<Bytes>, Reservation);

impl Prepared {
    fn new(message: Option<Bytes>, reservation: Reservation) -> Prepared {
        Prepared(Arc::new(Mutex::new(Some((message, reservation)))))
    }

    fn take(&self) -> Option<Read> {
        self.0.lock().ok()?.take()
    }
}

/// `google.rpc.Status`, the details of a gRPC error answer.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The `grpc-status` of an answer tonic built without a body (a header-only error).
fn grpc_status(response: &http::Response<tonic::body::Body>) -> Option<Code> {
    let v = response.headers().get("grpc-status")?.to_str().ok()?;
    Some(Code::from_i32(v.parse().ok()?))
}

/// One Export call.
struct Export {
    receiver: GrpcReceiver,
    reached: Arc<AtomicBool>,
}

impl UnaryService<Bytes> for Export {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<Result<tonic::Response<ExportTraceServiceResponse>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        self.reached.store(true, Ordering::SeqCst);
        let r = self.receiver.clone();
        Box::pin(async move {
            let (message, mut reservation) = match request.extensions().get::<Prepared>() {
                Some(prepared) => prepared.take(),
                None => None,
            }
            .unwrap_or_else(|| (None, r.budget.reservation()));
            let bytes = message.unwrap_or_else(|| request.into_inner());
            // The decoded message is built while the bytes are held: reserve as much again for it.
            if reservation.grow(bytes.len()).is_err() {
                return Err(r.over_budget());
            }
            let request = if bytes.is_empty() {
                ExportTraceServiceRequest::default()
            } else {
                match decode_request(
                    &bytes,
                    TraceFormat::OtlpProto,
                    r.max_body_bytes,
                    r.max_spans,
                ) {
                    Ok(request) => request,
                    Err(e) => {
                        crate::events::trace_rejected(&r.metrics, &e, "otlp/grpc");
                        r.outcome("bad_request");
                        return Err(Status::invalid_argument(e.to_string()));
                    }
                }
            };
            drop(bytes);
            match submit(&r.jobs_tx, request, reservation).await {
                Ok(stats) => {
                    let partial_success = partial_success(&stats);
                    r.outcome(if partial_success.is_some() {
                        "partial"
                    } else {
                        "ok"
                    });
                    Ok(tonic::Response::new(ExportTraceServiceResponse {
                        partial_success,
                    }))
                }
                Err(NotTaken::Full) => {
                    r.outcome("throttled");
                    Err(Status::unavailable(
                        "ragwatch's span assembly queue is full; retry later",
                    ))
                }
                Err(NotTaken::OverBudget) => Err(r.over_budget()),
                Err(NotTaken::Closed) => {
                    r.outcome("unavailable");
                    Err(Status::unavailable(
                        "ragwatch is shutting down; retry later",
                    ))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Duration;

    use tower::Service;

    use super::*;
    use crate::trace::otlp::AddStats;
    use crate::trace::otlp::build::{request, span, str_attr};

    fn receiver(budget: usize, jobs_tx: mpsc::Sender<Job>) -> GrpcReceiver {
        GrpcReceiver {
            jobs_tx,
            metrics: Arc::new(Metrics::new(&[], "test")),
            budget: MemoryBudget::new(budget),
            max_body_bytes: 1 << 20,
            max_spans: 10,
            retry_after_secs: 3,
        }
    }

    /// A unary Export call carrying `message`, gzip-compressed or not.
    fn call(message: &[u8], gzip: bool) -> http::Request<Body> {
        let payload = if gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(message).unwrap();
            gz.finish().unwrap()
        } else {
            message.to_vec()
        };
        let mut frame = vec![u8::from(gzip)];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        let mut b = http::Request::builder()
            .method("POST")
            .uri(EXPORT_PATH)
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if gzip {
            b = b.header("grpc-encoding", "gzip");
        }
        b.body(Body::from(frame)).unwrap()
    }

    fn message() -> Vec<u8> {
        request(vec![span(
            &[1; 16],
            1,
            0,
            vec![str_attr("k", &"v".repeat(50_000))],
        )])
        .encode_to_vec()
    }

    /// A gzip-compressed call: decompressed and decoded within the budget, its bytes held until span
    /// assembly takes the request; while they are, a second call is RESOURCE_EXHAUSTED with a
    /// RetryInfo (which OTLP exporters need to retry), counted as `memory`.
    #[tokio::test]
    async fn a_call_over_the_memory_budget_is_resource_exhausted_with_retry_info() {
        let (tx, mut rx) = mpsc::channel::<Job>(4);
        let r = receiver(150_000, tx);
        let mut service = TraceService(r.clone());
        let first = tokio::spawn(service.call(call(&message(), true)));
        let job = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the first call queued")
            .unwrap();
        let held = r.budget.used();
        assert!(held >= 50_000, "{held}");
        let refused = service.call(call(&message(), false)).await.unwrap();
        assert_eq!(refused.headers()["grpc-status"], "8", "{refused:?}");
        assert!(refused.headers().contains_key("grpc-status-details-bin"));
        assert_eq!(r.budget.used(), held);
        let _ = job.reply.send(AddStats::default());
        drop(job.reservation);
        let answer = first.await.unwrap().unwrap();
        assert_eq!(answer.status(), http::StatusCode::OK);
        assert!(!answer.headers().contains_key("grpc-status"), "{answer:?}");
        assert_eq!(r.budget.used(), 0);
        let count = |o: &str| {
            r.metrics
                .otlp
                .requests
                .with_label_values(&["grpc", o])
                .get()
        };
        assert_eq!(count("memory"), 1);
        assert_eq!(count("ok"), 1);
    }

    #[test]
    fn the_retry_info_names_the_retry_delay() {
        let (tx, _rx) = mpsc::channel::<Job>(1);
        let status = receiver(1, tx).over_budget();
        assert_eq!(status.code(), Code::ResourceExhausted);
        let details = RpcStatus::decode(status.details()).unwrap();
        assert_eq!(
            details.details[0].type_url,
            "type.googleapis.com/google.rpc.RetryInfo"
        );
        let retry = RetryInfo::decode(&details.details[0].value[..]).unwrap();
        assert_eq!(retry.retry_delay.unwrap().seconds, 3);
    }
}
