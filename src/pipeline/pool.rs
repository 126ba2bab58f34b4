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
use crate::dimensions::SkipReason;
use crate::events;
use crate::judge::llm::{Judged, LlmError, LlmJudge};
use crate::judge::{JudgeKind, OfflineJudge};
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

    async fn judge(&self, job: &JudgeJob) -> Result<Judged, LlmError> {
        match self {
            PoolJudge::Offline(j) => Ok(Judged::fresh(j.judge(&job.trace))),
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
            m.observe_judge_duration(
                kind,
                started.elapsed().as_secs_f64(),
                &job.trace.trace_id,
                crate::clock::now_ms(),
            );
            let Some(verdict) = verdict else {
                // Abandoned at the grace deadline: not acked, so redelivered after a restart.
                skip_shutdown(&shared, &job);
                return;
            };
            match verdict {
                Ok(Judged {
                    verdict: v,
                    outcome,
                }) => {
                    m.judge_requests
                        .with_label_values(&[kind, outcome.name()])
                        .inc();
                    shared.record_sampled(
                        job.stratum,
                        &v,
                        &job.offline,
                        job.probability,
                        &job.trace,
                        crate::clock::now_ms(),
                    );
                }
                Err(e) => {
                    m.judge_requests
                        .with_label_values(&[kind, e.kind().name()])
                        .inc();
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

#[cfg(test)]
mod tests {
    //! The drain and the grace period, in process on tokio's paused clock: a judge server that
    //! accepts connections and never answers, so only the grace deadline ends the drain.

    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::trace::Trace;

    fn job(id: &str, offset: i64) -> JudgeJob {
        let trace = Trace {
            trace_id: id.into(),
            timestamp_ms: None,
            query: "When does the museum open?".into(),
            contexts: Vec::new(),
            answer: "It opens at 9.".into(),
            stratum: None,
            metadata: Default::default(),
            label_faithful: None,
            gold: None,
        };
        let offline = OfflineJudge::default().judge(&trace);
        JudgeJob {
            trace,
            stratum: 0,
            offline,
            position: Some(Position {
                stream: 0,
                partition: 0,
                offset,
            }),
            priority: false,
            probability: 1.0,
        }
    }

    /// Two workers and three jobs against a server that never answers (request timeout an hour):
    /// the pool waits for the grace deadline, not longer, then skips all three as `shutdown` and
    /// acks none of them (so a restart reads them again).
    #[tokio::test(start_paused = true)]
    async fn a_hung_judge_is_abandoned_at_the_grace_deadline_and_nothing_is_acked() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = silent.accept().await {
                held.push(conn);
            }
        });
        let config = Config::from_toml_with_env(
            &format!(
                "[judge]\nsampled = \"llm\"\nworkers = 2\n[llm]\nbase_url = \"http://{addr}/v1\"\n\
                 structured_output = \"json_schema\"\nrequest_timeout_ms = 3600000\n\
                 trace_deadline_ms = 3600000\nmax_attempts = 1\n"
            ),
            &HashMap::new(),
        )
        .unwrap();
        let shared = Shared::new(&config);
        let judge = LlmJudge::try_new(&config, &HashMap::new(), shared.metrics.clone()).unwrap();
        let (jobs_tx, jobs_rx) = mpsc::channel(8);
        let (ack_tx, mut ack_rx) = mpsc::unbounded_channel();
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            shared.metrics.judge_queue_depth.inc();
            jobs_tx.send(job(id, i as i64)).await.unwrap();
        }
        let abandon = CancellationToken::new();
        let grace = Duration::from_secs(30);
        let started = tokio::time::Instant::now();
        let pool = tokio::spawn(run_pool(
            PoolJudge::Llm(Arc::new(judge)),
            2,
            jobs_rx,
            Some(ack_tx),
            shared.clone(),
            abandon.clone(),
        ));
        // Shutdown: the source stops (the queue closes) and the grace timer starts, as app does.
        drop(jobs_tx);
        tokio::time::sleep(grace).await;
        abandon.cancel();
        pool.await.unwrap();
        let waited = started.elapsed();
        assert!(
            waited >= grace && waited < grace + Duration::from_secs(1),
            "{waited:?}"
        );
        let skipped = shared
            .metrics
            .traces_skipped
            .with_label_values(&[shared.stratifier.name(0), "shutdown"])
            .get();
        assert_eq!(skipped, 3, "two in flight and one queued, all skipped");
        assert!(ack_rx.try_recv().is_err(), "nothing acked");
        assert_eq!(shared.metrics.judge_queue_depth.get(), 0);
        hold.abort();
    }
}
