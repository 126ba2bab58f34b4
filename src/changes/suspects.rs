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
//! `min_traces` verdicts.
//!
//! A lift within one window is an association, and on a real knowledge base the strongest ones are
//! the documents of hard questions: each is retrieved for its own questions, whose answers are
//! often low whatever the document says. So the short window is read as a change: each candidate is
//! compared with itself before the window (the baseline window's counts less the short window's).
//! With nothing changed, its low rate now is expected at the rest of the stratum's rate now times
//! its own lift before; the change is its rate now over that expected one, with a score interval
//! (the [`Rise`] test: the count's null variance at each candidate change, plus the expected
//! rate's own, continuity-corrected) at the same z. A candidate is listed as changed when the
//! interval's lower end is above 1: its low rate rose more than the rest of the stratum's did. Comparing a
//! document with itself holds its questions fixed, as long as it is retrieved for the same
//! questions before and now. A candidate with no verdict before the window is compared with the
//! stratum's rate (a lift of 1) when it is new: its share of the window's traces is more than
//! twice the most the baseline's sketches can have missed of it (a full epoch not holding an id
//! had at most its smallest count of it), so one as frequent before would have been held. Else it
//! is too thin to test. One whose lift's lower bound is above `min_lift` both now and before, and
//! which did not change, is chronic: listed apart. Without `min_traces` verdicts before the window
//! (start-up, or a replay without a baseline set) the report is one of associations, by lift.

use std::collections::HashMap;

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
    /// List the strongest candidates even below the listing thresholds.
    pub all: bool,
}

/// What a report's lists rest on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The short window against the baseline window before it: `documents` and `sources` list
    /// what changed (each candidate's low rate with it rose more than the rest of the stratum's),
    /// `chronic_documents` and `chronic_sources` what was as strongly associated before.
    Change,
    /// One window alone (the baseline window, a replay without a baseline set, or a short window
    /// with too few verdicts before it): `documents` and `sources` list the associations by
    /// lift. They say what goes with low verdicts, not what changed: the documents of hard
    /// questions are there in every window.
    Association,
}

/// Where a candidate stands in its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its change's lower bound is above 1: listed in `documents` or `sources`.
    Changed,
    /// Not changed, and its lift's lower bound is above `min_lift` both now and before: listed
    /// in `chronic_documents` or `chronic_sources`.
    Chronic,
    /// In a one-window report, its lift's lower bound is above `min_lift`.
    Association,
    /// None of those (listed only when every candidate is asked for).
    Unlisted,
}

/// What a candidate's change is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Against {
    /// Its own lift before the window.
    Own,
    /// The stratum's rate before the window (a lift of 1): the candidate had no verdict before
    /// it, and is new: its share of the traces now is more than twice the most the sketches could
    /// have missed of it before.
    Stratum,
}

/// A candidate's change: its lift now over its lift before the window.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Change {
    /// The ratio of the two lifts.
    pub ratio: f64,
    /// Its interval at the report's z.
    pub lower: f64,
    /// Upper end of that interval.
    pub upper: f64,
    /// What it is measured against.
    pub against: Against,
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
    /// Where it stands.
    pub status: Status,
    /// Whether it is listed as changed, chronic or an association.
    pub listed: bool,
    /// For a document: the traces the sketch may have missed before admitting it (its error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen_at_most: Option<u64>,
    /// In a change report: the same figures over the baseline window before the short one
    /// (absent when it holds no verdict with it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Before>,
    /// In a change report: its change (absent when its traces before the window are unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
}

