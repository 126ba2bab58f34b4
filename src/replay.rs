//! `ragwatch replay`: evaluate JSONL trace files once, as fast as the judge allows. Writes one
//! verdict per line and returns a per-stratum summary; with labelled traces (`label_faithful`) the
//! summary also says how well the judge agrees with the labels. With the LLM judge, replay keeps
//! `judge.workers` traces in flight and paces itself to the per-minute budget instead of skipping.
//! The labelled traces are also kept, as each judge scored them, for the judge audit
//! ([`Summary::audit`], `replay --audit`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;

use futures::{SinkExt, StreamExt};

use serde::Serialize;

use crate::audit::{AuditSample, JudgeAudit};
use crate::config::Config;
use crate::dimensions::{JudgeKind, PerQuality, Quality};
use crate::eval::{Confusion, RetrievalScores, auroc, percentile, retrieval_scores};
use crate::judge::llm::LlmJudge;
use crate::judge::{OfflineScore, Verdict};
use crate::pipeline::{Evaluation, Pipeline};
use crate::recorder::Shared;
use crate::sample::{VariantId, Variants};
use crate::trace::Trace;

mod lines;
mod otlp;
mod record;

use lines::{for_each_line, for_each_line_blocking};
use record::Records;
pub(crate) use record::{RecordVerdict, VerdictRecord};

/// Per-stratum figures of a replay.
#[derive(Debug, Default, Clone, Serialize)]
pub struct StratumSummary {
    /// Traces decoded.
    pub traces: u64,
    /// Traces with a faithfulness score.
    pub scored: u64,
    /// Traces the judge failed on (counted by reason in the verdict records).
    pub skipped: u64,
    /// Traces whose answer made no claims.
    pub no_claims: u64,
    /// Refusals.
    pub refusals: u64,
    /// Per metric, the sum of the scores and how many traces had one.
    pub(crate) score_sums: PerQuality<(f64, u64)>,
    /// Labelled scores for AUROC.
    #[serde(skip)]
    pub labelled: Vec<(f64, bool)>,
    /// Confusion at the threshold.
    pub(crate) confusion: Confusion,
    /// Labelled traces whose judge verdict (score against the judge's threshold) agrees with the
    /// label.
    pub agree: u64,
    /// Traces with gold retrieval labels and their summed retrieval scores.
    #[serde(skip)]
    pub retrieval: Vec<RetrievalScores>,
    /// Tokens per query from the traces' own `metadata.usage`.
    #[serde(skip)]
    pub tokens: Vec<f64>,
    /// With `[variants]`: per variant (indexed as [`Variants::names`]), its traces and the
    /// moments of each metric's scores.
    #[serde(skip)]
    pub(crate) variants: Vec<VariantSums>,
}

/// One variant's traces and score moments in one stratum.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct VariantSums {
    /// Traces counted (judged or skipped), as [`StratumSummary::traces`].
    pub traces: u64,
    /// Per metric, the moments of the scores of the judge that replayed the traces.
    pub scores: PerQuality<Moments>,
}

/// A count, sum and sum of squares of scores: what a two-sample test of means needs.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Moments {
    /// Scores.
    pub n: u64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares.
    pub sum_sq: f64,
}

impl Moments {
    fn add(&mut self, y: f64) {
        self.n += 1;
        self.sum += y;
        self.sum_sq += y * y;
    }

    fn merge(&mut self, o: &Moments) {
        self.n += o.n;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }

    /// The mean, when there is a score.
    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

impl VariantSums {
    fn merge(&mut self, o: &VariantSums) {
        self.traces += o.traces;
        for (m, x) in self.scores.iter_mut() {
            x.merge(&o.scores[m]);
        }
    }
}

impl StratumSummary {
    /// The figures a CI gate reads, by name.
    pub fn figures(&self, threshold_ks: &[usize]) -> BTreeMap<String, f64> {
        let mut f = BTreeMap::new();
        let mean = |sum: f64, n: u64| (n > 0).then(|| sum / n as f64);
        let mut put = |k: String, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                f.insert(k, v);
            }
        };
        put("traces".into(), Some(self.traces as f64));
        for (m, &(sum, n)) in self.score_sums.iter() {
            put(m.name().into(), mean(sum, n));
        }
        put(
            "refusal_ratio".into(),
            mean(self.refusals as f64, self.traces),
        );
        let (scores, labels): (Vec<f64>, Vec<bool>) = self.labelled.iter().copied().unzip();
        put("auroc".into(), auroc(&scores, &labels));
        put(
            "agreement".into(),
            mean(self.agree as f64, self.labelled.len() as u64),
        );
        if !self.retrieval.is_empty() {
            let n = self.retrieval.len() as f64;
            let avg = |score: &dyn Fn(&RetrievalScores) -> f64| {
                Some(self.retrieval.iter().map(score).sum::<f64>() / n)
            };
            for (i, &k) in threshold_ks.iter().enumerate() {
                put(format!("recall@{k}"), avg(&|r| r.recall_at[i].1));
                put(format!("precision@{k}"), avg(&|r| r.precision_at[i].1));
                put(format!("ndcg@{k}"), avg(&|r| r.ndcg_at[i].1));
            }
            put("mrr".into(), avg(&|r| r.reciprocal_rank));
            put("map".into(), avg(&|r| r.average_precision));
        }
        let mut tokens = self.tokens.clone();
        put("tokens_p50".into(), percentile(&mut tokens, 50.0));
        put("tokens_p95".into(), percentile(&mut tokens, 95.0));
        f
    }

    fn merge(&mut self, o: &StratumSummary) {
        self.traces += o.traces;
        self.scored += o.scored;
        self.skipped += o.skipped;
        self.no_claims += o.no_claims;
        self.refusals += o.refusals;
        for (m, (sum, n)) in self.score_sums.iter_mut() {
            *sum += o.score_sums[m].0;
            *n += o.score_sums[m].1;
        }
        self.labelled.extend_from_slice(&o.labelled);
        self.confusion.merge(&o.confusion);
        self.agree += o.agree;
        self.retrieval.extend(o.retrieval.iter().cloned());
        self.tokens.extend_from_slice(&o.tokens);
        if self.variants.len() < o.variants.len() {
            self.variants
                .resize(o.variants.len(), VariantSums::default());
        }
        for (a, b) in self.variants.iter_mut().zip(&o.variants) {
            a.merge(b);
        }
    }

    /// The figures of variant `v`.
    fn variant(&mut self, v: VariantId) -> &mut VariantSums {
        if self.variants.len() <= v {
            self.variants.resize(v + 1, VariantSums::default());
        }
        &mut self.variants[v]
    }

    /// Per-variant figures, named `variant/<name>/...`: `traces`, and per metric its mean
    /// (`variant/<name>/<metric>`, when a trace has a score) with the count, sum and sum of squares
    /// of the scores (`.../n`, `.../sum`, `.../sum_sq`). Every declared variant is there, `other`
    /// and `unknown` only with traces.
    fn variant_figures(&self, variants: &Variants, f: &mut BTreeMap<String, f64>) {
        let declared = variants.names().len() - 2;
        for (v, name) in variants.names().iter().enumerate() {
            let sums = self.variants.get(v).copied().unwrap_or_default();
            if v >= declared && sums.traces == 0 {
                continue;
            }
            let key = |rest: &str| format!("{VARIANT_FIGURE_PREFIX}{name}/{rest}");
            f.insert(key("traces"), sums.traces as f64);
            for (m, x) in sums.scores.iter() {
                if let Some(mean) = x.mean() {
                    f.insert(key(m.name()), mean);
                }
                f.insert(key(&format!("{}/n", m.name())), x.n as f64);
                f.insert(key(&format!("{}/sum", m.name())), x.sum);
                f.insert(key(&format!("{}/sum_sq", m.name())), x.sum_sq);
            }
        }
    }
}

