//! The comparison table: one row per figure (rule, labels, expected, got), what Prometheus shows at
//! a moment against what is expected, within the tolerance.

use std::collections::{BTreeMap, BTreeSet};

use ragwatch::dimensions::Quality;
use ragwatch::window::EstimateSums;

use super::exact::{Exact, Key, key};
use super::replicas::total;
use super::{ABS_TOL, JUDGES, REL_TOL, SOLO, STRATA};
use crate::common::Samples;
use crate::common::prometheus::query_at;

/// One comparison of the table.
pub(super) struct Row {
    pub(super) moment: String,
    pub(super) key: Key,
    pub(super) expected: Option<f64>,
    pub(super) got: Option<f64>,
}

impl Row {
    pub(super) fn ok(&self) -> bool {
        match (self.expected, self.got) {
            (None, None) => true,
            // A half-width is z * sqrt(variance): it is compared on the variance's scale, where
            // rounding is additive. Near 0 a square root turns 1e-17 of rounding into 1e-9.
            (Some(e), Some(g)) if self.key.0.contains("half_width") => {
                (g * g - e * e).abs() <= REL_TOL * e * e + ABS_TOL
            }
            (Some(e), Some(g)) => (g - e).abs() <= REL_TOL * e.abs() + ABS_TOL,
            _ => false,
        }
    }

    pub(super) fn relative(&self) -> Option<f64> {
        let (e, g) = (self.expected?, self.got?);
        Some(if e == 0.0 {
            (g - e).abs()
        } else {
            ((g - e) / e).abs()
        })
    }

    pub(super) fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.9}"));
        let (rule, s, m, j) = &self.key;
        format!(
            "{:<4} {:<40} {:<13} {:<17} {:<8} {:>18} {:>18} {:>10} {}",
            self.moment,
            rule,
            s,
            m,
            j,
            f(self.expected),
            f(self.got),
            self.relative().map_or("-".into(), |r| format!("{r:.2e}")),
            if self.ok() { "ok" } else { "MISMATCH" }
        )
    }
}

/// Queries every rule of `expected` at `t`; returns the rows and any evaluation timestamps outside
/// `[t - 2 lag, t]`: one evaluation late is a loaded machine (Prometheus starts a group's
/// evaluation after its slot when the CPUs are busy; the values are still compared, on a quiet
/// fleet), more is a rule that stopped evaluating.
pub(super) fn compare(
    prom: u16,
    namespace: &str,
    moment: &str,
    t: f64,
    lag: f64,
    expected: &BTreeMap<Key, Option<f64>>,
    problems: &mut Vec<String>,
) -> Vec<Row> {
    let rules: BTreeSet<&String> = expected.keys().map(|k| &k.0).collect();
    let mut got: BTreeMap<Key, Option<f64>> = BTreeMap::new();
    for rule in rules {
        let selector = format!("{rule}{{namespace=\"{namespace}\"}}");
        let results = query_at(prom, &selector, t)
            .unwrap_or_else(|| panic!("Prometheus answers {selector} at {t}"));
        let stamps = query_at(prom, &format!("timestamp({selector})"), t).unwrap_or_default();
        for r in stamps {
            let at: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            if at < t - 2.0 * lag - 0.01 || at > t + 0.01 {
                problems.push(format!(
                    "{moment}: {rule} was last evaluated at {at:.3}, outside [{:.3}, {t:.3}]",
                    t - 2.0 * lag
                ));
                break;
            }
        }
        for r in results {
            let l = &r["metric"];
            let label = |n: &str| l[n].as_str().unwrap_or_default().to_owned();
            let stratum = label("stratum");
            if !STRATA.contains(&stratum.as_str()) {
                continue;
            }
            let v: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            got.insert(
                (rule.clone(), stratum, label("metric"), label("judge")),
                (!v.is_nan()).then_some(v),
            );
        }
    }
    // Rows of the lone replica are marked with an `s` after the moment.
    let moment = &format!("{moment}{}", if namespace == SOLO { "s" } else { "" });
    let mut rows: Vec<Row> = expected
        .iter()
        .map(|(k, e)| Row {
            moment: moment.to_owned(),
            key: k.clone(),
            expected: *e,
            got: got.get(k).copied().flatten(),
        })
        .collect();
    for (k, g) in &got {
        if !expected.contains_key(k) && g.is_some() {
            rows.push(Row {
                moment: moment.to_owned(),
                key: k.clone(),
                expected: None,
                got: *g,
            });
        }
    }
    rows
}

