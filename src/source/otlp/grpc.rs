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
//! Status codes follow the OTLP specification: a full queue or a receiver shutting down is
//! UNAVAILABLE, which exporters retry; an undecodable message is INVALID_ARGUMENT, which they do not.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use tokio::sync::mpsc;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{Grpc, UnaryService};
use tonic::{Code, Status};

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
    pub(super) max_body_bytes: usize,
    pub(super) max_spans: usize,
}

impl GrpcReceiver {
    fn outcome(&self, outcome: &str) {
        self.metrics
            .otlp_requests
            .with_label_values(&["grpc", outcome])
            .inc();
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

impl<B> tower::Service<http::Request<B>> for TraceService
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Mounted on EXPORT_PATH only (`routes`): another method never reaches here.
        let receiver = self.0.clone();
        Box::pin(async move {
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
            let bytes = request.into_inner();
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
            match submit(&r.jobs_tx, request).await {
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
