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

use crate::config::Preset;

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
    pub start_ns: u64,
    pub end_ns: u64,
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
    /// A kept text was longer than `decode.max_field_bytes` (and was not kept).
    pub too_long: bool,
    /// More documents than `decode.max_contexts`.
    pub too_many_docs: bool,
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
    }
}

/// Reduces spans to facts under one preset.
#[derive(Debug, Clone)]
pub(super) struct Extractor {
    pub preset: Preset,
    pub stratum_key: String,
    pub max_field_bytes: usize,
    pub max_docs: usize,
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
        match self.preset {
            Preset::OpenInference => self.openinference(span, &mut f),
            Preset::OpenLlmetry => self.openllmetry(span, &mut f),
            Preset::GenAi => self.gen_ai(span, &mut f),
        }
        self.bound(&mut f);
        f
    }

    /// Reads a resource attribute list for the stratum attribute.
    pub fn resource_stratum(&self, attributes: &mut [KeyValue]) -> Option<String> {
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
                f.input = input.map(|s| text_of(s, input_json));
                f.output = output.map(|s| text_of(s, output_json));
            }
            Kind::Retriever => {
                f.query = input.map(|s| text_of(s, input_json));
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
                "gen_ai.operation.name" => {
                    llm |= matches!(
                        str_of(v),
                        Some("chat" | "text_completion" | "generate_content")
                    )
                }
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
        if retrieval {
            f.kind = Kind::Retriever;
            f.docs = docs;
        } else if chain {
            f.kind = Kind::Chain;
            f.input = input.map(|s| text_of(s, Some(true)));
            f.output = output.map(|s| text_of(s, Some(true)));
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

/// The text of a value that may be JSON (`json`: known to be, known not to be, or unknown): a
/// JSON string is unquoted; an object gives its first text field among the usual names (and
/// OpenLLMetry's `{"args": [...], "kwargs": {...}}` its first string argument); anything else is
/// kept as it is.
pub(super) fn text_of(s: String, json: Option<bool>) -> String {
    let t = s.trim_start();
    let parse = match json {
        Some(j) => j,
        None => t.starts_with('{'),
    };
    if !parse {
        return s;
    }
    match serde_json::from_str::<Value>(t) {
        Ok(Value::String(inner)) => inner,
        Ok(v @ Value::Object(_)) => pick_text(&v).unwrap_or(s),
        _ => s,
    }
}

const TEXT_KEYS: [&str; 11] = [
    "question", "query", "input", "prompt", "text", "content", "answer", "output", "result",
    "response", "message",
];

fn pick_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            if let Some(kw) = o.get("kwargs").and_then(pick_text) {
                return Some(kw);
            }
            if let Some(arg) = o
                .get("args")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find_map(|x| x.as_str().map(str::to_owned)))
            {
                return Some(arg);
            }
            TEXT_KEYS
                .iter()
                .find_map(|k| o.get(*k).and_then(|x| x.as_str().map(str::to_owned)))
        }
        _ => None,
    }
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
