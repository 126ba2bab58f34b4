//! Decoding: bytes to [`Trace`], for the native schema or a JSON-pointer mapping of another shape.
//! The OTLP formats (`decode.format`) carry spans rather than traces: [`super::otlp`] decodes and
//! assembles those, and checks the traces it builds with [`Decoder::check`].
//!
//! Every way a message can be wrong maps to one [`RejectReason`], a small closed set used as the
//! `reason` label of `ragwatch_traces_rejected_total`; the human-readable detail goes to the log only.

mod shortcut;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::{Context, Metadata, Trace};
use crate::trace::config::{DecodeConfig, MappingConfig};

/// Why a message was rejected. The label values are stable: dashboards and alerts use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// The payload was empty or absent (a tombstone).
    Empty,
    /// Larger than `decode.max_message_bytes`.
    TooLarge,
    /// Not valid UTF-8.
    NotUtf8,
    /// Not JSON at all.
    InvalidJson,
    /// JSON that ends early (a truncated message).
    Truncated,
    /// JSON nested beyond the parser's recursion limit.
    TooDeep,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong JSON type.
    WrongType,
    /// More contexts than `decode.max_contexts`.
    TooManyContexts,
    /// A text field longer than `decode.max_field_bytes`.
    FieldTooLong,
    /// `trace_id` or `query` is empty.
    EmptyField,
    /// Not a valid protobuf `ExportTraceServiceRequest`.
    InvalidProtobuf,
    /// More spans than `assembly.max_spans_per_message` in a message, or than
    /// `assembly.max_spans_per_trace` in a trace.
    TooManySpans,
    /// A trace whose spans' parent ids form a cycle.
    SpanCycle,
    /// A trace dropped unfinished because assembly held `assembly.max_pending_traces` traces or
    /// `assembly.max_pending_bytes` bytes.
    AssemblyFull,
}

impl RejectReason {
    /// Every reason, for pre-registering metric series.
    pub const ALL: [RejectReason; 15] = [
        RejectReason::Empty,
        RejectReason::TooLarge,
        RejectReason::NotUtf8,
        RejectReason::InvalidJson,
        RejectReason::Truncated,
        RejectReason::TooDeep,
        RejectReason::MissingField,
        RejectReason::WrongType,
        RejectReason::TooManyContexts,
        RejectReason::FieldTooLong,
        RejectReason::EmptyField,
        RejectReason::InvalidProtobuf,
        RejectReason::TooManySpans,
        RejectReason::SpanCycle,
        RejectReason::AssemblyFull,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Empty => "empty",
            RejectReason::TooLarge => "too_large",
            RejectReason::NotUtf8 => "not_utf8",
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::Truncated => "truncated",
            RejectReason::TooDeep => "too_deep",
            RejectReason::MissingField => "missing_field",
            RejectReason::WrongType => "wrong_type",
            RejectReason::TooManyContexts => "too_many_contexts",
            RejectReason::FieldTooLong => "field_too_long",
            RejectReason::EmptyField => "empty_field",
            RejectReason::InvalidProtobuf => "invalid_protobuf",
            RejectReason::TooManySpans => "too_many_spans",
            RejectReason::SpanCycle => "span_cycle",
            RejectReason::AssemblyFull => "assembly_full",
        }
    }
}

/// A rejected message: the bounded reason and a detail for the log.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {detail}", reason.as_str())]
pub struct DecodeError {
    /// The label value.
    pub reason: RejectReason,
    /// What exactly was wrong (never used as a label).
    pub detail: String,
}

impl DecodeError {
    /// A rejection with its reason and detail.
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

/// Turns message bytes into traces, enforcing the configured limits.
#[derive(Debug, Clone)]
pub struct Decoder {
    limits: DecodeConfig,
    mapping: Option<MappingConfig>,
}

#[derive(Deserialize)]
struct NativeTrace<'a> {
    #[serde(borrow)]
    trace_id: Cow<'a, str>,
    #[serde(default, borrow)]
    timestamp: Option<Timestamp<'a>>,
    #[serde(borrow)]
    query: Cow<'a, str>,
    contexts: Contexts,
    #[serde(borrow)]
    answer: Cow<'a, str>,
    #[serde(default, borrow)]
    stratum: Option<Cow<'a, str>>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    label_faithful: Option<bool>,
    #[serde(default)]
    relevant_ids: Option<Vec<String>>,
    #[serde(default)]
    relevance: Option<std::collections::BTreeMap<String, f64>>,
}

