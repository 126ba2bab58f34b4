//! What changed: when a stratum degrades, which documents and sources its low-scoring traces
//! retrieved more than the rest did, whether its questions are new, and whether retrieval lost
//! coverage. Each summary's memory is fixed by the config, whatever the traffic.
//!
//! ```text
//! trace + offline verdict ─ Changes::arrive ─┬─ suspects::StratumSuspects  ids (sketch::Sketch) and
//!                                            │                             sources (source::Sources)
//!                                            ├─ novelty::QuestionIndex      new or known question
//!                                            └─ coverage                    first retriever score vs level
//! LLM verdict ─ Changes::judged ───────────── suspects (the LLM judge's own counts)
//! GET /v1/suspects, replay ─ Changes::report
//! ```
//! The recorder turns what `arrive` and `judged` return into counters; the rules pool them.

pub mod config;
mod novelty;
mod sketch;
mod source;
mod suspects;

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::dimensions::{JudgeKind, Quality, StratumId};
use crate::judge::Verdict;
use crate::trace::Trace;
use config::{Better, ChangesConfig};
pub(crate) use novelty::Novelty;
use novelty::QuestionIndex;
use source::{SourceSet, Sources};
pub use suspects::{Against, Basis, Before, Change, Report, Status, Suspect, Totals, Window};
use suspects::{JUDGES, StratumSuspects, Test};

/// Distinct context ids a trace contributes at most (the rest are left out of the sketch).
const MAX_IDS_PER_TRACE: usize = 64;

/// One stratum's summaries.
#[derive(Debug)]
struct StratumChanges {
    suspects: StratumSuspects,
    questions: QuestionIndex,
}

/// The summaries of every stratum; built only when `changes.enabled`.
#[derive(Debug)]
pub struct Changes {
    strata: Vec<Mutex<StratumChanges>>,
    sources: Option<Sources>,
    low_faithfulness: f64,
    /// Other metrics' low levels.
    low_scores: Vec<(Quality, f64)>,
    coverage: Option<(f64, Better)>,
    test: Test,
    /// Every trace at one time, whatever the clock (replay: the whole run is one window).
    whole_run: bool,
    /// That time, in ms: 0, or once a replay's baseline set is in, a time whose short window
    /// holds none of it and whose baseline window holds all of it.
    replay_ms: AtomicU64,
    /// The short window's length, in ms.
    short_ms: u64,
}

/// What the recorder counts of a trace's arrival.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// Its question's novelty.
    pub novelty: Novelty,
    /// Whether its first context's retriever score reached the coverage level (when one is set
    /// and the context has a score).
    pub covered: Option<bool>,
    /// The offline verdict's lowness and the trace's sources.
    pub verdict: Judged,
}

/// What the recorder counts of a verdict.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged {
    /// Index of the judge in the attribution's counts.
    pub judge: usize,
    /// Whether the verdict is low.
    pub low: bool,
    /// The trace's sources.
    pub sources: SourceSet,
}

/// The report of `GET /v1/suspects` and replay: per stratum and judge.
#[derive(Debug, Clone, Serialize)]
pub struct StratumReport {
    /// The stratum.
    pub stratum: String,
    /// The judge whose verdicts are counted.
    pub judge: &'static str,
    /// The window read.
    pub window: Window,
    /// Its suspects.
    #[serde(flatten)]
    pub report: Report,
}

impl Changes {
    /// Summaries for `strata` strata; `None` when `changes.enabled` is off.
    pub fn new(
        config: &ChangesConfig,
        windows: (u64, u64),
        faithful_threshold: f64,
        strata: usize,
        whole_run: bool,
    ) -> Option<Self> {
        if !config.enabled {
            return None;
        }
        let sources = Sources::new(&config.source);
        let source_count = sources.as_ref().map_or(0, |s| s.names().len());
        let (short_ms, baseline_ms) = (windows.0 * 1000, windows.1 * 1000);
        let n = &config.novelty;
        let stratum = |i: usize| StratumChanges {
            suspects: StratumSuspects::new(short_ms, baseline_ms, config.capacity, source_count),
            questions: QuestionIndex::new(
                n.capacity,
                n.known_after_secs * 1000,
                baseline_ms,
                n.similarity,
                i as u64,
            ),
        };
        Some(Self {
            strata: (0..strata).map(|i| Mutex::new(stratum(i))).collect(),
            sources,
            low_faithfulness: config.low_faithfulness.unwrap_or(faithful_threshold),
            low_scores: Quality::ALL
                .into_iter()
                .filter_map(|m| Some((m, *config.low_scores.get(m.name())?)))
                .collect(),
            coverage: config.coverage.level.map(|l| (l, config.coverage.better)),
            test: Test {
                min_traces: config.min_traces,
                min_lift: config.min_lift,
                alpha: config.alpha,
                limit: config.limit,
                all: false,
            },
            whole_run,
            replay_ms: AtomicU64::new(0),
            short_ms,
        })
    }

    /// Replay: what was read so far is the baseline set; what follows is the window compared with
    /// it. Its traces go in one short window later, which the baseline window still covers (the
    /// config's short window is shorter than its baseline).
    pub fn baseline_set_read(&self) {
        if self.whole_run {
            self.replay_ms
                .store(self.short_ms.max(1), Ordering::Relaxed);
        }
    }

