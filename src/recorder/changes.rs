//! The change attribution's side of the recorder: each arrival and each LLM verdict into the
//! summaries of `changes`, and what they say into the counters the rules pool.

use prometheus::Registry;

use super::RecorderSetup;
use crate::changes::Changes;
use crate::dimensions::StratumId;
use crate::judge::Verdict;
use crate::metrics::changes::{ChangesMetrics, Dimensions};
use crate::trace::Trace;

/// The summaries and their series; built only when `changes.enabled`.
#[derive(Debug)]
pub(crate) struct Attribution {
    /// The summaries (`GET /v1/suspects` and replay read them).
    pub changes: Changes,
    metrics: ChangesMetrics,
}

impl Attribution {
    /// Summaries and series for `strata`; `whole_run` reads every trace into one window (replay).
    pub fn new(
        config: &RecorderSetup,
        strata: &[String],
        registry: &Registry,
        whole_run: bool,
    ) -> Option<Self> {
        let changes = Changes::new(
            &config.changes,
            (config.windows.short_secs, config.windows.baseline_secs),
            config.judge.faithful_threshold,
            strata.len(),
            whole_run,
        )?;
        let thresholds = config.changes.rules.exported();
        let metrics = ChangesMetrics::register(
            registry,
            &Dimensions {
                strata,
                sources: changes.source_names(),
                coverage: changes.covers(),
                thresholds: &thresholds,
            },
        );
        Some(Self { changes, metrics })
    }

    /// A trace of `stratum` arrived at `now_ms` with its offline verdict.
    pub fn arrive(&self, stratum: StratumId, trace: &Trace, offline: &Verdict, now_ms: u64) {
        let Some(a) = self.changes.arrive(stratum, trace, offline, now_ms) else {
            return;
        };
        self.metrics.question(stratum, a.novelty);
        if let Some(covered) = a.covered {
            self.metrics.coverage(stratum, covered);
        }
        let v = a.verdict;
        let sources = self.changes.source_members(v.sources);
        self.metrics.verdict(stratum, v.judge, v.low, sources);
        self.metrics
            .ids_held(stratum, self.changes.ids_held(stratum));
    }

    /// A sampled judge's verdict on a trace of `stratum` at `now_ms`.
    pub fn judged(&self, stratum: StratumId, trace: &Trace, verdict: &Verdict, now_ms: u64) {
        if let Some(v) = self.changes.judged(stratum, trace, verdict, now_ms) {
            let sources = self.changes.source_members(v.sources);
            self.metrics.verdict(stratum, v.judge, v.low, sources);
        }
    }
}