/// The prefix of the per-variant figures in a replay summary (`variant/canary/faithfulness/n`).
pub const VARIANT_FIGURE_PREFIX: &str = "variant/";

/// The result of a replay.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// The k values of the retrieval metrics.
    pub(crate) ks: Vec<usize>,
    /// Lines read.
    pub lines: u64,
    /// Lines rejected (with OTLP files: messages and assembled traces), by reason.
    pub rejected: BTreeMap<&'static str, u64>,
    /// OTLP files: assembled traces not judged, by reason (`not_rag`, `no_retrieval`...).
    pub unjudged: BTreeMap<&'static str, u64>,
    /// OTLP files: spans not kept, by reason (`late`, `invalid_id`, `too_many_spans`).
    pub(crate) spans_dropped: BTreeMap<&'static str, u64>,
    /// Per stratum.
    pub strata: BTreeMap<String, StratumSummary>,
    /// Labelled traces as each judge scored them, for the audit (`offline`, `llm`).
    #[serde(skip)]
    pub audit: BTreeMap<&'static str, Vec<AuditSample>>,
    /// With `--labels`: the join and each judge's agreement.
    pub labels: Option<LabelJoin>,
    /// With `[variants]`: how a trace's variant is read.
    #[serde(skip)]
    pub(crate) variants: Option<Variants>,
    /// The documents and sources over-represented in each stratum's low verdicts, per judge
    /// (`[changes]`): with a baseline set, what changed against it; else the whole run's
    /// associations.
    pub suspects: Vec<crate::changes::StratumReport>,
    /// Traces of the baseline set (`--suspects-baseline`) judged by the offline judge.
    pub suspects_baseline_traces: u64,
}

/// The files a replay reads.
#[derive(Debug, Clone, Copy)]
pub struct ReplayFiles<'a> {
    /// The traces judged (`-` is stdin).
    pub traces: &'a [PathBuf],
    /// A set of earlier traces the suspects are compared with (`--suspects-baseline`): judged by
    /// the offline judge into the change attribution only, before `traces`, so the suspects say
    /// what changed between the two sets. Empty: the suspects are the whole run's associations.
    pub suspects_baseline: &'a [PathBuf],
}

/// What a trace's record carries besides its evaluation: with the LLM judge, the offline judge's
/// verdict it replaced, and (auditing) the LLM score with the contexts reversed.
#[derive(Debug, Default)]
struct Extra {
    offline: Option<Verdict>,
    reversed: Option<Option<f64>>,
}

/// Human labels for a replay, from a JSONL file of the label shape (`--labels`).
#[derive(Debug, Default)]
pub struct ReplayLabels {
    by_trace: HashMap<String, bool>,
    /// Lines that are not labels.
    pub invalid: u64,
}

impl ReplayLabels {
    /// Reads a label file (the lines `POST /v1/labels` and the label topic take); a later label of a
    /// trace replaces an earlier one.
    pub fn read(path: &std::path::Path) -> std::io::Result<Self> {
        let text = std::fs::read(path)?;
        let mut labels = Self::default();
        for line in text.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match crate::recorder::parse_label(line) {
                Some((id, faithful)) => {
                    labels.by_trace.insert(id, faithful);
                }
                None => labels.invalid += 1,
            }
        }
        Ok(labels)
    }

    /// Labels read.
    pub fn len(&self) -> usize {
        self.by_trace.len()
    }

    /// Whether no label was read.
    pub fn is_empty(&self) -> bool {
        self.by_trace.is_empty()
    }
}

