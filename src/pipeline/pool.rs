//! The sampled-judge pool: takes jobs off the bounded queue and runs at most `workers` of them at a
//! time. Each finished job reports its source position on the ack channel so its offset can move on.
//!
//! Shutdown: when the queue closes (the source stopped) the pool finishes what is queued; when the
//! grace period runs out (`abandon` cancelled) the remaining jobs are counted as skipped with reason
//! `shutdown` and not acked, so their offsets stay uncommitted and they are redelivered.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{JudgeJob, Position};
use crate::clock::Instant;
use crate::dimensions::JudgeKind;
use crate::dimensions::SkipReason;
use crate::events;
use crate::judge::OfflineJudge;
use crate::judge::llm::{Judged, LlmError, LlmJudge};
use crate::recorder::Shared;

/// The judge the pool runs.
#[derive(Debug, Clone)]
pub(crate) enum PoolJudge {
    /// The offline judge, run again off the ingest path (exercises the queue without a network).
    Offline(OfflineJudge),
    /// The LLM judge.
    Llm(Arc<LlmJudge>),
    /// The classifier judge.
    #[cfg(feature = "classifier")]
    Classifier(Arc<crate::judge::classifier::Classifier>),
}

impl PoolJudge {
    fn kind(&self) -> JudgeKind {
        match self {
            PoolJudge::Offline(_) => JudgeKind::Offline,
            PoolJudge::Llm(_) => JudgeKind::Llm,
            #[cfg(feature = "classifier")]
            PoolJudge::Classifier(_) => JudgeKind::Classifier,
        }
    }

    async fn judge(&self, job: &JudgeJob) -> Result<Judged, LlmError> {
        match self {
            PoolJudge::Offline(j) => Ok(Judged::fresh(j.judge(&job.trace))),
            PoolJudge::Llm(j) => j.judge(&job.trace, job.priority).await,
            #[cfg(feature = "classifier")]
            PoolJudge::Classifier(j) => j
                .judge(&job.trace)
                .await
                .map(Judged::fresh)
                .map_err(|e| e.into_llm()),
        }
    }
}

/// Runs the pool until the queue is closed and drained, or `abandon` is cancelled.
pub(crate) async fn run_pool(
    judge: PoolJudge,
    workers: usize,
    jobs_rx: mpsc::Receiver<JudgeJob>,
    ack_tx: Option<mpsc::UnboundedSender<Position>>,
    shared: Shared,
    abandon: CancellationToken,
) {
    let judge = Arc::new(judge);
    let work = {
        let (shared, abandon) = (shared.clone(), abandon.clone());
        move |job: JudgeJob| {
            let (judge, shared, ack_tx, abandon) = (
                Arc::clone(&judge),
                shared.clone(),
                ack_tx.clone(),
                abandon.clone(),
            );
            async move {
                let started = Instant::now();
                let kind = judge.kind().name();
                let verdict = tokio::select! {
                    _ = abandon.cancelled() => None,
                    v = judge.judge(&job) => Some(v),
                };
                shared.metrics.observe_judge_duration(
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
                finish(&judge, &shared, &job, verdict);
                // Judged or skipped with a reason: either way the trace is accounted for.
                if let (Some(tx), Some(p)) = (ack_tx, job.position) {
                    let _ = tx.send(p);
                }
            }
        }
    };
    let taken = || shared.metrics.sample.judge_queue_depth.dec();
    let left = |job: &JudgeJob| skip_shutdown(&shared, job);
    serve_queue(workers, jobs_rx, &abandon, taken, work, left).await;
}

/// Records what the sampled judge made of `job`: its verdict (and the combined estimate's pair),
/// or the failure, counted by kind, and the trace skipped with its reason.
fn finish(judge: &PoolJudge, shared: &Shared, job: &JudgeJob, verdict: Result<Judged, LlmError>) {
    let m = &shared.metrics;
    let kind = judge.kind().name();
    match verdict {
        Ok(Judged {
            verdict: v,
            outcome,
        }) => {
            m.judge
                .requests
                .with_label_values(&[kind, outcome.name()])
                .inc();
            let now = crate::clock::now_ms();
            shared.record_sampled(
                job.stratum,
                &v,
                &job.offline,
                job.probability,
                &job.trace,
                now,
            );
            shared.record_pair(job.stratum, &v, job.prediction(), job.probability, now);
        }
        Err(e) => {
            m.judge
                .requests
                .with_label_values(&[kind, e.kind().name()])
                .inc();
            let reason = match e {
                LlmError::Budget if job.priority => SkipReason::BudgetReserve,
                LlmError::Budget => SkipReason::Budget,
                _ => SkipReason::JudgeError,
            };
            // A budget refusal is a skip, not a verdict: nothing to show on the trace.
            if matches!(judge, PoolJudge::Llm(_)) && !matches!(e, LlmError::Budget) {
                shared.export_failed(job.stratum, &job.trace, e.kind().name());
            }
            let stratum = shared.stratifier.name(job.stratum);
            events::trace_skipped(&shared.metrics, stratum, reason, &job.trace.trace_id);
            tracing::debug!(error = %e, trace_id = %job.trace.trace_id, "judge failed");
        }
    }
}

/// Runs `work` on each job of `jobs_rx`, at most `workers` at a time, until the queue is closed
/// and every job has finished, or `abandon` is cancelled. `taken` runs as each job leaves the
/// queue; a job still queued when `abandon` fires goes to `left` (jobs in flight see `abandon`
/// themselves).
pub(super) async fn serve_queue<J, W, F>(
    workers: usize,
    mut jobs_rx: mpsc::Receiver<J>,
    abandon: &CancellationToken,
    taken: impl Fn(),
    work: W,
    left: impl Fn(&J),
) where
    J: Send + 'static,
    W: Fn(J) -> F,
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(workers));
    let tracker = TaskTracker::new();
    loop {
        let job = tokio::select! {
            biased;
            _ = abandon.cancelled() => break,
            job = jobs_rx.recv() => match job { Some(j) => j, None => break },
        };
        taken();
        let permit = tokio::select! {
            biased;
            _ = abandon.cancelled() => {
                left(&job);
                break;
            }
            p = Arc::clone(&permits).acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let running = work(job);
        tracker.spawn(async move {
            let _permit = permit;
            running.await;
        });
    }
    // Whatever is still queued after an abandon is skipped, not lost silently.
    jobs_rx.close();
    while let Ok(job) = jobs_rx.try_recv() {
        taken();
        left(&job);
    }
    tracker.close();
    tracker.wait().await;
}

