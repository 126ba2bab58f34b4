//! `ragwatch gate --compare CANDIDATE=BASELINE`: two variants of one replay (a summary written with
//! `[variants]` on, so it carries per-variant figures), compared per metric by the fixed-sample form
//! of the live comparison rule. With `delta = mean_candidate - mean_baseline` and each arm's variance
//! of the mean `(sum_sq - sum^2/n + 0.25) / n^2`, `V` their sum, the one-sided 95% bounds are
//! `delta -/+ 1.645 sqrt(V)`: the candidate is `worse` (fails) when the upper bound is below
//! `-margin`, `not worse` when the lower bound is above it, `undecided` otherwise or when an arm has
//! fewer than `min_judged` scores (passes unless decided comparisons are required).

use serde::Deserialize;

use super::{Figures, GateError};

/// `[compare]` in a gate file: settings of `gate --compare`; a flag given on the command line wins.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompareConfig {
    /// The metrics compared; empty: `faithfulness`.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// The stratum whose figures are compared; unset: `all` (every stratum pooled).
    #[serde(default)]
    pub stratum: Option<String>,
    /// Worse means confidently worse by more than this; unset: `[variants].margin` of the config
    /// given, else 0.05.
    #[serde(default)]
    pub margin: Option<f64>,
    /// Scores each arm needs before any verdict; unset: `[variants].min_judged`, else 30.
    #[serde(default)]
    pub min_judged: Option<u64>,
    /// An undecided comparison fails.
    #[serde(default)]
    pub require_decided: bool,
}

/// The normal quantile of a one-sided 95% bound (alpha = 0.05).
pub const Z_ONE_SIDED_95: f64 = 1.645;

/// One `gate --compare`: the two variants and the settings, resolved from the flags, the gate
/// file's `[compare]` and the config's `[variants]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    /// The variant under test (`canary`).
    pub candidate: String,
    /// The variant it is compared with (`stable`).
    pub baseline: String,
    /// The metrics compared.
    pub metrics: Vec<String>,
    /// The stratum whose figures are read (`all`).
    pub stratum: String,
    /// Worse means confidently worse by more than this.
    pub margin: f64,
    /// Scores each arm needs before any verdict.
    pub min_judged: u64,
    /// An undecided comparison fails.
    pub require_decided: bool,
}

impl Compare {
    /// A comparison of `pair` (`CANDIDATE=BASELINE`) with the defaults: faithfulness, stratum
    /// `all`, margin 0.05, 30 scores per arm, undecided passes.
    pub fn new(pair: &str) -> Result<Self, GateError> {
        let bad = || GateError::Compare(format!("`{pair}` is not CANDIDATE=BASELINE"));
        let (candidate, baseline) = pair.split_once('=').ok_or_else(bad)?;
        let (candidate, baseline) = (candidate.trim(), baseline.trim());
        if candidate.is_empty() || baseline.is_empty() || baseline.contains('=') {
            return Err(bad());
        }
        if candidate == baseline {
            return Err(GateError::Compare(format!(
                "`{pair}` compares a variant with itself"
            )));
        }
        Ok(Self {
            candidate: candidate.to_owned(),
            baseline: baseline.to_owned(),
            metrics: vec![crate::dimensions::Quality::GATED.name().to_owned()],
            stratum: "all".to_owned(),
            margin: 0.05,
            min_judged: 30,
            require_decided: false,
        })
    }

    /// Takes what the gate file's `[compare]` sets.
    pub fn with_file(mut self, c: &CompareConfig) -> Self {
        if !c.metrics.is_empty() {
            self.metrics.clone_from(&c.metrics);
        }
        if let Some(s) = &c.stratum {
            self.stratum.clone_from(s);
        }
        if let Some(m) = c.margin {
            self.margin = m;
        }
        if let Some(n) = c.min_judged {
            self.min_judged = n;
        }
        self.require_decided |= c.require_decided;
        self
    }

    /// Checks the settings: a margin in [0, 1), a positive `min_judged`, at least one metric.
    pub fn validate(&self) -> Result<(), GateError> {
        if !(0.0..1.0).contains(&self.margin) {
            return Err(GateError::Compare(format!(
                "margin {} is not in [0, 1)",
                self.margin
            )));
        }
        if self.min_judged == 0 {
            return Err(GateError::Compare("min_judged must be > 0".into()));
        }
        if self.metrics.is_empty() {
            return Err(GateError::Compare("no metric to compare".into()));
        }
        Ok(())
    }
}

