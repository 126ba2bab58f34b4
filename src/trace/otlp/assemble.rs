//! Span assembly: spans grouped by trace id until the trace is complete, then built into a
//! [`Trace`].
//!
//! A trace completes when its root span (no parent) has arrived, at the end of the message that
//! carried it (spans are exported when they end, and a root ends last); or when no span of it has
//! arrived for `assembly.idle_timeout_ms` (its root was lost, or lives in a service that does not
//! export here); or at the end of a finite input. State is bounded: pending traces and their bytes
//! (the least recently active trace is dropped, `assembly_full`), spans per trace
//! (`too_many_spans`), and the ids of recently completed traces kept to count late spans. Nothing
//! leaves without an [`Outcome`]: a trace, a trace not to be judged (no retrieval), or a reject
//! reason.
//!
//! Building a trace: the question and answer come from the root-most chain span (OpenInference
//! CHAIN/AGENT, OpenLLMetry workflow, GenAI invoke_workflow/invoke_agent), else the retrieval query
//! and the last model call; the contexts from the last reranker's output when there is one, else
//! every retriever's documents in start order; model and token usage from the model calls. A trace
//! with no retrieval span is never judged for faithfulness: it has nothing to be faithful to.

use std::collections::{HashMap, HashSet, VecDeque};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::Value;

use super::SpanDrop;
use super::preset::{Extractor, Kind, SpanFacts, Usage, attribute_bytes};
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::AssemblyConfig;
use crate::trace::{Context, DecodeError, Decoder, RejectReason, Trace};

type TraceKey = [u8; 16];

/// What made a trace complete; label values of `ragwatch_traces_assembled_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Its root span arrived.
    Root,
    /// No span arrived for `assembly.idle_timeout_ms`.
    Idle,
    /// The input ended (a file source).
    End,
    /// Dropped unfinished to stay within the assembly's bounds.
    Evicted,
}

impl Trigger {
    /// Every trigger, for pre-registering metric series.
    pub const ALL: [Trigger; 4] = [Trigger::Root, Trigger::Idle, Trigger::End, Trigger::Evicted];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Root => "root",
            Trigger::Idle => "idle",
            Trigger::End => "end",
            Trigger::Evicted => "evicted",
        }
    }
}

/// What became of a completed trace.
#[derive(Debug)]
pub enum Outcome {
    /// A trace to judge.
    Trace(Trace),
    /// A trace not to be judged, with the reason (a label value of
    /// `ragwatch_traces_unjudged_total`): `not_rag`, no retrieval and no
    /// model call (an index being built); `no_retrieval`, no retrieval or reranker span;
    /// `no_context_text`, documents without text (scoring either would score the lack of
    /// contexts); `unreadable_question` / `unreadable_answer`, the chain carried only a serialized
    /// object where the text should be and nothing else in the trace has it (judging the object
    /// would give a confidently wrong score).
    Unjudged(Trace, &'static str),
    /// Not a usable trace.
    Rejected(DecodeError),
}

/// A trace that left the assembly, with the tokens of every message that carried its spans.
#[derive(Debug)]
pub struct Completed<T> {
    /// The trace id, lowercase hex.
    pub trace_id: String,
    /// What became of it.
    pub outcome: Outcome,
    /// Tokens (source positions) of the messages that carried its spans, each once.
    pub tokens: Vec<T>,
    /// Why it completed.
    pub trigger: Trigger,
    /// Spans it held.
    pub spans: usize,
}

/// What one request did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AddStats {
    /// Spans in the request.
    pub spans: usize,
    /// Spans not kept, by [`SpanDrop`] (in `SpanDrop::ALL` order).
    pub dropped: [usize; 3],
    /// Traces the request's token was attached to (each returns it once, in a [`Completed`]).
    pub(crate) attached: usize,
}

impl AddStats {
    /// Spans not kept, all reasons.
    pub(crate) fn dropped_total(&self) -> usize {
        self.dropped.iter().sum()
    }

    fn drop(&mut self, why: SpanDrop) {
        self.dropped[why as usize] += 1;
    }
}

#[derive(Debug)]
struct Pending<T> {
    spans: Vec<SpanFacts>,
    tokens: Vec<T>,
    bytes: usize,
    root: bool,
    overflow: bool,
    resource_stratum: Option<String>,
    /// Resource values of the attributes copied into the metadata, the first resource of each
    /// name.
    resource_attributes: Vec<(usize, Value)>,
    /// The request that last touched it.
    serial: u64,
    /// Matches its newest entry in the activity queue.
    stamp: u64,
}