/// A candidate's figures over the baseline window before the short one.
#[derive(Debug, Clone, Serialize)]
pub struct Before {
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

/// The verdicts a change report compares the window with.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Totals {
    /// Verdicts of the judge.
    pub verdicts: u64,
    /// Of those, low.
    pub low: u64,
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
    /// What the lists rest on.
    pub basis: Basis,
    /// In a change report: the verdicts of the baseline window before the short one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Totals>,
    /// Candidates tested (documents and sources with at least `min_traces` verdicts).
    pub tested: u64,
    /// Documents the sketches hold and sources with verdicts in the window, not tested: fewer
    /// than `min_traces` verdicts, or (in a change report) none before the window while the
    /// sketches may have missed some there.
    pub too_thin: u64,
    /// z of the intervals: two-sided `alpha` split over the candidates tested.
    pub z: f64,
    /// Listed documents: changed (strongest change lower bound first) in a change report,
    /// associations (strongest lift lower bound first) in a one-window report.
    pub documents: Vec<Suspect>,
    /// Listed sources, as the documents (when sources are declared).
    pub sources: Vec<Suspect>,
    /// In a change report: the chronic documents, strongest lift lower bound first.
    pub chronic_documents: Vec<Suspect>,
    /// In a change report: the chronic sources.
    pub chronic_sources: Vec<Suspect>,
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

    /// The suspects of `judge` in `window` at `now_ms`; `source_names` labels the sources.
    ///
    /// The short window is compared with the baseline window before it (the baseline's counts
    /// less the short window's) once that holds `min_traces` verdicts of the judge: a change
    /// report. Otherwise, and for the baseline window, a one-window report of associations.
    pub fn report(
        &self,
        judge: usize,
        window: Window,
        now_ms: u64,
        test: &Test,
        source_names: &[String],
    ) -> Report {
        let sources = source_names.len();
        match window {
            Window::Baseline => Aggregate::of(&self.baseline, judge, now_ms, sources)
                .associations(test, source_names),
            Window::Short => {
                let short = Aggregate::of(&self.short, judge, now_ms, sources);
                let baseline = Aggregate::of(&self.baseline, judge, now_ms, sources);
                let before = Earlier::of(&baseline, &short);
                if before.n < test.min_traces {
                    return short.associations(test, source_names);
                }
                let unseen = |id: &str| self.baseline.unseen(id, now_ms);
                short.changes(&before, unseen, test, source_names)
            }
        }
    }
}

impl Ring {
    /// Offers of `id` the live epochs may have missed: an epoch holding it, its admission error;
    /// a full epoch not holding it, its smallest count (Space-Saving holds every key counted more).
    fn unseen(&self, id: &str, now_ms: u64) -> u64 {
        self.live(now_ms)
            .map(|e| {
                e.documents
                    .get(id)
                    .map_or_else(|| e.documents.floor(), |d| d.error)
            })
            .sum()
    }
}

/// A window's counts for one judge: the sums of its ring's live epochs.
struct Aggregate<'a> {
    traces: u64,
    /// Verdicts and low verdicts.
    n: u64,
    l: u64,
    /// By held id: verdicts and low verdicts since admission, the admission errors, and the
    /// traces since admission.
    documents: HashMap<&'a str, (u64, u64, u64, u64)>,
    /// By source: verdicts and low verdicts.
    sources: Vec<(u64, u64)>,
}

/// The baseline window's counts before the short window: the baseline's less the short's (the
/// short window's traces are all in the baseline's live epochs).
struct Earlier<'a> {
    traces: u64,
    n: u64,
    l: u64,
    /// By id held in the baseline: verdicts and low verdicts.
    documents: HashMap<&'a str, (u64, u64)>,
    sources: Vec<(u64, u64)>,
}

impl<'a> Earlier<'a> {
    fn of(baseline: &Aggregate<'a>, short: &Aggregate<'_>) -> Self {
        let less =
            |(n, l): (u64, u64), (m, k): (u64, u64)| (n.saturating_sub(m), l.saturating_sub(k));
        Earlier {
            traces: baseline.traces.saturating_sub(short.traces),
            n: baseline.n.saturating_sub(short.n),
            l: baseline.l.saturating_sub(short.l),
            documents: baseline
                .documents
                .iter()
                .map(|(id, d)| {
                    let s = short.documents.get(id).map_or((0, 0), |s| (s.0, s.1));
                    (*id, less((d.0, d.1), s))
                })
                .collect(),
            sources: baseline
                .sources
                .iter()
                .zip(&short.sources)
                .map(|(b, s)| less(*b, *s))
                .collect(),
        }
    }
}

