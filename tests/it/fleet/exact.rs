//! The exact figures of a set of batches, from the library's own view of the traffic and the
//! replicas' verdict records, and every figure the pooled rules must show at a moment.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use ragwatch::dimensions::Quality;
use ragwatch::window::{Accumulate, EstimateSums};

use super::{JUDGES, STRATA};

/// One generated trace as the replicas' own code judges it offline, and its inclusion probability
/// when the sampler takes it.
pub(super) struct TraceInfo {
    pub(super) batch: usize,
    pub(super) stratum: String,
    pub(super) offline: [Option<f64>; 3],
    pub(super) sampled: Option<f64>,
}

/// Exact figures of a set of batches: every score per (stratum, metric, judge), verdicts per
/// (stratum, judge), the combined estimate's sums per (stratum, metric).
#[derive(Default)]
pub(super) struct Exact {
    pub(super) scores: BTreeMap<(String, usize, &'static str), Vec<f64>>,
    pub(super) judged: BTreeMap<(String, &'static str), f64>,
    pub(super) sums: BTreeMap<(String, usize), EstimateSums>,
}

impl Exact {
    pub(super) fn of(
        batches: &BTreeSet<usize>,
        traces: &BTreeMap<String, TraceInfo>,
        verdicts: &HashMap<String, [Option<f64>; 3]>,
    ) -> Exact {
        let mut x = Exact::default();
        for s in STRATA {
            for j in JUDGES {
                x.judged.insert((s.to_owned(), j), 0.0);
                for m in 0..3 {
                    x.scores.insert((s.to_owned(), m, j), Vec::new());
                }
            }
            for m in 0..3 {
                x.sums.insert((s.to_owned(), m), EstimateSums::default());
            }
        }
        for (id, t) in traces {
            if !batches.contains(&t.batch) {
                continue;
            }
            let s = t.stratum.clone();
            *x.judged.get_mut(&(s.clone(), "offline")).unwrap() += 1.0;
            for (m, f) in t.offline.iter().enumerate() {
                if let Some(f) = f {
                    x.scores
                        .get_mut(&(s.clone(), m, "offline"))
                        .unwrap()
                        .push(*f);
                    x.sums
                        .get_mut(&(s.clone(), m))
                        .unwrap()
                        .merge(&EstimateSums::population(*f));
                }
            }
            let Some(y) = verdicts.get(id) else { continue };
            *x.judged.get_mut(&(s.clone(), "llm")).unwrap() += 1.0;
            for (m, y) in y.iter().enumerate() {
                if let Some(y) = y {
                    x.scores.get_mut(&(s.clone(), m, "llm")).unwrap().push(*y);
                    if let (Some(f), Some(pi)) = (t.offline[m], t.sampled) {
                        x.sums
                            .get_mut(&(s.clone(), m))
                            .unwrap()
                            .merge(&EstimateSums::pair(*y, f, pi));
                    }
                }
            }
        }
        x
    }

    pub(super) fn values(&self, s: &str, m: usize, j: &'static str) -> &[f64] {
        &self.scores[&(s.to_owned(), m, j)]
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The sample variance (n - 1), two-pass.
fn variance(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    (v.len() > 1).then(|| v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64)
}

/// A series as the rules label it: (rule, stratum, metric label, judge label).
pub(super) type Key = (String, String, String, String);

pub(super) fn key(rule: &str, stratum: &str, metric: &str, judge: &str) -> Key {
    (rule.into(), stratum.into(), metric.into(), judge.into())
}

/// Every figure the test reads from Prometheus at one moment, computed exactly: short window
/// (`short`), middle window (`mid`), the whole baseline range (`long`) and the baseline without the
/// short window (`rest`).
pub(super) fn expected(
    short: &Exact,
    mid: &Exact,
    long: &Exact,
    rest: &Exact,
    z: f64,
) -> BTreeMap<Key, Option<f64>> {
    let mut e = BTreeMap::new();
    for s in STRATA {
        for (mi, m) in Quality::ALL.iter().enumerate() {
            for j in JUDGES {
                let windows = [short, mid, long, rest].map(|x| x.values(s, mi, j));
                judge_figures(&mut e, s, *m, j, windows);
            }
            estimate_figures(&mut e, s, mi, *m, short, rest, z);
        }
        for j in JUDGES {
            e.insert(
                key("ragwatch:judged:samples_1h", s, "", j),
                Some(mid.judged[&(s.to_owned(), j)]),
            );
        }
    }
    e
}

/// The figures of one judge's scores of metric `m` in stratum `s`: means and sample counts per
/// window, the shift rules' moments. `windows` holds the scores of the short, middle and whole
/// baseline window and of the baseline without the short window.
fn judge_figures(
    e: &mut BTreeMap<Key, Option<f64>>,
    s: &str,
    m: Quality,
    j: &str,
    [v20, v40, vlong, vrest]: [&[f64]; 4],
) {
    let name = m.name();
    e.insert(
        key(&format!("ragwatch:{name}:mean_5m"), s, "", j),
        mean(v20),
    );
    e.insert(
        key(&format!("ragwatch:{name}:samples_5m"), s, "", j),
        Some(v20.len() as f64),
    );
    if m != Quality::ContextRelevance {
        e.insert(
            key(&format!("ragwatch:{name}:mean_1h"), s, "", j),
            mean(v40),
        );
        e.insert(
            key(&format!("ragwatch:{name}:mean_24h"), s, "", j),
            mean(vlong),
        );
    }
    e.insert(
        key("ragwatch:score_count:increase5m", s, name, j),
        Some(v20.len() as f64),
    );
    e.insert(key("ragwatch:shift:short_mean_5m", s, name, j), mean(v20));
    e.insert(
        key("ragwatch:shift:short_variance_5m", s, name, j),
        variance(v20),
    );
    e.insert(
        key("ragwatch:shift:baseline_count_24h", s, name, j),
        Some(vrest.len() as f64),
    );
    e.insert(
        key("ragwatch:shift:baseline_mean_24h", s, name, j),
        mean(vrest),
    );
    e.insert(
        key("ragwatch:shift:baseline_variance_24h", s, name, j),
        variance(vrest),
    );
}

/// The combined estimate's figures of metric `m` (index `mi`) in stratum `s`: the short window's
/// with its baseline's lambda, the baseline's own.
fn estimate_figures(
    e: &mut BTreeMap<Key, Option<f64>>,
    s: &str,
    mi: usize,
    m: Quality,
    short: &Exact,
    rest: &Exact,
    z: f64,
) {
    let name = m.name();
    let now = short.sums[&(s.to_owned(), mi)];
    let base = rest.sums[&(s.to_owned(), mi)];
    // The short window's lambda is its baseline's (cross-fitted), 0 without a baseline.
    let lambda = base.estimate(z).map_or(0.0, |e| e.lambda);
    let est = now.estimate_with_lambda(z, lambda);
    let var = now
        .estimate_with_lambda(1.0, lambda)
        .map(|e| e.half_width * e.half_width);
    e.insert(
        key("ragwatch:estimate:mean_5m", s, name, ""),
        est.map(|e| e.mean),
    );
    e.insert(key("ragwatch:estimate:variance_5m", s, name, ""), var);
    e.insert(
        key("ragwatch:estimate:half_width_5m", s, name, ""),
        est.map(|e| e.half_width),
    );
    let base_est = base.estimate(z);
    e.insert(
        key("ragwatch:estimate:mean_24h", s, name, ""),
        base_est.map(|e| e.mean),
    );
    e.insert(
        key("ragwatch:estimate:variance_24h", s, name, ""),
        base.estimate(1.0).map(|e| e.half_width * e.half_width),
    );
    let combined = |r: &str| format!("ragwatch:{name}:combined_{r}");
    e.insert(
        key(&combined("mean_5m"), s, "", "combined"),
        est.map(|e| e.mean),
    );
    e.insert(
        key(&combined("upper_5m"), s, "", "combined"),
        est.map(|e| e.upper),
    );
    e.insert(
        key(&combined("lower_5m"), s, "", "combined"),
        est.map(|e| e.lower),
    );
    e.insert(key(&combined("samples_5m"), s, "", "combined"), Some(now.k));
    e.insert(
        key(&combined("mean_24h"), s, "", "combined"),
        base_est.map(|e| e.mean),
    );
}
