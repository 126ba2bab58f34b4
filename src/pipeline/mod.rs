//! The pipeline: what happens to one message between the source and the windows.
//!
//! decode → stratify → offline judge (every trace) → windows and histograms → sample → bounded
//! queue to the sampled judge. `ingest` never waits: a full queue is a counted skip, so the source
//! keeps pace with the topic whatever the judge does. With the classifier as the combined
//! estimate's prediction, every trace first passes a bounded queue to the classifier (`stage`),
//! which hands the sampled ones on; a trace that finds it full keeps the offline judge's score.

mod pool;
#[cfg(feature = "classifier")]
mod stage;

pub(crate) use pool::{PoolJudge, abandon_after_grace, run_pool};
#[cfg(feature = "classifier")]
pub(crate) use stage::{Staged, run_stage};

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::clock::now_ms;
use crate::dimensions::SkipReason;
use crate::dimensions::StratumId;
use crate::events;
use crate::judge::{OfflineJudge, OfflineScore, Verdict};
use crate::recorder::Shared;
use crate::sample::config::SampleConfig;
use crate::sample::{Sampler, SamplerDecision};
use crate::trace::config::DecodeConfig;
use crate::trace::{DecodeError, Decoder, Trace};

/// Where a message came from, so that its source can move past it once it is accounted for. The
/// three parts are the source's to define: Kafka's are the topic's index in its topic list, the
/// partition and the offset; a single-stream source (a file, a request queue) uses stream 0,
/// partition 0 and its own sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The source's stream (Kafka: the topic's index in `kafka.topics`).
    pub stream: usize,
    /// The stream's partition (0 when the stream has one).
    pub partition: i32,
    /// The message's place in its partition: an offset or sequence number, increasing.
    pub offset: i64,
}

/// What became of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Fully accounted for now (judged, skipped or rejected): its offset may move on.
    Done,
    /// Handed to the sampled judge; its position comes back on the ack channel when done.
    Pending,
}

/// A sampled trace on its way to the sampled judge.
#[derive(Debug)]
pub struct JudgeJob {
    /// The trace.
    pub trace: Trace,
    /// Its stratum.
    pub stratum: StratumId,
    /// The offline verdict, which the sampled judge may use (tiering, comparison).
    pub offline: Verdict,
    /// Where to report completion, if the source tracks offsets.
    pub position: Option<Position>,
    /// Sampled to meet its stratum's minimum per window: may spend the budget's reserve.
    pub(crate) priority: bool,
    /// The probability with which it was going to be sampled (weights the combined estimate).
    pub probability: f64,
    /// The score the combined estimate's population took for this trace when it is not the
    /// offline verdict's (the classifier's).
    pub prediction: Option<Verdict>,
}

impl JudgeJob {
    /// The verdict whose scores stood for this trace in the combined estimate's population: its
    /// pair must use the same.
    pub fn prediction(&self) -> &Verdict {
        self.prediction.as_ref().unwrap_or(&self.offline)
    }
}

/// Hands `job` to the judge queue `tx`; when the queue is full or closed, the trace is counted as
/// skipped with the reason and handed back.
pub(crate) fn offer(
    tx: &mpsc::Sender<JudgeJob>,
    job: JudgeJob,
    shared: &Shared,
) -> Option<JudgeJob> {
    let reason = match tx.try_send(job) {
        Ok(()) => {
            shared.metrics.sample.judge_queue_depth.inc();
            return None;
        }
        Err(mpsc::error::TrySendError::Full(job)) => (SkipReason::QueueFull, job),
        Err(mpsc::error::TrySendError::Closed(job)) => (SkipReason::Shutdown, job),
    };
    let (reason, job) = reason;
    let s = shared.stratifier.name(job.stratum);
    events::trace_skipped(&shared.metrics, s, reason, &job.trace.trace_id);
    Some(job)
}

/// The result of evaluating one message with the offline judge.
#[derive(Debug)]
pub struct Evaluation {
    /// The decoded trace, or why it was rejected.
    pub trace: Result<Trace, DecodeError>,
    /// Its stratum (when decoded).
    pub stratum: StratumId,
    /// The verdict (when decoded and judged).
    pub verdict: Option<Verdict>,
    /// Why a decoded trace has no verdict (a judge failure's outcome label).
    pub skipped: Option<&'static str>,
    /// Why an assembled trace is not judged at all (a `ragwatch_traces_unjudged_total` reason).
    pub unjudged: Option<&'static str>,
}

impl Evaluation {
    /// A message or assembled trace rejected for `e`.
    pub fn rejected(e: DecodeError) -> Self {
        Evaluation {
            trace: Err(e),
            stratum: 0,
            verdict: None,
            skipped: None,
            unjudged: None,
        }
    }
}

/// Ingest for one source task.
#[derive(Debug)]
pub struct Pipeline {
    decoder: Decoder,
    sampler: Sampler,
    offline: OfflineJudge,
    shared: Shared,
    judge_tx: Option<mpsc::Sender<JudgeJob>>,
    /// Every trace's way to the classifier, when it is the combined estimate's prediction.
    #[cfg(feature = "classifier")]
    stage_tx: Option<mpsc::Sender<Staged>>,
    /// The last message's trace, whose strings the next message is decoded into (a sampled trace
    /// leaves with its job, and the next one starts afresh).
    spare: Trace,
}

