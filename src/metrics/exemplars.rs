//! Exemplars: the trace id of the latest observation in each bucket of each series of the score and
//! judge-latency histograms, so a dashboard can jump from a low faithfulness bucket to the trace in
//! Tempo or Phoenix. The `prometheus` crate keeps no exemplars; this store sits beside its
//! histograms and [`super::openmetrics`] writes them out when the scraper asks for OpenMetrics.
//!
//! Memory is bounded by the histograms' own series: one exemplar per series per bucket (the latest
//! wins), and the series are the histograms' bounded label sets. A trace id that would break
//! OpenMetrics's 128-character limit on an exemplar's label set is not kept, and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::IntCounterVec;

/// OpenMetrics: "The combined length of the label names and values of an Exemplar's LabelSet MUST
/// NOT exceed 128 UTF-8 characters."
pub(crate) const MAX_LABEL_SET_CHARS: usize = 128;

/// The exemplar's one label.
pub(crate) const TRACE_ID_LABEL: &str = "trace_id";

/// Why a trace id was not kept as an exemplar; label values of `ragwatch_exemplars_dropped_total`.
pub(crate) const DROP_REASONS: [&str; 2] = ["too_long", "empty"];

/// One exemplar: the observation and the trace it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    /// The trace id.
    pub trace_id: String,
    /// The observed value.
    pub value: f64,
    /// When it was observed, in Unix milliseconds.
    pub(crate) timestamp_ms: u64,
}

/// The latest exemplar per series and bucket of the histograms registered with [`Exemplars::family`].
#[derive(Debug)]
pub struct Exemplars {
    families: Vec<Family>,
    series: Mutex<Store>,
    dropped: IntCounterVec,
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    labels: Vec<&'static str>,
    bounds: Vec<f64>,
}

#[derive(Debug, Default)]
struct Store {
    /// Per family: label values joined by `SEP` → the series' slots.
    by_family: Vec<HashMap<String, Slots>>,
    /// Reused for the lookup key, so a hit allocates nothing.
    key: String,
}

/// One series' exemplars: a slot per bucket, `+Inf` last.
type Slots = Arc<Mutex<Vec<Option<Exemplar>>>>;

/// One series of one histogram, looked up once ([`Exemplars::handle`]) and kept by a caller that
/// records into it for every trace ([`Exemplars::record_in`]): no label join, hash or map lookup.
#[derive(Debug, Clone)]
pub(crate) struct SeriesExemplars {
    family: usize,
    slots: Slots,
}

/// Cannot appear in a label value that came through the `prometheus` crate's registry intact.
const SEP: char = '\u{1f}';

impl Exemplars {
    /// An empty store; `dropped` counts the trace ids not kept, by reason.
    pub fn new(dropped: IntCounterVec) -> Self {
        for reason in DROP_REASONS {
            dropped.with_label_values(&[reason]);
        }
        Self {
            families: Vec::new(),
            series: Mutex::new(Store::default()),
            dropped,
        }
    }

