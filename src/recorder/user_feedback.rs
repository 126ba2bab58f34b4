//! User feedback events (`[labels.feedback]`): thumbs up and down, escalations, regenerations and
//! numeric ratings, each read as a kind from a bounded set (the declared kinds, `rating`, `other`)
//! and a polarity (negative, positive; none for `other`, which stays out of the AUROC).
//!
//! An event arrives as a label line with a `kind` (`{"trace_id": "...", "kind": "thumbs_down"}`,
//! `{"trace_id": "...", "kind": "rating", "value": 2}`), or attached to the trace itself at
//! `labels.feedback.trace_field` (a kind, an object with `kind` and `value`, or a list of them).
//! Feedback never counts as a faithfulness label, whatever else the line holds: an unhelpful
//! answer can be faithful.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::recorder::config::{Polarity, RatingScale, UserFeedbackConfig};
use crate::trace::metadata::Metadata;

/// The kind label value of an undeclared kind.
pub(crate) const OTHER: &str = "other";
/// The kind of a numeric rating.
pub(crate) const RATING: &str = "rating";

/// One feedback event: its kind's index in [`Kinds::labels`] and its polarity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    pub kind: usize,
    pub polarity: Option<Polarity>,
}

/// The bounded set of kinds: the declared ones, then `rating` (when a scale is set), then `other`.
#[derive(Debug, Clone)]
pub(crate) struct Kinds {
    /// (kind label value, polarity of a declared kind).
    labels: Vec<(String, Option<Polarity>)>,
    declared: BTreeMap<String, usize>,
    rating: Option<(RatingScale, usize)>,
    /// Where feedback attached to the trace is read.
    trace_field: Option<String>,
}

impl Kinds {
    pub fn new(config: &UserFeedbackConfig) -> Self {
        let mut labels: Vec<(String, Option<Polarity>)> = config
            .kinds
            .iter()
            .map(|(k, p)| (k.clone(), Some(*p)))
            .collect();
        let declared = labels
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let rating = config.rating.map(|scale| {
            labels.push((RATING.to_owned(), None));
            (scale, labels.len() - 1)
        });
        labels.push((OTHER.to_owned(), None));
        Self {
            labels,
            declared,
            rating,
            trace_field: config.trace_field.clone(),
        }
    }

    /// Every kind's label value.
    pub fn series(&self) -> Vec<&str> {
        self.labels.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// The label value of kind `i`.
    pub fn label(&self, i: usize) -> &str {
        self.labels.get(i).map_or(OTHER, |(k, _)| k.as_str())
    }

    /// One event from a kind and an optional value; `None` when it is not one (no kind, a rating
    /// without a number on the scale).
    pub fn event(&self, kind: &str, value: Option<&Value>) -> Option<Event> {
        if kind.is_empty() {
            return None;
        }
        if let Some(&i) = self.declared.get(kind) {
            return Some(Event {
                kind: i,
                polarity: self.labels[i].1,
            });
        }
        if let Some((scale, i)) = &self.rating
            && kind == RATING
        {
            let v = value?.as_f64()?;
            if !(scale.min..=scale.max).contains(&v) {
                return None;
            }
            let polarity = if v < scale.negative_below {
                Polarity::Negative
            } else {
                Polarity::Positive
            };
            return Some(Event {
                kind: *i,
                polarity: Some(polarity),
            });
        }
        Some(Event {
            kind: self.labels.len() - 1,
            polarity: None,
        })
    }

    /// The event a JSON value describes: a kind, or an object with `kind` (and `value`).
    fn of_value(&self, v: &Value) -> Option<Event> {
        match v {
            Value::String(kind) => self.event(kind, None),
            Value::Object(o) => self.event(o.get("kind")?.as_str()?, o.get("value")),
            _ => None,
        }
    }

    /// The events attached to a trace at `trace_field`, and how many entries there were not
    /// events.
    pub fn attached(&self, metadata: &Metadata) -> (Vec<Event>, u64) {
        let Some(pointer) = &self.trace_field else {
            return (Vec::new(), 0);
        };
        if metadata.is_null() {
            return (Vec::new(), 0);
        }
        let key = pointer.strip_prefix('/').unwrap_or(pointer);
        let found = if key.contains(['/', '~']) {
            metadata.value().pointer(pointer).cloned()
        } else {
            metadata.field::<Value>(key)
        };
        let items = match found {
            None | Some(Value::Null) => return (Vec::new(), 0),
            Some(Value::Array(items)) => items,
            Some(v) => vec![v],
        };
        let mut events = Vec::new();
        let mut invalid = 0;
        for item in items.iter().take(16) {
            match self.of_value(item) {
                Some(e) => events.push(e),
                None => invalid += 1,
            }
        }
        (events, invalid)
    }
}

/// Whether a label line is a feedback event (a JSON object with a `kind`).
pub(crate) fn is_feedback(v: &Value) -> bool {
    v.get("kind").is_some()
}
