//! The hand-off between the OTLP handlers (HTTP and gRPC) and the one task that owns span
//! assembly: a bounded queue of decoded requests, each with the channel its answer comes back on.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest,
};
use tokio::sync::{mpsc, oneshot};

use super::budget::{OverBudget, Reservation, decoded_size};
use crate::metrics::otlp::{Outcome, RequestCount};
use crate::trace::otlp::AddStats;

/// A decoded request on its way to span assembly, where to say what became of it, the bytes of
/// the memory budget it holds until its spans are taken, and its count: a request taken is counted
/// `ok` or `partial` when its spans are, whether or not its client waits for the answer.
pub(super) struct Job {
    pub(super) request: ExportTraceServiceRequest,
    pub(super) reply: oneshot::Sender<AddStats>,
    pub(super) reservation: Reservation,
    pub(super) count: RequestCount,
}

impl Job {
    /// Counts the request taken, with what became of its spans, and tells its handler (which may
    /// have gone: its client hung up).
    pub(super) fn answer(reply: oneshot::Sender<AddStats>, count: &RequestCount, stats: AddStats) {
        count.end(if stats.dropped_total() > 0 {
            Outcome::Partial
        } else {
            Outcome::Ok
        });
        let _ = reply.send(stats);
    }
}

/// Why a decoded request was not taken into span assembly.
pub(super) enum NotTaken {
    /// The queue is full: the exporter should retry later.
    Full,
    /// The memory budget cannot cover the decoded request: the exporter should retry later.
    OverBudget,
    /// The receiver is shutting down.
    Closed,
}

/// Hands a decoded request to the task that owns span assembly and waits for what became of its
/// spans. The request's `reservation` (its read and decompressed bytes, given back as their buffers
/// are dropped) becomes the decoded request's size, held until the spans are taken. Never waits for
/// queue room or memory: a full queue or budget is an answer the exporter retries on.
pub(super) async fn submit(
    jobs_tx: &mpsc::Sender<Job>,
    request: ExportTraceServiceRequest,
    mut reservation: Reservation,
    count: &RequestCount,
) -> Result<AddStats, NotTaken> {
    reservation
        .resize(decoded_size(&request))
        .map_err(|OverBudget| NotTaken::OverBudget)?;
    let (reply, answer) = oneshot::channel();
    match jobs_tx.try_send(Job {
        request,
        reply,
        reservation,
        count: count.clone(),
    }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => return Err(NotTaken::Full),
        Err(mpsc::error::TrySendError::Closed(_)) => return Err(NotTaken::Closed),
    }
    answer.await.map_err(|_| NotTaken::Closed)
}

/// The `partialSuccess` of an answer: the spans not kept and why; `None` when all were kept.
pub(super) fn partial_success(stats: &AddStats) -> Option<ExportTracePartialSuccess> {
    let rejected = stats.dropped_total();
    (rejected > 0).then(|| {
        let [invalid, late, too_many] = stats.dropped;
        ExportTracePartialSuccess {
            rejected_spans: rejected as i64,
            error_message: format!(
                "{rejected} of {} spans not kept: {invalid} with invalid ids, {late} of traces \
                 already complete, {too_many} over their trace's span limit",
                stats.spans
            ),
        }
    })
}
