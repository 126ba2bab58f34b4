//! The classifier stage: with the classifier as the combined estimate's prediction
//! (`judge.prediction = "classifier"`), every trace waits here, in a bounded queue, for the
//! classifier's verdict. The verdict goes to the histograms and windows under `judge="classifier"`
//! and stands for the trace in the combined estimate's population; a sampled trace then goes on to
//! the LLM judge carrying it, so that its pair uses the same prediction. A classifier failure
//! leaves the trace the offline judge's score (counted as a failed request, the trace still
//! judged), and the stage acks every trace it does not hand on.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::pool::{serve_queue, skip_shutdown};
use super::{JudgeJob, Position, offer};
use crate::clock::Instant;
use crate::dimensions::JudgeKind;
use crate::judge::classifier::Classifier;
use crate::recorder::Shared;

/// A trace on its way through the classifier stage.
#[derive(Debug)]
pub(crate) struct Staged {
    /// The trace, as it goes on to the sampled judge.
    pub(crate) job: JudgeJob,
    /// Whether it goes on to the sampled judge (sampled, and there is one).
    pub(crate) judge: bool,
}

/// Runs the stage until its queue is closed and drained, or `abandon` is cancelled; hands sampled
/// traces to `judge_tx` and acks the others on `ack_tx`.
pub(crate) async fn run_stage(
    classifier: Arc<Classifier>,
    workers: usize,
    staged_rx: mpsc::Receiver<Staged>,
    judge_tx: mpsc::Sender<JudgeJob>,
    ack_tx: Option<mpsc::UnboundedSender<Position>>,
    shared: Shared,
    abandon: CancellationToken,
) {
    let work = {
        let (shared, abandon) = (shared.clone(), abandon.clone());
        move |staged: Staged| {
            let (classifier, shared, judge_tx, ack_tx, abandon) = (
                Arc::clone(&classifier),
                shared.clone(),
                judge_tx.clone(),
                ack_tx.clone(),
                abandon.clone(),
            );
            async move {
                let Staged { mut job, judge } = staged;
                let started = Instant::now();
                let verdict = tokio::select! {
                    _ = abandon.cancelled() => None,
                    v = classifier.judge(&job.trace) => Some(v),
                };
                let Some(verdict) = verdict else {
                    // Abandoned at the grace deadline: not acked, so redelivered after a restart.
                    skip_shutdown(&shared, &job);
                    return;
                };
                predict(&shared, &mut job, verdict, started);
                let position = job.position;
                let handed_on = judge && offer(&judge_tx, job, &shared).is_none();
                // Not handed on (not sampled, or no room): accounted for here.
                if !handed_on && let (Some(tx), Some(p)) = (ack_tx, position) {
                    let _ = tx.send(p);
                }
            }
        }
    };
    let left = |staged: &Staged| skip_shutdown(&shared, &staged.job);
    serve_queue(workers, staged_rx, &abandon, || (), work, left).await;
}

/// Records the classifier's `verdict` on `job`'s trace (its scores, and its place in the combined
/// estimate's population), or its failure, whereupon the offline judge's score takes that place.
fn predict(
    shared: &Shared,
    job: &mut JudgeJob,
    verdict: Result<crate::judge::Verdict, crate::judge::classifier::ClassifierError>,
    started: Instant,
) {
    let m = &shared.metrics;
    let kind = JudgeKind::Classifier.name();
    let now = crate::clock::now_ms();
    m.observe_judge_duration(
        kind,
        started.elapsed().as_secs_f64(),
        &job.trace.trace_id,
        now,
    );
    match verdict {
        Ok(v) => {
            let judged = crate::judge::llm::Judged::fresh(v);
            m.judge
                .requests
                .with_label_values(&[kind, judged.outcome.name()])
                .inc();
            shared.record_beside(job.stratum, &judged.verdict, &job.trace, now);
            shared.record_prediction(job.stratum, &judged.verdict, now);
            job.prediction = Some(judged.verdict);
        }
        Err(e) => {
            let e = e.into_llm();
            m.judge
                .requests
                .with_label_values(&[kind, e.kind().name()])
                .inc();
            tracing::debug!(error = %e, trace_id = %job.trace.trace_id, "classifier failed: the offline score stands");
            shared.record_prediction(job.stratum, &job.offline, now);
        }
    }
}