/// How a label file joined the replayed traces, and each judge's agreement with it.
#[derive(Debug, Default, Serialize)]
pub struct LabelJoin {
    /// Labels whose trace was replayed.
    pub joined: u64,
    /// Labels for traces not in the replay.
    pub unknown_trace: u64,
    /// Lines of the file that are not labels.
    pub invalid: u64,
    /// Per judge: (verdicts agreeing with the label, labelled verdicts).
    pub agreement: BTreeMap<&'static str, (u64, u64)>,
    #[serde(skip)]
    seen: HashSet<String>,
}

/// Reads every file (`-` is stdin), writes verdicts to `out`, returns the summary.
///
/// With an OTLP `decode.format`, the files are OTLP files (the Collector's file exporter: JSON
/// lines or length-prefixed protobuf, told apart by each file's first byte), assembled into traces
/// with `decode.preset` as the live receiver assembles them; a trace the receiver would not judge
/// gets an `unjudged` record with the reason, and each record's `line` is the number of the message
/// that completed its trace.
///
/// With `llm`, each decoded trace is judged by the LLM judge instead: `judge.workers` traces are
/// in flight at all times (a new one starts as soon as one finishes, whatever its place), and
/// verdicts are written in input order through a bounded reorder window. Calls wait for the
/// per-minute budget rather than skip; a trace is skipped (a `skipped` record with the outcome as
/// reason) only when the daily budget cannot cover it or its calls fail.
///
/// Labelled traces are kept for [`Summary::audit`] as both judges scored them; with `audit` and
/// the LLM judge, each labelled trace is judged a second time with its contexts in reverse order
/// (the position check: twice the calls on the labelled traces).
pub async fn replay(
    config: &Config,
    files: &[PathBuf],
    llm: Option<&LlmJudge>,
    ks: &[usize],
    audit: bool,
    out: &mut dyn Write,
) -> std::io::Result<Summary> {
    replay_with_labels(config, files, llm, ks, audit, None, out).await
}

/// [`replay`] with human labels from a file, joined to the traces by id (a file label replaces the
/// trace's own `label_faithful`); the summary then says how each judge agrees with them.
pub async fn replay_with_labels(
    config: &Config,
    files: &[PathBuf],
    llm: Option<&LlmJudge>,
    ks: &[usize],
    audit: bool,
    labels: Option<&ReplayLabels>,
    out: &mut dyn Write,
) -> std::io::Result<Summary> {
    let judge = llm.map(ReplayJudge::Llm);
    let files = ReplayFiles {
        traces: files,
        suspects_baseline: &[],
    };
    replay_with(config, files, judge, ks, audit, labels, out).await
}

/// The judge that replays the traces in place of the offline judge (whose verdicts are kept
/// beside its own).
#[derive(Clone, Copy)]
pub enum ReplayJudge<'a> {
    /// The LLM judge, paced to its budget.
    Llm(&'a LlmJudge),
    /// The classifier judge.
    #[cfg(feature = "classifier")]
    Classifier(&'a Arc<crate::judge::classifier::Classifier>),
}

impl<'a> ReplayJudge<'a> {
    /// The judge's label value.
    fn kind(self) -> JudgeKind {
        match self {
            ReplayJudge::Llm(_) => JudgeKind::Llm,
            #[cfg(feature = "classifier")]
            ReplayJudge::Classifier(_) => JudgeKind::Classifier,
        }
    }

    /// The LLM judge, when it is the one.
    fn llm(self) -> Option<&'a LlmJudge> {
        match self {
            ReplayJudge::Llm(j) => Some(j),
            #[cfg(feature = "classifier")]
            ReplayJudge::Classifier(_) => None,
        }
    }

    async fn judge(self, trace: &Trace) -> Result<Verdict, crate::judge::llm::LlmError> {
        match self {
            ReplayJudge::Llm(j) => j.judge_paced(trace).await,
            #[cfg(feature = "classifier")]
            ReplayJudge::Classifier(j) => j.judge(trace).await.map_err(|e| e.into_llm()),
        }
    }
}

