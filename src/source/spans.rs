//! Span ingest: OTLP messages through span assembly into the pipeline, with the bookkeeping that
//! keeps delivery at-least-once through the join.
//!
//! A Kafka message carries spans of several traces, and a trace's spans can sit in several
//! messages. Each message's position is attached to every trace it carries spans of; the message
//! is accounted for when every one of those traces is: judged (after the sampled judge, when it was
//! sampled), not judged with a reason, rejected, or dropped with a reason. Until then its offset is
//! held back (the consumer keeps reading). Per message a count of open traces; per trace handed to
//! the sampled judge, the positions it holds, behind a token that comes back on the ack channel.
//!
//! After a crash the uncommitted messages are redelivered: every trace with spans in them is
//! assembled again (at least once). A trace whose earlier messages were committed (because every
//! trace in them was done) but whose later ones were not is assembled again from those later
//! spans alone, and is then judged, or counted under its reason, a second time.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::Ingest;
use crate::clock::now_ms;
use crate::events;
use crate::metrics::Metrics;
use crate::pipeline::{Disposition, Pipeline, Position};
use crate::trace::DecodeError;
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::{AssemblyConfig, TraceFormat};
use crate::trace::otlp::{AddStats, Assembler, Completed, Outcome, SpanDrop, decode_request};

/// The topic index of the tokens that stand for judge jobs (never a real topic index).
const JUDGE_TOKEN_STREAM: usize = usize::MAX;

/// OTLP messages in, assembled traces to the pipeline.
#[derive(Debug)]
pub struct SpanIngest {
    pipeline: Pipeline,
    assembler: Assembler<Position>,
    format: TraceFormat,
    max_message_bytes: usize,
    max_spans_per_message: usize,
    metrics: Arc<Metrics>,
    /// Open traces per message position.
    open: HashMap<Position, u32>,
    /// Positions held by traces waiting for the sampled judge, by job token.
    judging: HashMap<i64, Vec<Position>>,
    next_job: i64,
    completed: Vec<Completed<Position>>,
}

impl SpanIngest {
    /// Span ingest feeding `pipeline`, with `decode`'s format and preset and `assembly`'s bounds;
    /// the attributes the pipeline's variants read are copied onto each trace.
    pub fn new(decode: &DecodeConfig, assembly: &AssemblyConfig, pipeline: Pipeline) -> Self {
        let metrics = Arc::clone(&pipeline.shared().metrics);
        let variants = &pipeline.shared().setup.variants;
        Self {
            assembler: Assembler::new(decode, assembly)
                .copying_attributes(variants.metadata_attributes()),
            format: decode.format,
            max_message_bytes: decode.max_message_bytes,
            max_spans_per_message: assembly.max_spans_per_message,
            pipeline,
            metrics,
            open: HashMap::new(),
            judging: HashMap::new(),
            next_job: 0,
            completed: Vec::new(),
        }
    }

    /// Decodes one message in the configured format (the receiver uses each request's own format).
    pub fn decode(
        &self,
        bytes: &[u8],
        format: TraceFormat,
    ) -> Result<ExportTraceServiceRequest, DecodeError> {
        decode_request(
            bytes,
            format,
            self.max_message_bytes,
            self.max_spans_per_message,
        )
    }

    /// Traces waiting for more spans.
    pub(crate) fn pending_traces(&self) -> usize {
        self.assembler.pending()
    }

    /// Takes one decoded request at `now`: spans to the assembly, completed traces to the pipeline.
    /// Returns whether the request's own position is accounted for now, and what became of its
    /// spans.
    pub fn request(
        &mut self,
        req: ExportTraceServiceRequest,
        position: Option<Position>,
        now: u64,
        released: &mut Vec<Position>,
    ) -> (Disposition, AddStats) {
        let stats = self
            .assembler
            .add_request(req, position, now, &mut self.completed);
        let m = &self.metrics;
        m.otlp.spans_received.inc_by(stats.spans as u64);
        for (why, n) in SpanDrop::ALL.iter().zip(stats.dropped) {
            if n > 0 {
                m.otlp
                    .spans_dropped
                    .with_label_values(&[why.as_str()])
                    .inc_by(n as u64);
            }
        }
        if let Some(p) = position
            && stats.attached > 0
        {
            self.open.insert(p, stats.attached as u32);
        }
        self.assembler.expire(now, &mut self.completed);
        self.settle(position, now, released);
        let done = position.is_none_or(|p| !self.open.contains_key(&p));
        let disposition = if done {
            Disposition::Done
        } else {
            Disposition::Pending
        };
        (disposition, stats)
    }

