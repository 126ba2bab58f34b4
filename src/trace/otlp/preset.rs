//! Presets: which attributes of a span say what RAG step it is and what it carries. Each span is
//! reduced once, as it arrives, to a [`SpanFacts`]: its role (chain, retriever, reranker, LLM), the
//! question and answer candidates, documents with id and score, model and token usage. Strings are
//! moved out of the decoded span, not copied, and nothing else of the span is kept.
//!
//! - OpenInference: `openinference.span.kind`; `input.value` / `output.value` (with their mime
//!   types); `retrieval.documents.N.document.{id,content,score}`;
//!   `reranker.output_documents.N.document.*`; `llm.input_messages.N.message.{role,content}`,
//!   `llm.output_messages.N.message.content`, `llm.model_name`, `llm.token_count.*`; `metadata`.
//! - OpenLLMetry: `traceloop.span.kind` (workflow, agent, task), `traceloop.entity.{input,output}`
//!   (JSON); model calls as `gen_ai.prompt.N.{role,content}` and `gen_ai.completion.N.content`
//!   (older releases) or `gen_ai.input.messages` / `gen_ai.output.messages` (recent ones),
//!   `gen_ai.{request,response}.model`, `gen_ai.usage.*`; vector-store results as span events
//!   `db.query.result` with `db.query.result.{id,score,document}`.
//! - GenAI: `gen_ai.operation.name` (invoke_workflow / invoke_agent, chat, retrieval);
//!   `gen_ai.input.messages` / `gen_ai.output.messages` (role and text parts, a JSON string or
//!   structured); `gen_ai.retrieval.query.text`; `gen_ai.retrieval.documents` (`id`, `score`, and
//!   the text as `content` or `text`); `gen_ai.usage.{input,output}_tokens`.

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value as V};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

use crate::trace::otlp::config::Preset;

/// The RAG role of a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Kind {
    /// Anything else (HTTP, tools, embeddings...): kept for the tree only.
    #[default]
    Other,
    /// The request as a whole, or a step of it, with the question in and the answer out.
    Chain,
    /// A retrieval: documents with id, text and score.
    Retriever,
    /// A reranking: its output documents replace the retrieved ones.
    Reranker,
    /// A model call.
    Llm,
}

/// One document of a retriever or reranker span.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Doc {
    /// Its index in the span (the rank).
    pub index: u64,
    /// Document id.
    pub id: Option<String>,
    /// Its text.
    pub text: Option<String>,
    /// The retriever's or reranker's score.
    pub score: Option<f64>,
}

/// Token counts of a model call.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Usage {
    pub prompt: Option<i64>,
    pub completion: Option<i64>,
    pub total: Option<i64>,
}

/// What a span contributes to its trace.
#[derive(Debug, Default)]
pub(super) struct SpanFacts {
    pub span_id: u64,
    /// 0 for a root span.
    pub parent_id: u64,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub kind: Kind,
    /// Question candidate (a chain's input).
    pub input: Option<String>,
    /// Answer candidate (a chain's output).
    pub output: Option<String>,
    /// A retrieval or rerank query.
    pub query: Option<String>,
    /// The last user message of a model call.
    pub user: Option<String>,
    /// The first completion of a model call.
    pub completion: Option<String>,
    pub docs: Vec<Doc>,
    pub model: Option<String>,
    pub usage: Usage,
    pub stratum: Option<String>,
    /// OpenInference `metadata` (a JSON object), merged into the trace's metadata.
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// The span's values of the attributes copied into the trace's metadata: (index into
    /// [`Extractor::metadata_attributes`], value).
    pub attributes: Vec<(usize, Value)>,
    /// The chain's input was there but only as a serialized object with no question in it.
    pub(crate) input_unreadable: bool,
    /// The chain's output was there but only as a serialized object with no answer in it.
    pub(crate) output_unreadable: bool,
    /// A kept text was longer than `decode.max_field_bytes` (and was not kept).
    pub(crate) too_long: bool,
    /// More documents than `decode.max_contexts`.
    pub(crate) too_many_docs: bool,
}

impl SpanFacts {
    /// Bytes held for this span, for the assembly's byte bound.
    pub fn bytes(&self) -> usize {
        let s = |o: &Option<String>| o.as_ref().map_or(0, String::len);
        96 + s(&self.input)
            + s(&self.output)
            + s(&self.query)
            + s(&self.user)
            + s(&self.completion)
            + s(&self.model)
            + s(&self.stratum)
            + self
                .docs
                .iter()
                .map(|d| 48 + s(&d.id) + s(&d.text))
                .sum::<usize>()
            + self.metadata.as_ref().map_or(0, |m| 64 * m.len())
            + attribute_bytes(&self.attributes)
    }
}

/// Reduces spans to facts under one preset.
#[derive(Debug, Clone)]
pub(super) struct Extractor {
    pub preset: Preset,
    pub(crate) stratum_key: String,
    pub(crate) max_field_bytes: usize,
    pub(crate) max_docs: usize,
    /// Span or resource attributes copied into the trace's metadata under their own names
    /// (`service.version`, `gen_ai.request.model`): what `[variants].attributes` reads.
    pub(crate) metadata_attributes: Vec<String>,
}

