//! A trace's metadata: free-form JSON (generator model, prompt version, route, usage), kept as the
//! text it arrived in until something asks for a field.
//!
//! Most traces are never asked: only a stratum rule on a metadata field, the judge audit (for an
//! LLM verdict) and replay's token counts read it. Building a `serde_json::Value` of every trace's
//! metadata (an allocation per key and string, and as many frees) was about 6 % of an ingested
//! trace's instructions; the text costs one. The decoder checks the text exactly as it would have
//! checked the `Value` (numbers in range, strings valid, nesting within serde_json's limit), so a
//! trace is accepted or rejected as before, and a field reads the same.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

/// A trace's metadata: none (absent or `null`), JSON text checked by the decoder, or a `Value`
/// built by a caller (OTLP span assembly, a field mapping).
#[derive(Debug, Clone, Default)]
pub struct Metadata(Repr);

#[derive(Debug, Clone, Default)]
enum Repr {
    #[default]
    Null,
    /// A `String`, so that a reused trace's metadata reuses its buffer.
    Text(String),
    Value(Value),
}

impl Metadata {
    /// Metadata from JSON text that has been checked with [`Metadata::check`]; `null` is none.
    pub(crate) fn from_checked_text(text: &str) -> Metadata {
        if text == "null" {
            Metadata(Repr::Null)
        } else {
            Metadata(Repr::Text(text.into()))
        }
    }

    /// [`Metadata::from_checked_text`] in place, in this metadata's own buffer when it has one.
    pub(crate) fn set_checked_text(&mut self, text: &str) {
        match &mut self.0 {
            Repr::Text(own) if text != "null" => {
                own.clear();
                own.push_str(text);
            }
            _ => *self = Metadata::from_checked_text(text),
        }
    }

    /// Whether `text` is one JSON value that `serde_json::Value` accepts, checked without building
    /// it: the same parser calls (numbers as `Value` reads them, so `1e400` fails), no allocation.
    pub(crate) fn check(text: &str) -> bool {
        super::decode::is_json_value(text)
    }

    /// Whether there is no metadata (absent or `null`).
    pub fn is_null(&self) -> bool {
        matches!(self.0, Repr::Null)
    }

    /// The whole metadata as a `Value` (`Null` when none).
    pub fn value(&self) -> Value {
        match &self.0 {
            Repr::Null => Value::Null,
            Repr::Text(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            Repr::Value(v) => v.clone(),
        }
    }

    /// The member `key` of the metadata object read as a `T`; `None` when the metadata is not an
    /// object, has no such member, or the member is not a `T`. A repeated key reads its last value,
    /// as `Value` keeps it. Other members are skipped unread.
    pub fn field<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        match &self.0 {
            Repr::Null => None,
            Repr::Text(text) => {
                let mut de = serde_json::Deserializer::from_str(text);
                FieldSeed::<AsValue<T>> {
                    key,
                    read: std::marker::PhantomData,
                }
                .deserialize(&mut de)
                .ok()
                .flatten()
                .and_then(|AsValue(found)| found)
            }
            Repr::Value(v) => T::deserialize(v.get(key)?).ok(),
        }
    }

    /// The token counts in the member `usage`, as `usage["prompt_tokens"].as_f64()` and
    /// `usage["completion_tokens"].as_f64()` read them off the `Value`, without building the usage
    /// object (replay reads them off every trace).
    pub fn usage(&self) -> Usage {
        match &self.0 {
            Repr::Null => Usage::default(),
            Repr::Text(text) => {
                let mut de = serde_json::Deserializer::from_str(text);
                FieldSeed::<Usage> {
                    key: "usage",
                    read: std::marker::PhantomData,
                }
                .deserialize(&mut de)
                .ok()
                .flatten()
                .unwrap_or_default()
            }
            Repr::Value(v) => Usage {
                prompt_tokens: v["usage"]["prompt_tokens"].as_f64(),
                completion_tokens: v["usage"]["completion_tokens"].as_f64(),
            },
        }
    }
}