    /// Hands completed traces on and releases the positions of those accounted for. `current` is
    /// the message being taken: its own release is the caller's `Done`, not a `released` entry.
    fn settle(&mut self, current: Option<Position>, now: u64, released: &mut Vec<Position>) {
        let mut completed = std::mem::take(&mut self.completed);
        for c in completed.drain(..) {
            self.metrics
                .otlp
                .traces_assembled
                .with_label_values(&[c.trigger.as_str()])
                .inc();
            match c.outcome {
                Outcome::Trace(trace) => {
                    let token = (!c.tokens.is_empty()).then(|| {
                        self.next_job += 1;
                        Position {
                            stream: JUDGE_TOKEN_STREAM,
                            partition: 0,
                            offset: self.next_job,
                        }
                    });
                    let d = self.pipeline.ingest_trace_at(trace, token, now);
                    match token {
                        Some(t) if d == Disposition::Pending => {
                            self.judging.insert(t.offset, c.tokens);
                        }
                        _ => self.release(c.tokens, current, released),
                    }
                }
                Outcome::Unjudged(trace, why) => {
                    // Received, and not judged: received = judged + unjudged.
                    let shared = self.pipeline.shared();
                    let stratum = shared.stratifier.assign(&trace);
                    let name = shared.stratifier.name(stratum);
                    self.metrics
                        .ingest
                        .traces_received
                        .with_label_values(&[name])
                        .inc();
                    self.metrics
                        .ingest
                        .traces_unjudged
                        .with_label_values(&[name, why])
                        .inc();
                    self.release(c.tokens, current, released);
                }
                Outcome::Rejected(e) => {
                    events::trace_rejected(&self.metrics, &e, &c.trace_id);
                    self.release(c.tokens, current, released);
                }
            }
        }
        self.completed = completed;
        self.metrics
            .otlp
            .assembly_pending
            .set(self.assembler.pending() as i64);
    }

    fn release(
        &mut self,
        tokens: Vec<Position>,
        current: Option<Position>,
        released: &mut Vec<Position>,
    ) {
        for p in tokens {
            let Some(n) = self.open.get_mut(&p) else {
                // A partition revoked since: its messages are redelivered to the next owner.
                continue;
            };
            *n -= 1;
            if *n == 0 {
                self.open.remove(&p);
                if Some(p) != current {
                    released.push(p);
                }
            }
        }
    }
}

impl Ingest for SpanIngest {
    fn message(
        &mut self,
        bytes: &[u8],
        position: Option<Position>,
        released: &mut Vec<Position>,
    ) -> Disposition {
        self.metrics.source.messages.inc();
        match self.decode(bytes, self.format) {
            Ok(req) => self.request(req, position, now_ms(), released).0,
            Err(e) => {
                let at = position
                    .map(|p| format!("{}/{}", p.partition, p.offset))
                    .unwrap_or_default();
                events::trace_rejected(&self.metrics, &e, &at);
                Disposition::Done
            }
        }
    }

    fn ack(&mut self, token: Position, released: &mut Vec<Position>) {
        if token.stream != JUDGE_TOKEN_STREAM {
            released.push(token);
        } else if let Some(tokens) = self.judging.remove(&token.offset) {
            self.release(tokens, None, released);
        }
    }

    fn tick(&mut self, released: &mut Vec<Position>) {
        let now = now_ms();
        self.assembler.expire(now, &mut self.completed);
        self.settle(None, now, released);
    }

    fn forget(&mut self, stream: usize, partition: i32) {
        let gone = |p: &Position| p.stream == stream && p.partition == partition;
        self.open.retain(|p, _| !gone(p));
        for held in self.judging.values_mut() {
            held.retain(|p| !gone(p));
        }
        self.assembler.detach(gone);
    }

    fn end_of_input(&mut self) {
        self.assembler.finish(&mut self.completed);
        let mut released = Vec::new();
        self.settle(None, now_ms(), &mut released);
    }

