//! Canaries: a fixed set of traces with known verdicts, judged on a schedule. When the provider
//! changes the model behind a name, or a prompt edit changes behaviour, the agreement moves before the
//! production numbers are misread.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::LlmJudge;
use crate::trace::Trace;

/// Judges every canary once; returns the share whose verdict agrees with its label (faithfulness at or
/// above `threshold` means faithful), over the canaries the judge could score.
pub async fn agreement(judge: &LlmJudge, canaries: &[Trace], threshold: f64) -> Option<f64> {
    let mut agree = 0usize;
    let mut scored = 0usize;
    for c in canaries {
        let (Some(label), Ok(v)) = (c.label_faithful, judge.judge_fresh(c, true).await) else {
            continue;
        };
        if let Some(f) = v.faithfulness() {
            scored += 1;
            agree += usize::from((f >= threshold) == label);
        }
    }
    (scored > 0).then(|| agree as f64 / scored as f64)
}

/// Runs the canaries every `interval` until `stop`.
pub(crate) async fn run_canaries(
    judge: Arc<LlmJudge>,
    canaries: Vec<Trace>,
    threshold: f64,
    interval: Duration,
    observer: Arc<dyn super::LlmObserver>,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                if let Some(a) = agreement(&judge, &canaries, threshold).await {
                    observer.canary_agreement(a);
                    tracing::info!(agreement = a, canaries = canaries.len(), "canary run");
                }
            }
        }
    }
}