/// One candidate before it is placed: its window figures and, for a document, its key.
struct Candidate<'a> {
    id: &'a str,
    n1: u64,
    a: u64,
    /// Traces with it (for a document: since admission).
    traces: u64,
    unseen: Option<u64>,
    /// Index into the sources, for a source.
    source: Option<usize>,
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
                t.3 += d.count - d.error;
            }
            for (s, c) in agg.sources.iter_mut().zip(&e.sources) {
                s.0 += u64::from(c.judged[judge]);
                s.1 += u64::from(c.low[judge]);
            }
        }
        agg
    }

    /// The documents and the sources with enough verdicts to test, and how many had some but
    /// too few.
    fn candidates<'s>(
        &'s self,
        test: &Test,
        source_names: &'s [String],
    ) -> (Vec<Candidate<'s>>, Vec<Candidate<'s>>, u64) {
        let eligible = |n1: u64| n1 >= test.min_traces && n1 < self.n;
        let thin = self
            .documents
            .values()
            .map(|d| d.0)
            .chain(self.sources.iter().map(|s| s.0));
        let too_thin = thin.filter(|&n1| n1 > 0 && n1 < test.min_traces).count() as u64;
        let docs = self
            .documents
            .iter()
            .filter(|(_, d)| eligible(d.0))
            .map(|(id, d)| Candidate {
                id,
                n1: d.0,
                a: d.1,
                traces: d.3,
                unseen: Some(d.2),
                source: None,
            })
            .collect();
        let srcs = self
            .sources
            .iter()
            .zip(source_names)
            .enumerate()
            .filter(|(_, (s, _))| eligible(s.0))
            .map(|(i, (s, name))| Candidate {
                id: name,
                n1: s.0,
                a: s.1,
                traces: s.0,
                unseen: None,
                source: Some(i),
            })
            .collect();
        (docs, srcs, too_thin)
    }

    /// The z of a Bonferroni split of `alpha` over `tested` candidates.
    fn z(test: &Test, tested: usize) -> f64 {
        normal_quantile(1.0 - test.alpha / (2.0 * tested.max(1) as f64))
    }

    fn empty_report(&self, basis: Basis, tested: usize, too_thin: u64, z: f64) -> Report {
        Report {
            traces: self.traces,
            verdicts: self.n,
            low: self.l,
            basis,
            before: None,
            tested: tested as u64,
            too_thin,
            z,
            documents: Vec::new(),
            sources: Vec::new(),
            chronic_documents: Vec::new(),
            chronic_sources: Vec::new(),
        }
    }

    /// A one-window report: the candidates tested at a Bonferroni z, listed by lift.
    fn associations(&self, test: &Test, source_names: &[String]) -> Report {
        let (docs, srcs, too_thin) = self.candidates(test, source_names);
        let z = Self::z(test, docs.len() + srcs.len());
        let mut report =
            self.empty_report(Basis::Association, docs.len() + srcs.len(), too_thin, z);
        let place = |c: &Candidate<'_>| {
            let mut s = suspect(c.id, (c.n1, c.a), (self.n, self.l), z, c.unseen);
            if s.lift_lower > test.min_lift {
                s.status = Status::Association;
                s.listed = true;
            }
            s
        };
        for (list, candidates) in [(&mut report.documents, docs), (&mut report.sources, srcs)] {
            *list = candidates
                .iter()
                .map(place)
                .filter(|s| test.all || s.listed)
                .collect();
            list.sort_by(|a, b| {
                b.lift_lower
                    .total_cmp(&a.lift_lower)
                    .then_with(|| a.id.cmp(&b.id))
            });
            list.truncate(test.limit);
        }
        report
    }

    /// Whether a document with no verdict before the window is new there: its share of the
    /// window's traces is more than twice the most the baseline's sketches could have missed of it
    /// before (nothing missed, or a traffic that rose; one as frequent before would have been held).
    fn new_since(
        &self,
        c: &Candidate<'_>,
        before: &Earlier<'_>,
        unseen: &impl Fn(&str) -> u64,
    ) -> bool {
        let unseen = unseen(c.id);
        unseen == 0
            || u128::from(c.traces) * u128::from(before.traces)
                > 2 * u128::from(unseen) * u128::from(self.traces)
    }

    /// A change report: each candidate's lift now over its lift `before` the window (or, with no
    /// verdict before it that the sketches could have missed, over 1: the stratum's rate).
    fn changes(
        &self,
        before: &Earlier<'_>,
        unseen_before: impl Fn(&str) -> u64,
        test: &Test,
        source_names: &[String],
    ) -> Report {
        let (docs, srcs, mut too_thin) = self.candidates(test, source_names);
        let tested = docs.len() + srcs.len();
        let z = Self::z(test, tested);
        let mut report = self.empty_report(Basis::Change, tested, 0, z);
        report.before = Some(Totals {
            verdicts: before.n,
            low: before.l,
        });
        let mut place = |c: &Candidate<'_>| {
            let mut s = suspect(c.id, (c.n1, c.a), (self.n, self.l), z, c.unseen);
            let earlier = match c.source {
                Some(i) => before.sources[i],
                None => before.documents.get(c.id).copied().unwrap_or_default(),
            };
            let (m1, b) = earlier;
            let before_lift = if m1 > 0 && m1 < before.n {
                let then = log_risk_ratio((m1, b), (before.n, before.l));
                s.before = Some(Before {
                    verdicts: m1,
                    low: b,
                    lift: then.log.exp(),
                    lift_lower: then.lower(z).exp(),
                    lift_upper: then.upper(z).exp(),
                });
                Some((then, Against::Own))
            } else if m1 == 0 && (c.source.is_some() || self.new_since(c, before, &unseen_before)) {
                Some((LogRatio { log: 0.0, se: 0.0 }, Against::Stratum))
            } else {
                too_thin += 1;
                None
            };
            s.change = before_lift.map(|(then, against)| {
                // The rate expected now with nothing changed: the rest's rate now times the lift
                // before; its log's variance, the two estimates'.
                let (rest_low, rest) = (self.l - c.a.min(self.l), self.n - c.n1.min(self.n));
                let rest_now = log_rate(rest_low, rest);
                let rise = Rise {
                    low: c.a as f64,
                    verdicts: c.n1 as f64,
                    expected: (rest_now.log + then.log).exp(),
                    log_variance: rest_now.se.powi(2) + then.se.powi(2),
                };
                Change {
                    ratio: rise.ratio(),
                    lower: rise.bound(z),
                    upper: rise.bound(-z),
                    against,
                }
            });
            s.status = if s.change.is_some_and(|c| c.lower > 1.0) {
                Status::Changed
            } else if s.lift_lower > test.min_lift
                && s.before
                    .as_ref()
                    .is_some_and(|b| b.lift_lower > test.min_lift)
            {
                Status::Chronic
            } else {
                Status::Unlisted
            };
            s.listed = s.status != Status::Unlisted;
            s
        };
        let docs: Vec<Suspect> = docs.iter().map(&mut place).collect();
        let srcs: Vec<Suspect> = srcs.iter().map(&mut place).collect();
        let strength = |s: &Suspect| s.change.map_or(f64::NEG_INFINITY, |c| c.lower);
        for (changed, chronic, all) in [
            (&mut report.documents, &mut report.chronic_documents, docs),
            (&mut report.sources, &mut report.chronic_sources, srcs),
        ] {
            let (mut old, rest): (Vec<Suspect>, Vec<Suspect>) =
                all.into_iter().partition(|s| s.status == Status::Chronic);
            *changed = rest.into_iter().filter(|s| test.all || s.listed).collect();
            // Changed first (the strongest change first), then, asked for all, the others.
            changed.sort_by(|a, b| {
                (b.status == Status::Changed)
                    .cmp(&(a.status == Status::Changed))
                    .then_with(|| strength(b).total_cmp(&strength(a)))
                    .then_with(|| a.id.cmp(&b.id))
            });
            changed.truncate(test.limit);
            old.sort_by(|a, b| {
                b.lift_lower
                    .total_cmp(&a.lift_lower)
                    .then_with(|| a.id.cmp(&b.id))
            });
            old.truncate(test.limit);
            *chronic = old;
        }
        report.too_thin = too_thin;
        report
    }
}