    fn close_queue(&mut self) {
        self.pipeline.close_queue();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::Shared;
    use crate::trace::otlp::build::{request, str_attr as s};
    use opentelemetry_proto::tonic::trace::v1::Span;
    use tokio::sync::mpsc;

    fn span(
        trace: u8,
        id: u64,
        parent: u64,
        attributes: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
    ) -> Span {
        crate::trace::otlp::build::span(&[trace; 16], id, parent, attributes)
    }

    fn retriever(trace: u8) -> Span {
        span(
            trace,
            2,
            1,
            vec![
                s("openinference.span.kind", "RETRIEVER"),
                s(
                    "retrieval.documents.0.document.content",
                    "Ann wrote the book.",
                ),
            ],
        )
    }

    fn root(trace: u8) -> Span {
        span(
            trace,
            1,
            0,
            vec![
                s("openinference.span.kind", "CHAIN"),
                s("input.value", "Who wrote the book?"),
                s("output.value", "Ann wrote the book."),
            ],
        )
    }

    fn bytes(spans: Vec<Span>) -> Vec<u8> {
        use prost::Message;
        request(spans).encode_to_vec()
    }

    fn pos(offset: i64) -> Option<Position> {
        Some(Position {
            stream: 0,
            partition: 0,
            offset,
        })
    }

    fn ingest(judge: Option<mpsc::Sender<crate::pipeline::JudgeJob>>) -> SpanIngest {
        let toml = "[decode]\nformat = \"otlp_proto\"\n[sample]\ndefault_rate = 1.0\n";
        let decode: DecodeConfig = crate::section::fields::section(toml, "decode");
        let sample = crate::section::fields::section(toml, "sample");
        let shared = Shared::new(crate::recorder::RecorderSetup::default());
        let pipeline = Pipeline::new(&decode, &sample, shared, judge);
        SpanIngest::new(&decode, &AssemblyConfig::default(), pipeline)
    }

    #[test]
    fn a_message_is_accounted_for_when_every_trace_in_it_is() {
        let mut si = ingest(None);
        let mut released = Vec::new();
        // Message 0: trace 1's retriever and trace 2's retriever. Message 1: trace 1's root.
        // Message 2: trace 2's root.
        let d = si.message(
            &bytes(vec![retriever(1), retriever(2)]),
            pos(0),
            &mut released,
        );
        assert_eq!(d, Disposition::Pending);
        let d = si.message(&bytes(vec![root(1)]), pos(1), &mut released);
        assert_eq!(d, Disposition::Done);
        assert!(released.is_empty(), "message 0 still holds trace 2");
        let d = si.message(&bytes(vec![root(2)]), pos(2), &mut released);
        assert_eq!(d, Disposition::Done);
        assert_eq!(released, vec![pos(0).unwrap()]);
        let m = &si.metrics;
        assert_eq!(m.otlp.spans_received.get(), 4);
        assert_eq!(
            m.ingest
                .traces_received
                .with_label_values(&["default"])
                .get(),
            2
        );
        // A poison message is accounted for at once.
        assert_eq!(
            si.message(b"\xff\xff", pos(3), &mut released),
            Disposition::Done
        );
    }

    #[test]
    fn unjudged_traces_count_as_received() {
        let mut si = ingest(None);
        let mut released = Vec::new();
        si.message(&bytes(vec![retriever(1), root(1)]), pos(0), &mut released);
        // Only a chain: no retrieval, no model call (an index being built, say).
        si.message(&bytes(vec![root(2)]), pos(1), &mut released);
        let m = &si.metrics;
        assert_eq!(
            m.ingest
                .traces_received
                .with_label_values(&["default"])
                .get(),
            2
        );
        let unjudged = |why: &str| {
            m.ingest
                .traces_unjudged
                .with_label_values(&["default", why])
                .get()
        };
        assert_eq!(unjudged("not_rag"), 1);
        assert_eq!(unjudged("no_retrieval"), 0);
    }

    #[test]
    fn sampled_traces_hold_their_messages_until_acked() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut si = ingest(Some(tx));
        let mut released = Vec::new();
        si.message(&bytes(vec![retriever(1)]), pos(0), &mut released);
        let d = si.message(&bytes(vec![root(1)]), pos(1), &mut released);
        assert_eq!(d, Disposition::Pending);
        let job = rx.try_recv().unwrap();
        let token = job.position.unwrap();
        assert_eq!(token.stream, JUDGE_TOKEN_STREAM);
        assert!(released.is_empty());
        si.ack(token, &mut released);
        released.sort_by_key(|p| p.offset);
        assert_eq!(released, vec![pos(0).unwrap(), pos(1).unwrap()]);
    }

    #[test]
    fn a_revoked_partition_no_longer_holds_anything() {
        let mut si = ingest(None);
        let mut released = Vec::new();
        si.message(&bytes(vec![retriever(1)]), pos(0), &mut released);
        si.forget(0, 0);
        let d = si.message(&bytes(vec![root(1)]), pos(1), &mut released);
        assert_eq!(d, Disposition::Done);
        assert!(released.is_empty());
    }
}
