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
use crate::metrics::otlp::{Outcome, RequestCount};
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
    /// RESOURCE_EXHAUSTED with a `RetryInfo` (which OTLP exporters need to retry it): the memory
    /// budget cannot cover the request now.
    fn over_budget(&self, count: &RequestCount) -> Status {
        count.end(Outcome::Memory);
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
    async fn prepare(
        &self,
        request: http::Request<Body>,
        count: &RequestCount,
    ) -> Result<http::Request<Body>, Status> {
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
            count.end(Outcome::TooLarge);
            Status::out_of_range(format!(
                "message over otlp.max_body_bytes ({} bytes)",
                self.max_body_bytes
            ))
        };
        let failed = |e: ReadError| match e {
            ReadError::TooLarge => too_large(),
            ReadError::OverBudget => self.over_budget(count),
            ReadError::Broken(e) => {
                count.end(Outcome::BadRequest);
                Status::internal(e)
            }
            ReadError::Gone(e) => {
                // Nobody reads this answer: the stream is gone.
                count.end(Outcome::ClientGone);
                Status::cancelled(e)
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
        // Ended in one outcome below; dropped unanswered (the client reset the stream, so the
        // server dropped this future), it counts `client_gone`.
        let count = receiver.metrics.otlp.request("grpc");
        Box::pin(async move {
            let request = match receiver.prepare(request, &count).await {
                Ok(request) => request,
                Err(status) => return Ok(status.into_http()),
            };
            let mut grpc = Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(receiver.max_body_bytes);
            let export = Export {
                receiver: receiver.clone(),
                count: count.clone(),
            };
            let response = grpc.unary(export, request).await;
            // When tonic answered before the handler ran, this is the outcome; a handler that ran
            // has given its own, and this one is ignored.
            count.end(match grpc_status(&response) {
                Some(Code::OutOfRange | Code::ResourceExhausted) => Outcome::TooLarge,
                Some(Code::Unimplemented) => Outcome::Unsupported,
                _ => Outcome::BadRequest,
            });
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

/// One Export call, and the count its request ends in.
struct Export {
    receiver: GrpcReceiver,
    count: RequestCount,
}

impl UnaryService<Bytes> for Export {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<Result<tonic::Response<ExportTraceServiceResponse>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let r = self.receiver.clone();
        let count = self.count.clone();
        Box::pin(async move {
            let (message, mut reservation) = match request.extensions().get::<Prepared>() {
                Some(prepared) => prepared.take(),
                None => None,
            }
            .unwrap_or_else(|| (None, r.budget.reservation()));
            let bytes = message.unwrap_or_else(|| request.into_inner());
            // The decoded message is built while the bytes are held: reserve as much again for it.
            if reservation.grow(bytes.len()).is_err() {
                return Err(r.over_budget(&count));
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
                        count.end(Outcome::BadRequest);
                        return Err(Status::invalid_argument(e.to_string()));
                    }
                }
            };
            drop(bytes);
            match submit(&r.jobs_tx, request, reservation, &count).await {
                // Counted `ok` or `partial` where its spans were taken (`Job::answer`).
                Ok(stats) => Ok(tonic::Response::new(ExportTraceServiceResponse {
                    partial_success: partial_success(&stats),
                })),
                Err(NotTaken::Full) => {
                    count.end(Outcome::Throttled);
                    Err(Status::unavailable(
                        "ragwatch's span assembly queue is full; retry later",
                    ))
                }
                Err(NotTaken::OverBudget) => Err(r.over_budget(&count)),
                Err(NotTaken::Closed) => {
                    count.end(Outcome::Unavailable);
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

    use tokio::sync::oneshot;
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
        Job::answer(job.reply, &job.count, AddStats::default());
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
        let r = receiver(1, tx);
        let status = r.over_budget(&r.metrics.otlp.request("grpc"));
        assert_eq!(status.code(), Code::ResourceExhausted);
        let details = RpcStatus::decode(status.details()).unwrap();
        assert_eq!(
            details.details[0].type_url,
            "type.googleapis.com/google.rpc.RetryInfo"
        );
        let retry = RetryInfo::decode(&details.details[0].value[..]).unwrap();
        assert_eq!(retry.retry_delay.unwrap().seconds, 3);
    }

    /// Over gRPC too, every call ends in exactly one outcome, whether the handler answers, tonic
    /// answers before it, or the stream breaks off: the outcomes sum to the calls.
    #[tokio::test]
    async fn every_call_ends_in_exactly_one_outcome() {
        let (tx, mut rx) = mpsc::channel::<Job>(1);
        let r = receiver(1 << 20, tx.clone());
        let mut service = TraceService(r.clone());
        let small = request(vec![span(&[1; 16], 1, 0, vec![])]).encode_to_vec();
        let grpc_status = |resp: &http::Response<tonic::body::Body>| {
            resp.headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap().to_owned())
        };
        // Taken.
        let taken = tokio::spawn(service.call(call(&small, true)));
        let job = rx.recv().await.unwrap();
        Job::answer(job.reply, &job.count, AddStats::default());
        assert_eq!(grpc_status(&taken.await.unwrap().unwrap()), None);
        // Undecodable inside a good frame: the handler's INVALID_ARGUMENT.
        let resp = service.call(call(&[0xff; 20], false)).await.unwrap();
        assert_eq!(grpc_status(&resp).as_deref(), Some("3"));
        // A broken frame: tonic answers before the handler.
        let mut bad = call(&small, false);
        *bad.body_mut() = Body::from(vec![0u8, 0, 0, 9, 1]);
        let resp = service.call(bad).await.unwrap();
        assert!(grpc_status(&resp).is_some(), "{resp:?}");
        // An unknown compression: tonic's UNIMPLEMENTED.
        let mut zstd = call(&small, false);
        zstd.headers_mut()
            .insert("grpc-encoding", http::HeaderValue::from_static("zstd"));
        let resp = service.call(zstd).await.unwrap();
        assert_eq!(grpc_status(&resp).as_deref(), Some("12"));
        // The stream broke off mid-message.
        let mut gone = call(&small, false);
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![
            Ok(vec![0, 0, 0, 0, 40]),
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ];
        *gone.body_mut() = Body::from_stream(futures::stream::iter(chunks));
        service.call(gone).await.unwrap();
        // The queue full, then the receiver shut down.
        let (reply, _answer) = oneshot::channel();
        tx.try_send(Job {
            request: ExportTraceServiceRequest::default(),
            reply,
            reservation: r.budget.reservation(),
            count: r.metrics.otlp.request("grpc"),
        })
        .unwrap();
        let resp = service.call(call(&small, false)).await.unwrap();
        assert_eq!(grpc_status(&resp).as_deref(), Some("14"));
        let job = rx.recv().await.unwrap();
        Job::answer(job.reply, &job.count, AddStats::default());
        drop(rx);
        let resp = service.call(call(&small, false)).await.unwrap();
        assert_eq!(grpc_status(&resp).as_deref(), Some("14"));

        let count = |o: Outcome| {
            r.metrics
                .otlp
                .requests
                .with_label_values(&["grpc", o.as_str()])
                .get()
        };
        assert_eq!(count(Outcome::Ok), 2);
        assert_eq!(count(Outcome::BadRequest), 2);
        assert_eq!(count(Outcome::Unsupported), 1);
        assert_eq!(count(Outcome::ClientGone), 1);
        assert_eq!(count(Outcome::Throttled), 1);
        assert_eq!(count(Outcome::Unavailable), 1);
        let total: u64 = Outcome::ALL.iter().map(|&o| count(o)).sum();
        assert_eq!(total, 8);
    }
}