/// [`replay_with_labels`] with any second judge, and the suspects compared with a baseline set
/// when `files` names one.
pub async fn replay_with(
    config: &Config,
    files: ReplayFiles<'_>,
    second: Option<ReplayJudge<'_>>,
    ks: &[usize],
    audit: bool,
    labels: Option<&ReplayLabels>,
    out: &mut dyn Write,
) -> std::io::Result<Summary> {
    let shared = Shared::for_replay(config.recorder_setup());
    let pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
    let mut records = Records::new(out);
    let threshold = config.judge.faithful_threshold;
    let mut summary = Summary {
        ks: ks.to_vec(),
        labels: labels.map(|l| LabelJoin {
            invalid: l.invalid,
            ..LabelJoin::default()
        }),
        variants: Variants::new(&config.variants),
        ..Summary::default()
    };
    let judged = Judged {
        threshold,
        llm_threshold: config.labels.llm_faithful_threshold,
        labels,
        second: second.map_or(JudgeKind::Llm, ReplayJudge::kind).name(),
    };
    let keep = config.decode.max_message_bytes.saturating_add(1);
    let otlp = config.decode.format.is_otlp();
    if !files.suspects_baseline.is_empty() {
        summary.suspects_baseline_traces =
            read_suspects_baseline(config, files.suspects_baseline, &pipeline, &shared)?;
        if let Some(changes) = shared.changes() {
            changes.baseline_set_read();
        }
    }
    let files = files.traces;
    let progress = progress_bar(files);
    match second {
        None if otlp => {
            let (messages, dropped) =
                otlp::for_each_trace(files, config, progress.as_ref(), |outcome, line| {
                    let (eval, offline) = evaluate_outcome(&pipeline, outcome);
                    write_record(
                        &mut summary,
                        &shared,
                        (&eval, offline.as_ref()),
                        &Extra::default(),
                        line,
                        &judged,
                        &mut records,
                    )
                })?;
            summary.count_otlp(messages, dropped);
        }
        None => {
            // Nothing else runs meanwhile: the lines are read with blocking reads.
            for_each_line_blocking(files, keep, progress.as_ref(), |buf, line| {
                summary.lines += 1;
                let (eval, offline) = pipeline.evaluate(buf);
                let extra = Extra::default();
                write_record(
                    &mut summary,
                    &shared,
                    (&eval, offline.as_ref()),
                    &extra,
                    line,
                    &judged,
                    &mut records,
                )
            })?;
        }
        Some(judge) => {
            if let Some(llm) = judge.llm() {
                let mode = llm.resolve_structured_output().await;
                tracing::info!(
                    structured_output = crate::judge::llm::mode_name(mode),
                    judge_model = %llm.identity(),
                    "replaying with the LLM judge"
                );
            }
            let workers = config.judge.workers.max(1);
            // Lines (or assembled traces) travel from the reader to the judging loop over a
            // bounded channel: the reader (which may block on stdin) and the calls in flight
            // progress independently.
            let (tx, rx) = futures::channel::mpsc::channel::<(Input, u64)>(workers);
            let reader = async {
                let mut tx = tx;
                if otlp {
                    // Assembly reads with blocking reads, on a thread of its own.
                    let (files, config, progress) =
                        (files.to_vec(), config.clone(), progress.clone());
                    let read = tokio::task::spawn_blocking(move || {
                        otlp::for_each_trace(&files, &config, progress.as_ref(), |outcome, line| {
                            // A closed channel means the judging side stopped on an output
                            // error, which it reports.
                            let _ = futures::executor::block_on(
                                tx.send((Input::Assembled(Box::new(outcome)), line)),
                            );
                            Ok(())
                        })
                    });
                    return read.await.map_err(std::io::Error::other)?.map(Some);
                }
                for_each_line(files, keep, progress.as_ref(), async |buf, line| {
                    // A closed channel means the judging side stopped on an output error, which
                    // it reports.
                    let _ = tx.send((Input::Line(buf.to_vec()), line)).await;
                    Ok(())
                })
                .await
                .map(|()| None)
            };
            let judging =
                judge_in_order(rx, workers, &pipeline, judge, audit, |eval, extra, line| {
                    if !otlp {
                        summary.lines += 1;
                    }
                    write_record(
                        &mut summary,
                        &shared,
                        (eval, None),
                        extra,
                        line,
                        &judged,
                        &mut records,
                    )
                });
            let (read, judged) = tokio::join!(reader, judging);
            if let Some((messages, dropped)) = read? {
                summary.count_otlp(messages, dropped);
            }
            judged?;
        }
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    if let (Some(join), Some(labels)) = (summary.labels.as_mut(), labels) {
        join.joined = join.seen.len() as u64;
        join.unknown_trace = labels.len() as u64 - join.joined;
    }
    records.flush()?;
    let mut judges = vec![JudgeKind::Offline];
    judges.extend(second.map(ReplayJudge::kind));
    summary.suspects = shared.suspect_reports(&judges, 0);
    Ok(summary)
}

/// Judges the baseline set's traces with the offline judge into the change attribution (nothing
/// else counts them, and nothing is written); returns how many were judged.
fn read_suspects_baseline(
    config: &Config,
    files: &[PathBuf],
    pipeline: &Pipeline,
    shared: &Shared,
) -> std::io::Result<u64> {
    let mut judged = 0u64;
    let mut attribute = |eval: &Evaluation| {
        if let (Ok(trace), Some(verdict), None) = (&eval.trace, &eval.verdict, eval.unjudged) {
            shared.attribute_replayed(eval.stratum, trace, Some(verdict), None);
            judged += 1;
        }
    };
    if config.decode.format.is_otlp() {
        otlp::for_each_trace(files, config, None, |outcome, _| {
            attribute(&evaluate_outcome(pipeline, outcome).0);
            Ok(())
        })?;
    } else {
        let keep = config.decode.max_message_bytes.saturating_add(1);
        for_each_line_blocking(files, keep, None, |buf, _| {
            attribute(&pipeline.evaluate(buf).0);
            Ok(())
        })?;
    }
    Ok(judged)
}

/// What the judging loop takes: a line to decode, or what the span assembly made of OTLP files.
enum Input {
    Line(Vec<u8>),
    Assembled(Box<crate::trace::otlp::Outcome>),
}

/// The offline evaluation of an assembly outcome: a trace judged, a trace not to be judged with
/// its reason, or a reject.
fn evaluate_outcome(
    pipeline: &Pipeline,
    outcome: crate::trace::otlp::Outcome,
) -> (Evaluation, Option<OfflineScore>) {
    use crate::trace::otlp::Outcome;
    match outcome {
        Outcome::Trace(trace) => pipeline.evaluate_trace(trace),
        Outcome::Unjudged(trace, why) => (pipeline.unjudged(trace, why), None),
        Outcome::Rejected(e) => (Evaluation::rejected(e), None),
    }
}

/// What a record is held against: the judges' thresholds and the label file.
struct Judged<'a> {
    threshold: f64,
    llm_threshold: f64,
    labels: Option<&'a ReplayLabels>,
    /// The second judge's label value (whose skips the records name).
    second: &'static str,
}