/// What a comparison found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareVerdict {
    /// The candidate is confidently worse than the baseline by more than the margin: fails.
    Worse,
    /// The candidate is confidently no worse than the baseline minus the margin: passes.
    NotWorse,
    /// Neither, or too few scores: passes unless decided comparisons are required.
    Undecided,
}

impl CompareVerdict {
    /// The verdict as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            CompareVerdict::Worse => "worse",
            CompareVerdict::NotWorse => "not worse",
            CompareVerdict::Undecided => "undecided",
        }
    }
}

/// One arm's scores of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Arm {
    /// Scores.
    pub n: u64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares.
    pub sum_sq: f64,
}

impl Arm {
    /// The mean score, when there is one.
    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }

    /// The variance of the mean, with the live rule's regularisation (a quarter, the largest
    /// variance of a score in [0, 1], added to the sum of squared deviations): never zero.
    pub fn variance_of_mean(&self) -> Option<f64> {
        let n = self.n as f64;
        (self.n > 0).then(|| ((self.sum_sq - self.sum * self.sum / n).max(0.0) + 0.25) / (n * n))
    }
}

/// The outcome of comparing one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The metric.
    pub metric: String,
    /// The candidate's scores.
    pub candidate: Arm,
    /// The baseline's scores.
    pub baseline: Arm,
    /// `mean_candidate - mean_baseline`, when both arms have scores.
    pub delta: Option<f64>,
    /// The one-sided 95% lower and upper bounds of `delta`.
    pub interval: Option<(f64, f64)>,
    /// The verdict.
    pub verdict: CompareVerdict,
    /// Why an undecided comparison is undecided.
    pub note: Option<String>,
}

impl Comparison {
    /// Whether the comparison lets the change through.
    pub fn passed(&self, require_decided: bool) -> bool {
        match self.verdict {
            CompareVerdict::Worse => false,
            CompareVerdict::NotWorse => true,
            CompareVerdict::Undecided => !require_decided,
        }
    }
}

/// Compares the candidate with the baseline on each metric of `c`, from a summary's per-variant
/// figures.
pub fn compare(c: &Compare, results: &Figures) -> Result<Vec<Comparison>, GateError> {
    c.validate()?;
    let prefix = crate::replay::VARIANT_FIGURE_PREFIX;
    let Some(stratum) = results.get(&c.stratum) else {
        return Err(GateError::Compare(format!(
            "the summary has no stratum `{}`",
            c.stratum
        )));
    };
    if !stratum.keys().any(|k| k.starts_with(prefix)) {
        return Err(GateError::Compare(
            "the summary has no per-variant figures: replay with [variants] on in the config"
                .into(),
        ));
    }
    for v in [&c.candidate, &c.baseline] {
        if !stratum.contains_key(&format!("{prefix}{v}/traces")) {
            return Err(GateError::Compare(format!(
                "the summary has no variant `{v}` (stratum `{}`)",
                c.stratum
            )));
        }
    }
    let arm = |v: &str, metric: &str| -> Result<Arm, GateError> {
        let get = |what: &str| {
            stratum
                .get(&format!("{prefix}{v}/{metric}/{what}"))
                .copied()
        };
        let n = get("n").ok_or_else(|| {
            GateError::Compare(format!("the summary has no metric `{metric}` per variant"))
        })?;
        Ok(Arm {
            n: n.max(0.0) as u64,
            sum: get("sum").unwrap_or(0.0),
            sum_sq: get("sum_sq").unwrap_or(0.0),
        })
    };
    let mut out = Vec::new();
    for metric in &c.metrics {
        let (cand, base) = (arm(&c.candidate, metric)?, arm(&c.baseline, metric)?);
        out.push(compare_arms(c, metric, cand, base));
    }
    Ok(out)
}

