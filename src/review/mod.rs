//! The review queue: which LLM-judged traces a person should label, picked per stratum under a
//! reviews-per-day budget with a known probability each, and the labels that come back turned into
//! the stratum's faithfulness as reviewers judge it.
//!
//! A trace the LLM judge scored is picked with probability r = min(1, c x s): s is 1 for a plain
//! trace and `informative_boost` for an informative one (the judges disagree, the LLM score is near
//! `near_score`, the stratum drifts, a context is a listed suspect), and c spreads the day's budget
//! over the stratum's recent pace of (boosted) verdicts. The decision is a hash of the trace id, so a
//! redelivered trace is picked again or not at all. Its inclusion probability in the stratum is
//! p x r, with p the LLM judge's sample probability: both are recorded on the item and kept until
//! its label comes back.
//!
//! The reviewer estimate is a two-phase estimate of the share of the stratum's answers people judge
//! faithful: the share the LLM judge calls faithful over its sample (its faithfulness at or above
//! `labels.llm_faithful_threshold`; phase `judge`, weights 1/p), plus the weighted mean of (label -
//! call) over the labelled picks (phase `review`, weights 1/(p x r)): the judge's bias, measured
//! where people looked, with more looks where the judge is most likely wrong. Both phases are
//! counters the rules pool; the interval adds their variances. Picked traces leave the process
//! redacted like everything else.

pub mod config;
pub mod sheet;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{Value, json};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::dimensions::{JudgeKind, Quality, StratumId};
use crate::judge::Verdict;
use crate::judge::records::RecordsFile;
use crate::metrics::review::{REASONS, ReviewMetrics};
use crate::redact::Redactor;
use crate::redact::config::RedactConfig;
use crate::trace::Trace;
use config::ReviewConfig;

/// The salt of the review decision's hash: independent of the sampler's.
const SALT: u64 = 0x7265_7669_6577_0001;
/// The pace is counted in slots of an hour.
const SLOT_MS: u64 = 3_600_000;
/// Before a full slot has passed, the pace is read over at least this long.
const MIN_PACE_MS: u64 = 300_000;
const DAY_MS: u64 = 86_400_000;

/// One stratum's pace of boosted verdicts, and its picks today.
#[derive(Debug, Default, Clone, Copy)]
struct Pace {
    slot: u64,
    current: f64,
    previous: f64,
    started_ms: Option<u64>,
    day: u64,
    picked_today: f64,
}

impl Pace {
    /// Adds a verdict of weight `s` at `now_ms`; returns the boosted verdicts a day at this pace.
    fn add(&mut self, s: f64, now_ms: u64) -> f64 {
        let slot = now_ms / SLOT_MS;
        if slot != self.slot {
            self.previous = if slot == self.slot + 1 {
                self.current
            } else {
                0.0
            };
            self.current = 0.0;
            self.slot = slot;
        }
        self.current += s;
        let started = *self.started_ms.get_or_insert(now_ms);
        let into_slot = now_ms - slot * SLOT_MS;
        let span = if now_ms - started >= SLOT_MS {
            SLOT_MS + into_slot
        } else {
            (now_ms - started).max(MIN_PACE_MS)
        };
        (self.current + self.previous) * DAY_MS as f64 / span.max(1) as f64
    }

    /// Counts a pick today; false past the day's cap.
    fn take(&mut self, now_ms: u64, cap: f64) -> bool {
        let day = now_ms / DAY_MS;
        if day != self.day {
            self.day = day;
            self.picked_today = 0.0;
        }
        if self.picked_today >= cap {
            return false;
        }
        self.picked_today += 1.0;
        true
    }
}

/// A picked trace awaiting its label.
#[derive(Debug, Clone, Copy)]
struct Pending {
    stratum: StratumId,
    inclusion: f64,
    llm: f64,
    at_ms: u64,
}

/// What the recorder knows of a verdict's context besides the verdicts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context {
    /// A drift rule is active on the stratum.
    pub drifting: bool,
    /// A context of the trace is a listed suspect.
    pub suspect: bool,
}

