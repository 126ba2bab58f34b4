//! The sampled-judge pool: takes jobs off the bounded queue and runs at most `workers` of them at a
//! time. Each finished job reports its source position on the ack channel so its offset can move on.
//!
//! Shutdown: when the queue closes (the source stopped) the pool finishes what is queued; when the
//! grace period runs out (`abandon` cancelled) the remaining jobs are counted as skipped with reason
//! `shutdown` and not acked, so their offsets stay uncommitted and they are redelivered.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{JudgeJob, Position};
use crate::events;
use crate::judge::llm::{LlmError, LlmJudge};
use crate::judge::{JudgeKind, OfflineJudge, Verdict};
use crate::labels::SkipReason;
use crate::recorder::Shared;

/// The judge the pool runs.
#[derive(Debug, Clone)]
pub enum PoolJudge {
    /// The offline judge, run again off the ingest path (exercises the queue without a network).
    Offline(OfflineJudge),
    /// The LLM judge.
    Llm(Arc<LlmJudge>),
}

impl PoolJudge {
    fn kind(&self) -> JudgeKind {
        match self {
            PoolJudge::Offline(_) => JudgeKind::Offline,
            PoolJudge::Llm(_) => JudgeKind::Llm,
        }
    }

    async fn judge(&self, job: &JudgeJob) -> Result<Verdict, LlmError> {
        match self {
            PoolJudge::Offline(j) => Ok(j.judge(&job.trace)),
            PoolJudge::Llm(j) => j.judge(&job.trace, job.priority).await,
        }
    }
}

/// Runs the pool until the queue is closed and drained, or `abandon` is cancelled.
pub async fn run_pool(
    judge: PoolJudge,
    workers: usize,
    mut jobs_rx: mpsc::Receiver<JudgeJob>,
    ack_tx: Option<mpsc::UnboundedSender<Position>>,
    shared: Shared,
    abandon: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(workers));
    let tracker = TaskTracker::new();
    let judge = Arc::new(judge);
    loop {
        let job = tokio::select! {
            biased;
            _ = abandon.cancelled() => break,
            job = jobs_rx.recv() => match job { Some(j) => j, None => break },
        };
        shared.metrics.judge_queue_depth.dec();
        let permit = tokio::select! {
            biased;
            _ = abandon.cancelled() => {
                skip_shutdown(&shared, &job);
                break;
            }
            p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let (judge, shared, ack_tx, abandon) = (
            Arc::clone(&judge),
            shared.clone(),
            ack_tx.clone(),
            abandon.clone(),
        );
        tracker.spawn(async move {
            let _permit = permit;
            let started = Instant::now();
            let kind = judge.kind().name();
            let verdict = tokio::select! {
                _ = abandon.cancelled() => None,
                v = judge.judge(&job) => Some(v),
            };
            let m = &shared.metrics;
            m.judge_duration
                .with_label_values(&[kind])
                .observe(started.elapsed().as_secs_f64());
            let Some(verdict) = verdict else {
                // Abandoned at the grace deadline: not acked, so redelivered after a restart.
                skip_shutdown(&shared, &job);
                return;
            };
            match verdict {
                Ok(v) => {
                    let outcome = if v.faithfulness.is_some() {
                        "ok"
                    } else {
                        "no_claims"
                    };
                    m.judge_requests.with_label_values(&[kind, outcome]).inc();
                    shared.record_sampled(job.stratum, &v, &job.offline, job.probability);
                    shared.record_audit(job.stratum, &job.trace, &v);
                    shared.remember(&job.trace.trace_id, job.stratum, &v, crate::clock::now_ms());
                }
                Err(e) => {
                    m.judge_requests.with_label_values(&[kind, e.kind()]).inc();
                    let reason = match e {
                        LlmError::Budget if job.priority => SkipReason::BudgetReserve,
                        LlmError::Budget => SkipReason::Budget,
                        _ => SkipReason::JudgeError,
                    };
                    let stratum = shared.stratifier.name(job.stratum);
                    events::trace_skipped(&shared.metrics, stratum, reason, &job.trace.trace_id);
                    tracing::debug!(error = %e, trace_id = %job.trace.trace_id, "judge failed");
                }
            }
            // Judged or skipped with a reason: either way the trace is accounted for.
            if let (Some(tx), Some(p)) = (ack_tx, job.position) {
                let _ = tx.send(p);
            }
        });
    }
    // Whatever is still queued after an abandon is skipped, not lost silently.
    jobs_rx.close();
    while let Ok(job) = jobs_rx.try_recv() {
        shared.metrics.judge_queue_depth.dec();
        skip_shutdown(&shared, &job);
    }
    tracker.close();
    tracker.wait().await;
}

fn skip_shutdown(shared: &Shared, job: &JudgeJob) {
    let s = shared.stratifier.name(job.stratum);
    events::trace_skipped(
        &shared.metrics,
        s,
        SkipReason::Shutdown,
        &job.trace.trace_id,
    );
}