/// The fixed-sample comparison of two arms' scores of `metric`.
fn compare_arms(c: &Compare, metric: &str, cand: Arm, base: Arm) -> Comparison {
    let mut out = Comparison {
        metric: metric.to_owned(),
        candidate: cand,
        baseline: base,
        delta: None,
        interval: None,
        verdict: CompareVerdict::Undecided,
        note: None,
    };
    let (Some(mc), Some(mb), Some(vc), Some(vb)) = (
        cand.mean(),
        base.mean(),
        cand.variance_of_mean(),
        base.variance_of_mean(),
    ) else {
        out.note = Some("an arm has no scores".into());
        return out;
    };
    let delta = mc - mb;
    let half = Z_ONE_SIDED_95 * (vc + vb).sqrt();
    let (lower, upper) = (delta - half, delta + half);
    out.delta = Some(delta);
    out.interval = Some((lower, upper));
    if cand.n.min(base.n) < c.min_judged {
        out.note = Some(format!(
            "fewer than {} scores in an arm (min_judged)",
            c.min_judged
        ));
    } else if upper < -c.margin {
        out.verdict = CompareVerdict::Worse;
    } else if lower > -c.margin {
        out.verdict = CompareVerdict::NotWorse;
    } else {
        out.note = Some(format!(
            "the interval straddles -{}: more traces would decide",
            c.margin
        ));
    }
    out
}