/// The token counts a generator reported in its trace's `metadata.usage`: each the member's number,
/// or `None` when it is missing or not a number (or `usage` is no object).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<f64>,
    /// `usage.completion_tokens`.
    pub completion_tokens: Option<f64>,
}

/// Reads any JSON value: an object's two counts (numbers only, a repeated key's last value), and
/// nothing from any other value, never an error, so that it reads what indexing a `Value` reads.
impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UsageVisitor)
    }
}

struct UsageVisitor;

impl<'de> Visitor<'de> for UsageVisitor {
    type Value = Usage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Usage, A::Error> {
        let mut usage = Usage::default();
        while let Some(key) = map.next_key::<UsageKey>()? {
            let count = |v: Value| v.as_f64();
            match key {
                UsageKey::PromptTokens => usage.prompt_tokens = count(map.next_value()?),
                UsageKey::CompletionTokens => usage.completion_tokens = count(map.next_value()?),
                UsageKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(usage)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Usage, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Usage::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Usage, E> {
        Ok(Usage::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Usage, E> {
        Ok(Usage::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Usage, E> {
        Ok(Usage::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Usage, E> {
        Ok(Usage::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Usage, E> {
        Ok(Usage::default())
    }

    fn visit_unit<E>(self) -> Result<Usage, E> {
        Ok(Usage::default())
    }
}

/// The members of `usage` that are read.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum UsageKey {
    PromptTokens,
    CompletionTokens,
    #[serde(other)]
    Other,
}

impl From<Value> for Metadata {
    fn from(v: Value) -> Self {
        match v {
            Value::Null => Metadata(Repr::Null),
            v => Metadata(Repr::Value(v)),
        }
    }
}

/// Equal when the values are (text and `Value` alike).
impl PartialEq for Metadata {
    fn eq(&self, other: &Self) -> bool {
        self.value() == other.value()
    }
}

impl serde::Serialize for Metadata {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Value(v) => v.serialize(s),
            _ => self.value().serialize(s),
        }
    }
}

/// Read as a `Value` (the full decode's path).
impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Metadata::from)
    }
}

/// Reads one member of an object as an `R`: `Some(None)` when the object has no such member, `None`
/// (an error) when the value is not an object.
struct FieldSeed<'k, R> {
    key: &'k str,
    read: std::marker::PhantomData<R>,
}

/// A member's value read as a `Value`, then as a `T` (none when it is not one, as `Value::as_*`
/// would give).
struct AsValue<T>(Option<T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for AsValue<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(|v| AsValue(T::deserialize(v).ok()))
    }
}

impl<'de, R: DeserializeOwned> DeserializeSeed<'de> for FieldSeed<'_, R> {
    type Value = Option<R>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, R: DeserializeOwned> Visitor<'de> for FieldSeed<'_, R> {
    type Value = Option<R>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(hit) = map.next_key_seed(KeyIs(self.key))? {
            if hit {
                found = Some(map.next_value::<R>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key is the one wanted, compared without copying it.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

/// Where a label value is read from a trace's metadata: a top-level key (cheap: read off the
/// metadata's text), or a deeper JSON pointer.
#[derive(Debug, Clone)]
pub(crate) enum MetadataField {
    /// A top-level key (also an OpenTelemetry attribute that span assembly copied in).
    Key(String),
    /// A JSON pointer with more than one step.
    Pointer(String),
}

impl MetadataField {
    /// The field a JSON pointer (`/release`, `/deploy/role`) names.
    pub(crate) fn of_pointer(pointer: &str) -> MetadataField {
        let key = pointer.strip_prefix('/').unwrap_or(pointer);
        if key.contains(['/', '~']) {
            MetadataField::Pointer(pointer.to_owned())
        } else {
            MetadataField::Key(key.to_owned())
        }
    }

    /// The field's value when it is a non-empty string or a number.
    pub(crate) fn read(&self, metadata: &Metadata) -> Option<String> {
        let value = match self {
            MetadataField::Key(k) => metadata.field::<Value>(k)?,
            MetadataField::Pointer(p) => metadata.value().pointer(p)?.clone(),
        };
        match value {
            Value::String(s) if !s.is_empty() => Some(s),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> Metadata {
        assert!(Metadata::check(s), "{s}");
        Metadata::from_checked_text(s)
    }

    #[test]
    fn fields_read_as_from_the_value() {
        let s = r#"{"model":"gen-1","n":3,"usage":{"prompt_tokens":120},"model2":"\u00e9","model":"gen-2"}"#;
        let (t, v) = (
            text(s),
            Metadata::from(serde_json::from_str::<Value>(s).unwrap()),
        );
        for m in [&t, &v] {
            assert_eq!(m.field::<String>("model").as_deref(), Some("gen-2"));
            assert_eq!(m.field::<String>("model2").as_deref(), Some("é"));
            assert_eq!(m.field::<f64>("n"), Some(3.0));
            assert_eq!(m.field::<String>("n"), None);
            assert_eq!(
                m.field::<Value>("usage"),
                Some(json!({"prompt_tokens": 120}))
            );
            assert_eq!(m.field::<Value>("absent"), None);
        }
        assert_eq!(t, v);
        assert_eq!(serde_json::to_value(&t).unwrap(), t.value());
    }

    /// `usage()` reads what indexing the `Value` reads, whatever `usage` holds.
    #[test]
    fn usage_reads_as_indexing_the_value() {
        for s in [
            r#"{"usage":{"prompt_tokens":120,"completion_tokens":30}}"#,
            r#"{"usage":{"prompt_tokens":1.5e3,"other":{"x":[1,{"y":2}]},"completion_tokens":-2}}"#,
            r#"{"usage":{"completion_tokens":30}}"#,
            r#"{"usage":{"prompt_tokens":"120","completion_tokens":null}}"#,
            r#"{"usage":{"prompt_tokens":7,"prompt_tokens":true}}"#,
            r#"{"usage":{"prompt_tokens":true,"prompt_tokens":7}}"#,
            r#"{"usage":{"prompt\u005ftokens":9}}"#,
            r#"{"usage":[120,30]}"#,
            r#"{"usage":[[1],{"prompt_tokens":3}],"n":1}"#,
            r#"{"usage":"120"}"#,
            r#"{"usage":120}"#,
            r#"{"usage":-1.5}"#,
            r#"{"usage":true}"#,
            r#"{"usage":null}"#,
            r#"{"usage":[5],"usage":{"prompt_tokens":5}}"#,
            r#"{"usage":{"prompt_tokens":5},"usage":"x"}"#,
            r#"{"model":"m"}"#,
            r#"[{"usage":{"prompt_tokens":5}}]"#,
            "5",
            "null",
        ] {
            let v: Value = serde_json::from_str(s).unwrap();
            let want = Usage {
                prompt_tokens: v["usage"]["prompt_tokens"].as_f64(),
                completion_tokens: v["usage"]["completion_tokens"].as_f64(),
            };
            assert_eq!(text(s).usage(), want, "{s}");
            assert_eq!(Metadata::from(v).usage(), want, "{s}");
        }
        assert_eq!(Metadata::default().usage(), Usage::default());
    }

    #[test]
    fn not_an_object_has_no_fields_and_null_is_none() {
        assert_eq!(text("[1,2]").field::<Value>("a"), None);
        assert_eq!(text("5").value(), json!(5));
        assert!(text("null").is_null());
        assert!(Metadata::from(Value::Null).is_null());
        assert_eq!(Metadata::default().field::<Value>("a"), None);
    }

    #[test]
    fn checks_what_value_rejects() {
        for bad in [
            "1e400",
            r#"{"a":01}"#,
            r#"{"a":1,}"#,
            "{",
            "\"\u{1}\"",
            "1 2",
        ] {
            assert!(!Metadata::check(bad), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(!Metadata::check(&deep));
        assert!(serde_json::from_str::<Value>(&deep).is_err());
        for good in [
            r#"{"a":1e300,"b":[null,true],"c":{"d":"x"}}"#,
            "-0",
            r#""s""#,
        ] {
            assert!(Metadata::check(good), "{good}");
        }
    }
}