/// Messages of a model call seen so far: (index, role, text).
type Messages = Vec<(u64, Option<String>, Option<String>)>;

impl Extractor {
    /// The facts of `span`, whose strings are moved out.
    pub fn extract(&self, span: &mut Span) -> SpanFacts {
        let mut f = SpanFacts {
            span_id: id_u64(&span.span_id),
            parent_id: id_u64(&span.parent_span_id),
            start_ns: span.start_time_unix_nano,
            end_ns: span.end_time_unix_nano,
            ..SpanFacts::default()
        };
        // Copied before the preset moves strings out of the attributes.
        f.attributes = self.copied_attributes(&span.attributes);
        match self.preset {
            Preset::OpenInference => self.openinference(span, &mut f),
            Preset::OpenLlmetry => self.openllmetry(span, &mut f),
            Preset::GenAi => self.gen_ai(span, &mut f),
        }
        self.bound(&mut f);
        f
    }

    /// The values of the attributes in `attributes` named by `metadata_attributes` (the first of
    /// each name; strings, integers, doubles and booleans, as JSON), cloned: the preset still reads
    /// them. A string longer than `decode.max_field_bytes` is not copied.
    pub(crate) fn copied_attributes(&self, attributes: &[KeyValue]) -> Vec<(usize, Value)> {
        let mut out: Vec<(usize, Value)> = Vec::new();
        if self.metadata_attributes.is_empty() {
            return out;
        }
        for kv in attributes {
            let Some(i) = self.metadata_attributes.iter().position(|k| *k == kv.key) else {
                continue;
            };
            if out.iter().any(|(j, _)| *j == i) {
                continue;
            }
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(V::StringValue(s)) if s.len() <= self.max_field_bytes => {
                    Value::String(s.clone())
                }
                Some(V::IntValue(n)) => Value::from(*n),
                Some(V::DoubleValue(d)) => match serde_json::Number::from_f64(*d) {
                    Some(n) => Value::Number(n),
                    None => continue,
                },
                Some(V::BoolValue(b)) => Value::Bool(*b),
                _ => continue,
            };
            out.push((i, value));
        }
        out
    }

    /// Reads a resource attribute list for the stratum attribute.
    pub(crate) fn resource_stratum(&self, attributes: &mut [KeyValue]) -> Option<String> {
        attributes
            .iter_mut()
            .find(|kv| kv.key == self.stratum_key)
            .and_then(|kv| take_string(&mut kv.value))
    }

    fn openinference(&self, span: &mut Span, f: &mut SpanFacts) {
        let (mut input, mut output) = (None, None);
        let (mut input_json, mut output_json) = (None, None);
        let (mut retrieved, mut reranked) = (Vec::new(), Vec::new());
        let (mut inputs, mut outputs): (Messages, Messages) = (Vec::new(), Vec::new());
        for kv in span.attributes.iter_mut() {
            let v = &mut kv.value;
            match kv.key.as_str() {
                "openinference.span.kind" => {
                    f.kind = match str_of(v).map(str::to_ascii_uppercase).as_deref() {
                        Some("CHAIN" | "AGENT") => Kind::Chain,
                        Some("RETRIEVER") => Kind::Retriever,
                        Some("RERANKER") => Kind::Reranker,
                        Some("LLM") => Kind::Llm,
                        _ => Kind::Other,
                    }
                }
                "input.value" => input = take_string(v),
                "output.value" => output = take_string(v),
                "input.mime_type" => input_json = str_of(v).map(|m| m.contains("json")),
                "output.mime_type" => output_json = str_of(v).map(|m| m.contains("json")),
                "llm.model_name" => f.model = take_string(v),
                "llm.token_count.prompt" => f.usage.prompt = int_of(v),
                "llm.token_count.completion" => f.usage.completion = int_of(v),
                "llm.token_count.total" => f.usage.total = int_of(v),
                "reranker.query" => f.query = take_string(v),
                "metadata" => f.metadata = take_string(v).and_then(json_object),
                key if key == self.stratum_key => f.stratum = take_string(v),
                key => {
                    if let Some((i, rest)) = indexed(key, "retrieval.documents.") {
                        self.doc_field(&mut retrieved, i, rest, v);
                    } else if let Some((i, rest)) = indexed(key, "reranker.output_documents.") {
                        self.doc_field(&mut reranked, i, rest, v);
                    } else if let Some((i, rest)) = indexed(key, "llm.input_messages.") {
                        message_field(&mut inputs, i, rest, "message.role", "message.content", v);
                    } else if let Some((i, rest)) = indexed(key, "llm.output_messages.") {
                        message_field(&mut outputs, i, rest, "message.role", "message.content", v);
                    }
                }
            }
        }
        match f.kind {
            Kind::Chain => {
                set_text(
                    &mut f.input,
                    &mut f.input_unreadable,
                    input,
                    input_json,
                    Role::Question,
                );
                set_text(
                    &mut f.output,
                    &mut f.output_unreadable,
                    output,
                    output_json,
                    Role::Answer,
                );
            }
            Kind::Retriever => {
                f.query = input.and_then(|s| text_of(s, input_json, Role::Question));
                f.docs = retrieved;
            }
            Kind::Reranker => f.docs = reranked,
            Kind::Llm => {
                f.user = last_user(inputs);
                f.completion = first_text(outputs);
            }
            Kind::Other => {}
        }
    }

    fn openllmetry(&self, span: &mut Span, f: &mut SpanFacts) {
        let (mut input, mut output) = (None, None);
        let (mut chain, mut llm, mut retrieval) = (false, false, false);
        // A retriever task: documents in its entity output (LangChain's `vector_db_retrieve` span,
        // LlamaIndex's `...Retriever.task`).
        let mut vector_task =
            span.name.starts_with("vector_db_retrieve") || span.name.contains("Retriever.");
        let (mut request_model, mut response_model) = (None, None);
        let (mut prompts, mut completions): (Messages, Messages) = (Vec::new(), Vec::new());
        let (mut inputs, mut outputs) = (None, None);
        for kv in span.attributes.iter_mut() {
            let v = &mut kv.value;
            match kv.key.as_str() {
                "traceloop.span.kind" => {
                    chain = matches!(str_of(v), Some("workflow" | "agent" | "task"))
                }
                "traceloop.entity.input" => input = take_string(v),
                "traceloop.entity.output" => output = take_string(v),
                "llm.request.type" => llm = true,
                // Recent OpenLLMetry writes model calls in the GenAI conventions.
                "gen_ai.operation.name" => match str_of(v) {
                    Some("chat" | "text_completion" | "generate_content") => llm = true,
                    // A LangChain retriever (`vector_db_retrieve VectorStoreRetriever`).
                    Some("vector_db_retrieve") => vector_task = true,
                    _ => {}
                },
                "gen_ai.input.messages" => inputs = structured(v),
                "gen_ai.output.messages" => outputs = structured(v),
                "gen_ai.request.model" => request_model = take_string(v),
                "gen_ai.response.model" => response_model = take_string(v),
                "gen_ai.usage.prompt_tokens" | "gen_ai.usage.input_tokens" => {
                    f.usage.prompt = int_of(v)
                }
                "gen_ai.usage.completion_tokens" | "gen_ai.usage.output_tokens" => {
                    f.usage.completion = int_of(v)
                }
                "llm.usage.total_tokens" | "gen_ai.usage.total_tokens" => f.usage.total = int_of(v),
                "db.vector.query.top_k" => retrieval = true,
                key if key == self.stratum_key => f.stratum = take_string(v),
                key => {
                    if let Some((i, rest)) = indexed(key, "gen_ai.prompt.") {
                        llm = true;
                        message_field(&mut prompts, i, rest, "role", "content", v);
                    } else if let Some((i, rest)) = indexed(key, "gen_ai.completion.") {
                        llm = true;
                        message_field(&mut completions, i, rest, "role", "content", v);
                    }
                }
            }
        }
        let mut docs = Vec::new();
        for (rank, event) in span
            .events
            .iter_mut()
            .filter(|e| e.name == "db.query.result")
            .enumerate()
        {
            retrieval = true;
            for kv in event.attributes.iter_mut() {
                let rest = match kv.key.as_str() {
                    "db.query.result.id" => "id",
                    "db.query.result.document" => "content",
                    "db.query.result.score" => "score",
                    _ => continue,
                };
                self.doc_field(&mut docs, rank as u64, rest, &mut kv.value);
            }
        }
        f.model = response_model.or(request_model);
        let entity_docs = if chain && !retrieval && !llm {
            output
                .as_deref()
                .and_then(|o| self.entity_documents(o, vector_task))
        } else {
            None
        };
        if retrieval {
            f.kind = Kind::Retriever;
            f.docs = docs;
        } else if let Some(docs) = entity_docs {
            f.kind = Kind::Retriever;
            f.query = input.and_then(|s| text_of(s, Some(true), Role::Question));
            f.docs = docs;
        } else if chain {
            f.kind = Kind::Chain;
            set_text(
                &mut f.input,
                &mut f.input_unreadable,
                input,
                Some(true),
                Role::Question,
            );
            set_text(
                &mut f.output,
                &mut f.output_unreadable,
                output,
                Some(true),
                Role::Answer,
            );
        } else if llm {
            f.kind = Kind::Llm;
            f.user = last_user(prompts).or_else(|| {
                inputs
                    .as_ref()
                    .and_then(|m| gen_ai_text(m, Some("user"), true))
            });
            f.completion = first_text(completions)
                .or_else(|| outputs.as_ref().and_then(|m| gen_ai_text(m, None, false)));
        }
    }

    fn gen_ai(&self, span: &mut Span, f: &mut SpanFacts) {
        let (mut inputs, mut outputs) = (None, None);
        let (mut request_model, mut response_model) = (None, None);
        let mut docs = None;
        for kv in span.attributes.iter_mut() {
            let v = &mut kv.value;
            match kv.key.as_str() {
                "gen_ai.operation.name" => {
                    f.kind = match str_of(v) {
                        Some("invoke_workflow" | "invoke_agent") => Kind::Chain,
                        Some("chat" | "text_completion" | "generate_content") => Kind::Llm,
                        Some("retrieval") => Kind::Retriever,
                        _ => Kind::Other,
                    }
                }
                "gen_ai.input.messages" => inputs = structured(v),
                "gen_ai.output.messages" => outputs = structured(v),
                "gen_ai.retrieval.query.text" => f.query = take_string(v),
                "gen_ai.retrieval.documents" => docs = structured(v),
                "gen_ai.request.model" => request_model = take_string(v),
                "gen_ai.response.model" => response_model = take_string(v),
                "gen_ai.usage.input_tokens" => f.usage.prompt = int_of(v),
                "gen_ai.usage.output_tokens" => f.usage.completion = int_of(v),
                key if key == self.stratum_key => f.stratum = take_string(v),
                _ => {}
            }
        }
        f.model = response_model.or(request_model);
        let question = inputs
            .as_ref()
            .and_then(|m| gen_ai_text(m, Some("user"), true));
        let answer = outputs.as_ref().and_then(|m| gen_ai_text(m, None, false));
        match f.kind {
            Kind::Chain => (f.input, f.output) = (question, answer),
            Kind::Llm => (f.user, f.completion) = (question, answer),
            Kind::Retriever => {
                if let Some(Value::Array(items)) = docs {
                    for (rank, item) in items.into_iter().enumerate() {
                        let Value::Object(mut o) = item else { continue };
                        let text = o.remove("content").or_else(|| o.remove("text"));
                        for (rest, value) in [
                            ("id", o.remove("id")),
                            ("score", o.remove("score")),
                            ("content", text),
                        ] {
                            let mut v = value.and_then(json_to_any);
                            self.doc_field(&mut f.docs, rank as u64, rest, &mut v);
                        }
                    }
                }
            }
            Kind::Reranker | Kind::Other => {}
        }
    }

    /// The documents of an OpenLLMetry task's entity output, when it has the shape of a retrieval:
    /// LangChain's `{"documents": [{"page_content", "metadata"}, ...]}`, or LlamaIndex's array of
    /// nodes with scores (each a JSON-encoded string or an object: `{"node": {"id_", "text"},
    /// "score"}`). An empty list counts only on a span named as a retriever (`retriever`).
    fn entity_documents(&self, output: &str, retriever: bool) -> Option<Vec<Doc>> {
        let t = output.trim_start();
        if !(t.starts_with('{') || t.starts_with('[')) {
            return None;
        }
        let (items, node_shape) = match serde_json::from_str::<Value>(t).ok()? {
            Value::Object(mut o) => match o.remove("documents")? {
                Value::Array(a) => (a, false),
                _ => return None,
            },
            Value::Array(a) => (a, true),
            _ => return None,
        };
        if items.is_empty() {
            return retriever.then(Vec::new);
        }
        let mut docs = Vec::new();
        for (rank, item) in items.into_iter().enumerate() {
            let item = match item {
                Value::String(s) => serde_json::from_str::<Value>(&s).ok()?,
                other => other,
            };
            let doc = if node_shape {
                node_document(&item)?
            } else {
                langchain_document(&item)?
            };
            if docs.len() <= self.max_docs {
                docs.push(Doc {
                    index: rank as u64,
                    ..doc
                });
            } else {
                break;
            }
        }
        Some(docs)
    }

    /// Sets one field (`id`, `content`, `score`, or OpenInference's `document.*`) of document `i`.
    /// At most one document beyond `max_docs` is kept, which is enough for [`Self::bound`] to flag
    /// the span.
    fn doc_field(&self, docs: &mut Vec<Doc>, i: u64, rest: &str, v: &mut Option<AnyValue>) {
        let field = rest.strip_prefix("document.").unwrap_or(rest);
        if !matches!(field, "id" | "content" | "score") {
            return;
        }
        let at = match docs.iter().position(|d| d.index == i) {
            Some(at) => at,
            None if docs.len() > self.max_docs => return,
            None => {
                docs.push(Doc {
                    index: i,
                    ..Doc::default()
                });
                docs.len() - 1
            }
        };
        let d = &mut docs[at];
        match field {
            "id" => d.id = take_string(v),
            "content" => d.text = take_string(v),
            _ => d.score = float_of(v).filter(|s| s.is_finite()),
        }
    }

    /// Drops texts over the field limit (marking the span), so a huge attribute is never held.
    fn bound(&self, f: &mut SpanFacts) {
        let max = self.max_field_bytes;
        let mut too_long = false;
        for s in [
            &mut f.input,
            &mut f.output,
            &mut f.query,
            &mut f.user,
            &mut f.completion,
            &mut f.model,
            &mut f.stratum,
        ] {
            if s.as_ref().is_some_and(|t| t.len() > max) {
                *s = None;
                too_long = true;
            }
        }
        for d in &mut f.docs {
            for s in [&mut d.id, &mut d.text] {
                if s.as_ref().is_some_and(|t| t.len() > max) {
                    *s = None;
                    too_long = true;
                }
            }
        }
        f.too_long |= too_long;
        if f.docs.len() > self.max_docs {
            f.too_many_docs = true;
        }
        f.docs.sort_by_key(|d| d.index);
    }
}