/// The comparisons as a table, with a line per note and a last line counting the failures.
pub fn compare_table(c: &Compare, comparisons: &[Comparison]) -> String {
    let mut t = format!(
        "compare {}={} (stratum {}, margin {}, min_judged {}; bounds one-sided 95%, z {})\n",
        c.candidate, c.baseline, c.stratum, c.margin, c.min_judged, Z_ONE_SIDED_95
    );
    let (nc, nb) = (format!("n {}", c.candidate), format!("n {}", c.baseline));
    let (mc, mb) = (
        format!("mean {}", c.candidate),
        format!("mean {}", c.baseline),
    );
    t.push_str(&format!(
        "{:<20} {nc:>10} {nb:>10} {mc:>13} {mb:>13} {:>9}  {:<20} {}\n",
        "metric", "delta", "interval", "verdict"
    ));
    let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.4}"));
    for o in comparisons {
        let interval = o
            .interval
            .map_or("-".to_owned(), |(l, u)| format!("[{l:.4}, {u:.4}]"));
        t.push_str(&format!(
            "{:<20} {:>10} {:>10} {:>13} {:>13} {:>9}  {interval:<20} {}\n",
            o.metric,
            o.candidate.n,
            o.baseline.n,
            fmt(o.candidate.mean()),
            fmt(o.baseline.mean()),
            fmt(o.delta),
            o.verdict.as_str()
        ));
    }
    for o in comparisons {
        if let Some(note) = &o.note {
            let then = if o.passed(c.require_decided) {
                "passes; --require-decided fails it"
            } else {
                "fails: decided comparisons are required"
            };
            t.push_str(&format!("note: {} undecided, {note}; {then}\n", o.metric));
        }
    }
    let failed = comparisons
        .iter()
        .filter(|o| !o.passed(c.require_decided))
        .count();
    t.push_str(&format!(
        "{} comparisons, {} failed\n",
        comparisons.len(),
        failed
    ));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::GateConfig;

    fn figures(pairs: &[(&str, &str, f64)]) -> Figures {
        let mut f = Figures::new();
        for (s, m, v) in pairs {
            f.entry((*s).into()).or_default().insert((*m).into(), *v);
        }
        f
    }

    fn gate(text: &str) -> GateConfig {
        toml::from_str(text).unwrap()
    }

    /// Per-variant figures of stratum `all` as replay writes them: (variant, metric, n, sum, sum_sq).
    fn arms(rows: &[(&str, &str, f64, f64, f64)]) -> Figures {
        let mut f = figures(&[("all", "faithfulness", 0.6)]);
        let all = f.get_mut("all").unwrap();
        for (v, m, n, sum, sum_sq) in rows {
            all.insert(format!("variant/{v}/traces"), *n);
            all.insert(format!("variant/{v}/{m}/n"), *n);
            all.insert(format!("variant/{v}/{m}/sum"), *sum);
            all.insert(format!("variant/{v}/{m}/sum_sq"), *sum_sq);
        }
        f
    }

    /// An arm of `n` scores, a share `p` of them 1 and the rest 0.
    fn binary(v: &'static str, n: f64, p: f64) -> (&'static str, &'static str, f64, f64, f64) {
        (v, "faithfulness", n, n * p, n * p)
    }

    #[test]
    fn the_interval_is_the_live_rules_fixed_sample_form() {
        let c = Compare {
            min_judged: 1,
            ..Compare::new("canary=stable").unwrap()
        };
        let f = arms(&[
            ("canary", "faithfulness", 4.0, 2.0, 1.5),
            ("stable", "faithfulness", 4.0, 3.0, 2.5),
        ]);
        let o = &compare(&c, &f).unwrap()[0];
        // Variance of each mean: (sum_sq - sum^2/n + 0.25) / n^2 = 0.75/16 and 0.5/16.
        let half = 1.645 * (0.75f64 / 16.0 + 0.5 / 16.0).sqrt();
        assert_eq!(o.delta, Some(-0.25));
        let (l, u) = o.interval.unwrap();
        assert!((l - (-0.25 - half)).abs() < 1e-12 && (u - (-0.25 + half)).abs() < 1e-12);
        assert_eq!(o.verdict, CompareVerdict::Undecided);
        assert!(o.passed(false) && !o.passed(true));
        assert_eq!((o.candidate.n, o.baseline.n), (4, 4));
    }

    #[test]
    fn worse_not_worse_and_undecided() {
        let c = Compare::new("canary=stable").unwrap();
        let verdict = |cand, base| compare(&c, &arms(&[cand, base])).unwrap()[0].clone();
        let worse = verdict(binary("canary", 400.0, 0.6), binary("stable", 400.0, 0.9));
        assert_eq!(worse.verdict, CompareVerdict::Worse);
        assert!(!worse.passed(false));
        let same = verdict(binary("canary", 2000.0, 0.9), binary("stable", 2000.0, 0.9));
        assert_eq!(same.verdict, CompareVerdict::NotWorse, "{same:?}");
        let close = verdict(binary("canary", 100.0, 0.85), binary("stable", 100.0, 0.9));
        assert_eq!(close.verdict, CompareVerdict::Undecided, "{close:?}");
        assert!(close.note.as_deref().unwrap().contains("straddles"));
        // Far worse, but below min_judged in an arm: undecided.
        let few = verdict(binary("canary", 29.0, 0.1), binary("stable", 400.0, 0.9));
        assert_eq!(few.verdict, CompareVerdict::Undecided);
        assert!(few.note.as_deref().unwrap().contains("min_judged"));
        let none = verdict(binary("canary", 0.0, 0.0), binary("stable", 400.0, 0.9));
        assert_eq!(
            (none.verdict, none.delta),
            (CompareVerdict::Undecided, None)
        );
        // A wider margin lets the close one through.
        let wide = Compare {
            margin: 0.3,
            ..c.clone()
        };
        let f = arms(&[binary("canary", 100.0, 0.85), binary("stable", 100.0, 0.9)]);
        assert_eq!(
            compare(&wide, &f).unwrap()[0].verdict,
            CompareVerdict::NotWorse
        );
        let table = compare_table(&c, &[worse, close]);
        assert!(table.contains("worse") && table.contains("note: faithfulness undecided"));
        assert!(table.ends_with("2 comparisons, 1 failed\n"), "{table}");
    }

    #[test]
    fn what_cannot_be_compared_is_an_error() {
        let c = Compare::new("canary=stable").unwrap();
        let plain = figures(&[("all", "faithfulness", 0.6)]);
        let err = |c: &Compare, f: &Figures| compare(c, f).unwrap_err().to_string();
        assert!(err(&c, &plain).contains("[variants]"));
        let f = arms(&[binary("canary", 10.0, 0.5), binary("main", 10.0, 0.5)]);
        assert!(err(&c, &f).contains("`stable`"));
        let f = arms(&[binary("canary", 10.0, 0.5), binary("stable", 10.0, 0.5)]);
        let bogus = Compare {
            metrics: vec!["bogus".into()],
            ..c.clone()
        };
        assert!(err(&bogus, &f).contains("`bogus`"));
        let tail = Compare {
            stratum: "tail".into(),
            ..c.clone()
        };
        assert!(err(&tail, &f).contains("`tail`"));
        let margin = Compare { margin: 1.0, ..c };
        assert!(err(&margin, &f).contains("margin"));
        for bad in ["canary", "=stable", "a=b=c", "x=x"] {
            assert!(Compare::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_gate_files_compare_table_sets_the_defaults() {
        let g = gate(
            "[compare]\nmetrics = [\"faithfulness\", \"answer_relevancy\"]\nmargin = 0.1\nmin_judged = 5\nrequire_decided = true\n",
        );
        assert!(g.checks.is_empty());
        let c = Compare::new(" canary = stable ")
            .unwrap()
            .with_file(g.compare.as_ref().unwrap());
        assert_eq!(c.candidate, "canary");
        assert_eq!(c.metrics, ["faithfulness", "answer_relevancy"]);
        assert_eq!((c.margin, c.min_judged, c.require_decided), (0.1, 5, true));
        assert_eq!(c.stratum, "all");
    }
}