impl NativeTrace<'_> {
    /// The trace these fields make.
    fn into_trace(self) -> Trace {
        Trace {
            trace_id: self.trace_id.into_owned(),
            timestamp_ms: native_timestamp_ms(self.timestamp),
            query: self.query.into_owned(),
            contexts: self.contexts.0,
            answer: self.answer.into_owned(),
            stratum: self.stratum.map(Cow::into_owned),
            metadata: self.metadata.unwrap_or_default(),
            label_faithful: self.label_faithful,
            gold: gold(self.relevant_ids, self.relevance),
            span_id: None,
        }
    }
}

/// The trace's time from its `timestamp` field.
fn native_timestamp_ms(timestamp: Option<Timestamp<'_>>) -> Option<i64> {
    match timestamp {
        Some(Timestamp::Text(s)) => rfc3339_ms(&s),
        Some(Timestamp::Int(ms)) => Some(ms),
        Some(Timestamp::Other) | None => None,
    }
}

/// The gold relevance, when the trace gives either field.
fn gold(
    relevant_ids: Option<Vec<String>>,
    relevance: Option<std::collections::BTreeMap<String, f64>>,
) -> Option<super::Gold> {
    (relevant_ids.is_some() || relevance.is_some()).then(|| super::Gold {
        relevant_ids: relevant_ids.unwrap_or_default(),
        relevance: relevance.unwrap_or_default(),
    })
}

/// `dst` made `src`, in its own buffer.
fn set(dst: &mut String, src: &str) {
    dst.clear();
    dst.push_str(src);
}

/// `dst` made `src`, in its own buffer when it has one.
fn set_opt(dst: &mut Option<String>, src: Option<&str>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => set(d, s),
        (None, Some(s)) => *dst = Some(s.to_owned()),
        (_, None) => *dst = None,
    }
}

/// The `timestamp` field as far as [`timestamp_ms`] reads it: a string (borrowed when it has no
/// escapes), an integer, or anything else (read with the parser's full checks and dropped).
enum Timestamp<'a> {
    Text(Cow<'a, str>),
    Int(i64),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Timestamp<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TimestampVisitor)
    }
}

/// Reads any JSON value, with the parser calls `Value` made when it read the field, and keeps what
/// [`timestamp_ms`] took from that `Value`: the string, or the number when `as_i64` gave one.
struct TimestampVisitor;

impl<'de> serde::de::Visitor<'de> for TimestampVisitor {
    type Value = Timestamp<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Timestamp::Text(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Timestamp::Text(Cow::Owned(v.to_owned())))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Timestamp::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(v).map_or(Timestamp::Other, Timestamp::Int))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Timestamp::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Timestamp::Other)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Timestamp::Other)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        FieldVisitor.visit_seq(seq).map(|_| Timestamp::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        FieldVisitor.visit_map(map).map(|_| Timestamp::Other)
    }
}

/// The contexts, each made a [`Context`] as it is read (no second vector).
struct Contexts(Vec<Context>);

impl<'de> Deserialize<'de> for Contexts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(ContextsVisitor)
    }
}

struct ContextsVisitor;

impl<'de> serde::de::Visitor<'de> for ContextsVisitor {
    type Value = Contexts;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut contexts = Vec::new();
        while let Some(c) = seq.next_element::<NativeContext<'de>>()? {
            contexts.push(Context {
                id: c.id.and_then(id_string),
                text: c.text.into_owned(),
                score: c.score.filter(|s| s.is_finite()),
            });
        }
        Ok(Contexts(contexts))
    }
}

