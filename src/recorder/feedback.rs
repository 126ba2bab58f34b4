//! Human labels joined to recent traces: reviewer verdicts
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
//!
//! User feedback (`labels.feedback`, see `user_feedback`) is its own signal on the same store: a
//! line with a `kind` is never a faithfulness label. Each event with a polarity counts the judges'
//! scores of its trace by polarity in the same buckets, and [`Feedback::user_aurocs`] gives each
//! judge's AUROC at telling positive from negative feedback (a low score predicting the negative).
//! An event joined before a judge's verdict (feedback attached to the trace, or posted before the
//! sampled judge answered) is kept with the trace, two counters, and counts that judge's score
//! when it arrives.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::dimensions::{JudgeKind, StratumId};
use crate::eval::{LABEL_SCORE_BOUNDS, auroc_binned, label_score_bucket};
use crate::metrics::Metrics;
use crate::metrics::feedback::FeedbackMetrics;
use crate::recorder::config::{LabelsConfig, Polarity};
use crate::recorder::user_feedback::{Event, Kinds, is_feedback};
use crate::trace::metadata::Metadata;

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
    stratum: u32,
    /// User feedback events joined so far, negative then positive (saturating).
    feedback: [u8; 2],
    at_ms: u64,
    offline: Option<f64>,
    /// The sampled judge's score, and which judge that is (the LLM judge or the classifier).
    sampled: Option<f64>,
    sampled_judge: JudgeKind,
}

#[derive(Debug, Default)]
struct Store {
    traces: HashMap<u64, Remembered>,
    /// Insertion order, for eviction; a key may appear again after it was refreshed.
    order: VecDeque<(u64, u64)>,
    /// Labelled scores per (judge, stratum), by time slot.
    rings: HashMap<(JudgeKind, StratumId), ScoreRing>,
    /// Scores of traces with user feedback per (judge, stratum), by time slot (`[0]` negative).
    feedback_rings: HashMap<(JudgeKind, StratumId), ScoreRing>,
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

/// One judge's AUROC at telling positive from negative user feedback in one stratum.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FeedbackAuroc {
    /// The judge.
    pub judge: JudgeKind,
    /// The stratum.
    pub stratum: StratumId,
    /// Negative feedback events with a score from this judge.
    pub negative: u64,
    /// Positive feedback events with a score from this judge.
    pub positive: u64,
    /// The AUROC from the bucketed scores (positive as the higher class); `None` while a class is
    /// empty.
    pub auroc: Option<f64>,
}

/// User feedback's part of the join, when `labels.feedback.enabled`.
#[derive(Debug)]
struct User {
    kinds: Kinds,
    metrics: FeedbackMetrics,
    names: Vec<String>,
    min_per_class: u64,
    floor: f64,
}

/// The label join: remembered traces and the thresholds that turn scores into verdicts.
#[derive(Debug)]
pub(crate) struct Feedback {
    store: Mutex<Store>,
    user: Option<User>,
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
    /// Present on user feedback, which is never a faithfulness label.
    #[serde(default)]
    kind: Option<serde::de::IgnoredAny>,
}

