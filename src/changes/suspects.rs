//! Suspects: the documents and sources over-represented in a stratum's low-scoring traces.
//!
//! Each stratum keeps two rings of epochs: the short window (two epochs of half its length) and
//! the baseline window (eight epochs of an eighth of its length). Each epoch holds a Space-Saving
//! sketch of the document ids its traces retrieved (each id once per trace), with what each held
//! id's traces got from each judge since the id was admitted (verdicts, low verdicts), the same for
//! every source, and the epoch's totals. A window is read as the sum of its ring's live epochs, so
//! it covers between half and all of its length (the short window) or between seven eighths and
//! all of it (the baseline).
//!
//! The lift of a document for a judge is the risk ratio of a low verdict with the document against
//! without it: (a / n1) / (c / n2), with a of the n1 verdicts on traces with the document low, and
//! c of the n2 other verdicts low (each cell plus one half, so that no count is ever divided by
//! zero). Its interval is exp(ln RR ± z se), se = sqrt(1/a - 1/n1 + 1/c - 1/n2), at the z of a
//! two-sided family-wise error `alpha` split (Bonferroni) over the ids tested: those with at least
//! `min_traces` verdicts. A document is listed when its lower bound is above `min_lift`: one
//! retrieved into 2 % of the traffic but 30 % of the unfaithful answers stands out; one that is
//! simply popular has a lift near 1 and is not listed.

use serde::Serialize;

use super::sketch::Sketch;
use super::source::SourceSet;
use crate::dimensions::JudgeKind;

/// Judges counted, by index: the offline judge (every trace) and the LLM judge (the sample).
pub(crate) const JUDGES: [JudgeKind; 2] = [JudgeKind::Offline, JudgeKind::Llm];

/// Verdicts and low verdicts, per judge.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    judged: [u32; 2],
    low: [u32; 2],
}

impl Counts {
    fn add(&mut self, judge: usize, low: bool) {
        self.judged[judge] = self.judged[judge].saturating_add(1);
        self.low[judge] = self.low[judge].saturating_add(u32::from(low));
    }
}

/// One epoch's summary.
#[derive(Debug, Clone)]
struct Epoch {
    /// Which epoch it holds (time / epoch length); `u64::MAX` when it holds none.
    id: u64,
    documents: Sketch<Counts>,
    sources: Vec<Counts>,
    traces: u64,
    totals: [(u64, u64); 2],
}

impl Epoch {
    fn new(capacity: usize, sources: usize) -> Self {
        Self {
            id: u64::MAX,
            documents: Sketch::new(capacity),
            sources: vec![Counts::default(); sources],
            traces: 0,
            totals: [(0, 0); 2],
        }
    }

    fn reset(&mut self, id: u64) {
        self.id = id;
        self.documents.clear();
        self.sources.fill(Counts::default());
        self.traces = 0;
        self.totals = [(0, 0); 2];
    }
}

/// A ring of epochs covering one window.
#[derive(Debug, Clone)]
struct Ring {
    epoch_ms: u64,
    epochs: Vec<Epoch>,
}

impl Ring {
    fn new(window_ms: u64, epochs: usize, capacity: usize, sources: usize) -> Self {
        Self {
            epoch_ms: (window_ms / epochs as u64).max(1),
            epochs: vec![Epoch::new(capacity, sources); epochs],
        }
    }

    /// The epoch of `now_ms`, emptied first when it held an older one.
    fn current(&mut self, now_ms: u64) -> &mut Epoch {
        let id = now_ms / self.epoch_ms;
        let n = self.epochs.len() as u64;
        let e = &mut self.epochs[(id % n) as usize];
        if e.id != id {
            e.reset(id);
        }
        e
    }

    /// The epochs inside the window ending at `now_ms`.
    fn live(&self, now_ms: u64) -> impl Iterator<Item = &Epoch> {
        let id = now_ms / self.epoch_ms;
        let n = self.epochs.len() as u64;
        self.epochs
            .iter()
            .filter(move |e| e.id != u64::MAX && e.id <= id && id - e.id < n)
    }

    fn heap_bytes(&self) -> usize {
        self.epochs
            .iter()
            .map(|e| e.documents.heap_bytes() + e.sources.capacity() * size_of::<Counts>())
            .sum()
    }
}

/// Which window a report reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// The short window of the drift rules.
    Short,
    /// The baseline window.
    Baseline,
}

/// How suspects are tested and listed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Test {
    pub min_traces: u64,
    pub min_lift: f64,
    pub alpha: f64,
    pub limit: usize,
    /// List the strongest candidates even below `min_lift`.
    pub all: bool,
}