/// One retrieved context: a string, or an object with `text` and optional `id` and `score`.
/// Parsed once, straight from the message; anything else, a missing or mistyped `text`, a mistyped
/// `score` or a repeated field rejects the trace as a wrong type, after the whole context has been
/// read (so a truncation or syntax error inside it takes precedence, and the error sits where it
/// did when this was an untagged enum buffered through serde's `Content`).
struct NativeContext<'a> {
    id: Option<Value>,
    text: Cow<'a, str>,
    score: Option<f64>,
}

/// The error of a context that is neither form, worded as serde's untagged enum worded it.
const CONTEXT_MISMATCH: &str = "data did not match any variant of untagged enum NativeContext";

impl<'de: 'a, 'a> Deserialize<'de> for NativeContext<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The visitor reads the whole context and says whether it matched; the error is raised
        // here, outside the parser's frame for the context, as the untagged enum raised it.
        d.deserialize_any(ContextVisitor)?
            .ok_or_else(|| serde::de::Error::custom(CONTEXT_MISMATCH))
    }
}

struct ContextVisitor;

impl<'de> serde::de::Visitor<'de> for ContextVisitor {
    type Value = Option<NativeContext<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a context: a string or an object with `text`")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(NativeContext::text(Cow::Borrowed(v))))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(NativeContext::text(Cow::Owned(v.to_owned()))))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut id, mut text, mut score) = (None, None, None);
        let mut matched = true;
        while let Some(key) = map.next_key::<Field<'de>>()? {
            let name = match &key {
                Field::Str(name) => name.as_ref(),
                _ => "",
            };
            match name {
                "id" if id.is_none() => id = Some(map.next_value()?),
                "text" if text.is_none() => text = Some(map.next_value()?),
                "score" if score.is_none() => score = Some(map.next_value()?),
                other => {
                    // A repeated field fails the context, as serde's derived struct fails it;
                    // unknown fields are read and ignored.
                    matched &= !matches!(other, "id" | "text" | "score");
                    map.next_value::<Field<'de>>()?;
                }
            }
        }
        Ok(matched
            .then(|| NativeContext::doc(id, text, score))
            .flatten())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Field<'de>>()?.is_some() {}
        Ok(None)
    }

    // Any other JSON value (array, number, boolean, null) is neither form.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

impl<'a> NativeContext<'a> {
    fn text(text: Cow<'a, str>) -> Self {
        Self {
            id: None,
            text,
            score: None,
        }
    }

    /// The object form from its fields as read: `text` must be a string, `score` a
    /// number or null; `id` may be anything (only a string or number is kept).
    fn doc(id: Option<Value>, text: Option<Field<'a>>, score: Option<Field<'a>>) -> Option<Self> {
        let Some(Field::Str(text)) = text else {
            return None;
        };
        let score = match score {
            None | Some(Field::Null) => None,
            Some(Field::Num(s)) => Some(s),
            Some(_) => return None,
        };
        Some(Self { id, text, score })
    }
}

/// Whether `text` is one JSON value that `serde_json::Value` accepts, read as [`Field`]s (the parser
/// calls `Value` makes) without building it.
pub(super) fn is_json_value(text: &str) -> bool {
    serde_json::from_str::<Field<'_>>(text).is_ok()
}

/// A JSON value inside a context, read with the parser's full checks (nesting limit, number range)
/// and kept only as far as a context needs it: a string, a number as `f64`, null, or something
/// else (skipped).
enum Field<'a> {
    Str(Cow<'a, str>),
    Num(f64),
    Null,
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FieldVisitor)
    }
}

struct FieldVisitor;

impl<'de> serde::de::Visitor<'de> for FieldVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Field::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Field::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }

    // Integers convert as serde's own `f64` does.
    #[allow(clippy::cast_precision_loss)]
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Field::Num(v as f64))
    }

    #[allow(clippy::cast_precision_loss)]
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Field::Num(v as f64))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Field::Num(v))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Field::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Field<'de>>()?.is_some() {}
        Ok(Field::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<Field<'de>, Field<'de>>()?.is_some() {}
        Ok(Field::Other)
    }
}

