//! The OTLP receivers' memory budget (`otlp.max_queued_bytes`): the bytes held by requests being
//! read, decompressed, decoded and queued for span assembly, all requests and both protocols
//! together. A request reserves bytes before it allocates them (its body buffer, its decompressed
//! message) and holds the reservation until the task that owns span assembly has taken its spans;
//! a request the budget cannot cover is refused (HTTP 429, gRPC RESOURCE_EXHAUSTED, both with a
//! retry delay) rather than waiting.
//!
//! Body and decompression buffers grow by doubling, each step reserved before it is allocated, so
//! what is reserved is what is allocated. Before a message is decoded, as many bytes again are
//! reserved for the decoded message (which is built while the bytes are held); once decoded, the
//! request's reservation becomes the estimated size of the decoded message ([`decoded_size`]),
//! held until span assembly takes it. Protobuf with many small attributes decodes to several times
//! its encoded size: such a request is refused once decoded when the budget cannot cover it.

use std::io::Read;
use std::mem::size_of;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use futures::StreamExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// The bytes all OTLP requests may hold at once.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    used: AtomicUsize,
    limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            used: AtomicUsize::new(0),
            limit,
        })
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::SeqCst);
    }

    /// An empty reservation, to grow.
    pub(crate) fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            bytes: 0,
        }
    }
}

/// The budget cannot cover a request's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget;

/// Bytes of the budget held by one request; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Reservation {
    /// Holds `bytes` more, or nothing more when the budget cannot cover them.
    pub(crate) fn grow(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if self.budget.try_take(bytes) {
            self.bytes += bytes;
            Ok(())
        } else {
            Err(OverBudget)
        }
    }

    /// Gives back `bytes` (at most what it holds).
    pub(crate) fn shrink(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.budget.give(bytes);
        self.bytes -= bytes;
    }

    /// Holds exactly `bytes`: grows or gives back the difference.
    pub(crate) fn resize(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if bytes > self.bytes {
            self.grow(bytes - self.bytes)
        } else {
            self.shrink(self.bytes - bytes);
            Ok(())
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

/// Why bytes were not read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// More than the limit.
    TooLarge,
    /// The budget cannot cover them.
    OverBudget,
    /// The gzip stream is corrupt.
    Broken(String),
    /// The body broke off: the client hung up or reset the stream before it was all sent.
    Gone(String),
}

/// The next capacity of a buffer of capacity `cap` that must hold `needed` bytes, at most
/// `max + 1` (one over the limit is enough to know the limit was passed).
fn next_capacity(cap: usize, needed: usize, max: usize) -> usize {
    needed.max(cap.saturating_mul(2)).max(4096).min(max + 1)
}

/// Appends `chunk` to `out`, reserving in `reservation` each allocation before it is made.
fn append(
    out: &mut Vec<u8>,
    chunk: &[u8],
    max: usize,
    reservation: &mut Reservation,
) -> Result<(), ReadError> {
    let needed = out.len() + chunk.len();
    if needed > max {
        return Err(ReadError::TooLarge);
    }
    if needed > out.capacity() {
        let cap = next_capacity(out.capacity(), needed, max);
        reservation
            .grow(cap - out.capacity())
            .map_err(|OverBudget| ReadError::OverBudget)?;
        out.reserve_exact(cap - out.len());
    }
    out.extend_from_slice(chunk);
    Ok(())
}

/// Reads a body of at most `max` bytes, `declared` (its Content-Length) reserved at once when
/// known, each further buffer growth reserved before it is made.
pub(crate) async fn read_body(
    body: Body,
    declared: Option<usize>,
    max: usize,
    reservation: &mut Reservation,
) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    if let Some(n) = declared {
        if n > max {
            return Err(ReadError::TooLarge);
        }
        reservation
            .grow(n)
            .map_err(|OverBudget| ReadError::OverBudget)?;
        out.reserve_exact(n);
    }
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Gone(e.to_string()))?;
        append(&mut out, &chunk, max, reservation)?;
    }
    Ok(out)
}

/// Decompresses gzip `raw` to at most `max` bytes, each buffer growth reserved before it is made.
pub(crate) fn gunzip(
    raw: &[u8],
    max: usize,
    reservation: &mut Reservation,
) -> Result<Vec<u8>, ReadError> {
    let mut decoder = flate2::read::GzDecoder::new(raw);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = decoder
            .read(&mut chunk)
            .map_err(|e| ReadError::Broken(format!("gzip: {e}")))?;
        if n == 0 {
            return Ok(out);
        }
        append(&mut out, &chunk[..n], max, reservation)?;
    }
}