    /// The source label values (declared, `other`, `unknown`); empty without sources.
    pub fn source_names(&self) -> &[String] {
        self.sources.as_ref().map_or(&[], |s| s.names())
    }

    /// Whether a coverage level is set.
    pub fn covers(&self) -> bool {
        self.coverage.is_some()
    }

    /// The members of a source set, as indexes into [`Changes::source_names`].
    pub(crate) fn source_members(&self, set: SourceSet) -> impl Iterator<Item = usize> + '_ {
        self.sources.iter().flat_map(move |s| s.members(set))
    }

    fn clock(&self, now_ms: u64) -> u64 {
        if self.whole_run {
            self.replay_ms.load(Ordering::Relaxed)
        } else {
            now_ms
        }
    }

    fn stratum(&self, stratum: StratumId) -> Option<std::sync::MutexGuard<'_, StratumChanges>> {
        let m = self.strata.get(stratum)?;
        Some(m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether `verdict` is low: faithfulness below its low level, or another metric below its.
    fn low(&self, verdict: &Verdict) -> bool {
        verdict
            .faithfulness()
            .is_some_and(|f| f < self.low_faithfulness)
            || self
                .low_scores
                .iter()
                .any(|(m, level)| verdict.score(*m).is_some_and(|v| v < *level))
    }

    /// A trace of `stratum` arrived at `now_ms` with its offline verdict.
    pub(crate) fn arrive(
        &self,
        stratum: StratumId,
        trace: &Trace,
        offline: &Verdict,
        now_ms: u64,
    ) -> Option<Arrival> {
        let now = self.clock(now_ms);
        let ids = distinct_ids(trace);
        let verdict = self.judgement(trace, offline)?;
        let covered = self.coverage.and_then(|(level, better)| {
            let score = trace.contexts.first()?.score?;
            Some(match better {
                Better::Higher => score >= level,
                Better::Lower => score <= level,
            })
        });
        let mut s = self.stratum(stratum)?;
        s.suspects.arrive(ids.iter().copied(), now);
        s.suspects.judged(
            verdict.judge,
            verdict.low,
            ids.iter().copied(),
            verdict.sources,
            now,
        );
        let novelty = if self.whole_run {
            Novelty::Unchecked
        } else {
            s.questions.observe(&trace.query, now)
        };
        Some(Arrival {
            novelty,
            covered,
            verdict,
        })
    }

    /// A sampled judge's verdict on a trace of `stratum` at `now_ms`; `None` for a judge the
    /// attribution does not count apart (the offline judge's verdicts are counted on arrival).
    pub(crate) fn judged(
        &self,
        stratum: StratumId,
        trace: &Trace,
        verdict: &Verdict,
        now_ms: u64,
    ) -> Option<Judged> {
        if verdict.judge != JudgeKind::Llm {
            return None;
        }
        let judged = self.judgement(trace, verdict)?;
        let ids = distinct_ids(trace);
        let mut s = self.stratum(stratum)?;
        s.suspects.judged(
            judged.judge,
            judged.low,
            ids.iter().copied(),
            judged.sources,
            self.clock(now_ms),
        );
        Some(judged)
    }

    /// The judge index, lowness and sources of `verdict` on `trace`.
    fn judgement(&self, trace: &Trace, verdict: &Verdict) -> Option<Judged> {
        Some(Judged {
            judge: JUDGES.iter().position(|j| *j == verdict.judge)?,
            low: self.low(verdict),
            sources: self.sources.as_ref().map_or(0, |s| s.of_trace(trace)),
        })
    }

    /// Document ids `stratum`'s sketches hold.
    pub fn ids_held(&self, stratum: StratumId) -> usize {
        self.stratum(stratum).map_or(0, |s| s.suspects.ids_held())
    }

    /// Bytes every summary holds.
    pub fn heap_bytes(&self) -> usize {
        (0..self.strata.len())
            .filter_map(|i| self.stratum(i))
            .map(|s| s.suspects.heap_bytes() + s.questions.heap_bytes())
            .sum()
    }

    /// The suspects of `stratum` for `judge` in `window` at `now_ms`; `all` lists the strongest
    /// candidates even below the listing threshold; at most `limit` (the config's when `None`).
    pub fn report(
        &self,
        stratum: StratumId,
        judge: JudgeKind,
        window: Window,
        now_ms: u64,
        all: bool,
        limit: Option<usize>,
    ) -> Option<Report> {
        let j = JUDGES.iter().position(|k| *k == judge)?;
        let test = Test {
            all,
            limit: limit.unwrap_or(self.test.limit).min(100),
            ..self.test
        };
        let s = self.stratum(stratum)?;
        Some(
            s.suspects
                .report(j, window, self.clock(now_ms), &test, self.source_names()),
        )
    }
}

/// The distinct ids of `trace`'s contexts, in rank order, at most [`MAX_IDS_PER_TRACE`].
fn distinct_ids(trace: &Trace) -> Vec<&str> {
    let mut ids: Vec<&str> = Vec::new();
    for id in trace.contexts.iter().filter_map(|c| c.id.as_deref()) {
        if ids.len() == MAX_IDS_PER_TRACE {
            break;
        }
        if !id.is_empty() && !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}