impl Pipeline {
    /// A pipeline decoding with `decode` and sampling with `sample`, writing to `shared` (whose
    /// windows and variants the sampler's pace and boost follow); sampled traces go to `judge_tx`
    /// when there is a sampled judge.
    pub fn new(
        decode: &DecodeConfig,
        sample: &SampleConfig,
        shared: Shared,
        judge_tx: Option<mpsc::Sender<JudgeJob>>,
    ) -> Self {
        let recorded = &shared.setup;
        Self {
            decoder: Decoder::new(decode),
            sampler: Sampler::with_candidate_boost(
                sample,
                sample.min_window_secs(&recorded.windows),
                shared.stratifier.names(),
                recorded.variants.candidate_sample_boost(),
            ),
            offline: OfflineJudge::default(),
            shared,
            judge_tx,
            #[cfg(feature = "classifier")]
            stage_tx: None,
            spare: Trace::default(),
        }
    }

    /// Sends every trace through the classifier stage on `stage_tx` before sampling hands it on.
    #[cfg(feature = "classifier")]
    pub(crate) fn with_stage(mut self, stage_tx: mpsc::Sender<Staged>) -> Self {
        self.stage_tx = Some(stage_tx);
        self
    }

    /// Closes the sampled judge's queue (and the classifier stage's): the pool finishes what is
    /// queued and then stops.
    pub(crate) fn close_queue(&mut self) {
        self.judge_tx = None;
        #[cfg(feature = "classifier")]
        {
            self.stage_tx = None;
        }
    }

    /// Decodes, stratifies and runs the offline judge; touches no metric. The verdict has no `details`
    /// (building that JSON object costs more than the judge itself, and only verdict records read
    /// it); the judge's score comes alongside for a caller that writes records from it.
    pub fn evaluate(&self, bytes: &[u8]) -> (Evaluation, Option<OfflineScore>) {
        match self.decoder.decode(bytes) {
            Ok(trace) => self.evaluate_trace(trace),
            Err(e) => (Evaluation::rejected(e), None),
        }
    }

    /// [`Pipeline::evaluate`] for a trace already built (assembled from OTLP spans).
    pub(crate) fn evaluate_trace(&self, trace: Trace) -> (Evaluation, Option<OfflineScore>) {
        let stratum = self.shared.stratifier.assign(&trace);
        let score = self.offline.score(&trace);
        let eval = Evaluation {
            trace: Ok(trace),
            stratum,
            verdict: Some(score.verdict_without_details()),
            skipped: None,
            unjudged: None,
        };
        (eval, Some(score))
    }

    /// An assembled trace that is not to be judged, with the reason (`no_retrieval`, `not_rag`...).
    pub fn unjudged(&self, trace: Trace, reason: &'static str) -> Evaluation {
        Evaluation {
            stratum: self.shared.stratifier.assign(&trace),
            trace: Ok(trace),
            verdict: None,
            skipped: None,
            unjudged: Some(reason),
        }
    }

    /// Takes in one message. Never blocks.
    pub fn ingest(&mut self, bytes: &[u8], position: Option<Position>) -> Disposition {
        self.ingest_at(bytes, position, now_ms())
    }

    /// [`Pipeline::ingest`] at a given wall-clock time (simulations drive the clock).
    pub fn ingest_at(&mut self, bytes: &[u8], position: Option<Position>, now: u64) -> Disposition {
        self.shared.metrics.source.messages.inc();
        let mut trace = std::mem::take(&mut self.spare);
        if let Err(e) = self.decoder.decode_into(bytes, &mut trace) {
            self.keep(trace);
            let at = position
                .map(|p| format!("{}/{}", p.partition, p.offset))
                .unwrap_or_default();
            events::trace_rejected(&self.shared.metrics, &e, &at);
            return Disposition::Done;
        }
        self.ingest_trace_at(trace, position, now)
    }

    /// Keeps `trace`'s buffers for the next message, unless they have grown past what a common
    /// trace needs (one huge message does not pin its memory for the life of the source).
    fn keep(&mut self, trace: Trace) {
        const KEEP_BYTES: usize = 64 * 1024;
        let held = trace.query.capacity()
            + trace.answer.capacity()
            + trace
                .contexts
                .iter()
                .map(|c| c.text.capacity())
                .sum::<usize>();
        if held <= KEEP_BYTES && trace.contexts.capacity() <= 256 {
            self.spare = trace;
        }
    }

    /// Takes in one trace already built (assembled from OTLP spans): stratify, offline judge,
    /// record, sample. Never blocks.
    pub(crate) fn ingest_trace_at(
        &mut self,
        trace: Trace,
        position: Option<Position>,
        now: u64,
    ) -> Disposition {
        let stratum = self.shared.stratifier.assign(&trace);
        let verdict = self.offline.score(&trace).verdict_without_details();
        self.judge_and_sample(trace, stratum, verdict, position, now)
    }

