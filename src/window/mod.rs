//! Windows: rolling per-(metric, stratum, judge) statistics over several window lengths, the
//! combined estimate built from them, and the drift rules evaluated on both.

pub mod config;
mod diagnosis;
mod drift;
pub(crate) mod estimate;
mod ring;
pub mod scan;

pub(crate) use diagnosis::{STAGES, diagnose};
pub use drift::Shift;
pub(crate) use drift::{DriftState, RuleKind};
pub use estimate::EstimateSums;
pub use ring::Accumulate;
pub(crate) use ring::{Moments, Ring, WindowStats};

use crate::dimensions::{JudgeKind, Quality, StratumId};

/// The rings of one (metric, stratum, judge): one ring per configured window length.
#[derive(Debug, Clone)]
pub(crate) struct Series<T: Accumulate = Moments> {
    rings: Vec<Ring<T>>,
}

/// All window state of a process.
#[derive(Debug, Clone)]
pub struct Windows {
    window_ms: Vec<u64>,
    strata: usize,
    series: Vec<Series>,
    estimates: Vec<Series<EstimateSums>>,
}

impl Windows {
    /// Rings for every metric, judge and stratum, one per window length in `window_secs`.
    pub fn new(window_secs: &[u64], buckets: u32, strata: usize) -> Self {
        let window_ms: Vec<u64> = window_secs.iter().map(|s| s * 1000).collect();
        let one = Series {
            rings: window_ms.iter().map(|&w| Ring::new(w, buckets)).collect(),
        };
        let one_estimate = Series {
            rings: window_ms.iter().map(|&w| Ring::new(w, buckets)).collect(),
        };
        let n = Quality::ALL.len() * JudgeKind::ALL.len() * strata;
        Self {
            window_ms,
            strata,
            series: vec![one; n],
            estimates: vec![one_estimate; Quality::ALL.len() * strata],
        }
    }

    fn window(&self, window_secs: u64) -> Option<usize> {
        self.window_ms.iter().position(|&w| w == window_secs * 1000)
    }

    fn estimate_index(&self, metric: Quality, stratum: StratumId) -> usize {
        (metric as usize) * self.strata + stratum
    }

    /// Adds the sums of one trace or judged pair to the combined estimate of (metric, stratum).
    pub(crate) fn record_estimate(
        &mut self,
        metric: Quality,
        stratum: StratumId,
        sums: &EstimateSums,
        now_ms: u64,
    ) {
        let i = self.estimate_index(metric, stratum);
        for ring in &mut self.estimates[i].rings {
            ring.update(now_ms, |t| t.merge(sums));
        }
    }

    /// The combined estimate's sums of (metric, stratum) over the window of `window_secs`.
    pub(crate) fn estimate_sums(
        &self,
        metric: Quality,
        stratum: StratumId,
        window_secs: u64,
        now_ms: u64,
    ) -> Option<EstimateSums> {
        let w = self.window(window_secs)?;
        Some(self.estimates[self.estimate_index(metric, stratum)].rings[w].total(now_ms))
    }

    fn index(&self, metric: Quality, judge: JudgeKind, stratum: StratumId) -> usize {
        ((metric as usize) * JudgeKind::ALL.len() + judge as usize) * self.strata + stratum
    }

    /// Adds one score (in [0, 1]) at `now_ms`.
    pub fn record(
        &mut self,
        metric: Quality,
        judge: JudgeKind,
        stratum: StratumId,
        value: f64,
        now_ms: u64,
    ) {
        let i = self.index(metric, judge, stratum);
        for ring in &mut self.series[i].rings {
            ring.record(value, now_ms);
        }
    }

    /// Statistics of one series over the window of `window_secs` at `now_ms`.
    pub(crate) fn stats(
        &self,
        metric: Quality,
        judge: JudgeKind,
        stratum: StratumId,
        window_secs: u64,
        now_ms: u64,
        z: f64,
    ) -> Option<WindowStats> {
        let w = self.window(window_secs)?;
        Some(self.series[self.index(metric, judge, stratum)].rings[w].stats(now_ms, z))
    }
}

/// The `window` label value of a window length: `5m`, `1h`, `1d`, or seconds.
pub(crate) fn window_label(secs: u64) -> String {
    match secs {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_independent() {
        let mut w = Windows::new(&[10, 100], 10, 3);
        w.record(Quality::Faithfulness, JudgeKind::Offline, 1, 0.5, 1000);
        w.record(Quality::AnswerRelevancy, JudgeKind::Llm, 2, 1.0, 1000);
        let s = |m, j, st| w.stats(m, j, st, 10, 1500, 1.645).unwrap().count;
        assert_eq!(s(Quality::Faithfulness, JudgeKind::Offline, 1), 1);
        assert_eq!(s(Quality::Faithfulness, JudgeKind::Offline, 2), 0);
        assert_eq!(s(Quality::AnswerRelevancy, JudgeKind::Llm, 2), 1);
        assert_eq!(s(Quality::AnswerRelevancy, JudgeKind::Offline, 2), 0);
        assert!(
            w.stats(Quality::Faithfulness, JudgeKind::Offline, 1, 11, 0, 1.0)
                .is_none()
        );
    }
}
