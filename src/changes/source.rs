//! Sources: where a trace's contexts come from (a collection, an index, a document's origin), read
//! from each context's id by a pattern or from the trace's metadata, mapped onto a bounded set of
//! label values: the declared sources, `other` (an undeclared value) and `unknown` (no value).

use std::collections::HashMap;

use regex::Regex;

use super::config::{OTHER_SOURCE, SourceConfig, UNKNOWN_SOURCE};
use crate::trace::{MetadataField, Trace};

/// Index into [`Sources::names`].
pub(crate) type SourceId = usize;

/// A set of sources, one bit each (at most 64 declared, plus `other` and `unknown`).
pub(crate) type SourceSet = u128;

/// Assigns sources; built only when `changes.source` declares some.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    names: Vec<String>,
    pattern: Option<Regex>,
    fields: Vec<MetadataField>,
    map: HashMap<String, SourceId>,
}

impl Sources {
    /// Builds from a validated config; `None` when sources are off.
    pub fn new(config: &SourceConfig) -> Option<Self> {
        if !config.enabled() {
            return None;
        }
        let mut names = config.declared.clone();
        names.push(OTHER_SOURCE.into());
        names.push(UNKNOWN_SOURCE.into());
        let id = |name: &str| names.iter().position(|n| n == name);
        let mut map: HashMap<String, SourceId> = config
            .map
            .iter()
            .filter_map(|(raw, s)| Some((raw.clone(), id(s)?)))
            .collect();
        for (i, s) in config.declared.iter().enumerate() {
            map.entry(s.clone()).or_insert(i);
        }
        Some(Self {
            pattern: config
                .id_pattern
                .as_deref()
                .and_then(|p| Regex::new(p).ok()),
            fields: config
                .fields
                .iter()
                .map(|f| MetadataField::of_pointer(f))
                .collect(),
            names,
            map,
        })
    }

    /// Every label value: the declared sources, then `other` and `unknown`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn other(&self) -> SourceId {
        self.names.len() - 2
    }

    fn unknown(&self) -> SourceId {
        self.names.len() - 1
    }

    /// The source a raw value names.
    pub fn of_value(&self, raw: &str) -> SourceId {
        self.map.get(raw).copied().unwrap_or(self.other())
    }

    /// The source of a context id, when the pattern reads one from it.
    fn of_id(&self, id: &str) -> Option<SourceId> {
        let raw = self.pattern.as_ref()?.captures(id)?.get(1)?.as_str();
        (!raw.is_empty()).then(|| self.of_value(raw))
    }

    /// The distinct sources of `trace`'s contexts: each context's from its id, else the trace's
    /// from its metadata, else `unknown`.
    pub fn of_trace(&self, trace: &Trace) -> SourceSet {
        let mut trace_source: Option<SourceId> = None;
        let mut read_metadata = false;
        let mut set: SourceSet = 0;
        for c in &trace.contexts {
            let id = c.id.as_deref().and_then(|id| self.of_id(id));
            let source = match id {
                Some(s) => s,
                None => {
                    if !read_metadata {
                        read_metadata = true;
                        trace_source = self
                            .fields
                            .iter()
                            .find_map(|f| f.read(&trace.metadata))
                            .map(|raw| self.of_value(&raw));
                    }
                    trace_source.unwrap_or(self.unknown())
                }
            };
            set |= 1 << source;
        }
        set
    }

    /// The sources in `set`, in label order.
    pub fn members(&self, set: SourceSet) -> impl Iterator<Item = SourceId> + '_ {
        (0..self.names.len()).filter(move |i| set & (1 << i) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Metadata;

    fn sources(toml: &str) -> Sources {
        Sources::new(&toml::from_str(toml).unwrap()).unwrap()
    }

    #[test]
    fn ids_then_metadata_then_unknown() {
        let s = sources(
            r#"
            declared = ["handbook", "wiki"]
            id_pattern = "^([^/]+)/"
            fields = ["/index"]
            map = { "kb-2024" = "wiki" }
            "#,
        );
        let mut t = Trace::of(
            "q",
            &[("handbook/leave.md#3", "x"), ("kb-2024/a", "y"), ("b", "z")],
            "a",
        );
        let names = |set| {
            s.members(set)
                .map(|i| s.names()[i].as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(s.of_trace(&t)), ["handbook", "wiki", "unknown"]);
        t.metadata = Metadata::from_checked_text(r#"{"index": "crm"}"#);
        assert_eq!(names(s.of_trace(&t)), ["handbook", "wiki", "other"]);
        t.metadata = Metadata::from_checked_text(r#"{"index": "handbook"}"#);
        assert_eq!(names(s.of_trace(&t)), ["handbook", "wiki"]);
    }
}