/// Traces started ahead of the oldest unwritten one, per worker, at most: bounds the memory a slow
/// trace can hold up while the others go on.
const REORDER_WINDOW_PER_WORKER: usize = 16;

/// Judges the lines from `rx` with `workers` in flight at all times and hands each evaluation to
/// `write` in input order. With `audit`, a labelled trace is judged again with its contexts
/// reversed.
async fn judge_in_order(
    rx: futures::channel::mpsc::Receiver<(Input, u64)>,
    workers: usize,
    pipeline: &Pipeline,
    judge: ReplayJudge<'_>,
    audit: bool,
    mut write: impl FnMut(&Evaluation, &Extra, u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // A permit per trace from its start to its record: at most this many started and unwritten.
    let window = Arc::new(tokio::sync::Semaphore::new(
        workers * REORDER_WINDOW_PER_WORKER,
    ));
    let done = rx
        .enumerate()
        .then(|item| {
            let window = Arc::clone(&window);
            async move { (item, window.acquire_owned().await) }
        })
        .map(|((seq, (input, line)), permit)| async move {
            let (mut eval, _) = match input {
                Input::Line(bytes) => pipeline.evaluate(&bytes),
                Input::Assembled(outcome) => evaluate_outcome(pipeline, *outcome),
            };
            let mut extra = Extra {
                offline: eval.verdict.take(),
                reversed: None,
            };
            if let (Ok(t), None) = (&eval.trace, eval.unjudged) {
                match judge.judge(t).await {
                    Ok(v) => eval.verdict = Some(v),
                    Err(e) => eval.skipped = Some(e.kind().name()),
                }
                if audit && t.label_faithful.is_some() && eval.verdict.is_some() {
                    let mut reversed = t.clone();
                    reversed.contexts.reverse();
                    let v = judge.judge(&reversed).await;
                    extra.reversed = Some(v.ok().and_then(|v| v.faithfulness()));
                }
            }
            (seq, eval, extra, line, permit)
        })
        .buffer_unordered(workers);
    let mut done = std::pin::pin!(done);
    let mut pending = BTreeMap::new();
    let mut next = 0usize;
    while let Some((seq, eval, extra, line, permit)) = done.next().await {
        pending.insert(seq, (eval, extra, line, permit));
        while let Some((eval, extra, line, _permit)) = pending.remove(&next) {
            write(&eval, &extra, line)?;
            next += 1;
        }
    }
    Ok(())
}

/// A progress bar over the files' bytes when stderr is a terminal.
fn progress_bar(files: &[PathBuf]) -> Option<indicatif::ProgressBar> {
    let total_bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok().map(|m| m.len()))
        .sum();
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total_bytes);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {msg} ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    })
}

/// Counts `eval` in the summary and writes its record; an offline verdict's record comes with the
/// judge's scores.
fn write_record(
    summary: &mut Summary,
    shared: &Shared,
    (eval, offline): (&Evaluation, Option<&OfflineScore>),
    extra: &Extra,
    line: u64,
    judged: &Judged<'_>,
    records: &mut Records<'_>,
) -> std::io::Result<()> {
    let label = summary.count(shared, eval, extra, judged);
    records.write(&record_of(
        shared,
        (eval, offline),
        line,
        label,
        judged.second,
    ))
}

/// The record of `eval` at `line`, with the label it was judged against (a label file's, else the
/// trace's own).
fn record_of<'a>(
    shared: &'a Shared,
    (eval, offline): (&'a Evaluation, Option<&'a OfflineScore>),
    line: u64,
    label: Option<bool>,
    second: &'static str,
) -> VerdictRecord<'a> {
    let unscored = |trace: Option<&'a Trace>, judge, status, reason| VerdictRecord {
        trace_id: trace.map(|t| t.trace_id.as_str()),
        stratum: trace.map(|_| shared.stratifier.name(eval.stratum)),
        scores: PerQuality::default(),
        judge,
        status,
        reason,
        line,
        label_faithful: trace.and_then(|t| t.label_faithful),
        details: None,
    };
    match (&eval.trace, &eval.verdict) {
        (Err(e), _) => unscored(None, "offline", "rejected", Some(e.reason.as_str())),
        (Ok(trace), _) if eval.unjudged.is_some() => {
            unscored(Some(trace), "offline", "unjudged", eval.unjudged)
        }
        (Ok(trace), None) => unscored(Some(trace), second, "skipped", eval.skipped),
        (Ok(trace), Some(verdict)) => VerdictRecord {
            trace_id: Some(&trace.trace_id),
            stratum: Some(shared.stratifier.name(eval.stratum)),
            scores: verdict.scores,
            judge: verdict.judge.name(),
            status: if verdict.faithfulness().is_some() {
                "judged"
            } else {
                "no_claims"
            },
            reason: verdict.refusal.then_some("refusal"),
            line,
            label_faithful: label,
            details: Some(RecordVerdict { verdict, offline }),
        },
    }
}