/// Pending traces and the rules that complete them. `T` is the caller's message token (a Kafka
/// position), carried through untouched.
#[derive(Debug)]
pub struct Assembler<T> {
    extractor: Extractor,
    decoder: Decoder,
    config: AssemblyConfig,
    pending: HashMap<TraceKey, Pending<T>>,
    /// (last activity ms, trace, stamp), oldest first; entries whose stamp moved on are stale.
    activity: VecDeque<(u64, TraceKey, u64)>,
    recent: HashSet<TraceKey>,
    recent_order: VecDeque<TraceKey>,
    bytes: usize,
    serial: u64,
    stamp: u64,
    touched: Vec<TraceKey>,
}

impl<T: Copy + PartialEq> Assembler<T> {
    /// An empty assembly reading spans with `decode.preset` under `decode`'s field limits.
    pub fn new(decode: &DecodeConfig, config: &AssemblyConfig) -> Self {
        Self {
            extractor: Extractor {
                preset: decode.preset,
                stratum_key: config.stratum_attribute.clone(),
                max_field_bytes: decode.max_field_bytes,
                max_docs: decode.max_contexts,
                metadata_attributes: Vec::new(),
            },
            decoder: Decoder::new(decode),
            config: config.clone(),
            pending: HashMap::new(),
            activity: VecDeque::new(),
            recent: HashSet::new(),
            recent_order: VecDeque::new(),
            bytes: 0,
            serial: 0,
            stamp: 0,
            touched: Vec::new(),
        }
    }

    /// Copies the span or resource attributes named in `keys` into each trace's metadata under
    /// their own names: the value of the root-most span that has it, else the resource's; a key the
    /// metadata already has is left as it is. Only strings, integers, doubles and booleans.
    pub fn copying_attributes(mut self, keys: &[String]) -> Self {
        let mut unique: Vec<String> = Vec::new();
        for k in keys {
            if !unique.contains(k) {
                unique.push(k.clone());
            }
        }
        self.extractor.metadata_attributes = unique;
        self
    }

    /// Traces waiting for more spans.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Bytes of span content held.
    #[cfg(test)]
    pub(crate) fn pending_bytes(&self) -> usize {
        self.bytes
    }

    /// Takes the spans of one request. Traces that complete (their root arrived) or are dropped to
    /// stay within bounds are pushed to `out`.
    pub fn add_request(
        &mut self,
        req: ExportTraceServiceRequest,
        token: Option<T>,
        now_ms: u64,
        out: &mut Vec<Completed<T>>,
    ) -> AddStats {
        let mut stats = AddStats::default();
        self.serial += 1;
        self.touched.clear();
        for mut rs in req.resource_spans {
            let resource_attributes = rs
                .resource
                .as_ref()
                .map(|r| self.extractor.copied_attributes(&r.attributes))
                .unwrap_or_default();
            let resource_stratum = rs
                .resource
                .as_mut()
                .and_then(|r| self.extractor.resource_stratum(&mut r.attributes));
            for ss in rs.scope_spans {
                for mut span in ss.spans {
                    stats.spans += 1;
                    let Some(key) = valid_ids(&span) else {
                        stats.drop(SpanDrop::InvalidId);
                        continue;
                    };
                    if self.recent.contains(&key) {
                        stats.drop(SpanDrop::Late);
                        continue;
                    }
                    if !self.pending.contains_key(&key) {
                        self.make_room(1, out);
                        self.pending.insert(
                            key,
                            Pending {
                                spans: Vec::new(),
                                tokens: Vec::new(),
                                bytes: 0,
                                root: false,
                                overflow: false,
                                resource_stratum: None,
                                resource_attributes: Vec::new(),
                                serial: 0,
                                stamp: 0,
                            },
                        );
                    }
                    let Some(p) = self.pending.get_mut(&key) else {
                        continue;
                    };
                    if p.serial != self.serial {
                        // First span of this trace in this request: it is now the most recent.
                        p.serial = self.serial;
                        self.stamp += 1;
                        p.stamp = self.stamp;
                        self.activity.push_back((now_ms, key, self.stamp));
                        self.touched.push(key);
                        if let Some(t) = token
                            && !p.tokens.contains(&t)
                        {
                            p.tokens.push(t);
                            stats.attached += 1;
                        }
                    }
                    // A root over the span limit still completes its (rejected) trace.
                    p.root |= span.parent_span_id.is_empty();
                    if p.spans.len() >= self.config.max_spans_per_trace {
                        p.overflow = true;
                        stats.drop(SpanDrop::TooManySpans);
                        continue;
                    }
                    let facts = self.extractor.extract(&mut span);
                    if p.resource_stratum.is_none() {
                        p.resource_stratum.clone_from(&resource_stratum);
                    }
                    let mut b = facts.bytes();
                    for (i, v) in &resource_attributes {
                        if !p.resource_attributes.iter().any(|(j, _)| j == i) {
                            let one = (*i, v.clone());
                            b += attribute_bytes(std::slice::from_ref(&one));
                            p.resource_attributes.push(one);
                        }
                    }
                    p.bytes += b;
                    self.bytes += b;
                    p.spans.push(facts);
                }
                if self.bytes > self.config.max_pending_bytes {
                    self.make_room(0, out);
                }
            }
        }
        let touched = std::mem::take(&mut self.touched);
        for key in &touched {
            if self.pending.get(key).is_some_and(|p| p.root) {
                self.complete(*key, Trigger::Root, out);
            }
        }
        self.touched = touched;
        self.make_room(0, out);
        stats
    }

