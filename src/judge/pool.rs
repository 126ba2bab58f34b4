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

use super::{JudgeKind, OfflineJudge};
use crate::events;
use crate::pipeline::{JudgeJob, Position, Shared};

/// The judge the pool runs.
#[derive(Debug, Clone)]
pub enum PoolJudge {
    /// The offline judge, run again off the ingest path (exercises the queue without a network).
    Offline(OfflineJudge),
}

impl PoolJudge {
    fn kind(&self) -> JudgeKind {
        match self {
            PoolJudge::Offline(_) => JudgeKind::Offline,
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
                v = async {
                    match judge.as_ref() {
                        PoolJudge::Offline(j) => Some(j.judge(&job.trace)),
                    }
                } => v,
            };
            let m = &shared.metrics;
            m.judge_duration
                .with_label_values(&[kind])
                .observe(started.elapsed().as_secs_f64());
            match verdict {
                Some(v) => {
                    m.judge_requests.with_label_values(&[kind, "ok"]).inc();
                    shared.record(job.stratum, &v);
                    if let (Some(tx), Some(p)) = (ack_tx, job.position) {
                        let _ = tx.send(p);
                    }
                }
                None => skip_shutdown(&shared, &job),
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
    events::trace_skipped(&shared.metrics, s, "shutdown", &job.trace.trace_id);
}
