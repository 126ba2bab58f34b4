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
//! Each joined label also counts the judge's score in a fixed score bucket by the human verdict
//! (`ragwatch_labelled_score_ratio`, `ragwatch_labelled_scores_total`), and a ring of time slots
//! keeps the same counts for `labels.auroc_window_secs`, from which [`Feedback::aurocs`] gives each
//! judge's AUROC against people per stratum: the statistic the recording rule computes fleet-wide.
//!
//! Labels are not fed into the combined estimate: people label the traces they choose (a thumbs-down
//! is not a random draw), so they are not a known-probability sample, and weighting them as one would
//! bias the estimate. They measure agreement instead.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::dimensions::{JudgeKind, StratumId};
use crate::eval::{LABEL_SCORE_BOUNDS, auroc_binned, label_score_bucket};
use crate::metrics::Metrics;
use crate::recorder::config::LabelsConfig;

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
    /// Labelled scores per (judge, stratum), by time slot.
    rings: HashMap<(JudgeKind, StratumId), ScoreRing>,
}

/// Time slots of a [`ScoreRing`]: the window moves in steps of 1/60 of its length.
const SLOTS: u64 = 60;

/// Counts per score bucket of faithful (`[1]`) and unfaithful (`[0]`) labels.
type BucketCounts = [[u64; LABEL_SCORE_BOUNDS.len()]; 2];

/// Labelled scores of one judge and stratum over a sliding window of time slots; a slot is reused
/// (cleared) when time comes round to it again.
#[derive(Debug, Clone)]
struct ScoreRing {
    /// (slot number since the epoch, counts) per position.
    slots: Vec<(u64, BucketCounts)>,
}

impl ScoreRing {
    fn new() -> Self {
        Self {
            slots: vec![(u64::MAX, [[0; LABEL_SCORE_BOUNDS.len()]; 2]); SLOTS as usize],
        }
    }

    fn add(&mut self, slot: u64, faithful: bool, score: f64) {
        let at = &mut self.slots[(slot % SLOTS) as usize];
        if at.0 != slot {
            *at = (slot, [[0; LABEL_SCORE_BOUNDS.len()]; 2]);
        }
        at.1[usize::from(faithful)][label_score_bucket(score)] += 1;
    }

    /// The counts of the last `SLOTS` slots up to `slot`.
    fn sum(&self, slot: u64) -> BucketCounts {
        let mut out = [[0; LABEL_SCORE_BOUNDS.len()]; 2];
        for (at, counts) in &self.slots {
            if *at <= slot && slot - at < SLOTS {
                for (o, c) in out.iter_mut().zip(counts) {
                    for (o, c) in o.iter_mut().zip(c) {
                        *o += c;
                    }
                }
            }
        }
        out
    }
}

/// One judge's agreement with people in one stratum over the AUROC window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LabelAuroc {
    /// The judge.
    pub judge: JudgeKind,
    /// The stratum.
    pub stratum: StratumId,
    /// Labels saying faithful, with a score from this judge.
    pub faithful: u64,
    /// Labels saying unfaithful, with a score from this judge.
    pub unfaithful: u64,
    /// The AUROC from the bucketed scores; `None` while a class is empty.
    pub auroc: Option<f64>,
}

/// The label join: remembered traces and the thresholds that turn scores into verdicts.
#[derive(Debug)]
pub(crate) struct Feedback {
    store: Mutex<Store>,
    max_traces: usize,
    ttl_ms: u64,
    offline_threshold: f64,
    llm_threshold: f64,
    slot_ms: u64,
}

#[derive(Deserialize)]
struct Label {
    trace_id: String,
    faithful: serde_json::Value,
}

