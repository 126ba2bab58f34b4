//! Human labels joined to recent traces: reviewer verdicts and user feedback
//! (`{"trace_id": "...", "faithful": true | false | 0.0..1.0, "source": "review"}`) arrive after the
//! trace, on `POST /v1/labels`; each is joined to what the judges said about that trace, so
//! `ragwatch_label_agreement_total{judge, stratum, agree}` shows a judge drifting away from people.
//!
//! Bounded: the store keeps the judges' scores of the last `labels.max_traces` traces for
//! `labels.ttl_secs` (a trace id's hash and a few numbers, about 40 bytes each); older ones are evicted
//! first. A label for a trace the store no longer (or never) held is counted as `unknown_trace`, one
//! past the TTL as `expired`, one that does not parse as `invalid`: counted, never silently dropped.
//!
//! Labels are not fed into the combined estimate: people label the traces they choose (a thumbs-down
//! is not a random draw), so they are not a known-probability sample, and weighting them as one would
//! bias the estimate. They measure agreement instead.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::config::LabelsConfig;
use crate::labels::{JudgeKind, StratumId};
use crate::metrics::Metrics;

/// What became of one label; a label value of `ragwatch_labels_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOutcome {
    /// Joined to a remembered trace and compared with its judges.
    Joined,
    /// No remembered trace has this id (evicted, never seen, or not seen yet).
    UnknownTrace,
    /// The trace was remembered, but longer ago than the TTL.
    Expired,
    /// Not a label: bad JSON, no trace id, or no usable `faithful`.
    Invalid,
}

impl LabelOutcome {
    /// Every outcome, for pre-registering series.
    pub const ALL: [LabelOutcome; 4] = [
        LabelOutcome::Joined,
        LabelOutcome::UnknownTrace,
        LabelOutcome::Expired,
        LabelOutcome::Invalid,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LabelOutcome::Joined => "joined",
            LabelOutcome::UnknownTrace => "unknown_trace",
            LabelOutcome::Expired => "expired",
            LabelOutcome::Invalid => "invalid",
        }
    }
}

/// The judges' faithfulness scores of one remembered trace.
#[derive(Debug, Clone, Copy)]
struct Remembered {
    stratum: StratumId,
    at_ms: u64,
    offline: Option<f64>,
    llm: Option<f64>,
}

#[derive(Debug, Default)]
struct Store {
    traces: HashMap<u64, Remembered>,
    /// Insertion order, for eviction; a key may appear again after it was refreshed.
    order: VecDeque<(u64, u64)>,
}

/// The label join: remembered traces and the thresholds that turn scores into verdicts.
#[derive(Debug)]
pub struct Feedback {
    store: Mutex<Store>,
    max_traces: usize,
    ttl_ms: u64,
    offline_threshold: f64,
    llm_threshold: f64,
}

#[derive(Deserialize)]
struct Label {
    trace_id: String,
    faithful: serde_json::Value,
}

impl Feedback {
    /// A store for `config`; `offline_threshold` is `judge.faithful_threshold`.
    pub fn new(config: &LabelsConfig, offline_threshold: f64) -> Self {
        Self {
            store: Mutex::new(Store::default()),
            max_traces: config.max_traces.max(1),
            ttl_ms: config.ttl_secs.saturating_mul(1000),
            offline_threshold,
            llm_threshold: config.llm_faithful_threshold,
        }
    }

    /// Remembers `judge`'s faithfulness score of `trace_id` (absent scores are remembered too: a
    /// trace the judge found no claims in can still be labelled).
    pub fn remember(
        &self,
        trace_id: &str,
        stratum: StratumId,
        judge: JudgeKind,
        score: Option<f64>,
        now_ms: u64,
    ) {
        let key = xxh3_64(trace_id.as_bytes());
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = !store.traces.contains_key(&key);
        let entry = store.traces.entry(key).or_insert(Remembered {
            stratum,
            at_ms: now_ms,
            offline: None,
            llm: None,
        });
        match judge {
            JudgeKind::Offline => entry.offline = score,
            JudgeKind::Llm => entry.llm = score,
            JudgeKind::Combined => {}
        }
        if fresh {
            store.order.push_back((key, now_ms));
        }
        while store.traces.len() > self.max_traces {
            let Some((old, _)) = store.order.pop_front() else {
                break;
            };
            store.traces.remove(&old);
        }
    }