    /// Completes the traces idle for `assembly.idle_timeout_ms` at `now_ms`.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Completed<T>>) {
        while let Some(&(at, key, stamp)) = self.activity.front() {
            if at.saturating_add(self.config.idle_timeout_ms) > now_ms {
                break;
            }
            self.activity.pop_front();
            if self.pending.get(&key).is_some_and(|p| p.stamp == stamp) {
                self.complete(key, Trigger::Idle, out);
            }
        }
    }

    /// Completes every pending trace (the input ended).
    pub fn finish(&mut self, out: &mut Vec<Completed<T>>) {
        while let Some((_, key, stamp)) = self.activity.pop_front() {
            if self.pending.get(&key).is_some_and(|p| p.stamp == stamp) {
                self.complete(key, Trigger::End, out);
            }
        }
    }

    /// Removes `token`s matching `gone` from every pending trace (a revoked partition: its
    /// messages are redelivered to their next owner, whose tokens these are no longer).
    pub(crate) fn detach(&mut self, gone: impl Fn(&T) -> bool) {
        for p in self.pending.values_mut() {
            p.tokens.retain(|t| !gone(t));
        }
    }

    /// Drops least recently active traces until `extra` more fit and the bytes are within bounds.
    fn make_room(&mut self, extra: usize, out: &mut Vec<Completed<T>>) {
        while self.pending.len() + extra > self.config.max_pending_traces
            || self.bytes > self.config.max_pending_bytes
        {
            let Some((_, key, stamp)) = self.activity.pop_front() else {
                break;
            };
            if self.pending.get(&key).is_some_and(|p| p.stamp == stamp) {
                self.complete(key, Trigger::Evicted, out);
            }
        }
    }

    fn complete(&mut self, key: TraceKey, trigger: Trigger, out: &mut Vec<Completed<T>>) {
        let Some(p) = self.pending.remove(&key) else {
            return;
        };
        self.bytes -= p.bytes;
        self.recent.insert(key);
        self.recent_order.push_back(key);
        while self.recent_order.len() > self.config.completed_memory {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
        let trace_id = hex(&key);
        let spans = p.spans.len();
        let outcome = if trigger == Trigger::Evicted {
            Outcome::Rejected(DecodeError::new(
                RejectReason::AssemblyFull,
                format!(
                    "dropped unfinished with {spans} spans: assembly holds {} traces, {} bytes",
                    self.pending.len() + 1,
                    self.bytes + p.bytes
                ),
            ))
        } else if p.overflow {
            Outcome::Rejected(DecodeError::new(
                RejectReason::TooManySpans,
                format!("more than {} spans", self.config.max_spans_per_trace),
            ))
        } else {
            let resource = Resource {
                stratum: p.resource_stratum,
                attributes: p.resource_attributes,
                keys: &self.extractor.metadata_attributes,
            };
            build(&trace_id, p.spans, resource, &self.decoder)
        };
        out.push(Completed {
            trace_id,
            outcome,
            tokens: p.tokens,
            trigger,
            spans,
        });
    }
}

/// The trace id of a span with valid ids (16-byte trace id, 8-byte span id, neither all zero;
/// a parent id empty or 8 bytes).
fn valid_ids(span: &opentelemetry_proto::tonic::trace::v1::Span) -> Option<TraceKey> {
    let key = TraceKey::try_from(span.trace_id.as_slice()).ok()?;
    let ok = key != [0; 16]
        && span.span_id.len() == 8
        && span.span_id.iter().any(|&b| b != 0)
        && (span.parent_span_id.is_empty() || span.parent_span_id.len() == 8);
    ok.then_some(key)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Depth of every span below its top-most known ancestor, or `None` when parent ids form a cycle.
fn depths(spans: &[SpanFacts]) -> Option<Vec<u32>> {
    const NEW: u8 = 0;
    const VISITING: u8 = 1;
    const DONE: u8 = 2;
    let index: HashMap<u64, usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id, i))
        .collect();
    let parent = |i: usize| match spans[i].parent_id {
        0 => None,
        p => index.get(&p).copied(),
    };
    let mut state = vec![NEW; spans.len()];
    let mut depth = vec![0u32; spans.len()];
    let mut path = Vec::new();
    for start in 0..spans.len() {
        path.clear();
        let mut cur = start;
        let base = loop {
            match state[cur] {
                DONE => break depth[cur] + 1,
                VISITING => return None,
                _ => {}
            }
            state[cur] = VISITING;
            path.push(cur);
            match parent(cur) {
                Some(p) => cur = p,
                None => break 0,
            }
        };
        for (k, &i) in path.iter().rev().enumerate() {
            depth[i] = base + k as u32;
            state[i] = DONE;
        }
    }
    Some(depth)
}