impl Decoder {
    /// A decoder with these limits and optional mapping.
    pub fn new(config: &DecodeConfig) -> Self {
        Self {
            limits: config.clone(),
            mapping: config.mapping.clone(),
        }
    }

    /// Decodes one message.
    pub fn decode(&self, bytes: &[u8]) -> Result<Trace, DecodeError> {
        let mut trace = Trace::default();
        self.decode_into(bytes, &mut trace)?;
        Ok(trace)
    }

    /// Decodes one message into `out`, reusing its strings and contexts (a worker that keeps one
    /// trace allocates nothing for a message of the common shape once its buffers have grown).
    /// On an error `out` holds no trace (parts of the message, perhaps) and is only fit to reuse.
    pub(crate) fn decode_into(&self, bytes: &[u8], out: &mut Trace) -> Result<(), DecodeError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(DecodeError::new(RejectReason::Empty, "empty payload"));
        }
        if bytes.len() > self.limits.max_message_bytes {
            return Err(DecodeError::new(
                RejectReason::TooLarge,
                format!("{} bytes", bytes.len()),
            ));
        }
        // Validated with SIMD (a tenth of std's cost on a 2 KB trace); std's slower pass runs
        // only on invalid input, for its message (where the bad byte is).
        let text = simdutf8::basic::from_utf8(bytes).or_else(|_| {
            std::str::from_utf8(bytes)
                .map_err(|e| DecodeError::new(RejectReason::NotUtf8, e.to_string()))
        })?;
        match &self.mapping {
            None => self.decode_native(text, out)?,
            Some(mapping) => *out = self.decode_mapped(text, mapping)?,
        }
        self.check(out)
    }

    fn decode_native(&self, text: &str, out: &mut Trace) -> Result<(), DecodeError> {
        out.span_id = None;
        if shortcut::native_into(text, out).is_none() {
            let native: NativeTrace<'_> = serde_json::from_str(text).map_err(classify)?;
            *out = native.into_trace();
        }
        Ok(())
    }

    fn decode_mapped(&self, text: &str, m: &MappingConfig) -> Result<Trace, DecodeError> {
        let doc: Value = serde_json::from_str(text).map_err(classify)?;
        let required = |ptr: &str, name: &str| -> Result<String, DecodeError> {
            match doc.pointer(ptr) {
                None | Some(Value::Null) => Err(DecodeError::new(
                    RejectReason::MissingField,
                    format!("{name} at {ptr}"),
                )),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(Value::Number(n)) if name == "trace_id" => Ok(n.to_string()),
                Some(_) => Err(DecodeError::new(
                    RejectReason::WrongType,
                    format!("{name} at {ptr} is not a string"),
                )),
            }
        };
        let optional_str = |ptr: &Option<String>| {
            ptr.as_deref()
                .and_then(|p| doc.pointer(p))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let mut contexts = Vec::new();
        if m.contexts.contains("{n}") {
            for n in 0..=self.limits.max_contexts {
                let ptr = m.contexts.replace("{n}", &n.to_string());
                match doc.pointer(&ptr) {
                    None | Some(Value::Null) => break,
                    Some(v) => contexts.push(mapped_context(v, &ptr)?),
                }
            }
        } else {
            match doc.pointer(&m.contexts) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (i, v) in items.iter().enumerate() {
                        contexts.push(mapped_context(v, &format!("{}/{i}", m.contexts))?);
                    }
                }
                Some(_) => {
                    return Err(DecodeError::new(
                        RejectReason::WrongType,
                        format!("contexts at {} is not an array", m.contexts),
                    ));
                }
            }
        }
        let mut metadata = serde_json::Map::new();
        if let Some(model) = optional_str(&m.model) {
            metadata.insert("model".into(), Value::String(model));
        }
        Ok(Trace {
            trace_id: required(&m.trace_id, "trace_id")?,
            timestamp_ms: m
                .timestamp
                .as_deref()
                .and_then(|p| doc.pointer(p))
                .and_then(timestamp_ms),
            query: required(&m.query, "query")?,
            contexts,
            answer: required(&m.answer, "answer")?,
            stratum: optional_str(&m.stratum),
            metadata: Value::Object(metadata).into(),
            label_faithful: None,
            gold: None,
            span_id: None,
        })
    }

    /// Checks a trace against the limits (non-empty id and question, context count, field lengths);
    /// OTLP traces assembled from spans pass the same checks as decoded ones.
    pub fn check(&self, t: &Trace) -> Result<(), DecodeError> {
        if t.trace_id.trim().is_empty() || t.query.trim().is_empty() {
            return Err(DecodeError::new(
                RejectReason::EmptyField,
                "trace_id and query must not be empty",
            ));
        }
        if t.contexts.len() > self.limits.max_contexts {
            return Err(DecodeError::new(
                RejectReason::TooManyContexts,
                format!("{} contexts", t.contexts.len()),
            ));
        }
        let max = self.limits.max_field_bytes;
        let longest = [t.trace_id.len(), t.query.len(), t.answer.len()]
            .into_iter()
            .chain(t.contexts.iter().map(|c| c.text.len()))
            .max()
            .unwrap_or(0);
        if longest > max || t.trace_id.len() > 256 {
            return Err(DecodeError::new(
                RejectReason::FieldTooLong,
                format!("a field of {longest} bytes"),
            ));
        }
        Ok(())
    }
}