/// Bytes held for copied attribute values.
pub(super) fn attribute_bytes(attributes: &[(usize, Value)]) -> usize {
    attributes
        .iter()
        .map(|(_, v)| 32 + v.as_str().map_or(0, str::len))
        .sum()
}

/// `prefix` `N` `.` `rest` → (N, rest).
fn indexed<'k>(key: &'k str, prefix: &str) -> Option<(u64, &'k str)> {
    let tail = key.strip_prefix(prefix)?;
    let (n, rest) = tail.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

fn message_field(
    messages: &mut Messages,
    i: u64,
    rest: &str,
    role_key: &str,
    content_key: &str,
    v: &mut Option<AnyValue>,
) {
    let is_role = rest == role_key;
    if !is_role && rest != content_key {
        return;
    }
    let at = match messages.iter().position(|m| m.0 == i) {
        Some(at) => at,
        None if messages.len() >= 256 => return,
        None => {
            messages.push((i, None, None));
            messages.len() - 1
        }
    };
    if is_role {
        messages[at].1 = take_string(v);
    } else {
        messages[at].2 = take_string(v);
    }
}

fn last_user(mut messages: Messages) -> Option<String> {
    messages.sort_by_key(|m| m.0);
    messages
        .into_iter()
        .rev()
        .find(|m| m.1.as_deref() == Some("user"))
        .and_then(|m| m.2)
}

fn first_text(mut messages: Messages) -> Option<String> {
    messages.sort_by_key(|m| m.0);
    messages.into_iter().find_map(|m| m.2)
}

/// The text of the last (or first) GenAI message with `role` (any role when `None`): its `text`
/// parts joined, or a plain `content` string.
fn gen_ai_text(messages: &Value, role: Option<&str>, last: bool) -> Option<String> {
    let list = messages.as_array()?;
    let matching =
        |m: &&Value| role.is_none_or(|r| m.get("role").and_then(Value::as_str) == Some(r));
    let m = if last {
        list.iter().rev().find(matching)?
    } else {
        list.iter().find(matching)?
    };
    if let Some(s) = m.get("content").and_then(Value::as_str) {
        return Some(s.to_owned());
    }
    let parts: Vec<&str> = m
        .get("parts")?
        .as_array()?
        .iter()
        .filter(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "text")
        })
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// The first 8 bytes of an id as a number; 0 when absent (a root span's parent).
fn id_u64(id: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(id) {
        Ok(b) => u64::from_be_bytes(b),
        Err(_) => 0,
    }
}