/// The estimated heap and inline size of a decoded request: what holding it in the queue costs.
pub(crate) fn decoded_size(request: &ExportTraceServiceRequest) -> usize {
    fn value(v: &AnyValue) -> usize {
        match &v.value {
            Some(Value::StringValue(s)) => s.capacity(),
            Some(Value::BytesValue(b)) => b.capacity(),
            Some(Value::ArrayValue(a)) => {
                a.values.capacity() * size_of::<AnyValue>()
                    + a.values.iter().map(value).sum::<usize>()
            }
            Some(Value::KvlistValue(l)) => attributes(&l.values),
            _ => 0,
        }
    }
    fn attributes(kvs: &Vec<KeyValue>) -> usize {
        kvs.capacity() * size_of::<KeyValue>()
            + kvs
                .iter()
                .map(|kv| kv.key.capacity() + kv.value.as_ref().map_or(0, value))
                .sum::<usize>()
    }
    fn event(e: &Event) -> usize {
        e.name.capacity() + attributes(&e.attributes)
    }
    fn link(l: &Link) -> usize {
        l.trace_id.capacity()
            + l.span_id.capacity()
            + l.trace_state.capacity()
            + attributes(&l.attributes)
    }
    fn span(s: &Span) -> usize {
        s.trace_id.capacity()
            + s.span_id.capacity()
            + s.parent_span_id.capacity()
            + s.trace_state.capacity()
            + s.name.capacity()
            + attributes(&s.attributes)
            + s.events.capacity() * size_of::<Event>()
            + s.events.iter().map(event).sum::<usize>()
            + s.links.capacity() * size_of::<Link>()
            + s.links.iter().map(link).sum::<usize>()
            + s.status.as_ref().map_or(0, |st| st.message.capacity())
    }
    fn scope(s: &ScopeSpans) -> usize {
        s.schema_url.capacity()
            + s.scope.as_ref().map_or(0, |sc| {
                sc.name.capacity() + sc.version.capacity() + attributes(&sc.attributes)
            })
            + s.spans.capacity() * size_of::<Span>()
            + s.spans.iter().map(span).sum::<usize>()
    }
    fn resource(r: &ResourceSpans) -> usize {
        r.schema_url.capacity()
            + r.resource
                .as_ref()
                .map_or(0, |res| attributes(&res.attributes))
            + r.scope_spans.capacity() * size_of::<ScopeSpans>()
            + r.scope_spans.iter().map(scope).sum::<usize>()
    }
    size_of::<ExportTraceServiceRequest>()
        + request.resource_spans.capacity() * size_of::<ResourceSpans>()
        + request.resource_spans.iter().map(resource).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::trace::otlp::build::{request, span, str_attr};

    #[test]
    fn reservations_are_bounded_and_given_back() {
        let budget = MemoryBudget::new(100);
        let mut a = budget.reservation();
        a.grow(60).unwrap();
        let mut b = budget.reservation();
        assert_eq!(b.grow(41), Err(OverBudget));
        b.grow(40).unwrap();
        assert_eq!(budget.used(), 100);
        a.resize(10).unwrap();
        assert_eq!(budget.used(), 50);
        assert_eq!(b.resize(91), Err(OverBudget));
        b.resize(90).unwrap();
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_body_is_reserved_before_it_is_buffered() {
        let budget = MemoryBudget::new(1 << 20);
        // Content-Length known: reserved at once, and over the budget refused before reading.
        let mut r = budget.reservation();
        let body = read_body(Body::from(vec![7u8; 5000]), Some(5000), 10_000, &mut r)
            .await
            .unwrap();
        assert_eq!(body.len(), 5000);
        assert_eq!(r.bytes(), body.capacity());
        let mut other = budget.reservation();
        assert!(matches!(
            read_body(
                Body::from(vec![0u8; 10]),
                Some((1 << 20) - 4000),
                2 << 20,
                &mut other
            )
            .await,
            Err(ReadError::OverBudget)
        ));
        assert_eq!(other.bytes(), 0);
        // Streamed (no length): each growth reserved, the reservation covers the capacity.
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            (0..40).map(|_| Ok(vec![1u8; 1000])).collect();
        let body = Body::from_stream(futures::stream::iter(chunks));
        let mut s = budget.reservation();
        let out = read_body(body, None, 100_000, &mut s).await.unwrap();
        assert_eq!(out.len(), 40_000);
        assert_eq!(s.bytes(), out.capacity());
        assert!(out.capacity() < 2 * out.len());
        // Over the limit: too large, whatever the budget.
        let mut t = budget.reservation();
        assert!(matches!(
            read_body(Body::from(vec![0u8; 3000]), None, 2000, &mut t).await,
            Err(ReadError::TooLarge)
        ));
    }

    #[test]
    fn decompressed_bytes_are_reserved_and_a_bomb_stops_at_the_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b'a'; 1 << 20]).unwrap();
        let bomb = gz.finish().unwrap();
        let budget = MemoryBudget::new(4 << 20);
        let mut r = budget.reservation();
        let out = gunzip(&bomb, 2 << 20, &mut r).unwrap();
        assert_eq!(out.len(), 1 << 20);
        assert_eq!(r.bytes(), out.capacity());
        let mut small = MemoryBudget::new(100_000).reservation();
        assert!(matches!(
            gunzip(&bomb, 2 << 20, &mut small),
            Err(ReadError::OverBudget)
        ));
        let mut limited = budget.reservation();
        assert!(matches!(
            gunzip(&bomb, 1000, &mut limited),
            Err(ReadError::TooLarge)
        ));
    }

    #[test]
    fn the_decoded_size_counts_every_attribute() {
        let attrs = |n: usize| (0..n).map(|i| str_attr("k", &"v".repeat(i))).collect();
        let small = decoded_size(&request(vec![span(&[1; 16], 1, 0, attrs(1))]));
        let large = decoded_size(&request(vec![span(&[1; 16], 1, 0, attrs(100))]));
        // 99 more attributes: their structs and their 4950 more value bytes, 99 more key bytes.
        assert!(large - small >= 99 * size_of::<KeyValue>() + 4950 + 99);
    }
}