fn mapped_context(v: &Value, ptr: &str) -> Result<Context, DecodeError> {
    match v {
        Value::String(s) => Ok(Context {
            id: None,
            text: s.clone(),
            score: None,
        }),
        Value::Object(o) => {
            let text = o
                .get("text")
                .or_else(|| o.get("content"))
                .or_else(|| o.get("document.content"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    DecodeError::new(
                        RejectReason::WrongType,
                        format!("context at {ptr} has no text"),
                    )
                })?;
            Ok(Context {
                id: o
                    .get("id")
                    .or_else(|| o.get("document.id"))
                    .cloned()
                    .and_then(id_string),
                text: text.to_owned(),
                score: o
                    .get("score")
                    .or_else(|| o.get("document.score"))
                    .and_then(Value::as_f64),
            })
        }
        _ => Err(DecodeError::new(
            RejectReason::WrongType,
            format!("context at {ptr} is neither text nor object"),
        )),
    }
}

fn id_string(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// RFC 3339 text (UTC `Z` form) or epoch milliseconds.
fn timestamp_ms(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => rfc3339_ms(s),
        _ => None,
    }
}

/// RFC 3339 text (UTC `Z` form) as epoch milliseconds.
fn rfc3339_ms(s: &str) -> Option<i64> {
    humantime::parse_rfc3339_weak(s)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
}

/// The reject reason of a JSON parse error (OTLP JSON is read with the same classes).
pub(crate) fn classify_json(e: serde_json::Error) -> DecodeError {
    classify(e)
}