/// One label line as (trace id, faithful): `faithful` a boolean, or a score in [0, 1] read as
/// faithful from 0.5 up. `None` when it is not a label (bad JSON, no or empty trace id, no usable
/// `faithful`, or a `kind`: user feedback). Shared by the live join and `replay --labels`.
pub(crate) fn parse_label(line: &[u8]) -> Option<(String, bool)> {
    let label = serde_json::from_slice::<Label>(line).ok()?;
    if label.kind.is_some() {
        return None;
    }
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

fn polarity_index(p: Polarity) -> usize {
    match p {
        Polarity::Negative => 0,
        Polarity::Positive => 1,
    }
}

/// Sets a judge's AUROC series (removed when `auroc` is `None`: too few of a class) and its
/// below-floor flag (`floor` 0: never); returns whether the flag rose now, for the caller to log once.
pub(crate) fn export_floored_auroc(
    gauge: &prometheus::GaugeVec,
    below_floor: &prometheus::IntGaugeVec,
    labels: &[&str],
    auroc: Option<f64>,
    floor: f64,
) -> bool {
    let below = auroc.is_some_and(|v| floor > 0.0 && v < floor);
    match auroc {
        Some(v) => gauge.with_label_values(labels).set(v),
        None => {
            let _ = gauge.remove_label_values(labels);
        }
    }
    let flag = below_floor.with_label_values(labels);
    let rose = below && flag.get() == 0;
    flag.set(i64::from(below));
    rose
}

impl Feedback {
    /// A store for `config`; `offline_threshold` is `judge.faithful_threshold`.
    #[cfg(test)]
    pub fn new(config: &LabelsConfig, offline_threshold: f64) -> Self {
        Self::with_user_feedback(config, offline_threshold, None)
    }

    /// [`Feedback::new`], with user feedback's families registered on `registry` (for `strata`
    /// and `judges`, every series at zero) when `labels.feedback.enabled`.
    pub fn with_user_feedback(
        config: &LabelsConfig,
        offline_threshold: f64,
        families: Option<(&prometheus::Registry, &[String], &[JudgeKind])>,
    ) -> Self {
        let user =
            families
                .filter(|_| config.feedback.enabled)
                .map(|(registry, strata, judges)| {
                    let kinds = Kinds::new(&config.feedback);
                    let metrics = FeedbackMetrics::register(registry);
                    let outcomes = LabelOutcome::ALL.map(LabelOutcome::as_str);
                    let judges: Vec<&str> = judges.iter().map(|j| j.name()).collect();
                    metrics.precreate(&outcomes, &judges, strata, &kinds.series());
                    metrics.floor.set(config.feedback.auroc_floor);
                    metrics
                        .min_per_class
                        .set(config.feedback.auroc_min_per_class as i64);
                    User {
                        kinds,
                        metrics,
                        names: strata.to_vec(),
                        min_per_class: config.feedback.auroc_min_per_class,
                        floor: config.feedback.auroc_floor,
                    }
                });
        Self {
            user,
            store: Mutex::new(Store::default()),
            max_traces: config.max_traces.max(1),
            ttl_ms: config.ttl_secs.saturating_mul(1000),
            offline_threshold,
            llm_threshold: config.llm_faithful_threshold,
            slot_ms: (config.auroc_window_secs.saturating_mul(1000) / SLOTS).max(1),
        }
    }

    /// The threshold that turns `judge`'s score into a verdict: the LLM judge's own, else the
    /// offline judge's (the classifier's probability reads as the offline judge's score does).
    fn sampled_threshold(&self, judge: JudgeKind) -> f64 {
        if judge == JudgeKind::Llm {
            self.llm_threshold
        } else {
            self.offline_threshold
        }
    }

    /// Remembers `judge`'s faithfulness score of `trace_id` (absent scores are remembered too: a
    /// trace the judge found no claims in can still be labelled).
    #[cfg(test)]
    pub(crate) fn remember(
        &self,
        trace_id: &str,
        stratum: StratumId,
        judge: JudgeKind,
        score: Option<f64>,
        now_ms: u64,
    ) {
        self.remember_with(trace_id, stratum, judge, score, None, now_ms);
    }

    /// [`Feedback::remember`], reading the user feedback attached to the trace (`metadata`) the
    /// first time the trace is remembered; the trace's feedback so far counts this judge's score.
    pub(crate) fn remember_with(
        &self,
        trace_id: &str,
        stratum: StratumId,
        judge: JudgeKind,
        score: Option<f64>,
        metadata: Option<&Metadata>,
        now_ms: u64,
    ) {
        let key = xxh3_64(trace_id.as_bytes());
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = !store.traces.contains_key(&key);
        let attached = match (&self.user, metadata) {
            (Some(u), Some(m)) if fresh => u.kinds.attached(m),
            _ => (Vec::new(), 0),
        };
        let entry = store.traces.entry(key).or_insert(Remembered {
            stratum: u32::try_from(stratum).unwrap_or(u32::MAX),
            feedback: [0; 2],
            at_ms: now_ms,
            offline: None,
            sampled: None,
            sampled_judge: JudgeKind::Llm,
        });
        match judge {
            JudgeKind::Offline => entry.offline = score,
            JudgeKind::Llm | JudgeKind::Classifier => {
                entry.sampled = score;
                entry.sampled_judge = judge;
            }
            JudgeKind::Combined => {}
        }
        let (events, invalid) = attached;
        if let Some(u) = &self.user {
            for e in &events {
                u.count_event(stratum, e);
                u.received(LabelOutcome::Joined);
                if let Some(p) = e.polarity {
                    let at = &mut entry.feedback[polarity_index(p)];
                    *at = at.saturating_add(1);
                }
            }
            for _ in 0..invalid {
                u.received(LabelOutcome::Invalid);
            }
            let held = entry.feedback;
            if let Some(score) = score
                && held != [0, 0]
            {
                let ring = store
                    .feedback_rings
                    .entry((judge, stratum))
                    .or_insert_with(ScoreRing::new);
                for (polarity, n) in held.iter().enumerate() {
                    for _ in 0..*n {
                        u.metrics
                            .observe(judge.name(), u.name(stratum), polarity, score);
                        ring.add(now_ms / self.slot_ms, polarity == 1, score);
                    }
                }
            }
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

    /// Every judge's and stratum's scores of traces with user feedback over the AUROC window
    /// ending at `now_ms`, in judge then stratum order; empty without user feedback.
    pub(crate) fn user_aurocs(&self, now_ms: u64) -> Vec<FeedbackAuroc> {
        let slot = now_ms / self.slot_ms;
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<FeedbackAuroc> = store
            .feedback_rings
            .iter()
            .map(|(&(judge, stratum), ring)| {
                let [neg, pos] = ring.sum(slot);
                FeedbackAuroc {
                    judge,
                    stratum,
                    positive: pos.iter().sum(),
                    negative: neg.iter().sum(),
                    auroc: auroc_binned(&pos, &neg),
                }
            })
            .collect();
        out.sort_by_key(|a| (a.judge.name(), a.stratum));
        out
    }

    /// Exports each judge's feedback AUROC per stratum while both polarities have
    /// `labels.feedback.auroc_min_per_class` events in the window (removed otherwise), and flags
    /// and logs a judge whose AUROC falls below `labels.feedback.auroc_floor`.
    pub(crate) fn export_user_aurocs(&self, now_ms: u64) {
        let Some(u) = &self.user else {
            return;
        };
        let m = &u.metrics;
        for a in self.user_aurocs(now_ms) {
            let stratum = u.name(a.stratum);
            let labels = [a.judge.name(), stratum];
            let min = u.min_per_class.max(1);
            let auroc = a.auroc.filter(|_| a.negative >= min && a.positive >= min);
            if export_floored_auroc(&m.auroc, &m.below_floor, &labels, auroc, u.floor) {
                tracing::warn!(
                    judge = a.judge.name(),
                    stratum,
                    auroc = auroc.unwrap_or_default(),
                    floor = u.floor,
                    negative = a.negative,
                    positive = a.positive,
                    "judge misses user feedback: its scores barely separate answers users liked from ones they did not"
                );
            }
        }
    }

    /// Joins one label line and counts the outcome and each judge's agreement; a line with a
    /// `kind` is user feedback (counted as `invalid` here when user feedback is off).
    pub fn label(
        &self,
        line: &[u8],
        names: &[String],
        metrics: &Metrics,
        now_ms: u64,
    ) -> LabelOutcome {
        let feedback = serde_json::from_slice::<serde_json::Value>(line)
            .ok()
            .filter(is_feedback);
        let outcome = match (feedback, &self.user) {
            (Some(v), Some(u)) => {
                let outcome = self.join_user(u, &v, now_ms);
                u.received(outcome);
                return outcome;
            }
            (Some(_), None) => LabelOutcome::Invalid,
            (None, _) => self.join(line, names, metrics, now_ms),
        };
        metrics
            .labelled
            .received
            .with_label_values(&[outcome.as_str()])
            .inc();
        outcome
    }

    /// Joins one user feedback event (a label line with a `kind`).
    fn join_user(&self, u: &User, v: &serde_json::Value, now_ms: u64) -> LabelOutcome {
        let Some(trace_id) = v
            .get("trace_id")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
        else {
            return LabelOutcome::Invalid;
        };
        let Some(event) = v
            .get("kind")
            .and_then(|k| k.as_str())
            .and_then(|k| u.kinds.event(k, v.get("value")))
        else {
            return LabelOutcome::Invalid;
        };
        let key = xxh3_64(trace_id.as_bytes());
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = store.traces.get_mut(&key) else {
            return LabelOutcome::UnknownTrace;
        };
        if now_ms.saturating_sub(r.at_ms) > self.ttl_ms {
            return LabelOutcome::Expired;
        }
        let stratum = r.stratum as StratumId;
        u.count_event(stratum, &event);
        let Some(polarity) = event.polarity else {
            return LabelOutcome::Joined;
        };
        let polarity = polarity_index(polarity);
        r.feedback[polarity] = r.feedback[polarity].saturating_add(1);
        let scores = [
            (JudgeKind::Offline, r.offline),
            (r.sampled_judge, r.sampled),
        ];
        for (judge, score) in scores {
            if let Some(score) = score {
                u.metrics
                    .observe(judge.name(), u.name(stratum), polarity, score);
                store
                    .feedback_rings
                    .entry((judge, stratum))
                    .or_insert_with(ScoreRing::new)
                    .add(now_ms / self.slot_ms, polarity == 1, score);
            }
        }
        LabelOutcome::Joined
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
        let r_stratum = r.stratum as StratumId;
        let stratum = names.get(r_stratum).map(String::as_str).unwrap_or("other");
        for (judge, score, threshold) in [
            (JudgeKind::Offline, r.offline, self.offline_threshold),
            (
                r.sampled_judge,
                r.sampled,
                self.sampled_threshold(r.sampled_judge),
            ),
        ] {
            if let Some(score) = score {
                metrics
                    .labelled
                    .observe(judge.name(), stratum, faithful, score);
                self.store
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .rings
                    .entry((judge, r_stratum))
                    .or_insert_with(ScoreRing::new)
                    .add(now_ms / self.slot_ms, faithful, score);
                let agree = (score >= threshold) == faithful;
                metrics
                    .labelled
                    .agreement
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

impl User {
    fn name(&self, stratum: StratumId) -> &str {
        self.names.get(stratum).map_or("other", String::as_str)
    }

    fn count_event(&self, stratum: StratumId, e: &Event) {
        self.metrics
            .events
            .with_label_values(&[self.name(stratum), self.kinds.label(e.kind)])
            .inc();
        if let Some(p) = e.polarity {
            self.metrics
                .polarity
                .with_label_values(&[self.name(stratum), p.as_str()])
                .inc();
        }
    }

    fn received(&self, outcome: LabelOutcome) {
        self.metrics
            .received
            .with_label_values(&[outcome.as_str()])
            .inc();
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
            m.labelled
                .agreement
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
        assert_eq!(m.labelled.received.with_label_values(&["invalid"]).get(), 3);
    }

    #[test]
    fn user_feedback_is_its_own_signal_with_an_auroc_per_judge() {
        use crate::recorder::config::{RatingScale, UserFeedbackConfig};
        let names = vec!["head".to_string()];
        let m = Metrics::new(&names, "test");
        let config = LabelsConfig {
            enabled: true,
            max_traces: 10,
            ttl_secs: 60,
            auroc_window_secs: 60,
            feedback: UserFeedbackConfig {
                enabled: true,
                rating: Some(RatingScale {
                    min: 1.0,
                    max: 5.0,
                    negative_below: 3.0,
                }),
                trace_field: Some("/feedback".into()),
                ..UserFeedbackConfig::default()
            },
            ..LabelsConfig::default()
        };
        let judges = [JudgeKind::Offline, JudgeKind::Llm];
        let f = Feedback::with_user_feedback(&config, 0.5, Some((&m.registry, &names, &judges)));
        let u = f.user.as_ref().unwrap();
        let events = |kind: &str| u.metrics.events.with_label_values(&["head", kind]).get();
        let polarity = |p: &str| u.metrics.polarity.with_label_values(&["head", p]).get();
        // Created at zero: every declared kind, rating (both polarities), other.
        assert_eq!(
            (events("rating"), events("other"), polarity("negative")),
            (0, 0, 0)
        );
        for (id, score) in [("a", 0.9), ("b", 0.3), ("c", 0.6)] {
            f.remember(id, 0, JudgeKind::Offline, Some(score), 0);
        }
        // Thumbs down on b, a 5 on a, a rating of 2 on c, an undeclared kind, a bad rating; a
        // line with `faithful` and `kind` is feedback only.
        let body = [
            (
                r#"{"trace_id": "b", "kind": "thumbs_down", "faithful": true}"#,
                LabelOutcome::Joined,
            ),
            (
                r#"{"trace_id": "a", "kind": "rating", "value": 5}"#,
                LabelOutcome::Joined,
            ),
            (
                r#"{"trace_id": "c", "kind": "rating", "value": 2}"#,
                LabelOutcome::Joined,
            ),
            (
                r#"{"trace_id": "a", "kind": "shared"}"#,
                LabelOutcome::Joined,
            ),
            (
                r#"{"trace_id": "a", "kind": "rating", "value": 9}"#,
                LabelOutcome::Invalid,
            ),
            (
                r#"{"trace_id": "zz", "kind": "thumbs_up"}"#,
                LabelOutcome::UnknownTrace,
            ),
        ];
        for (line, want) in body {
            assert_eq!(f.label(line.as_bytes(), &names, &m, 1000), want, "{line}");
        }
        assert_eq!(m.labelled.received.with_label_values(&["joined"]).get(), 0);
        assert_eq!(parse_label(body[0].0.as_bytes()), None);
        assert_eq!(
            m.labelled
                .agreement
                .with_label_values(&["offline", "head", "true"])
                .get(),
            0
        );
        assert_eq!(events("thumbs_down"), 1);
        assert_eq!(events("rating"), 2);
        assert_eq!(events("other"), 1);
        assert_eq!((polarity("negative"), polarity("positive")), (2, 1));
        // The LLM judge answers c after its feedback: that feedback counts its score then.
        f.remember("c", 0, JudgeKind::Llm, Some(0.2), 1500);
        // Feedback attached to a trace: a thumbs-up, counted when the trace is remembered.
        let meta = crate::trace::metadata::Metadata::from_checked_text(
            r#"{"feedback": [{"kind": "thumbs_up"}, "escalation", 3]}"#,
        );
        f.remember_with("d", 0, JudgeKind::Offline, Some(0.95), Some(&meta), 1000);
        assert_eq!((events("thumbs_up"), events("escalation")), (1, 1));
        assert_eq!((polarity("negative"), polarity("positive")), (3, 2));
        assert_eq!(u.metrics.received.with_label_values(&["invalid"]).get(), 2);
        // Offline: positive {a 0.9, d 0.95}, negative {b 0.3, c 0.6, d 0.95}: a beats b and c,
        // d beats b and c and ties itself in its bucket (1/2): 4.5 of 6 pairs.
        let a = f.user_aurocs(2000);
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a[0].judge, JudgeKind::Llm);
        assert_eq!((a[0].negative, a[0].positive, a[0].auroc), (1, 0, None));
        let off = &a[1];
        assert_eq!((off.negative, off.positive), (3, 2));
        assert!((off.auroc.unwrap() - 0.75).abs() < 1e-12, "{off:?}");
        let bucket = |feedback: &str, le: &str| {
            u.metrics
                .bucket
                .with_label_values(&["offline", "head", feedback, le])
                .get()
        };
        assert_eq!(
            (bucket("negative", "0.95"), bucket("positive", "0.95")),
            (1, 1)
        );
        assert_eq!(bucket("negative", "0.3"), 1);
    }
}