    /// Keeps exemplars for the histogram `name`, whose labels (in the order its observations pass
    /// them) and bucket upper bounds (without `+Inf`) are given.
    pub fn family(&mut self, name: &'static str, labels: &[&'static str], bounds: &[f64]) {
        self.families.push(Family {
            name,
            labels: labels.to_vec(),
            bounds: bounds.to_vec(),
        });
        let store = self.series.get_mut().unwrap_or_else(|p| p.into_inner());
        store.by_family.push(HashMap::new());
    }

    /// Keeps `trace_id` as the exemplar of the bucket `value` falls in, in the series `labels` of
    /// the histogram `name`. A family that was not registered, or a NaN, is ignored.
    pub fn record(&self, name: &str, labels: &[&str], value: f64, trace_id: &str, now_ms: u64) {
        let Some(family) = self.families.iter().position(|f| f.name == name) else {
            return;
        };
        if self.keeps(value, trace_id) {
            let slots = self.slots(family, labels);
            self.put(family, &slots, value, trace_id, now_ms);
        }
    }

    /// The series `labels` of the histogram `name`, to record into with [`Exemplars::record_in`];
    /// `None` for a family that was not registered.
    pub(crate) fn handle(&self, name: &str, labels: &[&str]) -> Option<SeriesExemplars> {
        let family = self.families.iter().position(|f| f.name == name)?;
        Some(SeriesExemplars {
            family,
            slots: self.slots(family, labels),
        })
    }

    /// [`Exemplars::record`] into a series looked up before.
    pub(crate) fn record_in(
        &self,
        series: &SeriesExemplars,
        value: f64,
        trace_id: &str,
        now_ms: u64,
    ) {
        if self.keeps(value, trace_id) {
            self.put(series.family, &series.slots, value, trace_id, now_ms);
        }
    }

    /// Whether an observation can be an exemplar; a trace id that cannot is counted by reason.
    fn keeps(&self, value: f64, trace_id: &str) -> bool {
        if value.is_nan() {
            return false;
        }
        if trace_id.is_empty() {
            self.dropped.with_label_values(&["empty"]).inc();
            return false;
        }
        // Characters, not bytes; a byte count within the limit needs no count of characters.
        let room = MAX_LABEL_SET_CHARS - TRACE_ID_LABEL.len();
        if trace_id.len() > room && trace_id.chars().count() > room {
            self.dropped.with_label_values(&["too_long"]).inc();
            return false;
        }
        true
    }

    /// The slots of the series `labels` of the family at `family`, made on first use.
    fn slots(&self, family: usize, labels: &[&str]) -> Slots {
        let buckets = self.families[family].bounds.len() + 1;
        let mut guard = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let store = &mut *guard;
        join(&mut store.key, labels.iter().copied());
        let map = &mut store.by_family[family];
        match map.get(store.key.as_str()) {
            Some(slots) => Arc::clone(slots),
            None => Arc::clone(
                map.entry(store.key.clone())
                    .or_insert_with(|| Arc::new(Mutex::new(vec![None; buckets]))),
            ),
        }
    }

    /// Keeps the observation in its bucket's slot (the latest wins).
    fn put(&self, family: usize, slots: &Slots, value: f64, trace_id: &str, now_ms: u64) {
        let bounds = &self.families[family].bounds;
        let bucket = bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(bounds.len());
        let mut slots = slots.lock().unwrap_or_else(|p| p.into_inner());
        match &mut slots[bucket] {
            Some(e) => {
                // The trace id's buffer is reused.
                e.trace_id.clear();
                e.trace_id.push_str(trace_id);
                e.value = value;
                e.timestamp_ms = now_ms;
            }
            slot @ None => {
                *slot = Some(Exemplar {
                    trace_id: trace_id.to_owned(),
                    value,
                    timestamp_ms: now_ms,
                });
            }
        }
    }

    /// The bucket slots (`+Inf` last) of one series of `name`, empty when it has none; `label_of`
    /// gives the series' value of a label name. A copy, so the encoder writes without the lock.
    pub fn series<'a>(
        &self,
        name: &str,
        label_of: impl Fn(&str) -> Option<&'a str>,
    ) -> Vec<Option<Exemplar>> {
        let Some(f) = self.families.iter().position(|f| f.name == name) else {
            return Vec::new();
        };
        let values: Option<Vec<&str>> = self.families[f]
            .labels
            .iter()
            .map(|l| label_of(l))
            .collect();
        let Some(values) = values else {
            return Vec::new();
        };
        let mut key = String::new();
        join(&mut key, values.into_iter());
        let slots = {
            let store = self.series.lock().unwrap_or_else(|p| p.into_inner());
            store.by_family[f].get(&key).map(Arc::clone)
        };
        slots.map_or_else(Vec::new, |s| {
            s.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }

    /// Whether `name` is a histogram with exemplars.
    pub(crate) fn has_family(&self, name: &str) -> bool {
        self.families.iter().any(|f| f.name == name)
    }

    /// Exemplars held now, over every family (for tests and the bound).
    pub fn len(&self) -> usize {
        let store = self.series.lock().unwrap_or_else(|p| p.into_inner());
        store
            .by_family
            .iter()
            .flat_map(|m| m.values())
            .map(|slots| {
                let slots = slots.lock().unwrap_or_else(|p| p.into_inner());
                slots.iter().flatten().count()
            })
            .sum()
    }

    /// Whether no exemplar is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn join<'a>(key: &mut String, values: impl Iterator<Item = &'a str>) {
    key.clear();
    for v in values {
        key.push_str(v);
        key.push(SEP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::Opts;

    fn store() -> Exemplars {
        let dropped =
            IntCounterVec::new(Opts::new("dropped_total", "d"), &["reason"]).expect("valid");
        let mut e = Exemplars::new(dropped);
        e.family("h", &["stratum", "judge"], &[0.5, 1.0]);
        e
    }

    fn slots(e: &Exemplars, stratum: &str, judge: &str) -> Vec<Option<Exemplar>> {
        e.series("h", |l| match l {
            "stratum" => Some(stratum),
            "judge" => Some(judge),
            _ => None,
        })
    }

    #[test]
    fn the_latest_observation_of_each_bucket_wins() {
        let e = store();
        e.record("h", &["a", "llm"], 0.2, "t1", 1);
        e.record("h", &["a", "llm"], 0.3, "t2", 2);
        e.record("h", &["a", "llm"], 0.9, "t3", 3);
        e.record("h", &["a", "llm"], 7.0, "t4", 4);
        e.record("h", &["b", "llm"], 0.1, "t5", 5);
        let a = slots(&e, "a", "llm");
        let ids: Vec<Option<&str>> = a
            .iter()
            .map(|s| s.as_ref().map(|x| x.trace_id.as_str()))
            .collect();
        assert_eq!(ids, [Some("t2"), Some("t3"), Some("t4")]);
        assert_eq!(
            a[0].as_ref().map(|x| (x.value, x.timestamp_ms)),
            Some((0.3, 2))
        );
        assert_eq!(slots(&e, "b", "llm")[0].as_ref().unwrap().trace_id, "t5");
        assert!(slots(&e, "c", "llm").is_empty());
        // A value on a bound belongs to that bucket (le is inclusive).
        e.record("h", &["b", "llm"], 0.5, "t6", 6);
        assert_eq!(slots(&e, "b", "llm")[0].as_ref().unwrap().trace_id, "t6");
    }

    #[test]
    fn a_kept_handle_records_into_its_series() {
        let e = store();
        let h = e.handle("h", &["a", "llm"]).unwrap();
        assert!(e.handle("other", &["a"]).is_none());
        // A series with a handle and no observation yet holds no exemplar.
        assert_eq!(e.len(), 0);
        e.record_in(&h, 0.9, "t1", 1);
        e.record("h", &["a", "llm"], 0.2, "t2", 2);
        e.record_in(&h, f64::NAN, "t3", 3);
        e.record_in(&h, 0.1, "", 4);
        let ids: Vec<Option<String>> = slots(&e, "a", "llm")
            .into_iter()
            .map(|s| s.map(|x| x.trace_id))
            .collect();
        assert_eq!(ids, [Some("t2".into()), Some("t1".into()), None]);
        assert_eq!(e.dropped.with_label_values(&["empty"]).get(), 1);
    }

    #[test]
    fn memory_is_one_exemplar_per_series_and_bucket() {
        let e = store();
        for i in 0..10_000u64 {
            let stratum = ["a", "b", "c"][(i % 3) as usize];
            let judge = ["offline", "llm"][(i % 2) as usize];
            e.record(
                "h",
                &[stratum, judge],
                (i % 13) as f64 / 10.0,
                &format!("trace-{i}"),
                i,
            );
        }
        // 3 strata x 2 judges x (2 bounds + Inf).
        assert_eq!(e.len(), 18);
    }

    #[test]
    fn overlong_and_empty_trace_ids_are_counted_not_kept() {
        let e = store();
        let fits = "x".repeat(MAX_LABEL_SET_CHARS - TRACE_ID_LABEL.len());
        e.record("h", &["a", "llm"], 0.1, &fits, 1);
        assert_eq!(slots(&e, "a", "llm")[0].as_ref().unwrap().trace_id, fits);
        // Characters, not bytes: 120 two-byte characters fit.
        let wide = "é".repeat(MAX_LABEL_SET_CHARS - TRACE_ID_LABEL.len());
        e.record("h", &["a", "llm"], 0.1, &wide, 2);
        assert_eq!(slots(&e, "a", "llm")[0].as_ref().unwrap().trace_id, wide);
        e.record("h", &["a", "llm"], 0.1, &format!("{fits}y"), 3);
        e.record("h", &["a", "llm"], 0.1, "", 4);
        assert_eq!(slots(&e, "a", "llm")[0].as_ref().unwrap().trace_id, wide);
        assert_eq!(e.dropped.with_label_values(&["too_long"]).get(), 1);
        assert_eq!(e.dropped.with_label_values(&["empty"]).get(), 1);
        // Unknown families and NaN are ignored.
        e.record("other", &["a"], 0.1, "t", 5);
        e.record("h", &["a", "llm"], f64::NAN, "t", 5);
        assert_eq!(e.len(), 1);
    }
}