    /// Traces remembered now.
    pub fn len(&self) -> usize {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .traces
            .len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Joins one label line and counts the outcome and each judge's agreement.
    pub fn label(
        &self,
        line: &[u8],
        names: &[String],
        metrics: &Metrics,
        now_ms: u64,
    ) -> LabelOutcome {
        let outcome = self.join(line, names, metrics, now_ms);
        metrics
            .labels_received
            .with_label_values(&[outcome.as_str()])
            .inc();
        outcome
    }

    fn join(&self, line: &[u8], names: &[String], metrics: &Metrics, now_ms: u64) -> LabelOutcome {
        let Ok(label) = serde_json::from_slice::<Label>(line) else {
            return LabelOutcome::Invalid;
        };
        let faithful = match &label.faithful {
            serde_json::Value::Bool(b) => *b,
            serde_json::Value::Number(n) => match n.as_f64() {
                Some(v) if (0.0..=1.0).contains(&v) => v >= 0.5,
                _ => return LabelOutcome::Invalid,
            },
            _ => return LabelOutcome::Invalid,
        };
        if label.trace_id.is_empty() {
            return LabelOutcome::Invalid;
        }
        let key = xxh3_64(label.trace_id.as_bytes());
        let remembered = {
            let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
            store.traces.get(&key).copied()
        };
        let Some(r) = remembered else {
            return LabelOutcome::UnknownTrace;
        };
        if now_ms.saturating_sub(r.at_ms) > self.ttl_ms {
            return LabelOutcome::Expired;
        }
        let stratum = names.get(r.stratum).map(String::as_str).unwrap_or("other");
        for (judge, score, threshold) in [
            (JudgeKind::Offline, r.offline, self.offline_threshold),
            (JudgeKind::Llm, r.llm, self.llm_threshold),
        ] {
            if let Some(score) = score {
                let agree = (score >= threshold) == faithful;
                metrics
                    .label_agreement
                    .with_label_values(&[
                        judge.name(),
                        stratum,
                        if agree { "true" } else { "false" },
                    ])
                    .inc();
            }
        }
        LabelOutcome::Joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feedback(max: usize) -> Feedback {
        Feedback::new(
            &LabelsConfig {
                enabled: true,
                max_traces: max,
                ttl_secs: 60,
                llm_faithful_threshold: 1.0,
            },
            0.5,
        )
    }

    #[test]
    fn joins_counts_agreement_and_bounds_the_store() {
        let names = vec!["head".to_string(), "tail".to_string()];
        let m = Metrics::new(&names, "test");
        let f = feedback(2);
        f.remember("a", 0, JudgeKind::Offline, Some(0.7), 0);
        f.remember("a", 0, JudgeKind::Llm, Some(0.5), 10);
        f.remember("b", 1, JudgeKind::Offline, Some(0.2), 20);
        let agree = |judge: &str, stratum: &str, v: &str| {
            m.label_agreement
                .with_label_values(&[judge, stratum, v])
                .get()
        };
        // Humans say `a` is faithful: the offline judge agrees (0.7 >= 0.5), the LLM judge found an
        // unsupported claim (0.5 < 1.0) and disagrees.
        let line = br#"{"trace_id": "a", "faithful": true, "source": "review"}"#;
        assert_eq!(f.label(line, &names, &m, 1000), LabelOutcome::Joined);
        assert_eq!(
            (
                agree("offline", "head", "true"),
                agree("llm", "head", "false")
            ),
            (1, 1)
        );
        assert_eq!(
            f.label(br#"{"trace_id": "b", "faithful": 0.1}"#, &names, &m, 1000),
            LabelOutcome::Joined
        );
        assert_eq!(agree("offline", "tail", "true"), 1);
        // Past the TTL; unknown; not a label.
        assert_eq!(
            f.label(
                br#"{"trace_id": "a", "faithful": true}"#,
                &names,
                &m,
                70_000
            ),
            LabelOutcome::Expired
        );
        assert_eq!(
            f.label(br#"{"trace_id": "zz", "faithful": true}"#, &names, &m, 0),
            LabelOutcome::UnknownTrace
        );
        for bad in [
            &br#"{"faithful": true}"#[..],
            br#"{"trace_id": "a", "faithful": 3}"#,
            b"nope",
        ] {
            assert_eq!(f.label(bad, &names, &m, 0), LabelOutcome::Invalid);
        }
        // A third trace evicts the oldest.
        f.remember("c", 0, JudgeKind::Offline, Some(0.9), 30);
        assert_eq!(f.len(), 2);
        assert_eq!(
            f.label(br#"{"trace_id": "a", "faithful": true}"#, &names, &m, 40),
            LabelOutcome::UnknownTrace
        );
        assert_eq!(m.labels_received.with_label_values(&["invalid"]).get(), 3);
    }
}