/// One document's or source's figures in a window, for one judge.
#[derive(Debug, Clone, Serialize)]
pub struct Suspect {
    /// The document id (cut to 128 bytes) or the source's label value.
    pub id: String,
    /// Verdicts on traces with it (for a document: since the sketch admitted it, exact).
    pub verdicts: u64,
    /// Of those, low.
    pub low: u64,
    /// low / verdicts.
    pub low_ratio: f64,
    /// The share of low verdicts among the stratum's other verdicts.
    pub rest_low_ratio: f64,
    /// Its share of the stratum's low verdicts.
    pub share_of_low: f64,
    /// Its share of the stratum's verdicts.
    pub share_of_verdicts: f64,
    /// The risk ratio of a low verdict with it against without it.
    pub lift: f64,
    /// The lift's interval at the report's z.
    pub lift_lower: f64,
    /// Upper end of that interval.
    pub lift_upper: f64,
    /// Whether the lower bound is above `min_lift`.
    pub listed: bool,
    /// For a document: the traces the sketch may have missed before admitting it (its error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen_at_most: Option<u64>,
    /// In a short-window report: the same figures over the baseline window (absent when the
    /// baseline holds no verdict with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// A short-window suspect's figures over the baseline window.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Verdicts on traces with it.
    pub verdicts: u64,
    /// Of those, low.
    pub low: u64,
    /// The risk ratio.
    pub lift: f64,
    /// Its interval.
    pub lift_lower: f64,
    /// Upper end.
    pub lift_upper: f64,
}

/// One stratum's suspects for one judge in one window.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Traces that arrived in the window.
    pub traces: u64,
    /// Verdicts of the judge.
    pub verdicts: u64,
    /// Of those, low.
    pub low: u64,
    /// Candidates tested (documents and sources with at least `min_traces` verdicts).
    pub tested: u64,
    /// z of the intervals: two-sided `alpha` split over the candidates tested.
    pub z: f64,
    /// Listed documents, strongest lower bound first.
    pub documents: Vec<Suspect>,
    /// Listed sources, strongest lower bound first (when sources are declared).
    pub sources: Vec<Suspect>,
}

/// One stratum's rings.
#[derive(Debug, Clone)]
pub(crate) struct StratumSuspects {
    short: Ring,
    baseline: Ring,
}

impl StratumSuspects {
    /// Rings for windows of `short_ms` and `baseline_ms`, `capacity` ids per epoch, `sources`
    /// source label values.
    pub fn new(short_ms: u64, baseline_ms: u64, capacity: usize, sources: usize) -> Self {
        Self {
            short: Ring::new(short_ms, 2, capacity, sources),
            baseline: Ring::new(baseline_ms, 8, capacity, sources),
        }
    }

    /// A trace arrived at `now_ms` with these distinct document ids.
    pub fn arrive<'a>(&mut self, ids: impl Iterator<Item = &'a str> + Clone, now_ms: u64) {
        for ring in [&mut self.short, &mut self.baseline] {
            let e = ring.current(now_ms);
            e.traces += 1;
            for id in ids.clone() {
                e.documents.offer(id);
            }
        }
    }

    /// A verdict of `judge` (index into [`JUDGES`]) on a trace with these ids and sources.
    pub fn judged<'a>(
        &mut self,
        judge: usize,
        low: bool,
        ids: impl Iterator<Item = &'a str> + Clone,
        sources: SourceSet,
        now_ms: u64,
    ) {
        for ring in [&mut self.short, &mut self.baseline] {
            let e = ring.current(now_ms);
            e.totals[judge].0 += 1;
            e.totals[judge].1 += u64::from(low);
            for id in ids.clone() {
                if let Some(entry) = e.documents.get_mut(id) {
                    entry.payload.add(judge, low);
                }
            }
            for (i, c) in e.sources.iter_mut().enumerate() {
                if sources & (1 << i) != 0 {
                    c.add(judge, low);
                }
            }
        }
    }

    /// Document ids the sketches hold now.
    pub fn ids_held(&self) -> usize {
        [&self.short, &self.baseline]
            .iter()
            .flat_map(|r| r.epochs.iter())
            .map(|e| e.documents.entries().len())
            .sum()
    }

    /// Bytes the rings hold.
    pub fn heap_bytes(&self) -> usize {
        self.short.heap_bytes() + self.baseline.heap_bytes()
    }

    /// The suspects of `judge` in `window` at `now_ms`; `source_names` labels the sources. The
    /// short window's suspects carry their baseline figures: a suspect whose baseline lift is near
    /// 1 is what changed; one as high in the baseline was already so.
    pub fn report(
        &self,
        judge: usize,
        window: Window,
        now_ms: u64,
        test: &Test,
        source_names: &[String],
    ) -> Report {
        let ring = match window {
            Window::Short => &self.short,
            Window::Baseline => &self.baseline,
        };
        let counts = Aggregate::of(ring, judge, now_ms, source_names.len());
        let mut report = counts.report(test, source_names);
        if window == Window::Short {
            let baseline = Aggregate::of(&self.baseline, judge, now_ms, source_names.len());
            let compare = |id: &str, n1: u64, a: u64| {
                (n1 > 0 && n1 < baseline.n).then(|| {
                    let s = suspect(
                        id,
                        (n1, a),
                        (baseline.n, baseline.l),
                        report.z,
                        test.min_lift,
                        None,
                    );
                    Baseline {
                        verdicts: s.verdicts,
                        low: s.low,
                        lift: s.lift,
                        lift_lower: s.lift_lower,
                        lift_upper: s.lift_upper,
                    }
                })
            };
            for d in &mut report.documents {
                let (n1, a, _) = baseline
                    .documents
                    .get(d.id.as_str())
                    .copied()
                    .unwrap_or_default();
                d.baseline = compare(&d.id, n1, a);
            }
            for s in &mut report.sources {
                if let Some(i) = source_names.iter().position(|n| *n == s.id) {
                    let (n1, a) = baseline.sources[i];
                    s.baseline = compare(&s.id, n1, a);
                }
            }
        }
        report
    }
}