    /// What the pipeline writes to.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    #[inline]
    fn judge_and_sample(
        &mut self,
        trace: Trace,
        stratum: StratumId,
        verdict: Verdict,
        position: Option<Position>,
        now: u64,
    ) -> Disposition {
        let m = Arc::clone(&self.shared.metrics);
        // The label is borrowed from a clone of the Arc: no String per trace on the hot path.
        let stratifier = Arc::clone(&self.shared.stratifier);
        let s = stratifier.name(stratum);
        m.count_received(
            stratum,
            s,
            trace.contexts.len(),
            trace.contexts.iter().map(|c| c.score),
        );
        let candidate = self.shared.record(stratum, &verdict, &trace, now);
        let (decision, probability) = self.sampler.decide_tiered(
            stratum,
            &trace.trace_id,
            now / 1000,
            verdict.uncertain,
            candidate,
        );
        let sampled = decision.sampled();
        if sampled {
            m.count_sampled(stratum, s);
        }
        let job = JudgeJob {
            trace,
            stratum,
            offline: verdict,
            position,
            priority: decision == SamplerDecision::Minimum,
            probability,
            prediction: None,
        };
        #[cfg(feature = "classifier")]
        let Some(job) = self.stage(job, sampled) else {
            return Disposition::Pending;
        };
        self.shared.record_prediction(stratum, &job.offline, now);
        let (true, Some(tx)) = (sampled, &self.judge_tx) else {
            self.keep(job.trace);
            return Disposition::Done;
        };
        match offer(tx, job, &self.shared) {
            None => Disposition::Pending,
            Some(job) => {
                self.keep(job.trace);
                Disposition::Done
            }
        }
    }

    /// Queues `job` for the classifier stage, to go on to the sampled judge when `sampled`; hands
    /// it back when there is no stage or no room in it.
    #[cfg(feature = "classifier")]
    fn stage(&self, job: JudgeJob, sampled: bool) -> Option<JudgeJob> {
        let Some(tx) = &self.stage_tx else {
            return Some(job);
        };
        let judge = sampled && self.judge_tx.is_some();
        tx.try_send(Staged { job, judge })
            .err()
            .map(|e| e.into_inner().job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The score histograms of `/metrics`, the lines a trace's verdict writes.
    fn scores(shared: &Shared) -> Vec<String> {
        shared
            .metrics
            .render()
            .lines()
            .filter(|l| l.contains("_ratio") && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    /// Messages decoded into the last message's trace (its strings and contexts reused, a rejected
    /// message between them) are scored as messages each decoded into a trace of its own.
    #[test]
    fn a_reused_trace_scores_as_a_fresh_one() {
        let messages = [
            r#"{"trace_id":"a","query":"What does the kettle cost?","contexts":[{"id":"d1","text":"The kettle costs 40 dollars.","score":0.9},{"id":"d2","text":"It is made in Lisbon."},"A plain context about kettles."],"answer":"The kettle costs 40 dollars [d1].","stratum":"head","metadata":{"model":"m","usage":{"prompt_tokens":3}}}"#,
            r#"{"trace_id":"b","query":"Where is it made?","contexts":["It is made in Porto by Ana Silva."],"answer":"It is made in Lisbon by Maria Keller."}"#,
            r#"{"trace_id":"c","query":"q","contexts":"#,
            r#"{"trace_id":"d","query":"Who opened the factory?","contexts":[{"text":"Maria Keller opened the factory in 1990.","score":null},{"id":"x","text":"The factory makes kettles."}],"answer":"Maria Keller opened it in 1990.","label_faithful":true,"relevant_ids":["x"]}"#,
            r#"{"trace_id":"e","query":"Escaped \"query\"?","contexts":[{"id":7,"text":"An escaped \"text\" and more.","extra":1}],"answer":"I cannot answer that."}"#,
            r#"{"trace_id":"f","query":"What does the kettle cost?","contexts":[],"answer":"It costs 40 dollars."}"#,
        ];
        let (decode, sample) = (DecodeConfig::default(), SampleConfig::default());
        let setup = crate::recorder::RecorderSetup::default;
        let (reused, fresh) = (Shared::new(setup()), Shared::new(setup()));
        let mut one = Pipeline::new(&decode, &sample, reused.clone(), None);
        for (i, m) in messages.iter().enumerate() {
            let now = 1_800_000_000_000 + i as u64;
            one.ingest_at(m.as_bytes(), None, now);
            Pipeline::new(&decode, &sample, fresh.clone(), None).ingest_at(m.as_bytes(), None, now);
        }
        assert_eq!(scores(&reused), scores(&fresh));
        // Five traces decoded (the cut message rejected), one of them in `head`.
        for line in [
            r#"ragwatch_answer_relevancy_ratio_count{judge="offline",stratum="default"} 4"#,
            r#"ragwatch_answer_relevancy_ratio_count{judge="offline",stratum="head"} 1"#,
        ] {
            assert!(scores(&reused).iter().any(|l| l == line), "{line}");
        }
    }
}