/// The queue; built when `review.enabled`.
#[derive(Debug)]
pub struct Review {
    config: ReviewConfig,
    names: Vec<String>,
    paces: Mutex<Vec<Pace>>,
    pending: Mutex<(HashMap<u64, Pending>, VecDeque<u64>)>,
    redactor: Redactor,
    file: Option<RecordsFile>,
    /// Items awaiting `GET /v1/review`, when `pull_buffer` > 0.
    pull: Option<Mutex<VecDeque<(StratumId, Value)>>>,
    metrics: ReviewMetrics,
    /// The LLM judge's faithfulness at or above which its call is "faithful"
    /// (`labels.llm_faithful_threshold`).
    faithful_at: f64,
}

/// The sections the review queue is built from, gathered from the config file above it.
#[derive(Debug, Clone, Copy)]
pub struct ReviewSetup<'a> {
    /// `[review]`: the queue's pace, reasons and output.
    pub review: &'a ReviewConfig,
    /// `[redact]`: what is replaced in a pick before it is written.
    pub redact: &'a RedactConfig,
    /// `labels.llm_faithful_threshold`: the LLM judge's faithfulness at or above which its call
    /// is "faithful".
    pub faithful_at: f64,
}

impl Review {
    /// The queue of `setup` for `strata`, its families on `registry`.
    pub fn new(
        setup: ReviewSetup<'_>,
        env: &HashMap<String, String>,
        strata: &[String],
        registry: &prometheus::Registry,
    ) -> Result<Option<Self>, String> {
        let c = setup.review;
        if !c.enabled {
            return Ok(None);
        }
        let redactor = Redactor::try_new(setup.redact, env).map_err(|e| e.to_string())?;
        let file = match &c.path {
            Some(p) => Some(
                RecordsFile::open(p, c.max_bytes, c.keep_files)
                    .map_err(|e| format!("review.path {}: {e}", p.display()))?,
            ),
            None => None,
        };
        Ok(Some(Self {
            config: c.clone(),
            names: strata.to_vec(),
            paces: Mutex::new(vec![Pace::default(); strata.len()]),
            pending: Mutex::new((HashMap::new(), VecDeque::new())),
            redactor,
            file,
            pull: (c.pull_buffer > 0).then(|| Mutex::new(VecDeque::new())),
            metrics: ReviewMetrics::register(registry, strata, c.min_labels, c.z),
            faithful_at: setup.faithful_at,
        }))
    }

    /// The reasons `llm`'s verdict on `trace` is informative, as indexes into [`REASONS`].
    fn reasons(&self, offline: &Verdict, llm: f64, cx: Context) -> Vec<usize> {
        let c = &self.config;
        let mut reasons = Vec::new();
        if offline
            .faithfulness()
            .is_some_and(|f| (f - llm).abs() >= c.disagree_gap)
        {
            reasons.push(1);
        }
        if (llm - c.near_score).abs() <= c.near_band {
            reasons.push(2);
        }
        if cx.drifting {
            reasons.push(3);
        }
        if cx.suspect {
            reasons.push(4);
        }
        reasons
    }