/// The replicas' own sums over all the traffic against the exact ones: the exposition is exact, so
/// a mismatch at a moment is in the rules, not in the figures the test expects.
pub(super) fn exposition_rows(all: &Exact, fleet: &[Samples]) -> Vec<Row> {
    let row = |key: Key, expected: f64, got: f64| Row {
        moment: "all".into(),
        key,
        expected: Some(expected),
        got: Some(got),
    };
    let mut rows: Vec<Row> = Vec::new();
    for s in STRATA {
        for (mi, m) in Quality::ALL.iter().enumerate() {
            let hist = m.spec().histogram;
            for j in JUDGES {
                let v = all.values(s, mi, j);
                let labels = [("stratum", s), ("judge", j)];
                for (name, exact) in [
                    (format!("{hist}_count"), v.len() as f64),
                    (format!("{hist}_sum"), v.iter().sum::<f64>()),
                ] {
                    let got = total(fleet, &name, &labels);
                    rows.push(row(key(&format!("/metrics {name}"), s, "", j), exact, got));
                }
                let squares = total(
                    fleet,
                    "ragwatch_score_squares_total",
                    &[("stratum", s), ("judge", j), ("metric", m.name())],
                );
                rows.push(row(
                    key("/metrics ragwatch_score_squares_total", s, m.name(), j),
                    v.iter().map(|x| x * x).sum(),
                    squares,
                ));
            }
            let sums = all.sums[&(s.to_owned(), mi)];
            for (term, exact) in EstimateSums::TERMS.iter().zip(sums.terms()) {
                let got = total(
                    fleet,
                    "ragwatch_estimate_terms_total",
                    &[("stratum", s), ("metric", m.name()), ("term", term)],
                );
                let rule = format!("/metrics ragwatch_estimate_terms_total{{term={term}}}");
                rows.push(row(key(&rule, s, m.name(), ""), exact, got));
            }
        }
    }
    rows
}

/// The header of the printed table.
pub(super) fn header() -> String {
    format!(
        "{:<4} {:<40} {:<13} {:<17} {:<8} {:>18} {:>18} {:>10} result",
        "at", "rule", "stratum", "metric", "judge", "expected", "got", "rel.err"
    )
}

/// Prints every comparison, then per rule and moment the comparisons, the mismatches and the
/// largest relative error.
pub(super) fn print(rows: &[Row]) {
    eprintln!("---- every comparison (tolerance: relative {REL_TOL:e}, absolute {ABS_TOL:e})");
    eprintln!("{}", header());
    for r in rows {
        eprintln!("{}", r.line());
    }
    let mut summary: BTreeMap<(String, String), (usize, usize, f64)> = BTreeMap::new();
    for r in rows {
        let e = summary
            .entry((r.key.0.clone(), r.moment.clone()))
            .or_insert((0, 0, 0.0));
        e.0 += 1;
        if !r.ok() {
            e.1 += 1;
        }
        e.2 = e.2.max(
            r.relative()
                .unwrap_or(if r.ok() { 0.0 } else { f64::INFINITY }),
        );
    }
    eprintln!("---- per rule and moment: comparisons, mismatches, largest relative error");
    for ((rule, moment), (n, bad, worst)) in &summary {
        eprintln!("{rule:<62} {moment:<4} {n:>4} {bad:>4} {worst:>10.2e}");
    }
}