/// A log risk ratio of a low verdict with a candidate against without it, and its standard
/// error: `a` low of `n1` verdicts with it, in a window with `l` low of `n`. Each cell gets one
/// half (so that no count is divided by zero), each total one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LogRatio {
    /// ln RR.
    pub log: f64,
    /// Its standard error.
    pub se: f64,
}

impl LogRatio {
    fn lower(&self, z: f64) -> f64 {
        self.log - z * self.se
    }

    fn upper(&self, z: f64) -> f64 {
        self.log + z * self.se
    }
}

/// The log of a rate of `low` in `n` (one half added to the count, one to the total) and its
/// standard error.
fn log_rate(low: u64, n: u64) -> LogRatio {
    let (l, n) = (low as f64 + 0.5, n as f64 + 1.0);
    LogRatio {
        log: (l / n).ln(),
        se: (1.0 / l - 1.0 / n).max(0.0).sqrt(),
    }
}

/// A candidate's low verdicts now against the rate `expected` with nothing changed (known to
/// `log_variance` on the log scale): the score test of a change `r` (the rate now over the
/// expected one) puts the null variance of the count, `n q (1 - q)` at `q = r · expected`, plus the
/// expected rate's own, `(n q)² · log_variance`, under the count less one half (a continuity
/// correction: the count's upper tail is heavier than the normal's at small rates).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rise {
    pub low: f64,
    pub verdicts: f64,
    pub expected: f64,
    pub log_variance: f64,
}

