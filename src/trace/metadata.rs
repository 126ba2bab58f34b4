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
    Text(Box<str>),
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
                FieldSeed::<T> {
                    key,
                    found: std::marker::PhantomData,
                }
                .deserialize(&mut de)
                .ok()
                .flatten()
            }
            Repr::Value(v) => T::deserialize(v.get(key)?).ok(),
        }
    }
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

/// Reads one member of an object: `Some(None)` when the object has no such member, `None` (an
/// error) when the value is not an object.
struct FieldSeed<'k, T> {
    key: &'k str,
    found: std::marker::PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for FieldSeed<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for FieldSeed<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(hit) = map.next_key_seed(KeyIs(self.key))? {
            if hit {
                // A member that is not a `T` reads as none, as `Value::as_*` would give.
                found = map.next_value::<Value>().map(|v| T::deserialize(v).ok())?;
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