/// A window's counts for one judge: the sums of its ring's live epochs.
struct Aggregate<'a> {
    traces: u64,
    /// Verdicts and low verdicts.
    n: u64,
    l: u64,
    /// By held id: verdicts and low verdicts since admission, and the admission errors.
    documents: std::collections::HashMap<&'a str, (u64, u64, u64)>,
    /// By source: verdicts and low verdicts.
    sources: Vec<(u64, u64)>,
}

impl<'a> Aggregate<'a> {
    fn of(ring: &'a Ring, judge: usize, now_ms: u64, sources: usize) -> Self {
        let mut agg = Aggregate {
            traces: 0,
            n: 0,
            l: 0,
            documents: Default::default(),
            sources: vec![(0, 0); sources],
        };
        for e in ring.live(now_ms) {
            agg.traces += e.traces;
            agg.n += e.totals[judge].0;
            agg.l += e.totals[judge].1;
            for d in e.documents.entries() {
                let t = agg.documents.entry(&d.key).or_default();
                t.0 += u64::from(d.payload.judged[judge]);
                t.1 += u64::from(d.payload.low[judge]);
                t.2 += d.error;
            }
            for (s, c) in agg.sources.iter_mut().zip(&e.sources) {
                s.0 += u64::from(c.judged[judge]);
                s.1 += u64::from(c.low[judge]);
            }
        }
        agg
    }

    /// The candidates with enough verdicts, tested at a Bonferroni z, listed and ranked.
    fn report(&self, test: &Test, source_names: &[String]) -> Report {
        let (n, l) = (self.n, self.l);
        let eligible = |n1: u64| n1 >= test.min_traces && n1 < n;
        let tested = self.documents.values().filter(|d| eligible(d.0)).count()
            + self.sources.iter().filter(|s| eligible(s.0)).count();
        let z = normal_quantile(1.0 - test.alpha / (2.0 * tested.max(1) as f64));
        let figures = |id: &str, n1: u64, a: u64, unseen: Option<u64>| {
            suspect(id, (n1, a), (n, l), z, test.min_lift, unseen)
        };
        let mut docs: Vec<Suspect> = self
            .documents
            .iter()
            .filter(|(_, d)| eligible(d.0))
            .map(|(id, d)| figures(id, d.0, d.1, Some(d.2)))
            .collect();
        let mut srcs: Vec<Suspect> = self
            .sources
            .iter()
            .zip(source_names)
            .filter(|(s, _)| eligible(s.0))
            .map(|(s, name)| figures(name, s.0, s.1, None))
            .collect();
        for list in [&mut docs, &mut srcs] {
            list.retain(|s| test.all || s.listed);
            list.sort_by(|a, b| {
                b.lift_lower
                    .total_cmp(&a.lift_lower)
                    .then_with(|| a.id.cmp(&b.id))
            });
            list.truncate(test.limit);
        }
        Report {
            traces: self.traces,
            verdicts: n,
            low: l,
            tested: tested as u64,
            z,
            documents: docs,
            sources: srcs,
        }
    }
}