    /// An LLM verdict on `trace` of `stratum`, sampled with `sample_probability`: into the
    /// judge phase, and picked for review or not. Returns the item when picked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn judged(
        &self,
        stratum: StratumId,
        trace: &Trace,
        offline: &Verdict,
        llm: &Verdict,
        sample_probability: f64,
        cx: Context,
        now_ms: u64,
    ) -> Option<Value> {
        if llm.judge != JudgeKind::Llm || sample_probability.is_nan() || sample_probability <= 0.0 {
            return None;
        }
        let score = llm.faithfulness()?;
        // The judge's call, faithful or not: the reviewers' labels are calls too.
        let y = f64::from(u8::from(score >= self.faithful_at));
        self.metrics.add(stratum, 0, 1.0 / sample_probability, y);
        let reasons = self.reasons(offline, score, cx);
        let s = if reasons.is_empty() {
            1.0
        } else {
            self.config.informative_boost
        };
        let mut paces = self.paces.lock().unwrap_or_else(|p| p.into_inner());
        let pace = paces.get_mut(stratum)?;
        let per_day = pace.add(s, now_ms);
        let r = (self.config.reviews_per_day * s / per_day.max(f64::MIN_POSITIVE)).min(1.0);
        let u =
            (xxh3_64_with_seed(trace.trace_id.as_bytes(), SALT) >> 11) as f64 / (1u64 << 53) as f64;
        if u >= r {
            return None;
        }
        if !pace.take(now_ms, 2.0 * self.config.reviews_per_day) {
            self.metrics.dropped(stratum, 0);
            return None;
        }
        drop(paces);
        let inclusion = sample_probability * r;
        if !self.remember(trace, stratum, inclusion, y, now_ms) {
            self.metrics.dropped(stratum, 1);
            return None;
        }
        let listed = if reasons.is_empty() { vec![0] } else { reasons };
        self.metrics.picked(stratum, listed.iter().copied());
        let item = self.item(
            stratum,
            trace,
            (offline, llm),
            &listed,
            (sample_probability, r),
            now_ms,
        );
        if let Some(f) = &self.file {
            f.write(&item);
        }
        if let Some(pull) = &self.pull {
            let mut buffer = pull.lock().unwrap_or_else(|p| p.into_inner());
            if buffer.len() >= self.config.pull_buffer
                && let Some((s, _)) = buffer.pop_front()
            {
                self.metrics.dropped(s, 2);
            }
            buffer.push_back((stratum, item.clone()));
        }
        Some(item)
    }

    fn remember(
        &self,
        trace: &Trace,
        stratum: StratumId,
        inclusion: f64,
        llm: f64,
        now_ms: u64,
    ) -> bool {
        let key = xxh3_64(trace.trace_id.as_bytes());
        let ttl = self.config.ttl_secs.saturating_mul(1000);
        let mut guard = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        while let Some(&old) = order.front() {
            let stale = map
                .get(&old)
                .is_none_or(|p| now_ms.saturating_sub(p.at_ms) > ttl);
            if !stale {
                break;
            }
            map.remove(&old);
            order.pop_front();
        }
        if map.len() >= self.config.max_pending && !map.contains_key(&key) {
            return false;
        }
        if map
            .insert(
                key,
                Pending {
                    stratum,
                    inclusion,
                    llm,
                    at_ms: now_ms,
                },
            )
            .is_none()
        {
            order.push_back(key);
        }
        true
    }

    /// Whether `GET /v1/review` is served.
    pub(crate) fn pulls(&self) -> bool {
        self.pull.is_some()
    }

    /// Takes up to `max` items from the pull buffer, oldest first.
    pub(crate) fn take(&self, max: usize) -> Vec<Value> {
        let Some(pull) = &self.pull else {
            return Vec::new();
        };
        let mut buffer = pull.lock().unwrap_or_else(|p| p.into_inner());
        let n = max.min(buffer.len());
        buffer.drain(..n).map(|(_, item)| item).collect()
    }

    /// A reviewer's label of `trace_id`: when it was picked (and not labelled yet), into the
    /// review phase. Returns whether it joined a pick.
    pub(crate) fn label(&self, trace_id: &str, faithful: bool, now_ms: u64) -> bool {
        let key = xxh3_64(trace_id.as_bytes());
        let ttl = self.config.ttl_secs.saturating_mul(1000);
        let mut guard = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = guard.0.remove(&key) else {
            return false;
        };
        drop(guard);
        if now_ms.saturating_sub(p.at_ms) > ttl {
            return false;
        }
        // Offset by 1 so that every term a counter adds is non-negative; the rules take it off.
        let gap = 1.0 + f64::from(u8::from(faithful)) - p.llm;
        self.metrics.add(p.stratum, 1, 1.0 / p.inclusion, gap);
        true
    }

    /// The item a reviewer sees: the trace redacted, both judges' scores, why it was picked, and
    /// its probabilities.
    fn item(
        &self,
        stratum: StratumId,
        trace: &Trace,
        (offline, llm): (&Verdict, &Verdict),
        reasons: &[usize],
        (p, r): (f64, f64),
        now_ms: u64,
    ) -> Value {
        let mut counts = Vec::new();
        let shown = self.redactor.redact_trace(trace, &mut counts);
        let scores = |v: &Verdict| {
            let mut o = serde_json::Map::new();
            for m in Quality::ALL {
                o.insert(m.name().into(), json!(v.score(m)));
            }
            Value::Object(o)
        };
        json!({
            "trace_id": trace.trace_id,
            "stratum": self.names.get(stratum),
            "picked_at_ms": now_ms,
            "reasons": reasons.iter().map(|&i| REASONS[i]).collect::<Vec<_>>(),
            "inclusion_probability": p * r,
            "sample_probability": p,
            "review_probability": r,
            "query": shown.query,
            "contexts": shown.contexts.iter().map(|c| json!({"id": c.id, "text": c.text})).collect::<Vec<_>>(),
            "answer": shown.answer,
            "verdicts": {"offline": scores(offline), "llm": scores(llm)},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimensions::PerQuality;
    use crate::section::fields::section;

    /// The review's sections of a TOML text.
    struct Sections(ReviewConfig, RedactConfig);

    impl Sections {
        fn as_setup(&self) -> ReviewSetup<'_> {
            ReviewSetup {
                review: &self.0,
                redact: &self.1,
                // `labels.llm_faithful_threshold`'s default: every claim supported.
                faithful_at: 1.0,
            }
        }
    }

    fn setup(toml: &str) -> Sections {
        Sections(section(toml, "review"), section(toml, "redact"))
    }

    fn review(dir: &std::path::Path) -> (Review, prometheus::Registry) {
        let toml = format!(
            "[judge]\nsampled = \"llm\"\n[labels]\nenabled = true\n[review]\nenabled = true\n\
             reviews_per_day = 1000000\npath = {:?}\n\
             [redact]\nbuiltins = [\"email\", \"phone\", \"card\", \"secret\"]\n",
            dir.join("review.jsonl")
        );
        let registry = prometheus::Registry::new();
        let review = Review::new(
            setup(&toml).as_setup(),
            &HashMap::new(),
            &["qa".to_owned()],
            &registry,
        )
        .expect("built")
        .expect("on");
        (review, registry)
    }

    fn verdict(judge: JudgeKind, f: f64) -> Verdict {
        Verdict {
            judge,
            scores: PerQuality::default().with(Quality::Faithfulness, Some(f)),
            ..Verdict::with_faithfulness(judge, f)
        }
    }

    #[test]
    fn a_pick_leaves_redacted_with_its_probabilities_and_its_label_joins_once() {
        let dir = tempfile::tempdir().expect("dir");
        let (review, _) = review(dir.path());
        let mut trace = Trace::of(
            "my card is 4111 1111 1111 1111, mail jane.doe@example.com",
            &[(
                "d1",
                "call +44 20 7946 0958 or write to jane.doe@example.com",
            )],
            "charged to 4111 1111 1111 1111",
        );
        trace.trace_id = "t-1".into();
        let offline = verdict(JudgeKind::Offline, 0.9);
        let llm = verdict(JudgeKind::Llm, 0.2);
        let item = review
            .judged(0, &trace, &offline, &llm, 0.5, Context::default(), 1_000)
            .expect("picked: the budget is far above the pace");
        let text = item.to_string();
        for secret in ["4111 1111 1111 1111", "jane.doe@example.com", "7946 0958"] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        assert_eq!(item["reasons"], json!(["disagreement"]));
        assert_eq!(item["sample_probability"], json!(0.5));
        let written = std::fs::read_to_string(dir.path().join("review.jsonl")).expect("file");
        assert!(!written.contains("4111") && written.contains("\"trace_id\":\"t-1\""));
        assert!(review.label("t-1", false, 2_000));
        assert!(!review.label("t-1", false, 3_000), "a pick joins one label");
        assert!(!review.label("never-picked", true, 3_000));
    }

    #[test]
    fn the_budget_paces_the_picks() {
        let dir = tempfile::tempdir().expect("dir");
        let toml = "[judge]\nsampled = \"llm\"\n[labels]\nenabled = true\n[review]\nenabled = true\nreviews_per_day = 100\n";
        let registry = prometheus::Registry::new();
        let review = Review::new(
            setup(toml).as_setup(),
            &HashMap::new(),
            &["qa".to_owned()],
            &registry,
        )
        .expect("built")
        .expect("on");
        drop(dir);
        // 10,000 plain verdicts over a day: about 100 picks.
        let offline = verdict(JudgeKind::Offline, 1.0);
        let llm = verdict(JudgeKind::Llm, 1.0);
        let mut picked = 0;
        for i in 0..10_000u64 {
            let mut t = Trace::of("q", &[("d", "c")], "a");
            t.trace_id = format!("t{i}");
            let now = i * DAY_MS / 10_000;
            picked += usize::from(
                review
                    .judged(0, &t, &offline, &llm, 1.0, Context::default(), now)
                    .is_some(),
            );
        }
        assert!(
            (70..=130).contains(&picked),
            "{picked} picks for a budget of 100"
        );
    }
}
