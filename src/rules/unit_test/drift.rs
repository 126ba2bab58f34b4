//! The drop scan's unit tests: strata whose estimate sums grow by a fixed amount a minute, in
//! phases, written out as input series; what the rules must record at the evaluation is worked
//! out from the same sums by [`crate::window::scan`], so promtool holds the PromQL to the code
//! the simulation runs.

use std::time::Duration;

use crate::dimensions::Quality;
use crate::window::EstimateSums;
use crate::window::scan::{DROP_MULTIPLES, Evidence, horizon, llr, reference, scan, windows};

use super::super::scan::window_label;

const MAX_DROP: f64 = 0.05;
const MIN_SAMPLES: f64 = 20.0;
const PAGE_LLR: f64 = 15.0;

/// One stratum: from each phase's first minute on, its terms grow by these amounts a minute.
pub(super) struct Stratum {
    name: &'static str,
    phases: Vec<(u32, Vec<(&'static str, f64)>)>,
}

/// Terms of `k` pairs a minute sampled with probability 0.5 (w = 2 each, c = 2 as the file's
/// header explains), n = 2k traces, with mean `mean` and sum of squares `squares` per unit weight.
fn llm_only(k: f64, mean: f64, squares: f64) -> Vec<(&'static str, f64)> {
    let w = 2.0 * k;
    vec![
        ("n", w),
        ("k", k),
        ("w", w),
        ("c", w),
        ("wy", w * mean),
        ("cy", w * mean),
        ("cyy", w * squares),
    ]
}

/// [`llm_only`]'s terms with the offline score's: every pair drawn at random (`kr`), an offline
/// mean `f_pairs` and square `ff` on the pairs, `yf` their product's mean, and `f_all` the offline
/// mean over all `n` traces.
fn paired(
    k: f64,
    mean: f64,
    squares: f64,
    f_pairs: f64,
    ff: f64,
    yf: f64,
    f_all: f64,
) -> Vec<(&'static str, f64)> {
    let w = 2.0 * k;
    let mut out = llm_only(k, mean, squares);
    out.extend([
        ("kr", k),
        ("f", w * f_all),
        ("wf", w * f_pairs),
        ("cf", w * f_pairs),
        ("cff", w * ff),
        ("cyf", w * yf),
    ]);
    out
}

impl Stratum {
    /// The increments of minute `m` (minutes count from 1; minute 0 is the counters' zero).
    fn at(&self, m: u32) -> EstimateSums {
        let phase = self
            .phases
            .iter()
            .rev()
            .find(|(from, _)| *from <= m)
            .expect("a stratum's first phase starts at minute 1");
        sums(&phase.1, 1.0)
    }

    /// The sums over minutes `from + 1 ..= to`.
    fn between(&self, from: u32, to: u32) -> EstimateSums {
        let mut out = [0.0; 13];
        for m in from + 1..=to {
            for (o, t) in out.iter_mut().zip(self.at(m).terms()) {
                *o += t;
            }
        }
        EstimateSums::from_terms(out)
    }

    /// The input series of `metric`'s terms over `minutes` minutes.
    fn series(&self, metric: &str, minutes: u32) -> String {
        let mut out = String::new();
        for (i, (term, _)) in self.phases[0].1.iter().enumerate() {
            let mut values = vec!["0".to_owned()];
            for (p, (from, incs)) in self.phases.iter().enumerate() {
                let to = self.phases.get(p + 1).map_or(minutes, |n| n.0 - 1);
                let start = self.between(0, *from).terms()[index(term)];
                values.push(format!("{}+{}x{}", num(start), num(incs[i].1), to - from));
            }
            out.push_str(&format!(
                "      - series: 'ragwatch_estimate_terms_total{{metric=\"{metric}\",stratum=\"{}\",term=\"{term}\"}}'\n        values: '{}'\n",
                self.name,
                values.join(" ")
            ));
        }
        out
    }

    /// Each look-back window's evidence at minute `at`, against the reference: the minutes up to
    /// it before the longest window.
    fn evidence(&self, at: u32) -> Vec<(String, Evidence)> {
        let all = self.between(0, at);
        let (short, day) = (Duration::from_secs(300), Duration::from_secs(86_400));
        let minutes = |w: Duration| (w.as_secs() / 60) as u32;
        let longest = horizon(short, day).expect("the shipped windows have a horizon");
        let rest = reference(&all, &self.between(at.saturating_sub(minutes(longest)), at));
        windows(short, day)
            .into_iter()
            .filter_map(|w| {
                let window = self.between(at.saturating_sub(minutes(w)), at);
                let e = Evidence::of(&window, &rest)?;
                Some((window_label(w), e))
            })
            .collect()
    }
}

fn sums(terms: &[(&str, f64)], scale: f64) -> EstimateSums {
    let mut out = [0.0; 13];
    for (term, v) in terms {
        out[index(term)] = v * scale;
    }
    EstimateSums::from_terms(out)
}

fn index(term: &str) -> usize {
    EstimateSums::TERMS
        .iter()
        .position(|t| *t == term)
        .expect("a term the estimate knows")
}

/// A number as promtool's series notation takes it, free of accumulated rounding.
fn num(v: f64) -> String {
    let r = (v * 1e6).round() / 1e6;
    format!("{r}")
}

/// Prometheus's `round(v, to)`.
fn round(v: f64, to: f64) -> f64 {
    (v / to + 0.5).floor() * to
}

/// Go's `%.4g` of `v * 100` and a `%`: Prometheus's `humanizePercentage`.
pub(super) fn humanize_percentage(v: f64) -> String {
    let x = v * 100.0;
    if x == 0.0 {
        return "0%".to_owned();
    }
    let digits = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{x:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    format!("{s}%")
}

/// The best ratio of each qualifying window (the largest over the drop sizes).
fn per_window(e: &[(String, Evidence)]) -> Vec<(String, f64)> {
    e.iter()
        .filter_map(|(label, ev)| {
            DROP_MULTIPLES
                .iter()
                .filter_map(|m| llr(ev, m * MAX_DROP, MIN_SAMPLES))
                .reduce(f64::max)
                .map(|v| (label.clone(), v))
        })
        .collect()
}

fn thresholds(metric: &str, strata: &[&Stratum], minutes: u32) -> String {
    let mut out = format!(
        "      - series: 'ragwatch_threshold_confidence_z{{}}'\n        values: '1.645x{minutes}'\n      - series: 'ragwatch_threshold_page_llr{{}}'\n        values: '{PAGE_LLR}x{minutes}'\n"
    );
    for s in strata {
        let st = s.name;
        out.push_str(&format!(
            "      - series: 'ragwatch_threshold_ratio{{metric=\"{metric}\",stratum=\"{st}\",judge=\"combined\",rule=\"max_drop\"}}'\n        values: '{MAX_DROP}x{minutes}'\n      - series: 'ragwatch_threshold_min_samples{{metric=\"{metric}\",stratum=\"{st}\",judge=\"combined\"}}'\n        values: '{MIN_SAMPLES}x{minutes}'\n"
        ));
    }
    out.trim_end_matches('\n').to_owned()
}

/// A `promql_expr_test` entry: the expression, its evaluation minute, its samples.
fn expect(expr: &str, at: u32, samples: &[(String, f64)]) -> String {
    let mut out = format!("      - expr: {expr}\n        eval_time: {at}m\n");
    if samples.is_empty() {
        out.push_str("        exp_samples: []\n");
    } else {
        out.push_str("        exp_samples:\n");
        for (labels, v) in samples {
            out.push_str(&format!(
                "          - labels: '{labels}'\n            value: {}\n",
                num(round(*v, 0.01))
            ));
        }
    }
    out
}

/// The variables of `templates/tests/drift.yaml` for `metric`; `description` writes an alert's
/// description from the window, the window's and the reference's means and the ratio.
pub(super) fn vars(
    metric: Quality,
    description: impl Fn(&str, f64, f64, f64) -> String,
) -> (Vec<(&'static str, String)>, String) {
    let name = metric.name();
    // head: 0.95 (sd 0.1) for 170 minutes, then 0.75 (sd 0.2); tail: a steady 0.8 (sd 0.2);
    // sparse: head's drop with a pair every ten minutes, 16 in the longest window (minimum 20).
    let head = Stratum {
        name: "head",
        phases: vec![
            (1, llm_only(12.0, 0.95, 0.9125)),
            (171, llm_only(12.0, 0.75, 0.6025)),
        ],
    };
    let tail = Stratum {
        name: "tail",
        phases: vec![(1, llm_only(12.0, 0.8, 0.68))],
    };
    let sparse = Stratum {
        name: "sparse",
        phases: vec![
            (1, llm_only(0.1, 0.95, 0.9125)),
            (171, llm_only(0.1, 0.75, 0.6025)),
        ],
    };
    // paired: a steady 0.8 with the offline judge on every trace; on the pairs its mean is 0.6
    // (variance 0.04, covariance with the LLM score 0.02: lambda 0.5), over all traces 0.62, so
    // the estimate is 0.8 + 0.5 * 0.02 = 0.81 and lambda and the offline terms are exercised.
    let paired = Stratum {
        name: "paired",
        phases: vec![(1, paired(40.0, 0.8, 0.68, 0.6, 0.4, 0.5, 0.62))],
    };
    // young: 2.5 verdicts a minute, supported or not (mean 0.75) for 185 minutes, then 0.6 or 0.7
    // (mean 0.65). At minute 40 Prometheus holds less than the longest look-back (160 minutes): no
    // reference, no evidence. At minute 200 the reference is the 40 minutes before the longest
    // look-back, 100 verdicts uncertain by +-0.07: a drop of 0.10 within its own noise.
    let young = Stratum {
        name: "young",
        phases: vec![
            (1, llm_only(2.5, 0.75, 0.75)),
            (186, llm_only(2.5, 0.65, 0.425)),
        ],
    };
    let mut series = String::new();
    for s in [&head, &tail, &sparse, &paired] {
        series.push_str(&s.series(name, 220));
    }
    let at = 200;
    let head_windows = per_window(&head.evidence(at));
    let best = head_windows
        .iter()
        .cloned()
        .reduce(|a, b| if b.1 > a.1 { b } else { a })
        .expect("head has qualifying windows");
    assert!(best.1 >= PAGE_LLR, "the test's drop pages");
    let head_evidence = head.evidence(at);
    let e = &head_evidence
        .iter()
        .find(|(l, _)| *l == best.0)
        .expect("the best window")
        .1;
    let alert_description = description(&best.0, e.mean, e.reference.mean, best.1);
    let tail_best = scan(
        &tail
            .evidence(at)
            .into_iter()
            .map(|(_, e)| e)
            .collect::<Vec<_>>(),
        MAX_DROP,
        MIN_SAMPLES,
    )
    .expect("tail has qualifying windows");
    assert!(tail_best < 0.0, "a steady stratum shows no drop");
    let windows_of = |w: &[(String, f64)]| -> Vec<(String, f64)> {
        w.iter()
            .map(|(l, v)| (format!("{{window=\"{l}\"}}"), *v))
            .collect()
    };
    let mut values = String::new();
    values.push_str("      # Each window's ratio and the scan, as src/window/scan.rs works them out from the same sums.\n");
    values.push_str(&expect(
        "round(max by (window) (ragwatch:scan:llr{stratum=\"head\"}), 0.01)",
        at,
        &windows_of(&head_windows),
    ));
    values.push_str(&expect(
        &format!("round(ragwatch:estimate:scan_llr{{metric=\"{name}\",stratum=\"tail\"}}, 0.01)"),
        at,
        &[(format!("{{metric=\"{name}\",stratum=\"tail\"}}"), tail_best)],
    ));
    let paired_evidence = paired.evidence(at);
    let paired_means: Vec<(String, f64)> = paired_evidence
        .iter()
        .filter(|(_, e)| e.pairs >= MIN_SAMPLES)
        .map(|(l, e)| (format!("{{window=\"{l}\"}}"), e.mean))
        .collect();
    assert!(paired_means.iter().all(|(_, m)| (m - 0.81).abs() < 1e-9));
    values.push_str(&expect(
        "round(max by (window) (ragwatch:scan:llr{stratum=\"paired\"}), 0.01)",
        at,
        &windows_of(&per_window(&paired_evidence)),
    ));
    values.push_str(&expect(
        &format!("ragwatch:estimate:scan_llr{{metric=\"{name}\",stratum=\"sparse\"}}"),
        at,
        &[],
    ));
    let young_at = 200;
    let young_windows = per_window(&young.evidence(young_at));
    assert!(!young_windows.is_empty(), "the thin reference is compared");
    assert!(
        young_windows.iter().all(|(_, v)| *v < PAGE_LLR),
        "a drop within a thin baseline's noise does not page"
    );
    assert!(
        young.evidence(40).is_empty(),
        "no reference before the longest look-back"
    );
    let vars = vec![
        (
            "thresholds",
            thresholds(name, &[&head, &tail, &sparse, &paired], 220),
        ),
        ("series", series.trim_end_matches('\n').to_owned()),
        ("exp_values", values.trim_end_matches('\n').to_owned()),
        ("young_thresholds", thresholds(name, &[&young], 220)),
        (
            "young_series",
            young.series(name, 220).trim_end_matches('\n').to_owned(),
        ),
        (
            "young_values",
            format!(
                "      # Less history than the longest look-back: no reference, no ratio.\n{}{}",
                expect(
                    "round(max by (window) (ragwatch:scan:llr{stratum=\"young\"}), 0.01)",
                    40,
                    &[],
                ),
                expect(
                    "round(max by (window) (ragwatch:scan:llr{stratum=\"young\"}), 0.01)",
                    young_at,
                    &windows_of(&young_windows),
                )
            )
            .trim_end_matches('\n')
            .to_owned(),
        ),
    ];
    (vars, alert_description)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_read_as_prometheus_writes_them() {
        assert_eq!(humanize_percentage(0.75), "75%");
        assert_eq!(humanize_percentage(0.924_444), "92.44%");
        assert_eq!(humanize_percentage(1.0), "100%");
        assert_eq!(humanize_percentage(0.061_23), "6.123%");
    }

    #[test]
    fn a_stratum_sums_its_phases() {
        let s = Stratum {
            name: "s",
            phases: vec![(1, llm_only(1.0, 1.0, 1.0)), (3, llm_only(2.0, 0.5, 0.25))],
        };
        let sum = s.between(0, 4);
        assert_eq!(sum.k, 1.0 + 1.0 + 2.0 + 2.0);
        assert!(
            s.series("faithfulness", 4)
                .contains("term=\"k\"}'\n        values: '0 1+1x1 4+2x1'")
        );
    }
}