/// What a trace takes from the resources its spans came with.
struct Resource<'a> {
    /// The stratum attribute.
    stratum: Option<String>,
    /// Values of the attributes copied into the metadata.
    attributes: Vec<(usize, Value)>,
    /// The names of the attributes copied into the metadata.
    keys: &'a [String],
}

fn build(
    trace_id: &str,
    mut spans: Vec<SpanFacts>,
    resource: Resource,
    decoder: &Decoder,
) -> Outcome {
    let reject = |reason, detail: String| Outcome::Rejected(DecodeError::new(reason, detail));
    let Some(depth) = depths(&spans) else {
        return reject(
            RejectReason::SpanCycle,
            format!("parent ids of trace {trace_id} form a cycle"),
        );
    };
    let rank = |i: usize| (depth[i], spans[i].start_ns);
    let top = |pred: &dyn Fn(&SpanFacts) -> bool| {
        (0..spans.len())
            .filter(|&i| pred(&spans[i]))
            .min_by_key(|&i| rank(i))
    };
    let last_ending = |pred: &dyn Fn(&SpanFacts) -> bool| {
        (0..spans.len())
            .filter(|&i| pred(&spans[i]))
            .max_by_key(|&i| spans[i].end_ns)
    };
    if spans
        .iter()
        .any(|s| s.too_long && matches!(s.kind, Kind::Chain | Kind::Retriever | Kind::Reranker))
    {
        return reject(
            RejectReason::FieldTooLong,
            format!("a text of trace {trace_id} is longer than decode.max_field_bytes"),
        );
    }
    if spans.iter().any(|s| s.too_many_docs) {
        return reject(
            RejectReason::TooManyContexts,
            format!("a span of trace {trace_id} has more than decode.max_contexts documents"),
        );
    }

    // The root-most chain with an input decides the question, read or not: a deeper chain's
    // input (a text splitter's, an embedding's) is not the question.
    let chain_in = top(&|s| s.kind == Kind::Chain && (s.input.is_some() || s.input_unreadable));
    let has_output = |s: &SpanFacts| s.output.is_some() || s.output_unreadable;
    let chain_out = match chain_in {
        Some(i) if has_output(&spans[i]) => Some(i),
        _ => top(&|s| s.kind == Kind::Chain && has_output(s)),
    };
    let question_unreadable = chain_in.is_some_and(|i| spans[i].input_unreadable);
    let answer_unreadable = chain_out.is_some_and(|i| spans[i].output_unreadable);
    let query_span = top(&|s| s.query.is_some());
    let llm_user = last_ending(&|s| s.kind == Kind::Llm && s.user.is_some());
    let llm_out = last_ending(&|s| s.kind == Kind::Llm && s.completion.is_some());
    let model_span = last_ending(&|s| s.kind == Kind::Llm && s.model.is_some());
    let stratum_span = top(&|s| s.stratum.is_some());
    let root_end = top(&|_| true).map(|i| spans[i].end_ns);
    let has_retrieval = spans
        .iter()
        .any(|s| matches!(s.kind, Kind::Retriever | Kind::Reranker));
    let has_llm = spans.iter().any(|s| s.kind == Kind::Llm);
    let reranker = last_ending(&|s| s.kind == Kind::Reranker && !s.docs.is_empty());

    let mut metadata = merged_metadata(&mut spans, &depth, model_span);
    copy_attributes(
        &mut metadata,
        &mut spans,
        &depth,
        resource.attributes,
        resource.keys,
    );

    let llm_too_long = spans.iter().any(|s| s.too_long && s.kind == Kind::Llm);
    let (chain_out_span, llm_out_span) = (
        chain_out.map(|i| spans[i].span_id),
        llm_out.map(|i| spans[i].span_id),
    );
    let mut take = |i: Option<usize>, f: fn(&mut SpanFacts) -> &mut Option<String>| {
        i.and_then(|i| f(&mut spans[i]).take())
    };
    // A chain whose input was only a serialized object: the retrieval query, never the prompt
    // sent to the model (it holds the contexts too).
    let question = take(chain_in, |s| &mut s.input)
        .or_else(|| take(query_span, |s| &mut s.query))
        .or_else(|| {
            if question_unreadable {
                None
            } else {
                take(llm_user, |s| &mut s.user)
            }
        });
    // The span the answer is read from is the one a verdict is about (verdict export annotates it).
    let (answer, span_id) = match take(chain_out, |s| &mut s.output) {
        Some(a) => (Some(a), chain_out_span),
        None => (take(llm_out, |s| &mut s.completion), llm_out_span),
    };
    let span_id = span_id.filter(|_| answer.is_some());
    let stratum = take(stratum_span, |s| &mut s.stratum).or(resource.stratum);

    let (contexts, any_docs) = contexts_of(&mut spans, reranker);

    let unjudged = if !has_retrieval && !has_llm {
        Some("not_rag")
    } else if !has_retrieval {
        Some("no_retrieval")
    } else if any_docs && contexts.is_empty() {
        Some("no_context_text")
    } else if question.is_none() && question_unreadable {
        Some("unreadable_question")
    } else if answer.is_none() && answer_unreadable {
        Some("unreadable_answer")
    } else {
        None
    };
    let missing = |what: &str| {
        let reason = if llm_too_long {
            RejectReason::FieldTooLong
        } else {
            RejectReason::MissingField
        };
        reject(
            reason,
            format!("no {what} in the spans of trace {trace_id}"),
        )
    };
    let trace = Trace {
        trace_id: trace_id.to_owned(),
        timestamp_ms: root_end
            .filter(|&ns| ns > 0)
            .and_then(|ns| i64::try_from(ns / 1_000_000).ok()),
        query: question.clone().unwrap_or_default(),
        contexts,
        answer: answer.clone().unwrap_or_default(),
        stratum,
        metadata: Value::Object(metadata).into(),
        label_faithful: None,
        gold: None,
        span_id,
    };
    if let Some(why) = unjudged {
        return Outcome::Unjudged(trace, why);
    }
    if question.is_none() {
        return missing("question (chain input, retrieval query or user message)");
    }
    if answer.is_none() {
        return missing("answer (chain output or model completion)");
    }
    match decoder.check(&trace) {
        Ok(()) => Outcome::Trace(trace),
        Err(e) => Outcome::Rejected(e),
    }
}