fn str_of(v: &Option<AnyValue>) -> Option<&str> {
    match v.as_ref()?.value.as_ref()? {
        V::StringValue(s) => Some(s),
        _ => None,
    }
}

/// Moves a string out of an attribute value; numbers and booleans are formatted.
fn take_string(v: &mut Option<AnyValue>) -> Option<String> {
    match v.as_mut()?.value.as_mut()? {
        V::StringValue(s) => Some(std::mem::take(s)),
        V::IntValue(i) => Some(i.to_string()),
        V::DoubleValue(d) => Some(d.to_string()),
        V::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn int_of(v: &Option<AnyValue>) -> Option<i64> {
    match v.as_ref()?.value.as_ref()? {
        V::IntValue(i) => Some(*i),
        V::DoubleValue(d) if d.is_finite() => Some(*d as i64),
        V::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn float_of(v: &Option<AnyValue>) -> Option<f64> {
    match v.as_ref()?.value.as_ref()? {
        V::DoubleValue(d) => Some(*d),
        V::IntValue(i) => Some(*i as f64),
        V::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn json_object(s: String) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(&s) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// A JSON-string attribute parsed, or a structured (array / key-value list) one converted.
fn structured(v: &mut Option<AnyValue>) -> Option<Value> {
    match v.as_mut()?.value.as_mut()? {
        V::StringValue(s) => serde_json::from_str(s).ok(),
        other => Some(any_to_json(other)),
    }
}

fn any_to_json(v: &mut V) -> Value {
    match v {
        V::StringValue(s) => Value::String(std::mem::take(s)),
        V::BoolValue(b) => Value::Bool(*b),
        V::IntValue(i) => Value::from(*i),
        V::DoubleValue(d) => serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number),
        V::ArrayValue(a) => Value::Array(
            a.values
                .iter_mut()
                .filter_map(|x| x.value.as_mut().map(any_to_json))
                .collect(),
        ),
        V::KvlistValue(l) => Value::Object(
            l.values
                .iter_mut()
                .filter_map(|kv| {
                    let value = kv.value.as_mut()?.value.as_mut().map(any_to_json)?;
                    Some((std::mem::take(&mut kv.key), value))
                })
                .collect(),
        ),
        V::BytesValue(_) | V::StringValueStrindex(_) => Value::Null,
    }
}

fn json_to_any(v: Value) -> Option<AnyValue> {
    let value = match v {
        Value::String(s) => V::StringValue(s),
        Value::Number(n) => match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64()?),
        },
        Value::Bool(b) => V::BoolValue(b),
        _ => return None,
    };
    Some(AnyValue { value: Some(value) })
}

/// A LangChain document as OpenLLMetry writes it (`page_content`, `metadata`; an `id` when the
/// instrumentation keeps it), or in LangChain's serialized form (`{"lc": 1, "kwargs": {...}}`).
fn langchain_document(v: &Value) -> Option<Doc> {
    let o = v.as_object()?;
    let o = match o.get("kwargs").and_then(Value::as_object) {
        Some(k) if o.contains_key("lc") => k,
        _ => o,
    };
    let text = o
        .get("page_content")
        .or_else(|| o.get("content"))?
        .as_str()?;
    let meta = o.get("metadata");
    Some(Doc {
        index: 0,
        id: o
            .get("id")
            .or_else(|| meta.and_then(|m| m.get("id")))
            .and_then(scalar_text),
        text: Some(text.to_owned()),
        score: o
            .get("score")
            .or_else(|| meta.and_then(|m| m.get("score")))
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite()),
    })
}

/// A LlamaIndex node with its score: `{"node": {"id_", "text"}, "score"}` (the text possibly in
/// `text_resource.text`).
fn node_document(v: &Value) -> Option<Doc> {
    let node = v.get("node")?;
    let text = node
        .get("text")
        .and_then(Value::as_str)
        .or_else(|| node.pointer("/text_resource/text").and_then(Value::as_str))?;
    Some(Doc {
        index: 0,
        id: node.get("id_").and_then(scalar_text),
        text: Some(text.to_owned()),
        score: v
            .get("score")
            .and_then(Value::as_f64)
            .filter(|s| s.is_finite()),
    })
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Which text a chain's value should give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Question,
    Answer,
}

/// Sets a chain's question or answer from `value`, or marks it unreadable (a serialized object
/// with no text in it).
fn set_text(
    slot: &mut Option<String>,
    unreadable: &mut bool,
    value: Option<String>,
    json: Option<bool>,
    role: Role,
) {
    if let Some(v) = value {
        *slot = text_of(v, json, role);
        *unreadable = slot.is_none();
    }
}

/// The text of a value that may be JSON (`json`: known to be, known not to be, or unknown). A JSON
/// string is unquoted; an object gives its text under the role's usual keys, looking through the
/// wrappers frameworks put around it (see [`pick_text`]); text that is not JSON is kept as it is.
/// `None` when the value is a serialized object or array with no such text: it is never itself
/// the question or the answer.
pub(super) fn text_of(s: String, json: Option<bool>, role: Role) -> Option<String> {
    let t = s.trim_start();
    let parse = match json {
        Some(j) => j,
        None => t.starts_with('{') || t.starts_with('['),
    };
    if !parse {
        return Some(s);
    }
    match serde_json::from_str::<Value>(t) {
        Ok(Value::String(inner)) => Some(inner),
        Ok(v @ Value::Object(_)) => pick_text(&v, role, 0),
        Ok(Value::Array(_) | Value::Null) => None,
        _ => Some(s),
    }
}

const QUESTION_KEYS: [&str; 8] = [
    "question",
    "query",
    "input",
    "query_str",
    "prompt",
    "text",
    "content",
    "message",
];
const ANSWER_KEYS: [&str; 8] = [
    "answer",
    "output",
    "response",
    "result",
    "text",
    "content",
    "message",
    "generated_text",
];
/// Keys frameworks wrap the real value in: OpenLLMetry's LangChain `inputs` / `outputs` and
/// `kwargs`, Haystack's pipeline `data`, LlamaIndex's `str_or_query_bundle` / `query_bundle`.
const WRAPPERS: [&str; 6] = [
    "inputs",
    "outputs",
    "data",
    "str_or_query_bundle",
    "query_bundle",
    "kwargs",
];
/// Object fields never searched for the question or answer.
const NOT_TEXT: [&str; 6] = [
    "metadata",
    "meta",
    "tags",
    "usage",
    "documents",
    "source_nodes",
];

/// The question or answer in a parsed JSON value: a string under the role's keys (an object there
/// is searched in turn), then inside the wrappers, OpenLLMetry's first positional `args`, a
/// generator's first `replies` entry, and last the other object fields in order (a Haystack
/// pipeline's components). A Python object's repr (`ChatMessage(...)`, `<NodeWithScore ...>`) is
/// not text.
fn pick_text(v: &Value, role: Role, depth: u32) -> Option<String> {
    const MAX_DEPTH: u32 = 4;
    if depth > MAX_DEPTH {
        return None;
    }
    let o = match v {
        Value::String(s) => return (!is_repr(s)).then(|| s.clone()),
        Value::Object(o) => o,
        _ => return None,
    };
    let keys: &[&str] = match role {
        Role::Question => &QUESTION_KEYS,
        Role::Answer => &ANSWER_KEYS,
    };
    for k in keys {
        match o.get(*k) {
            Some(x @ Value::String(_)) => {
                if let Some(t) = pick_text(x, role, depth + 1) {
                    return Some(t);
                }
            }
            Some(x @ Value::Object(_)) => {
                if let Some(t) = pick_text(x, role, depth + 1) {
                    return Some(t);
                }
            }
            _ => {}
        }
    }
    for k in WRAPPERS {
        if let Some(t) = o.get(k).and_then(|x| pick_text(x, role, depth + 1)) {
            return Some(t);
        }
    }
    for k in ["args", "replies"] {
        if let Some(t) = o
            .get(k)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|x| pick_text(x, role, depth + 1))
        {
            return Some(t);
        }
    }
    o.iter()
        .filter(|(k, x)| {
            x.is_object()
                && !NOT_TEXT.contains(&k.as_str())
                && !WRAPPERS.contains(&k.as_str())
                && !keys.contains(&k.as_str())
        })
        .find_map(|(_, x)| pick_text(x, role, depth + 1))
}

/// A Python object's repr, as instrumentors write objects they cannot serialize:
/// `ChatMessage(_role=..., ...)`, `<NodeWithScore(...)>`, `Document(id=..., ...)`.
fn is_repr(s: &str) -> bool {
    let t = s.trim();
    if t.starts_with('<') && t.ends_with('>') {
        return true;
    }
    let Some((head, _)) = t.split_once('(') else {
        return false;
    };
    t.ends_with(')')
        && head.starts_with(|c: char| c.is_ascii_uppercase())
        && head.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::span::Event;

    use crate::trace::otlp::build::{attr as kv, str_attr as s};

    fn extractor(preset: Preset) -> Extractor {
        Extractor {
            preset,
            stratum_key: "ragwatch.stratum".into(),
            max_field_bytes: 1000,
            max_docs: 4,
            metadata_attributes: Vec::new(),
        }
    }

    fn span(attributes: Vec<KeyValue>) -> Span {
        crate::trace::otlp::build::span(&[1; 16], 2, 1, attributes)
    }

    #[test]
    fn openinference_retriever_keeps_ids_scores_and_rank() {
        let mut sp = span(vec![
            s("openinference.span.kind", "RETRIEVER"),
            s("input.value", "who?"),
            s("retrieval.documents.1.document.content", "second"),
            s("retrieval.documents.0.document.content", "first"),
            s("retrieval.documents.0.document.id", "d0"),
            kv("retrieval.documents.0.document.score", V::DoubleValue(0.9)),
            kv("retrieval.documents.1.document.id", V::IntValue(7)),
        ]);
        let f = extractor(Preset::OpenInference).extract(&mut sp);
        assert_eq!(f.kind, Kind::Retriever);
        assert_eq!((f.span_id, f.parent_id), (2, 1));
        assert_eq!(f.query.as_deref(), Some("who?"));
        assert_eq!(f.docs.len(), 2);
        assert_eq!(f.docs[0].text.as_deref(), Some("first"));
        assert_eq!(f.docs[0].score, Some(0.9));
        assert_eq!(f.docs[1].id.as_deref(), Some("7"));
    }

    #[test]
    fn openinference_llm_and_chain() {
        let mut llm = span(vec![
            s("openinference.span.kind", "LLM"),
            s("llm.model_name", "gpt-x"),
            kv("llm.token_count.prompt", V::IntValue(10)),
            s("llm.input_messages.0.message.role", "system"),
            s("llm.input_messages.0.message.content", "be good"),
            s("llm.input_messages.1.message.role", "user"),
            s("llm.input_messages.1.message.content", "ctx + q"),
            s("llm.output_messages.0.message.role", "assistant"),
            s("llm.output_messages.0.message.content", "ans"),
        ]);
        let f = extractor(Preset::OpenInference).extract(&mut llm);
        assert_eq!(f.kind, Kind::Llm);
        assert_eq!(f.user.as_deref(), Some("ctx + q"));
        assert_eq!(f.completion.as_deref(), Some("ans"));
        assert_eq!(f.usage.prompt, Some(10));
        let mut chain = span(vec![
            s("openinference.span.kind", "CHAIN"),
            s("input.value", r#"{"question": "q?"}"#),
            s("input.mime_type", "application/json"),
            s("output.value", "{not json"),
            s("ragwatch.stratum", "tail"),
            s("metadata", r#"{"route": "support"}"#),
        ]);
        let f = extractor(Preset::OpenInference).extract(&mut chain);
        assert_eq!(f.input.as_deref(), Some("q?"));
        assert_eq!(f.output.as_deref(), Some("{not json"));
        assert_eq!(f.stratum.as_deref(), Some("tail"));
        assert_eq!(f.metadata.unwrap()["route"], "support");
    }

    #[test]
    fn named_attributes_are_copied_before_the_preset_reads_them() {
        let ex = Extractor {
            metadata_attributes: vec!["llm.model_name".into(), "n".into(), "big".into()],
            max_field_bytes: 8,
            ..extractor(Preset::OpenInference)
        };
        let mut sp = span(vec![
            s("openinference.span.kind", "LLM"),
            s("llm.model_name", "gpt-x"),
            kv("n", V::DoubleValue(f64::NAN)),
            kv("n", V::IntValue(3)),
            s("big", "longer than eight"),
        ]);
        let f = ex.extract(&mut sp);
        assert_eq!(f.model.as_deref(), Some("gpt-x"));
        assert_eq!(
            f.attributes,
            [(0, Value::from("gpt-x")), (1, Value::from(3))],
            "a NaN and an over-long string are not copied"
        );
        assert!(
            f.bytes()
                > extractor(Preset::OpenInference)
                    .extract(&mut span(vec![]))
                    .bytes()
        );
        assert!(
            extractor(Preset::OpenInference)
                .extract(&mut sp)
                .attributes
                .is_empty()
        );
    }

    #[test]
    fn openllmetry_reads_entities_prompts_and_result_events() {
        let mut wf = span(vec![
            s("traceloop.span.kind", "workflow"),
            s(
                "traceloop.entity.input",
                r#"{"args": ["q?"], "kwargs": {}}"#,
            ),
            s("traceloop.entity.output", r#""the answer""#),
        ]);
        let f = extractor(Preset::OpenLlmetry).extract(&mut wf);
        assert_eq!(f.kind, Kind::Chain);
        assert_eq!(f.input.as_deref(), Some("q?"));
        assert_eq!(f.output.as_deref(), Some("the answer"));
        let mut db = span(vec![s("db.system", "chroma")]);
        db.events = (0..2)
            .map(|i| Event {
                name: "db.query.result".into(),
                attributes: vec![
                    s("db.query.result.id", &format!("d{i}")),
                    kv("db.query.result.score", V::DoubleValue(0.5)),
                    s("db.query.result.document", "text"),
                ],
                ..Default::default()
            })
            .collect();
        let f = extractor(Preset::OpenLlmetry).extract(&mut db);
        assert_eq!(f.kind, Kind::Retriever);
        assert_eq!(f.docs.len(), 2);
        assert_eq!(f.docs[1].id.as_deref(), Some("d1"));
        let mut llm = span(vec![
            s("gen_ai.prompt.0.role", "user"),
            s("gen_ai.prompt.0.content", "hi"),
            s("gen_ai.completion.0.content", "yo"),
            s("gen_ai.response.model", "m"),
        ]);
        let f = extractor(Preset::OpenLlmetry).extract(&mut llm);
        assert_eq!(
            (f.kind, f.user.as_deref(), f.completion.as_deref()),
            (Kind::Llm, Some("hi"), Some("yo"))
        );
    }

    #[test]
    fn texts_by_role_through_wrappers_and_never_an_object() {
        let q = |v: &str| text_of(v.to_owned(), Some(true), Role::Question);
        let a = |v: &str| text_of(v.to_owned(), Some(true), Role::Answer);
        let out = r#"{"input": "q?", "context": [{"page_content": "x"}], "answer": "a."}"#;
        assert_eq!(
            (q(out).as_deref(), a(out).as_deref()),
            (Some("q?"), Some("a."))
        );
        assert_eq!(
            q(r#"{"inputs": {"query": "q?"}, "tags": []}"#).as_deref(),
            Some("q?")
        );
        assert_eq!(
            q(r#"{"str_or_query_bundle": {"query_str": "q?"}}"#).as_deref(),
            Some("q?")
        );
        assert_eq!(
            a(r#"{"outputs": {"content": "a."}}"#).as_deref(),
            Some("a.")
        );
        assert_eq!(a(r#"{"llm": {"replies": ["a."]}}"#).as_deref(), Some("a."));
        // Reprs, arrays, null and objects with no text are unreadable; plain text stays.
        assert_eq!(a(r#"{"llm": {"replies": ["ChatMessage(_role=x)"]}}"#), None);
        assert_eq!(a(r#"["<NodeWithScore(node=TextNode(id_=d))>"]"#), None);
        assert_eq!(a("null"), None);
        assert_eq!(a(r#"{"metadata": {"answer": "no"}}"#), None);
        assert_eq!(a("plain {text").as_deref(), Some("plain {text"));
        assert_eq!(
            text_of("Ann (the author)".into(), None, Role::Answer).as_deref(),
            Some("Ann (the author)")
        );
    }

    #[test]
    fn gen_ai_messages_and_documents() {
        let mut wf = span(vec![
            s("gen_ai.operation.name", "invoke_workflow"),
            s(
                "gen_ai.input.messages",
                r#"[{"role":"user","parts":[{"type":"text","content":"q?"}]}]"#,
            ),
            s(
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"text","content":"a."}],"finish_reason":"stop"}]"#,
            ),
        ]);
        let f = extractor(Preset::GenAi).extract(&mut wf);
        assert_eq!(
            (f.input.as_deref(), f.output.as_deref()),
            (Some("q?"), Some("a."))
        );
        let mut r = span(vec![
            s("gen_ai.operation.name", "retrieval"),
            s(
                "gen_ai.retrieval.documents",
                r#"[{"id":"d1","score":0.8,"content":"x"},{"id":2,"score":1}]"#,
            ),
        ]);
        let f = extractor(Preset::GenAi).extract(&mut r);
        assert_eq!(f.kind, Kind::Retriever);
        assert_eq!(f.docs[0].text.as_deref(), Some("x"));
        assert_eq!(f.docs[1].id.as_deref(), Some("2"));
        assert_eq!(f.docs[1].score, Some(1.0));
    }

    #[test]
    fn huge_texts_and_too_many_docs_are_flagged_not_kept() {
        let big = "x".repeat(2000);
        let mut sp = span(vec![
            s("openinference.span.kind", "CHAIN"),
            s("input.value", &big),
        ]);
        let f = extractor(Preset::OpenInference).extract(&mut sp);
        assert!(f.too_long && f.input.is_none());
        let mut many = span(
            std::iter::once(s("openinference.span.kind", "RETRIEVER"))
                .chain(
                    (0..50).map(|i| s(&format!("retrieval.documents.{i}.document.content"), "t")),
                )
                .collect(),
        );
        let f = extractor(Preset::OpenInference).extract(&mut many);
        assert!(f.too_many_docs);
        assert!(f.docs.len() <= 5);
    }
}