/// One label line as (trace id, faithful): `faithful` a boolean, or a score in [0, 1] read as
/// faithful from 0.5 up. `None` when it is not a label (bad JSON, no or empty trace id, no usable
/// `faithful`). Shared by the live join and `replay --labels`.
pub(crate) fn parse_label(line: &[u8]) -> Option<(String, bool)> {
    let label = serde_json::from_slice::<Label>(line).ok()?;
    let faithful = match &label.faithful {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Number(n) => match n.as_f64() {
            Some(v) if (0.0..=1.0).contains(&v) => v >= 0.5,
            _ => return None,
        },
        _ => return None,
    };
    (!label.trace_id.is_empty()).then_some((label.trace_id, faithful))
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
            slot_ms: (config.auroc_window_secs.saturating_mul(1000) / SLOTS).max(1),
        }
    }

    /// Remembers `judge`'s faithfulness score of `trace_id` (absent scores are remembered too: a
    /// trace the judge found no claims in can still be labelled).
    pub(crate) fn remember(
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

    /// Every judge's and stratum's labelled scores over the AUROC window ending at `now_ms`, in
    /// judge then stratum order.
    pub(crate) fn aurocs(&self, now_ms: u64) -> Vec<LabelAuroc> {
        let slot = now_ms / self.slot_ms;
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<LabelAuroc> = store
            .rings
            .iter()
            .map(|(&(judge, stratum), ring)| {
                let [neg, pos] = ring.sum(slot);
                LabelAuroc {
                    judge,
                    stratum,
                    faithful: pos.iter().sum(),
                    unfaithful: neg.iter().sum(),
                    auroc: auroc_binned(&pos, &neg),
                }
            })
            .collect();
        out.sort_by_key(|a| (a.judge.name(), a.stratum));
        out
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
        let Some((trace_id, faithful)) = parse_label(line) else {
            return LabelOutcome::Invalid;
        };
        let key = xxh3_64(trace_id.as_bytes());
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
                metrics
                    .labelled
                    .observe(judge.name(), stratum, faithful, score);
                self.store
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .rings
                    .entry((judge, r.stratum))
                    .or_insert_with(ScoreRing::new)
                    .add(now_ms / self.slot_ms, faithful, score);
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
                auroc_window_secs: 60,
                ..LabelsConfig::default()
            },
            0.5,
        )
    }

    #[test]
    fn windowed_auroc_from_bucketed_label_counts() {
        let names = vec!["head".to_string()];
        let m = Metrics::new(&names, "test");
        let f = feedback(10);
        // Faithful 0.93 and 0.81, unfaithful 0.84 and 0.12: 0.81 and 0.84 share the bucket
        // (0.8, 0.85], a tie (1/2) where the exact AUROC counts a loss. U = 2 + 1/2 + 1 = 3.5 of
        // 4 pairs: 0.875.
        for (id, score) in [("a", 0.93), ("b", 0.81), ("c", 0.84), ("d", 0.12)] {
            f.remember(id, 0, JudgeKind::Offline, Some(score), 0);
        }
        for (id, faithful) in [("a", true), ("b", true), ("c", false), ("d", false)] {
            let line = format!("{{\"trace_id\": \"{id}\", \"faithful\": {faithful}}}");
            assert_eq!(
                f.label(line.as_bytes(), &names, &m, 1000),
                LabelOutcome::Joined
            );
        }
        let a = f.aurocs(2000);
        assert_eq!(
            a,
            vec![LabelAuroc {
                judge: JudgeKind::Offline,
                stratum: 0,
                faithful: 2,
                unfaithful: 2,
                auroc: Some(0.875),
            }]
        );
        // The exported per-bucket counters hold the same counts (le of the shared bucket: 0.85).
        let bucket = |human: &str, le: &str| {
            m.labelled
                .bucket
                .with_label_values(&["offline", "head", human, le])
                .get()
        };
        assert_eq!(
            (bucket("faithful", "0.85"), bucket("unfaithful", "0.85")),
            (1, 1)
        );
        assert_eq!(bucket("unfaithful", "0.15"), 1);
        // Labels older than the window (60 s here) no longer count.
        let later = f.aurocs(61_500);
        assert_eq!((later[0].faithful, later[0].auroc), (0, None));
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
        assert_eq!(f.store.lock().unwrap().traces.len(), 2);
        assert_eq!(
            f.label(br#"{"trace_id": "a", "faithful": true}"#, &names, &m, 40),
            LabelOutcome::UnknownTrace
        );
        assert_eq!(m.labels_received.with_label_values(&["invalid"]).get(), 3);
    }
}