fn classify(e: serde_json::Error) -> DecodeError {
    use serde_json::error::Category;
    let msg = e.to_string();
    let reason = match e.classify() {
        Category::Eof => RejectReason::Truncated,
        Category::Syntax if msg.contains("recursion limit") => RejectReason::TooDeep,
        Category::Syntax | Category::Io => RejectReason::InvalidJson,
        Category::Data if msg.starts_with("missing field") => RejectReason::MissingField,
        Category::Data => RejectReason::WrongType,
    };
    DecodeError::new(reason, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native() -> Decoder {
        Decoder::new(&DecodeConfig::default())
    }

    fn reason(d: &Decoder, s: &[u8]) -> &'static str {
        d.decode(s).unwrap_err().reason.as_str()
    }

    #[test]
    fn decodes_native_with_mixed_contexts() {
        let t = native()
            .decode(br#"{"trace_id":"t1","timestamp":"2026-11-29T10:00:00Z","query":"q?","contexts":["a",{"id":"doc_3","text":"b","score":0.8},{"id":7,"text":"c"}],"answer":"x","stratum":"tail","metadata":{"model":"m"},"label_faithful":false}"#)
            .unwrap();
        assert_eq!(t.trace_id, "t1");
        assert_eq!(t.contexts.len(), 3);
        assert_eq!(t.contexts[1].id.as_deref(), Some("doc_3"));
        assert_eq!(t.contexts[1].score, Some(0.8));
        assert_eq!(t.contexts[2].id.as_deref(), Some("7"));
        assert_eq!(t.stratum.as_deref(), Some("tail"));
        assert_eq!(t.timestamp_ms, Some(1_795_946_400_000));
        assert_eq!(t.label_faithful, Some(false));
    }

    #[test]
    fn escaped_strings_decode() {
        let t = native()
            .decode(br#"{"trace_id":"t","query":"a \"b\"\n","contexts":[],"answer":"\u00e9"}"#)
            .unwrap();
        assert_eq!(t.query, "a \"b\"\n");
        assert_eq!(t.answer, "é");
    }

    #[test]
    fn every_malformation_has_its_reason() {
        let d = native();
        assert_eq!(reason(&d, b""), "empty");
        assert_eq!(reason(&d, b"not json"), "invalid_json");
        assert_eq!(reason(&d, br#"{"trace_id":"t","query":"#), "truncated");
        assert_eq!(
            reason(&d, br#"{"trace_id":"t","contexts":[],"answer":"a"}"#),
            "missing_field"
        );
        assert_eq!(
            reason(
                &d,
                br#"{"trace_id":"t","query":3,"contexts":[],"answer":"a"}"#
            ),
            "wrong_type"
        );
        assert_eq!(
            reason(
                &d,
                br#"{"trace_id":"t","query":"q","contexts":[5],"answer":"a"}"#
            ),
            "wrong_type"
        );
        assert_eq!(
            reason(
                &d,
                b"{\"trace_id\":\"t\",\"query\":\"\xff\",\"contexts\":[],\"answer\":\"a\"}"
            ),
            "not_utf8"
        );
        assert_eq!(
            reason(
                &d,
                br#"{"trace_id":"","query":"q","contexts":[],"answer":"a"}"#
            ),
            "empty_field"
        );
        let deep = format!(
            r#"{{"trace_id":"t","query":"q","contexts":[],"answer":"a","metadata":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(reason(&d, deep.as_bytes()), "too_deep");
    }

    #[test]
    fn limits_are_enforced() {
        let d = Decoder::new(&DecodeConfig {
            max_message_bytes: 300,
            max_contexts: 2,
            max_field_bytes: 20,
            ..DecodeConfig::default()
        });
        let big = format!(
            r#"{{"trace_id":"t","query":"q","contexts":[],"answer":"{}"}}"#,
            "a".repeat(400)
        );
        assert_eq!(reason(&d, big.as_bytes()), "too_large");
        assert_eq!(
            reason(
                &d,
                br#"{"trace_id":"t","query":"q","contexts":["a","b","c"],"answer":"a"}"#
            ),
            "too_many_contexts"
        );
        assert_eq!(reason(&d, br#"{"trace_id":"t","query":"q","contexts":[],"answer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#), "field_too_long");
    }

    #[test]
    fn openinference_mapping_reads_flattened_attributes() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/openinference.toml"
        ))
        .unwrap();
        let file: toml::Table = toml::from_str(&text).unwrap();
        let decode: DecodeConfig = file["decode"].clone().try_into().unwrap();
        let d = Decoder::new(&decode);
        let span = br#"{"context":{"trace_id":"abc123","span_id":"s1"},"name":"rag",
            "attributes":{"input.value":"Who wrote it?","output.value":"Ann wrote it.",
            "retrieval.documents.0.document.content":"Ann wrote the book.",
            "retrieval.documents.0.document.id":"d0",
            "retrieval.documents.1.document.content":"It sold well.",
            "llm.model_name":"gpt-x","ragwatch.stratum":"tail"}}"#;
        let t = d.decode(span).unwrap();
        assert_eq!(t.trace_id, "abc123");
        assert_eq!(t.query, "Who wrote it?");
        assert_eq!(t.answer, "Ann wrote it.");
        assert_eq!(t.contexts.len(), 2);
        assert_eq!(t.contexts[1].text, "It sold well.");
        assert_eq!(t.stratum.as_deref(), Some("tail"));
        assert_eq!(
            t.metadata.field::<String>("model").as_deref(),
            Some("gpt-x")
        );
        let missing = br#"{"context":{"trace_id":"a"},"attributes":{"output.value":"x"}}"#;
        assert_eq!(reason(&d, missing), "missing_field");
    }

    mod reference {
        use super::*;

        /// The untagged enum the context visitor replaced, kept as the reference it must agree
        /// with (under its old name, which its error message names).
        #[derive(Deserialize)]
        #[serde(untagged)]
        pub(super) enum NativeContext<'a> {
            Text(#[serde(borrow)] Cow<'a, str>),
            Doc {
                #[serde(default)]
                id: Option<Value>,
                #[serde(borrow)]
                text: Cow<'a, str>,
                #[serde(default)]
                score: Option<f64>,
            },
        }
    }

    #[derive(Deserialize)]
    struct Untagged<'a> {
        #[serde(borrow)]
        contexts: Vec<reference::NativeContext<'a>>,
    }

    #[derive(Deserialize)]
    struct Visited<'a> {
        #[serde(borrow)]
        contexts: Vec<NativeContext<'a>>,
    }

    type Decoded = Result<Vec<(Option<String>, String, Option<f64>)>, String>;

    /// `{"contexts": ...}` through the untagged enum and through the visitor: the contexts, or the
    /// error message (with its position) and reject reason.
    fn both_ways(json: &str) -> (Decoded, Decoded) {
        let err = |e: serde_json::Error| {
            let e = classify(e);
            format!("{}: {}", e.reason.as_str(), e.detail)
        };
        let untagged = serde_json::from_str::<Untagged<'_>>(json)
            .map(|u| {
                u.contexts
                    .into_iter()
                    .map(|c| match c {
                        reference::NativeContext::Text(t) => (None, t.into_owned(), None),
                        reference::NativeContext::Doc { id, text, score } => {
                            (id.and_then(id_string), text.into_owned(), score)
                        }
                    })
                    .collect()
            })
            .map_err(err);
        let visited = serde_json::from_str::<Visited<'_>>(json)
            .map(|v| {
                v.contexts
                    .into_iter()
                    .map(|c| (c.id.and_then(id_string), c.text.into_owned(), c.score))
                    .collect()
            })
            .map_err(err);
        (untagged, visited)
    }

    /// JSON values of the shapes the decoders meet (strings plain and escaped, bad escapes and
    /// control characters, numbers in and out of range, bad literals, arrays nested `nesting` deep,
    /// objects with context-like keys), written with or without spaces around `:` and `,`. Used by
    /// the shortcut's tests too.
    pub(super) fn json_value(
        nesting: usize,
        spaced: bool,
    ) -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(r#""t""#.to_owned()),
            Just(r#""a b c""#.to_owned()),
            Just(r#""a\"b\u00e9""#.to_owned()),
            Just(r#""a\"b\u00e9\n""#.to_owned()),
            Just(r#""bad \x escape""#.to_owned()),
            Just("\"ctl\u{1}\"".to_owned()),
            Just(r#""2026-11-29T10:00:00Z""#.to_owned()),
            Just("7".to_owned()),
            Just("-0".to_owned()),
            Just("-3".to_owned()),
            Just("0.25".to_owned()),
            Just("18446744073709551616".to_owned()),
            Just("1e400".to_owned()),
            Just("null".to_owned()),
            Just("nul".to_owned()),
            Just("true".to_owned()),
            Just("[]".to_owned()),
            Just("{}".to_owned()),
            Just(format!("{}1{}", "[".repeat(nesting), "]".repeat(nesting))),
        ];
        let (colon, comma) = if spaced { (" : ", ", ") } else { (":", ",") };
        leaf.prop_recursive(3, 24, 4, move |inner| {
            let key = prop_oneof![
                Just(r#""id""#),
                Just(r#""text""#),
                Just(r#""score""#),
                Just(r#""te\u0078t""#),
                Just(r#""model""#),
                Just(r#""other""#),
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                proptest::collection::vec((key, inner), 0..5).prop_map(move |entries| {
                    let entries: Vec<String> = entries
                        .iter()
                        .map(|(k, v)| format!("{k}{colon}{v}"))
                        .collect();
                    format!("{{{}}}", entries.join(comma))
                }),
            ]
        })
    }

    /// The timestamp read by [`Timestamp`] is the one the `Value` it replaced gave, and a bad one
    /// fails alike (reason and message).
    #[test]
    fn timestamp_reads_as_the_value_did() {
        #[derive(Deserialize)]
        struct ByValue {
            #[serde(default)]
            timestamp: Option<Value>,
        }
        #[derive(Deserialize)]
        struct Visited<'a> {
            #[serde(default, borrow)]
            timestamp: Option<Timestamp<'a>>,
        }
        let err = |e: serde_json::Error| {
            let e = classify(e);
            format!("{}: {}", e.reason.as_str(), e.detail)
        };
        let deep = format!("{}1{}", "[".repeat(130), "]".repeat(130));
        for ts in [
            r#""2026-11-29T10:00:00Z""#,
            r#""2026-11-29T10:00:00.123+02:00""#,
            r#""2026\u002d11-29T10:00:00Z""#,
            r#""garbage""#,
            r#""1969-12-31T23:59:59Z""#,
            "1795946400123",
            "-5",
            "-0",
            "0",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551616",
            "5.0",
            "1e3",
            "1e400",
            "null",
            "true",
            "[1, {\"a\": [null]}]",
            "{\"a\": 1, \"a\": \"b\"}",
            &deep,
            "tru",
            r#""bad \x escape""#,
        ] {
            let json = format!(r#"{{"timestamp":{ts}}}"#);
            let by_value = serde_json::from_str::<ByValue>(&json)
                .map(|b| b.timestamp.as_ref().and_then(timestamp_ms))
                .map_err(err);
            let visited = serde_json::from_str::<Visited<'_>>(&json)
                .map(|v| match v.timestamp {
                    Some(Timestamp::Text(s)) => rfc3339_ms(&s),
                    Some(Timestamp::Int(ms)) => Some(ms),
                    Some(Timestamp::Other) | None => None,
                })
                .map_err(err);
            assert_eq!(by_value, visited, "{ts}");
        }
    }

    #[test]
    fn context_visitor_matches_the_untagged_enum_on_known_cases() {
        for contexts in [
            r#"["a",{"id":"d","text":"b","score":0.5},{"id":7,"text":"c","x":{}},{"text":"\u00e9"}]"#,
            r#"[[null,"e"]]"#,
            r#"[[1,"f",2]]"#,
            r#"[{"text":"a","text":"b"}]"#,
            r#"[{"id":1}]"#,
            r#"[{"text":5}]"#,
            r#"[{"text":"a","score":"high"}]"#,
            r#"[{"text":"a","score":null,"extra":[1,{"x":1e400}]}]"#,
            r#"[[1,"a",2,3]]"#,
            r#"[[]]"#,
            r#"[5, "a"]"#,
            r#"[null]"#,
            r#"[{"text":5,"id":tru"#,
            r#"[{"text":"a"}, {"text": 1"#,
        ] {
            let (untagged, visited) = both_ways(&format!(r#"{{"contexts":{contexts}}}"#));
            assert_eq!(untagged, visited, "{contexts}");
        }
    }

    proptest::proptest! {
        #[test]
        fn context_visitor_matches_the_untagged_enum(
            contexts in proptest::collection::vec(json_value(130, false), 0..4),
            cut in proptest::option::of(0usize..400),
        ) {
            let mut json = format!(r#"{{"contexts":[{}]}}"#, contexts.join(", "));
            if let Some(cut) = cut.filter(|&c| c < json.len()) {
                json.truncate(cut);
            }
            let (untagged, visited) = both_ways(&json);
            proptest::prop_assert_eq!(untagged, visited, "{}", json);
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = native().decode(&bytes);
        }
    }
}