/// Cancels `abandon` once `grace` has passed since `stop` fired: the bound on the drain of
/// [`run_pool`]. Abort the handle when the pool has ended before.
pub(crate) fn abandon_after_grace(
    stop: CancellationToken,
    grace: Duration,
    abandon: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        stop.cancelled().await;
        tokio::time::sleep(grace).await;
        abandon.cancel();
    })
}

/// Counts `job`'s trace as skipped at shutdown.
pub(super) fn skip_shutdown(shared: &Shared, job: &JudgeJob) {
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
    //! The drain and the grace period, in process on tokio's paused clock, against judge servers
    //! on loopback in the test's runtime: one that answers after a delay, one that accepts
    //! connections and never answers (so only the grace deadline ends the drain).

    use std::collections::HashMap;

    use super::*;
    use crate::judge::llm::loopback::{Loopback, Reply};
    use crate::recorder::RecorderSetup;
    use crate::section::fields::section;
    use crate::trace::Trace;

    fn job(offset: i64, priority: bool) -> JudgeJob {
        // A different answer each, so no verdict comes from the cache.
        let trace = Trace {
            trace_id: format!("t{offset}"),
            ..Trace::of(
                "When does the museum open?",
                &[],
                &format!("It opens at {offset}."),
            )
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
            priority,
            probability: 1.0,
            prediction: None,
        }
    }

    /// A pool of `config`'s LLM judge with `jobs` queued, shut down as `app` does: the source
    /// stops (the queue closes) and the grace timer starts, both at once.
    struct Drain {
        shared: Shared,
        acks: mpsc::UnboundedReceiver<Position>,
        pool: tokio::task::JoinHandle<()>,
        timer: tokio::task::JoinHandle<()>,
        started: Instant,
    }

    impl Drain {
        async fn start(toml: &str, jobs: Vec<JudgeJob>, grace: Duration) -> Drain {
            let setup = RecorderSetup::from_toml(toml);
            let workers = setup.judge.workers;
            let shared = Shared::new(setup);
            let judge = LlmJudge::try_new(
                crate::judge::llm::LlmSetup {
                    llm: &section(toml, "llm"),
                    budget: &section(toml, "budget"),
                    redact: &section(toml, "redact"),
                    records_kafka: None,
                },
                &HashMap::new(),
                shared.metrics.clone(),
            )
            .unwrap();
            let (jobs_tx, jobs_rx) = mpsc::channel(16);
            let (ack_tx, acks) = mpsc::unbounded_channel();
            for j in jobs {
                shared.metrics.sample.judge_queue_depth.inc();
                jobs_tx.send(j).await.unwrap();
            }
            let (stop, abandon) = (CancellationToken::new(), CancellationToken::new());
            let started = Instant::now();
            let pool = tokio::spawn(run_pool(
                PoolJudge::Llm(Arc::new(judge)),
                workers,
                jobs_rx,
                Some(ack_tx),
                shared.clone(),
                abandon.clone(),
            ));
            let timer = abandon_after_grace(stop.clone(), grace, abandon);
            drop(jobs_tx);
            stop.cancel();
            Drain {
                shared,
                acks,
                pool,
                timer,
                started,
            }
        }

        /// Waits for the pool to end; returns how long the drain took and the offsets acked.
        async fn end(&mut self) -> (Duration, Vec<i64>) {
            (&mut self.pool).await.unwrap();
            let took = self.started.elapsed();
            self.timer.abort();
            let mut acked = Vec::new();
            while let Ok(p) = self.acks.try_recv() {
                acked.push(p.offset);
            }
            acked.sort_unstable();
            assert_eq!(self.shared.metrics.sample.judge_queue_depth.get(), 0);
            (took, acked)
        }

        fn skipped(&self, reason: &str) -> u64 {
            let m = &self.shared.metrics;
            let s = self.shared.stratifier.name(0);
            m.sample
                .traces_skipped
                .with_label_values(&[s, reason])
                .get()
        }

        fn judged(&self) -> u64 {
            let m = &self.shared.metrics;
            let s = self.shared.stratifier.name(0);
            m.verdicts
                .traces_judged
                .with_label_values(&[s, "llm"])
                .get()
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// One worker and three jobs of three calls each, every call answered in 2 s (6 s a job),
    /// shut down with `grace`: the drain's length and the offsets acked.
    async fn three_slow_jobs(grace: Duration) -> (Loopback, Drain, Duration, Vec<i64>) {
        let server = Loopback::start(Reply::Verdict { delay: secs(2) }).await;
        let toml = format!(
            "[judge]\nsampled = \"llm\"\nworkers = 1\n{}",
            server.llm_toml()
        );
        let jobs = (0..3).map(|i| job(i, false)).collect();
        let mut drain = Drain::start(&toml, jobs, grace).await;
        let (took, acked) = drain.end().await;
        (server, drain, took, acked)
    }

    /// With a 30-s grace the queue drains in 18 s, and the pool ends then, not at the grace.
    #[tokio::test(start_paused = true)]
    async fn a_shutdown_drains_queued_work_within_the_grace_and_waits_no_longer() {
        let (server, drain, took, acked) = three_slow_jobs(secs(30)).await;
        assert_eq!(took, secs(18));
        assert_eq!(acked, [0, 1, 2]);
        assert_eq!((drain.judged(), drain.skipped("shutdown")), (3, 0));
        assert_eq!(server.requests(), 9);
    }

    /// With a 10-s grace the first job is judged at 6 s; at 10 s the second is cut off mid-call
    /// and the third never started. Both are counted as skipped `shutdown` and not acked (a
    /// restart reads them again), and the drain takes the grace, not a moment more.
    #[tokio::test(start_paused = true)]
    async fn work_still_running_at_the_grace_is_counted_and_not_acked() {
        let (_server, drain, took, acked) = three_slow_jobs(secs(10)).await;
        assert_eq!(took, secs(10));
        assert_eq!(acked, [0]);
        assert_eq!((drain.judged(), drain.skipped("shutdown")), (1, 2));
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
        let toml = format!(
            "[judge]\nsampled = \"llm\"\nworkers = 2\n[llm]\nbase_url = \"http://{addr}/v1\"\n\
             structured_output = \"json_schema\"\nrequest_timeout_ms = 3600000\n\
             trace_deadline_ms = 3600000\nmax_attempts = 1\n"
        );
        let jobs = (0..3).map(|i| job(i, false)).collect();
        let mut drain = Drain::start(&toml, jobs, secs(30)).await;
        let (took, acked) = drain.end().await;
        assert_eq!(took, secs(30));
        assert_eq!(
            drain.skipped("shutdown"),
            3,
            "two in flight and one queued, all skipped"
        );
        assert!(acked.is_empty(), "nothing acked");
        hold.abort();
    }

    /// A budget that covers no call: every job is refused before anything is sent, counted by
    /// reason (a stratum's guaranteed sample as `budget_reserve`) and as a `budget_exhausted`
    /// judge outcome, and acked: a refused trace is accounted for.
    #[tokio::test(start_paused = true)]
    async fn budget_refusals_are_counted_by_reason_and_nothing_is_sent() {
        let server = Loopback::start(Reply::Verdict { delay: secs(2) }).await;
        let toml = format!(
            "[judge]\nsampled = \"llm\"\n{}[budget]\ntokens_per_minute = 10\n",
            server.llm_toml()
        );
        let jobs = (0..5).map(|i| job(i, i >= 3)).collect();
        let mut drain = Drain::start(&toml, jobs, secs(30)).await;
        let (took, acked) = drain.end().await;
        assert_eq!(took, Duration::ZERO);
        assert_eq!(acked, [0, 1, 2, 3, 4]);
        assert_eq!(
            (drain.skipped("budget"), drain.skipped("budget_reserve")),
            (3, 2)
        );
        let refused = drain
            .shared
            .metrics
            .judge
            .requests
            .with_label_values(&["llm", "budget_exhausted"])
            .get();
        assert_eq!(refused, 5);
        assert_eq!((server.requests(), drain.judged()), (0, 0));
    }
}