impl Rise {
    /// The largest rate a change may take the expected one to.
    const MAX_RATE: f64 = 1.0 - 1e-9;

    /// The rate now over the expected one.
    pub(crate) fn ratio(&self) -> f64 {
        if self.verdicts == 0.0 {
            return 1.0;
        }
        self.low / self.verdicts / self.expected
    }

    /// The score of change `r`: how far above what `r` predicts the count is, in standard errors
    /// (a continuity correction of one half towards `r`'s count).
    pub(crate) fn z(&self, r: f64) -> f64 {
        let q = (r * self.expected).min(Self::MAX_RATE);
        let e = self.verdicts * q;
        let variance = e * (1.0 - q) + e * e * self.log_variance;
        let gap = self.low - e;
        let gap = gap.signum() * (gap.abs() - 0.5).max(0.0);
        gap / variance.max(1e-300).sqrt()
    }

    /// The change at which the score is `z`: with `z` the report's, the interval's lower end
    /// (its upper with `-z`). The score falls as the change grows; found by bisection on its log,
    /// between 1e-6 and the change that takes the expected rate to 1.
    pub(crate) fn bound(&self, z: f64) -> f64 {
        let (mut lo, mut hi) = (1e-6f64.ln(), (Self::MAX_RATE / self.expected).ln());
        if self.z(hi.exp()) >= z {
            return hi.exp();
        }
        if self.z(lo.exp()) <= z {
            return lo.exp();
        }
        for _ in 0..64 {
            let mid = 0.5 * (lo + hi);
            if self.z(mid.exp()) > z {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (0.5 * (lo + hi)).exp()
    }
}

pub(crate) fn log_risk_ratio((n1, a): (u64, u64), (n, l): (u64, u64)) -> LogRatio {
    let (n2, c) = (n.saturating_sub(n1), l.saturating_sub(a));
    let (a_, n1_, c_, n2_) = (
        a as f64 + 0.5,
        n1 as f64 + 1.0,
        c as f64 + 0.5,
        n2 as f64 + 1.0,
    );
    LogRatio {
        log: (a_ / n1_).ln() - (c_ / n2_).ln(),
        se: (1.0 / a_ - 1.0 / n1_ + 1.0 / c_ - 1.0 / n2_)
            .max(0.0)
            .sqrt(),
    }
}

/// The figures of a candidate with `a` low of `n1` verdicts, in a window with `l` low of `n`,
/// unlisted.
fn suspect(
    id: &str,
    (n1, a): (u64, u64),
    (n, l): (u64, u64),
    z: f64,
    unseen_at_most: Option<u64>,
) -> Suspect {
    let (n2, c) = (n.saturating_sub(n1), l.saturating_sub(a));
    let r = log_risk_ratio((n1, a), (n, l));
    let ratio = |x: u64, y: u64| if y == 0 { 0.0 } else { x as f64 / y as f64 };
    Suspect {
        id: id.to_owned(),
        verdicts: n1,
        low: a,
        low_ratio: ratio(a, n1),
        rest_low_ratio: ratio(c, n2),
        share_of_low: ratio(a, l),
        share_of_verdicts: ratio(n1, n),
        lift: r.log.exp(),
        lift_lower: r.lower(z).exp(),
        lift_upper: r.upper(z).exp(),
        status: Status::Unlisted,
        listed: false,
        unseen_at_most,
        before: None,
        change: None,
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

    /// `traces` traces at `now`: `popular` in 40 % at the base rate of 20 % low, each of `docs`
    /// in its share of them with its own low rate; every trace has a unique id too.
    fn stream(
        s: &mut StratumSuspects,
        now: u64,
        seed: u64,
        traces: u64,
        docs: &[(&str, f64, f64)],
    ) {
        stream_at(s, now, seed, traces, docs, 0.2);
    }

    /// [`stream`] at a base rate of `base`.
    fn stream_at(
        s: &mut StratumSuspects,
        now: u64,
        seed: u64,
        traces: u64,
        docs: &[(&str, f64, f64)],
        base: f64,
    ) {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        for i in 0..traces {
            let unique = format!("u{seed}-{i}");
            let mut ids = vec![unique.as_str()];
            let mut p_low = base;
            for (id, share, low) in docs {
                if rng.random::<f64>() < *share {
                    ids.push(id);
                    p_low = *low;
                }
            }
            if rng.random::<f64>() < 0.4 {
                ids.push("popular");
            }
            let low = rng.random::<f64>() < p_low;
            s.arrive(ids.iter().copied(), now);
            s.judged(0, low, ids.iter().copied(), 0, now);
        }
    }

    const BEFORE: u64 = 10_000_000;
    const NOW: u64 = BEFORE + 600_000;

    #[test]
    fn a_document_that_changed_is_listed_and_a_chronic_one_apart() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 0);
        // Before: `hard` (the document of hard questions) is low on 90 % of its traces, `bad` on
        // the stratum's 20 %. Now `bad` went bad; `hard` is as it was.
        stream(
            &mut s,
            BEFORE,
            1,
            4000,
            &[("hard", 0.05, 0.9), ("bad", 0.05, 0.2)],
        );
        stream(
            &mut s,
            NOW,
            2,
            2000,
            &[("hard", 0.05, 0.9), ("bad", 0.05, 0.9)],
        );
        let r = s.report(0, Window::Short, NOW, &TEST, &[]);
        assert_eq!(r.basis, Basis::Change);
        assert_eq!(r.before.map(|b| b.verdicts), Some(4000));
        let ids = |l: &[Suspect]| l.iter().map(|d| d.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&r.documents), ["bad"], "{r:#?}");
        assert_eq!(ids(&r.chronic_documents), ["hard"], "{r:#?}");
        let bad = &r.documents[0];
        let change = bad.change.unwrap();
        assert_eq!(
            (bad.status, change.against),
            (Status::Changed, Against::Own)
        );
        assert!(change.lower > 1.0 && change.ratio > 2.0, "{bad:?}");
        let hard = &r.chronic_documents[0];
        assert!(
            hard.change.unwrap().lower <= 1.0 && hard.before.as_ref().unwrap().lift_lower > 1.5
        );
        // Every id the short window's sketch holds but the three has one trace: too thin.
        let held: usize = s.short.live(NOW).map(|e| e.documents.entries().len()).sum();
        assert_eq!(r.too_thin, held as u64 - 3);
        // Asked for all, the popular one follows the changed one, unlisted.
        let all = s.report(0, Window::Short, NOW, &Test { all: true, ..TEST }, &[]);
        assert_eq!(ids(&all.documents), ["bad", "popular"]);
        assert_eq!(all.documents[1].status, Status::Unlisted);
        // The baseline window alone is a report of associations.
        let base = s.report(0, Window::Baseline, NOW, &TEST, &[]);
        assert_eq!(base.basis, Basis::Association);
        assert!(base.chronic_documents.is_empty() && base.documents[0].id == "hard");
    }