impl Summary {
    /// Counts `eval`: its rejection, its unjudged reason, its skip, or its verdict's scores,
    /// retrieval figures and agreement with its label. Returns the label of a judged trace (a
    /// label file's, else the trace's own).
    fn count(
        &mut self,
        shared: &Shared,
        eval: &Evaluation,
        extra: &Extra,
        judged: &Judged<'_>,
    ) -> Option<bool> {
        let trace = match &eval.trace {
            Err(e) => {
                *self.rejected.entry(e.reason.as_str()).or_default() += 1;
                return None;
            }
            Ok(trace) => trace,
        };
        if let Some(reason) = eval.unjudged {
            *self.unjudged.entry(reason).or_default() += 1;
            return None;
        }
        self.keep_for_audit(trace, extra.offline.as_ref(), None);
        let stratum = shared.stratifier.name(eval.stratum);
        let variant = self.variants.as_ref().map(|v| v.assign(trace));
        let Some(verdict) = eval.verdict.as_ref() else {
            let s = self.stratum(stratum);
            s.traces += 1;
            s.skipped += 1;
            if let Some(v) = variant {
                s.variant(v).traces += 1;
            }
            return None;
        };
        self.keep_for_audit(trace, Some(verdict), extra.reversed);
        let (offline, llm) = match verdict.judge {
            JudgeKind::Llm | JudgeKind::Classifier => (extra.offline.as_ref(), Some(verdict)),
            _ => (Some(verdict), None),
        };
        shared.attribute_replayed(eval.stratum, trace, offline, llm);
        let retrieval = trace.gold.as_ref().and_then(|gold| {
            let ranked: Vec<Option<&str>> =
                trace.contexts.iter().map(|c| c.id.as_deref()).collect();
            retrieval_scores(&ranked, gold, &self.ks)
        });
        let s = self.stratum(stratum);
        s.traces += 1;
        s.retrieval.extend(retrieval);
        let usage = trace.metadata.usage();
        if let Some(p) = usage.prompt_tokens {
            s.tokens.push(p + usage.completion_tokens.unwrap_or(0.0));
        }
        s.refusals += u64::from(verdict.refusal);
        for (m, (sum, n)) in s.score_sums.iter_mut() {
            if let Some(v) = verdict.score(m) {
                *sum += v;
                *n += 1;
            }
        }
        if let Some(v) = variant {
            let sums = s.variant(v);
            sums.traces += 1;
            for (m, x) in sums.scores.iter_mut() {
                if let Some(y) = verdict.score(m) {
                    x.add(y);
                }
            }
        }
        let file_label = judged
            .labels
            .and_then(|l| l.by_trace.get(&trace.trace_id).copied());
        if file_label.is_some()
            && let Some(join) = self.labels.as_mut()
        {
            join.seen.insert(trace.trace_id.clone());
        }
        let label = file_label.or(trace.label_faithful);
        let s = self
            .strata
            .get_mut(stratum)
            .expect("entered above for this trace");
        let Some(f) = verdict.faithfulness() else {
            s.no_claims += 1;
            return label;
        };
        s.scored += 1;
        let Some(l) = label else {
            return label;
        };
        s.labelled.push((f, l));
        s.confusion.add(f, l, judged.threshold);
        let judge_threshold = match verdict.judge {
            crate::dimensions::JudgeKind::Llm => judged.llm_threshold,
            _ => judged.threshold,
        };
        let agree = (f >= judge_threshold) == l;
        s.agree += u64::from(agree);
        if let Some(join) = self.labels.as_mut().filter(|_| file_label.is_some()) {
            let a = join.agreement.entry(verdict.judge.name()).or_default();
            a.0 += u64::from(agree);
            a.1 += 1;
        }
        label
    }

    /// Counts an OTLP replay's messages and dropped spans.
    fn count_otlp(&mut self, messages: u64, dropped: otlp::Dropped) {
        self.lines += messages;
        for (why, n) in dropped {
            if n > 0 {
                *self.spans_dropped.entry(why.as_str()).or_default() += n;
            }
        }
    }

    /// The figures of the stratum named `name`, started when it is new (its name copied only then).
    fn stratum(&mut self, name: &str) -> &mut StratumSummary {
        if !self.strata.contains_key(name) {
            self.strata
                .insert(name.to_owned(), StratumSummary::default());
        }
        self.strata
            .get_mut(name)
            .expect("inserted above when missing")
    }

    /// Keeps a labelled trace's score by `verdict`'s judge for the audit.
    fn keep_for_audit(
        &mut self,
        trace: &crate::trace::Trace,
        verdict: Option<&Verdict>,
        reversed: Option<Option<f64>>,
    ) {
        let (Some(faithful), Some(v)) = (trace.label_faithful, verdict) else {
            return;
        };
        let Some(score) = v.faithfulness() else {
            return;
        };
        self.audit
            .entry(v.judge.name())
            .or_default()
            .push(AuditSample {
                score,
                faithful,
                answer_words: crate::judge::word_count(&trace.answer) as f64,
                reversed,
            });
    }

    /// The audit of each judge that scored labelled traces: the offline judge at
    /// `judge.faithful_threshold`, the LLM judge at `labels.llm_faithful_threshold`, intervals from
    /// `resamples` bootstrap resamples drawn from `seed`.
    pub fn audit(
        &self,
        config: &Config,
        resamples: usize,
        seed: u64,
    ) -> BTreeMap<String, JudgeAudit> {
        self.audit
            .iter()
            .map(|(judge, samples)| {
                let threshold = if *judge == crate::dimensions::JudgeKind::Llm.name() {
                    config.labels.llm_faithful_threshold
                } else {
                    config.judge.faithful_threshold
                };
                let a = JudgeAudit::compute(samples, threshold, resamples, seed);
                ((*judge).to_owned(), a)
            })
            .collect()
    }

    /// Figures per stratum plus `all` (every stratum pooled), for `--summary` and `ragwatch gate`;
    /// with `[variants]`, each stratum's per-variant figures too.
    pub fn figures(&self) -> BTreeMap<String, BTreeMap<String, f64>> {
        let all = self.pooled();
        let mut out = BTreeMap::new();
        for (name, s) in self.strata.iter().chain([(&"all".to_owned(), &all)]) {
            let mut f = s.figures(&self.ks);
            if let Some(v) = &self.variants {
                s.variant_figures(v, &mut f);
            }
            out.insert(name.clone(), f);
        }
        out
    }