/// The figures of a candidate with `a` low of `n1` verdicts, in a stratum with `l` low of `n`.
fn suspect(
    id: &str,
    (n1, a): (u64, u64),
    (n, l): (u64, u64),
    z: f64,
    min_lift: f64,
    unseen_at_most: Option<u64>,
) -> Suspect {
    let (n2, c) = (n.saturating_sub(n1), l.saturating_sub(a));
    let (a_, n1_, c_, n2_) = (
        a as f64 + 0.5,
        n1 as f64 + 1.0,
        c as f64 + 0.5,
        n2 as f64 + 1.0,
    );
    let log_rr = (a_ / n1_).ln() - (c_ / n2_).ln();
    let se = (1.0 / a_ - 1.0 / n1_ + 1.0 / c_ - 1.0 / n2_)
        .max(0.0)
        .sqrt();
    let ratio = |x: u64, y: u64| if y == 0 { 0.0 } else { x as f64 / y as f64 };
    let lift_lower = (log_rr - z * se).exp();
    Suspect {
        id: id.to_owned(),
        verdicts: n1,
        low: a,
        low_ratio: ratio(a, n1),
        rest_low_ratio: ratio(c, n2),
        share_of_low: ratio(a, l),
        share_of_verdicts: ratio(n1, n),
        lift: log_rr.exp(),
        lift_lower,
        lift_upper: (log_rr + z * se).exp(),
        listed: lift_lower > min_lift,
        unseen_at_most,
        baseline: None,
    }
}

/// The standard normal quantile of `p` in (0, 1) (Acklam's rational approximation, refined by one
/// Halley step: relative error below 1e-9).
pub(crate) fn normal_quantile(p: f64) -> f64 {
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let x = if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // One Halley step on Φ(x) - p.
    let e = 0.5 * libm_erfc(-x / std::f64::consts::SQRT_2) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

/// The complementary error function (Numerical Recipes' erfcc: relative error below 1.2e-7,
/// which the Halley step then tightens).
fn libm_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Test = Test {
        min_traces: 20,
        min_lift: 1.0,
        alpha: 0.05,
        limit: 20,
        all: false,
    };

    #[test]
    fn normal_quantiles() {
        for (p, z) in [
            (0.5, 0.0),
            (0.95, 1.644_853_626_951),
            (0.975, 1.959_963_984_540),
            (0.999, 3.090_232_306_168),
            (0.01, -2.326_347_874_041),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-6,
                "{p}: {}",
                normal_quantile(p)
            );
        }
    }

    /// 2,000 traces: `bad` in 5 % of them, all low; `popular` in 40 %, low at the base rate of
    /// 20 %; every trace has a unique id too.
    fn fill(s: &mut StratumSuspects, now: u64) {
        for i in 0..2000u64 {
            // Three patterns that do not line up: every 20th, and two hashes of i.
            let bad = i % 20 == 0;
            let popular = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 5 < 2;
            let low = bad || (i.wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 40) % 5 == 4;
            let unique = format!("u{i}");
            let mut ids = vec![unique.as_str()];
            if bad {
                ids.push("bad");
            }
            if popular {
                ids.push("popular");
            }
            s.arrive(ids.iter().copied(), now);
            s.judged(0, low, ids.iter().copied(), 0, now);
        }
    }

    #[test]
    fn the_corrupted_document_is_listed_and_the_popular_one_is_not() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 0);
        fill(&mut s, 1_000_000);
        let r = s.report(0, Window::Short, 1_000_000, &TEST, &[]);
        assert_eq!((r.traces, r.verdicts), (2000, 2000));
        assert_eq!(r.documents.len(), 1, "{:?}", r.documents);
        let bad = &r.documents[0];
        assert_eq!((bad.id.as_str(), bad.verdicts, bad.low), ("bad", 100, 100));
        assert!(bad.lift_lower > 1.0 && bad.lift > 3.0, "{bad:?}");
        let all = s.report(
            0,
            Window::Short,
            1_000_000,
            &Test { all: true, ..TEST },
            &[],
        );
        let popular = all.documents.iter().find(|d| d.id == "popular").unwrap();
        assert!(!popular.listed && popular.lift_lower < 1.0 && popular.lift_upper > 1.0);
        // The LLM judge saw none of it.
        assert!(
            s.report(1, Window::Short, 1_000_000, &TEST, &[])
                .documents
                .is_empty()
        );
    }

    #[test]
    fn windows_forget_old_epochs() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 0);
        fill(&mut s, 1_000_000);
        let later = 1_000_000 + 300_000;
        assert_eq!(s.report(0, Window::Short, later, &TEST, &[]).traces, 0);
        assert_eq!(
            s.report(0, Window::Baseline, later, &TEST, &[]).traces,
            2000
        );
        let much_later = 1_000_000 + 86_400_000;
        assert_eq!(
            s.report(0, Window::Baseline, much_later, &TEST, &[]).traces,
            0
        );
    }

    #[test]
    fn sources_are_tested_like_documents() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 3);
        for i in 0..1000u64 {
            let low = i % 10 == 0 || i % 4 == 0;
            let sources = if i % 10 == 0 { 0b011 } else { 0b010 };
            s.arrive(std::iter::empty(), 0);
            s.judged(0, low, std::iter::empty(), sources, 0);
        }
        let names = ["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let r = s.report(0, Window::Short, 0, &TEST, &names);
        assert_eq!(r.sources.len(), 1);
        assert_eq!((r.sources[0].id.as_str(), r.sources[0].low), ("a", 100));
    }
}