/// The trace's metadata: each span's own, the root-most first to set a key; the model of the
/// last-ending LLM span (`model_span`); the LLM spans' token usage summed.
fn merged_metadata(
    spans: &mut [SpanFacts],
    depth: &[u32],
    model_span: Option<usize>,
) -> serde_json::Map<String, Value> {
    let mut usage = Usage::default();
    for s in spans.iter().filter(|s| s.kind == Kind::Llm) {
        let add = |a: &mut Option<i64>, b: Option<i64>| {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0).saturating_add(b));
            }
        };
        add(&mut usage.prompt, s.usage.prompt);
        add(&mut usage.completion, s.usage.completion);
        add(&mut usage.total, s.usage.total);
    }
    let mut metadata = serde_json::Map::new();
    let mut with_metadata: Vec<usize> = (0..spans.len())
        .filter(|&i| spans[i].metadata.is_some())
        .collect();
    with_metadata.sort_by_key(|&i| (depth[i], spans[i].start_ns));
    for i in with_metadata {
        for (k, v) in spans[i].metadata.take().into_iter().flatten() {
            metadata.entry(k).or_insert(v);
        }
    }
    if let Some(i) = model_span {
        metadata.insert("model".into(), Value::from(spans[i].model.take()));
    }
    if usage != Usage::default() {
        let total = usage
            .total
            .or_else(|| Some(usage.prompt.unwrap_or(0) + usage.completion.unwrap_or(0)));
        metadata.insert(
            "usage".into(),
            serde_json::json!({
                "prompt_tokens": usage.prompt,
                "completion_tokens": usage.completion,
                "total_tokens": total,
            }),
        );
    }
    metadata
}