    /// Every stratum pooled.
    fn pooled(&self) -> StratumSummary {
        let mut all = StratumSummary::default();
        for s in self.strata.values() {
            all.merge(s);
        }
        all
    }

    /// The summary as a text table.
    pub fn table(&self) -> String {
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
        // One column per metric, headed by its name.
        let row = |cells: &[String]| {
            let (counts, rest) = cells.split_at(6);
            let mut line = format!(
                "{:<16} {:>7} {:>7} {:>7} {:>9} {:>8}",
                counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]
            );
            for (i, cell) in rest.iter().enumerate() {
                let width = Quality::ALL.get(i).map_or(9, |m| m.name().len());
                line.push_str(&format!(" {cell:>width$}"));
            }
            line.push('\n');
            line
        };
        let header: Vec<String> = [
            "stratum",
            "traces",
            "scored",
            "skipped",
            "no_claims",
            "refusals",
        ]
        .into_iter()
        .chain(Quality::ALL.map(Quality::name))
        .chain(["auroc", "precision", "recall"])
        .map(str::to_owned)
        .collect();
        let mut t = row(&header);
        for (name, s) in &self.strata {
            let (scores, labels): (Vec<f64>, Vec<bool>) = s.labelled.iter().copied().unzip();
            let mut cells = vec![
                name.clone(),
                s.traces.to_string(),
                s.scored.to_string(),
                s.skipped.to_string(),
                s.no_claims.to_string(),
                s.refusals.to_string(),
            ];
            cells.extend(
                s.score_sums
                    .iter()
                    .map(|(_, &(sum, n))| fmt((n > 0).then(|| sum / n as f64))),
            );
            cells.extend([
                fmt(auroc(&scores, &labels)),
                fmt(s.confusion.precision()),
                fmt(s.confusion.recall()),
            ]);
            t.push_str(&row(&cells));
            if !s.labelled.is_empty() {
                let c = s.confusion;
                t.push_str(&format!(
                    "{:<16} confusion (flag = faithfulness below threshold): tp {} fp {} fn {} tn {}\n",
                    "", c.true_positive, c.false_positive, c.false_negative, c.true_negative
                ));
            }
        }
        if let Some(variants) = &self.variants {
            t.push_str(&self.variant_table(variants));
        }
        t.push_str(&self.suspect_table());
        if let Some(join) = &self.labels {
            t.push_str(&format!(
                "labels file: joined {}, unknown_trace {}, invalid {}\n",
                join.joined, join.unknown_trace, join.invalid
            ));
            for (judge, (agree, n)) in &join.agreement {
                t.push_str(&format!(
                    "agreement with the labels: {judge} {} ({agree} of {n})\n",
                    fmt((*n > 0).then(|| *agree as f64 / *n as f64))
                ));
            }
        }
        t.push_str(&format!("lines {}", self.lines));
        for (reason, n) in &self.rejected {
            t.push_str(&format!(", rejected {reason} {n}"));
        }
        for (reason, n) in &self.unjudged {
            t.push_str(&format!(", unjudged {reason} {n}"));
        }
        for (reason, n) in &self.spans_dropped {
            t.push_str(&format!(", spans dropped {reason} {n}"));
        }
        t.push('\n');
        t
    }

    /// The suspects section of the table: per stratum and judge, with a baseline set the
    /// changed documents and sources (their change against the baseline set and its interval) and,
    /// apart, the chronic ones; without one, the whole run's associations (their lift).
    fn suspect_table(&self) -> String {
        use crate::changes::Basis;
        let mut t = String::new();
        let row = |t: &mut String, s: &crate::changes::Suspect, figures: String| {
            t.push_str(&format!(
                "  {:<40} low {:>5} of {:>5}  {figures}\n",
                s.id, s.low, s.verdicts
            ));
        };
        for r in &self.suspects {
            let head = |what: &str| {
                format!(
                    "{what} in {} ({} judge, {} of {} verdicts low{}, z {:.2}; {} tested, {} too thin):\n",
                    r.stratum,
                    r.judge,
                    r.report.low,
                    r.report.verdicts,
                    r.report.before.map_or(String::new(), |b| format!(
                        ", against {} of {} before",
                        b.low, b.verdicts
                    )),
                    r.report.z,
                    r.report.tested,
                    r.report.too_thin,
                )
            };
            let report = &r.report;
            let listed: Vec<_> = report.documents.iter().chain(&report.sources).collect();
            match report.basis {
                Basis::Association => {
                    if !listed.is_empty() {
                        t.push_str(&head(
                            "associations, not changes (one window, no baseline set)",
                        ));
                    }
                    for s in listed {
                        let f = format!(
                            "lift {:.2} [{:.2}, {:.2}]",
                            s.lift, s.lift_lower, s.lift_upper
                        );
                        row(&mut t, s, f);
                    }
                }
                Basis::Change => {
                    t.push_str(&head("changes against the baseline set"));
                    if listed.is_empty() {
                        t.push_str("  none\n");
                    }
                    for s in listed {
                        let before = s.before.as_ref().map_or_else(
                            || match s.change.map(|c| c.against) {
                                Some(crate::changes::Against::Stratum) => {
                                    "new: against the stratum".to_owned()
                                }
                                _ => "before unknown".to_owned(),
                            },
                            |b| format!("before {} of {}", b.low, b.verdicts),
                        );
                        let f = s.change.map_or(before.clone(), |c| {
                            format!(
                                "{before}  change {:.2} [{:.2}, {:.2}]",
                                c.ratio, c.lower, c.upper
                            )
                        });
                        row(&mut t, s, f);
                    }
                    let chronic: Vec<_> = report
                        .chronic_documents
                        .iter()
                        .chain(&report.chronic_sources)
                        .collect();
                    if !chronic.is_empty() {
                        t.push_str(&head("chronic, as high before"));
                    }
                    for s in chronic {
                        let before = s.before.as_ref().map_or(String::new(), |b| {
                            format!(
                                ", before {:.2} [{:.2}, {:.2}]",
                                b.lift, b.lift_lower, b.lift_upper
                            )
                        });
                        let f = format!(
                            "lift {:.2} [{:.2}, {:.2}]{before}",
                            s.lift, s.lift_lower, s.lift_upper
                        );
                        row(&mut t, s, f);
                    }
                }
            }
        }
        t
    }

    /// The per-variant section of the table: per stratum and `all`, each variant's traces and, per
    /// metric, its mean score with the count and standard deviation. Declared variants are listed
    /// in `all` whatever their count; elsewhere only variants with traces.
    fn variant_table(&self, variants: &Variants) -> String {
        let mut t = format!("{:<16} {:<16} {:>7}", "variant", "stratum", "traces");
        for m in Quality::ALL {
            t.push_str(&format!(" {:>26}", format!("{} (n, sd)", m.name())));
        }
        t.push('\n');
        let all = self.pooled();
        let declared = variants.names().len() - 2;
        for (v, name) in variants.names().iter().enumerate() {
            let strata = self.strata.iter().map(|(k, s)| (k.as_str(), s, false));
            for (stratum, s, always) in strata.chain([("all", &all, v < declared)]) {
                let sums = s.variants.get(v).copied().unwrap_or_default();
                if sums.traces == 0 && !always {
                    continue;
                }
                t.push_str(&format!("{name:<16} {stratum:<16} {:>7}", sums.traces));
                for (_, x) in sums.scores.iter() {
                    let cell = match x.mean() {
                        Some(mean) => {
                            let var = (x.sum_sq - x.sum * mean) / (x.n.max(2) - 1) as f64;
                            format!("{mean:.3} ({}, {:.3})", x.n, var.max(0.0).sqrt())
                        }
                        None => "-".to_owned(),
                    };
                    t.push_str(&format!(" {cell:>26}"));
                }
                t.push('\n');
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(id: &str, stratum: &str, release: Option<&str>, answer: &str) -> String {
        let mut metadata = serde_json::json!({"model": "m"});
        if let Some(r) = release {
            metadata["release"] = r.into();
        }
        serde_json::json!({
            "trace_id": id,
            "query": "How long is the warranty on the Aurora router?",
            "contexts": [{"id": "d0", "text": "The Aurora router comes with a warranty of 3 years covering parts and labour."}],
            "answer": answer,
            "stratum": stratum,
            "metadata": metadata,
        })
        .to_string()
    }

    async fn replayed(config: &str, lines: &[String]) -> Summary {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("traces.jsonl");
        std::fs::write(&file, lines.join("\n")).unwrap();
        let config = Config::from_toml_with_env(config, &HashMap::new()).unwrap();
        replay(&config, &[file], None, &[1], false, &mut Vec::new())
            .await
            .unwrap()
    }

    const VARIANTS: &str = r#"
        [variants]
        declared = ["stable", "canary"]
        baseline = "stable"
        fields = ["/release"]
    "#;

    #[tokio::test]
    async fn per_variant_figures_sum_to_the_strata_and_appear_only_with_variants() {
        let good = "The warranty on the Aurora router lasts 3 years and covers parts and labour.";
        let bad = "The warranty on the Aurora router lasts 9 years and covers accidental damage.";
        let lines = [
            trace("a", "head", Some("stable"), good),
            trace("b", "tail", Some("stable"), bad),
            trace("c", "head", None, good),
            trace("d", "head", Some("canary"), bad),
            trace("e", "head", Some("v9"), good),
        ];
        let summary = replayed(VARIANTS, &lines).await;
        let f = summary.figures();
        let all = &f["all"];
        assert_eq!(all["variant/stable/traces"], 3.0, "{all:?}");
        assert_eq!(all["variant/canary/traces"], 1.0);
        assert_eq!(all["variant/other/traces"], 1.0);
        assert!(!all.contains_key("variant/unknown/traces"));
        assert_eq!(f["tail"]["variant/stable/traces"], 1.0);
        assert_eq!(f["tail"]["variant/canary/traces"], 0.0);
        assert!(!f["tail"].contains_key("variant/canary/faithfulness"));
        let n: f64 = ["stable", "canary", "other"]
            .iter()
            .map(|v| all[&format!("variant/{v}/faithfulness/n")])
            .sum();
        let sum: f64 = ["stable", "canary", "other"]
            .iter()
            .map(|v| all[&format!("variant/{v}/faithfulness/sum")])
            .sum();
        assert_eq!(n, 5.0);
        assert!((sum / n - all["faithfulness"]).abs() < 1e-9);
        let (s, ss, m) = (
            all["variant/stable/faithfulness/sum"],
            all["variant/stable/faithfulness/sum_sq"],
            all["variant/stable/faithfulness"],
        );
        assert!((s / 3.0 - m).abs() < 1e-12 && ss >= s * s / 3.0 - 1e-12);
        assert!(
            all["variant/canary/faithfulness"] < all["variant/stable/faithfulness"],
            "{all:?}"
        );
        let table = summary.table();
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("canary") && l.contains(" all ")),
            "{table}"
        );

        let plain = replayed("", &lines).await;
        let f = plain.figures();
        assert!(
            f.values()
                .all(|s| s.keys().all(|k| !k.starts_with(VARIANT_FIGURE_PREFIX))),
            "{f:?}"
        );
        assert!(!plain.table().contains("variant"));
    }
}