    #[test]
    fn a_new_document_is_judged_against_the_stratum() {
        // Room for 256 ids an epoch: what it may have missed of an id before is under 1 % of
        // the traces, and the new document is in 5 %.
        let mut s = StratumSuspects::new(300_000, 86_400_000, 256, 0);
        stream(&mut s, BEFORE, 3, 4000, &[]);
        stream(
            &mut s,
            NOW,
            4,
            2000,
            &[("new", 0.05, 0.9), ("fine", 0.05, 0.2)],
        );
        let r = s.report(0, Window::Short, NOW, &TEST, &[]);
        assert_eq!(r.documents.len(), 1, "{r:#?}");
        let new = &r.documents[0];
        assert_eq!(new.id, "new");
        assert_eq!(new.change.unwrap().against, Against::Stratum);
        assert!(new.before.is_none());
        assert!(new.change.unwrap().lower > 1.0);
    }

    #[test]
    fn a_rise_of_the_whole_stratum_changes_no_document() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 0);
        stream(&mut s, BEFORE, 5, 4000, &[("a", 0.1, 0.2), ("b", 0.1, 0.2)]);
        // Everything is low twice as often now (the model got worse, not a document).
        stream_at(
            &mut s,
            NOW,
            6,
            2000,
            &[("a", 0.1, 0.4), ("b", 0.1, 0.4)],
            0.4,
        );
        let r = s.report(0, Window::Short, NOW, &TEST, &[]);
        assert!(r.low * 10 > r.verdicts * 3, "{r:?}");
        assert!(r.documents.is_empty(), "{:#?}", r.documents);
    }

    #[test]
    fn without_verdicts_before_the_window_the_report_is_of_associations() {
        let mut s = StratumSuspects::new(300_000, 86_400_000, 64, 0);
        stream(&mut s, NOW, 7, 2000, &[("bad", 0.05, 0.9)]);
        let r = s.report(0, Window::Short, NOW, &TEST, &[]);
        assert_eq!(r.basis, Basis::Association);
        assert_eq!(r.documents[0].status, Status::Association);
        assert!(r.documents[0].change.is_none());
    }

    #[test]
    fn a_document_the_sketch_may_have_missed_before_is_too_thin() {
        // Two ids a baseline epoch: before, `gone` is offered once and pushed out by many others;
        // now it has its traces, and nothing says what it had before.
        let mut s = StratumSuspects::new(300_000, 86_400_000, 2, 0);
        s.arrive(["gone"].into_iter(), BEFORE);
        s.judged(0, false, ["gone"].into_iter(), 0, BEFORE);
        for i in 0..100u64 {
            let id = format!("x{}", i % 3);
            s.arrive([id.as_str()].into_iter(), BEFORE);
            s.judged(0, i % 5 == 0, [id.as_str()].into_iter(), 0, BEFORE);
        }
        for i in 0..100u64 {
            let ids: &[&str] = if i % 2 == 0 { &["gone"] } else { &[] };
            s.arrive(ids.iter().copied(), NOW);
            s.judged(0, i % 2 == 0, ids.iter().copied(), 0, NOW);
        }
        let r = s.report(0, Window::Short, NOW, &Test { all: true, ..TEST }, &[]);
        assert_eq!(r.basis, Basis::Change);
        let gone = r.documents.iter().find(|d| d.id == "gone").unwrap();
        assert!(
            gone.change.is_none() && gone.status == Status::Unlisted,
            "{gone:?}"
        );
        assert_eq!(r.too_thin, 1);
    }

    /// Draws `k` of `n` at `p`.
    fn binomial(rng: &mut rand::rngs::SmallRng, n: u64, p: f64) -> u64 {
        use rand::RngExt;
        (0..n).filter(|_| rng.random::<f64>() < p).count() as u64
    }

    /// The rise of `a` low of `n1` now against `b` of `m1` before, each against the rest.
    fn rise(
        (n1, a): (u64, u64),
        (n2, c): (u64, u64),
        (m1, b): (u64, u64),
        (m2, d): (u64, u64),
    ) -> Rise {
        let rest = log_rate(c, n2);
        let then = log_risk_ratio((m1, b), (m1 + m2, b + d));
        Rise {
            low: a as f64,
            verdicts: n1 as f64,
            expected: (rest.log + then.log).exp(),
            log_variance: rest.se.powi(2) + then.se.powi(2),
        }
    }

    #[test]
    fn with_nothing_changed_the_change_bound_is_above_1_at_most_alpha_over_2() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let z = normal_quantile(0.975);
        let (mut above, runs) = (0, 4000);
        for run in 0..runs {
            // A document at its own rate, different from the rest's, the same in both windows;
            // sizes from 20 to 200 verdicts now and 20 to 2,000 before.
            let p_doc = [0.2, 0.3, 0.6, 0.9][run % 4];
            let p_rest = [0.2, 0.45][run % 2];
            let (n1, m1) = (20 + (run as u64 * 7) % 181, 20 + (run as u64 * 13) % 1981);
            let (n2, m2) = (2000, 20_000);
            let a = binomial(&mut rng, n1, p_doc);
            let c = binomial(&mut rng, n2, p_rest);
            let b = binomial(&mut rng, m1, p_doc);
            let d = binomial(&mut rng, m2, p_rest);
            let r = rise((n1, a), (n2, c), (m1, b), (m2, d));
            above += u32::from(r.bound(z) > 1.0);
        }
        let rate = f64::from(above) / runs as f64;
        assert!(rate < 0.03, "{rate}");
    }

    /// The binomial probabilities of 0..=n low of n at p.
    fn binomial_pmf(n: u64, p: f64) -> Vec<f64> {
        let mut pmf = vec![(1.0 - p).powi(n as i32)];
        for k in 1..=n {
            let prev = pmf[k as usize - 1];
            pmf.push(prev * (n - k + 1) as f64 / k as f64 * p / (1.0 - p));
        }
        pmf
    }

    #[test]
    fn the_change_test_holds_its_error_at_rates_of_a_fifth_and_above() {
        // With the expected rate known, the chance that the lower bound is above 1, summed
        // exactly over the counts: within 2.5 times the nominal one-sided tail at rates from 0.2,
        // 20 to 500 verdicts and 1 to 100 candidates.
        let mut worst: f64 = 0.0;
        for n in [20u64, 30, 50, 90, 200, 500] {
            for p in [0.2, 0.3, 0.41, 0.6, 0.8] {
                for k in [1.0, 10.0, 30.0, 100.0] {
                    let nominal = 0.05 / (2.0 * k);
                    let z = normal_quantile(1.0 - nominal);
                    let tail: f64 = binomial_pmf(n, p)
                        .iter()
                        .enumerate()
                        .filter(|(a, _)| {
                            let r = Rise {
                                low: *a as f64,
                                verdicts: n as f64,
                                expected: p,
                                log_variance: 0.0,
                            };
                            r.bound(z) > 1.0
                        })
                        .map(|(_, pr)| pr)
                        .sum();
                    worst = worst.max(tail / nominal);
                }
            }
        }
        assert!(worst < 2.5, "{worst}");
    }

    proptest::proptest! {
        /// The interval holds the ratio, its ends move apart as z grows, and the score at the
        /// lower end is z.
        #[test]
        fn the_change_interval_holds_its_ratio(
            n1 in 1u64..2000, a in 0u64..2000, expected in 0.01f64..0.95, log_variance in 0.0f64..0.2,
            z in 1.0f64..4.0,
        ) {
            let a = a.min(n1);
            let r = Rise { low: a as f64, verdicts: n1 as f64, expected, log_variance };
            let (lower, upper) = (r.bound(z), r.bound(-z));
            let ratio = r.ratio().clamp(1e-6, Rise::MAX_RATE / expected);
            proptest::prop_assert!(lower <= ratio * (1.0 + 1e-9) && ratio <= upper * (1.0 + 1e-9));
            proptest::prop_assert!(r.bound(z + 0.5) <= lower * (1.0 + 1e-9));
            proptest::prop_assert!(r.bound(-z - 0.5) >= upper * (1.0 - 1e-9));
            if lower > 2e-6 && lower * expected < 0.99 {
                proptest::prop_assert!((r.z(lower) - z).abs() < 1e-3, "{}", r.z(lower));
            }
        }
    }
}