/// Sets each of `keys` the metadata does not have yet to the value of the root-most span that has
/// that attribute, else to the resource's value.
fn copy_attributes(
    metadata: &mut serde_json::Map<String, Value>,
    spans: &mut [SpanFacts],
    depth: &[u32],
    mut resource: Vec<(usize, Value)>,
    keys: &[String],
) {
    for (i, key) in keys.iter().enumerate() {
        if metadata.contains_key(key) {
            continue;
        }
        let from_span = (0..spans.len())
            .filter(|&s| spans[s].attributes.iter().any(|(j, _)| *j == i))
            .min_by_key(|&s| (depth[s], spans[s].start_ns))
            .and_then(|s| {
                let at = spans[s].attributes.iter().position(|(j, _)| *j == i)?;
                Some(spans[s].attributes.swap_remove(at).1)
            });
        let value = from_span.or_else(|| {
            let at = resource.iter().position(|(j, _)| *j == i)?;
            Some(resource.swap_remove(at).1)
        });
        if let Some(v) = value {
            metadata.insert(key.clone(), v);
        }
    }
}

/// The contexts: the last-ending reranker's documents when there is one, else every retriever's in
/// start order, a document id seen before skipped; documents without text are left out. Also
/// whether there were any documents at all.
fn contexts_of(spans: &mut [SpanFacts], reranker: Option<usize>) -> (Vec<Context>, bool) {
    let mut docs = Vec::new();
    if let Some(i) = reranker {
        docs = std::mem::take(&mut spans[i].docs);
    } else {
        let mut retrievers: Vec<usize> = (0..spans.len())
            .filter(|&i| spans[i].kind == Kind::Retriever)
            .collect();
        retrievers.sort_by_key(|&i| spans[i].start_ns);
        for i in retrievers {
            for d in std::mem::take(&mut spans[i].docs) {
                let seen = d.id.is_some() && docs.iter().any(|o: &super::preset::Doc| o.id == d.id);
                if !seen {
                    docs.push(d);
                }
            }
        }
    }
    let any_docs = !docs.is_empty();
    let contexts: Vec<Context> = docs
        .into_iter()
        .filter_map(|d| {
            Some(Context {
                text: d.text?,
                id: d.id,
                score: d.score,
            })
        })
        .collect();
    (contexts, any_docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::otlp::build::{request, str_attr as s};
    use crate::trace::otlp::config::Preset;
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::trace::v1::Span;

    /// A span with times: started in id order, ended in reverse id order.
    fn span(trace: u8, id: u8, parent: u8, attributes: Vec<KeyValue>) -> Span {
        Span {
            start_time_unix_nano: u64::from(id) * 1000,
            end_time_unix_nano: 1_700_000_000_000_000_000 - u64::from(id),
            ..crate::trace::otlp::build::span(&[trace; 16], id.into(), parent.into(), attributes)
        }
    }

    /// An OpenInference RAG trace: chain root 1, retriever 2, LLM 3.
    fn rag(trace: u8) -> Vec<Span> {
        vec![
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
                    s("retrieval.documents.0.document.id", "d0"),
                ],
            ),
            span(
                trace,
                3,
                1,
                vec![
                    s("openinference.span.kind", "LLM"),
                    s("llm.model_name", "gpt-x"),
                    s("llm.output_messages.0.message.content", "Ann wrote it."),
                ],
            ),
            span(
                trace,
                1,
                0,
                vec![
                    s("openinference.span.kind", "CHAIN"),
                    s("input.value", "Who wrote it?"),
                    s("output.value", "Ann wrote it [d0]."),
                    s("ragwatch.stratum", "tail"),
                ],
            ),
        ]
    }

    fn assembler(config: AssemblyConfig) -> Assembler<u32> {
        let decode = DecodeConfig {
            preset: Preset::OpenInference,
            ..DecodeConfig::default()
        };
        Assembler::new(&decode, &config)
    }

    fn traces(out: &[Completed<u32>]) -> Vec<&Trace> {
        out.iter()
            .filter_map(|c| match &c.outcome {
                Outcome::Trace(t) => Some(t),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_trace_split_across_requests_completes_at_its_root() {
        let mut a = assembler(AssemblyConfig::default());
        let mut out = Vec::new();
        let mut spans = rag(7);
        let root = spans.pop().unwrap();
        let st = a.add_request(request(spans), Some(1), 0, &mut out);
        assert_eq!((st.spans, st.attached), (2, 1));
        assert!(out.is_empty());
        assert_eq!(a.pending(), 1);
        let st = a.add_request(request(vec![root]), Some(2), 10, &mut out);
        assert_eq!(st.attached, 1);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tokens, vec![1, 2]);
        assert_eq!(out[0].trigger, Trigger::Root);
        let t = traces(&out)[0];
        assert_eq!(t.trace_id, "07".repeat(16));
        assert_eq!(t.query, "Who wrote it?");
        assert_eq!(t.answer, "Ann wrote it [d0].");
        assert_eq!(t.contexts[0].id.as_deref(), Some("d0"));
        assert_eq!(t.stratum.as_deref(), Some("tail"));
        assert_eq!(
            t.metadata.field::<String>("model").as_deref(),
            Some("gpt-x")
        );
        assert_eq!(a.pending(), 0);
        assert_eq!(a.pending_bytes(), 0);
        // A span of the finished trace arriving later is counted as late.
        let st = a.add_request(request(vec![span(7, 9, 1, vec![])]), Some(3), 20, &mut out);
        assert_eq!(st.dropped[SpanDrop::Late as usize], 1);
        assert_eq!(st.attached, 0);
    }

    #[test]
    fn several_traces_in_one_request_and_idle_completion() {
        let mut a = assembler(AssemblyConfig {
            idle_timeout_ms: 100,
            ..AssemblyConfig::default()
        });
        let mut out = Vec::new();
        let mut spans = rag(1);
        spans.extend(rag(2));
        let mut rootless = rag(3);
        rootless.pop();
        spans.extend(rootless);
        let st = a.add_request(request(spans), Some(5), 0, &mut out);
        assert_eq!(st.attached, 3);
        assert_eq!(traces(&out).len(), 2);
        a.expire(99, &mut out);
        assert_eq!(out.len(), 2);
        a.expire(100, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[2].trigger, Trigger::Idle);
        // Without its chain span, the question falls back to nothing: a reason, not a guess.
        match &out[2].outcome {
            Outcome::Rejected(e) => assert_eq!(e.reason, RejectReason::MissingField),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn no_retrieval_is_not_judged() {
        let mut a = assembler(AssemblyConfig::default());
        let mut out = Vec::new();
        let spans: Vec<Span> = rag(4).into_iter().skip(1).collect();
        a.add_request(request(spans), None, 0, &mut out);
        assert!(matches!(
            &out[0].outcome,
            Outcome::Unjudged(_, "no_retrieval")
        ));
    }

    #[test]
    fn cycles_bounds_and_bad_ids_are_reasons() {
        let mut a = assembler(AssemblyConfig {
            max_pending_traces: 2,
            max_spans_per_trace: 3,
            idle_timeout_ms: 10,
            ..AssemblyConfig::default()
        });
        let mut out = Vec::new();
        // A cycle (1 -> 2 -> 1) has no root: it completes idle and is rejected.
        a.add_request(
            request(vec![span(1, 1, 2, vec![]), span(1, 2, 1, vec![])]),
            Some(1),
            0,
            &mut out,
        );
        a.expire(10, &mut out);
        match &out[0].outcome {
            Outcome::Rejected(e) => assert_eq!(e.reason, RejectReason::SpanCycle),
            o => panic!("{o:?}"),
        }
        // A self-parented span is a cycle too.
        a.add_request(request(vec![span(2, 3, 3, vec![])]), None, 20, &mut out);
        a.expire(30, &mut out);
        assert!(
            matches!(&out[1].outcome, Outcome::Rejected(e) if e.reason == RejectReason::SpanCycle)
        );
        // Too many spans in a trace.
        let many = (1..=5).map(|i| span(3, i + 1, 1, vec![])).collect();
        let st = a.add_request(request(many), None, 40, &mut out);
        assert_eq!(st.dropped[SpanDrop::TooManySpans as usize], 2);
        a.add_request(request(vec![span(3, 1, 0, vec![])]), None, 41, &mut out);
        assert!(
            matches!(&out[2].outcome, Outcome::Rejected(e) if e.reason == RejectReason::TooManySpans)
        );
        // Three traces in a two-trace assembly: the oldest is dropped with a reason.
        a.add_request(
            request(vec![
                span(4, 2, 1, vec![]),
                span(5, 2, 1, vec![]),
                span(6, 2, 1, vec![]),
            ]),
            Some(9),
            50,
            &mut out,
        );
        assert!(
            matches!(&out[3].outcome, Outcome::Rejected(e) if e.reason == RejectReason::AssemblyFull)
        );
        assert_eq!(out[3].tokens, vec![9]);
        assert_eq!(a.pending(), 2);
        // Invalid ids.
        let mut bad = span(0, 1, 0, vec![]);
        bad.trace_id = vec![0; 16];
        let mut short = span(8, 1, 0, vec![]);
        short.span_id = vec![1, 2];
        let st = a.add_request(request(vec![bad, short]), None, 60, &mut out);
        assert_eq!(st.dropped[SpanDrop::InvalidId as usize], 2);
        a.finish(&mut out);
        assert_eq!(a.pending(), 0);
        assert_eq!(a.pending_bytes(), 0);
    }

    #[test]
    fn reranker_output_replaces_retrieved_documents() {
        let mut a = assembler(AssemblyConfig::default());
        let mut out = Vec::new();
        let mut spans = rag(9);
        spans.insert(
            1,
            span(
                9,
                4,
                1,
                vec![
                    s("openinference.span.kind", "RERANKER"),
                    s("reranker.output_documents.0.document.content", "Reranked."),
                    s("reranker.output_documents.0.document.id", "r0"),
                ],
            ),
        );
        a.add_request(request(spans), None, 0, &mut out);
        let t = traces(&out)[0];
        assert_eq!(t.contexts.len(), 1);
        assert_eq!(t.contexts[0].id.as_deref(), Some("r0"));
    }

    #[test]
    fn named_attributes_are_copied_into_the_metadata_root_most_span_first_then_resource() {
        use crate::trace::otlp::build::attr;
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        use opentelemetry_proto::tonic::resource::v1::Resource;
        let keys: Vec<String> = [
            "service.version",
            "gen_ai.request.model",
            "deploy.weight",
            "deploy.canary",
            "deploy.share",
            "deploy.labels",
            "release",
            "ragwatch.stratum",
            "absent",
        ]
        .map(String::from)
        .to_vec();
        let spans = || {
            let mut spans = rag(5);
            spans[1].attributes.extend([
                s("gen_ai.request.model", "m-deep"),
                attr("deploy.weight", V::IntValue(7)),
            ]);
            spans[2].attributes.extend([
                s("gen_ai.request.model", "m-root"),
                s("metadata", r#"{"release": "from-metadata"}"#),
            ]);
            spans
        };
        let req = || {
            let mut r = request(spans());
            r.resource_spans[0].resource = Some(Resource {
                attributes: vec![
                    s("service.version", "v1.5.0"),
                    s("gen_ai.request.model", "m-resource"),
                    attr("deploy.canary", V::BoolValue(true)),
                    attr("deploy.share", V::DoubleValue(0.25)),
                    attr("deploy.labels", V::ArrayValue(Default::default())),
                    s("release", "from-resource"),
                ],
                ..Default::default()
            });
            r
        };
        let mut a = assembler(AssemblyConfig::default()).copying_attributes(&keys);
        let mut out = Vec::new();
        a.add_request(req(), None, 0, &mut out);
        let t = traces(&out)[0];
        let m = t.metadata.value();
        assert_eq!(m["service.version"], "v1.5.0", "{m}");
        assert_eq!(
            m["gen_ai.request.model"], "m-root",
            "the root-most span wins"
        );
        assert_eq!(m["deploy.weight"], 7);
        assert_eq!(m["deploy.canary"], true);
        assert_eq!(m["deploy.share"], 0.25);
        assert!(m.get("deploy.labels").is_none(), "arrays are not copied");
        assert_eq!(m["release"], "from-metadata", "a key already set is kept");
        assert_eq!(m["ragwatch.stratum"], "tail");
        assert_eq!(
            t.stratum.as_deref(),
            Some("tail"),
            "the stratum still reads it"
        );
        assert!(m.get("absent").is_none());
        assert_eq!(m["model"], "gpt-x");
        assert_eq!(a.pending_bytes(), 0);

        // Nothing is copied unless named.
        let mut plain = assembler(AssemblyConfig::default());
        let mut out = Vec::new();
        plain.add_request(req(), None, 0, &mut out);
        let m = traces(&out)[0].metadata.value().clone();
        assert!(m.get("service.version").is_none() && m.get("gen_ai.request.model").is_none());
    }

    #[test]
    fn a_resource_attribute_reaches_a_trace_split_across_requests() {
        use opentelemetry_proto::tonic::resource::v1::Resource;
        let keys = vec!["service.version".to_owned()];
        let mut a = assembler(AssemblyConfig::default()).copying_attributes(&keys);
        let mut out = Vec::new();
        let mut spans = rag(6);
        let root = spans.pop().unwrap();
        a.add_request(request(spans), Some(1), 0, &mut out);
        let mut last = request(vec![root]);
        last.resource_spans[0].resource = Some(Resource {
            attributes: vec![s("service.version", "v2")],
            ..Default::default()
        });
        a.add_request(last, Some(2), 1, &mut out);
        let t = traces(&out)[0];
        assert_eq!(
            t.metadata.field::<String>("service.version").as_deref(),
            Some("v2")
        );
        assert_eq!(a.pending_bytes(), 0);
    }

    #[test]
    fn deep_chains_do_not_recurse() {
        let n = 50_000u32;
        let spans: Vec<SpanFacts> = (1..=u64::from(n))
            .map(|i| SpanFacts {
                span_id: i,
                parent_id: i - 1,
                ..SpanFacts::default()
            })
            .collect();
        let d = depths(&spans).unwrap();
        assert_eq!(d[n as usize - 1], n - 1);
    }
}
