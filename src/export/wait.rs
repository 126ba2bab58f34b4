//! Verdict events waiting for their target to store the judged span.
//!
//! A service's spans reach a trace view after its SDK's batch delay (5 s by default in the
//! OpenTelemetry SDKs) and the view's ingest, and ragwatch often judges them sooner. Phoenix refuses
//! an annotation on a span it has not stored; such an event is held here and sent again, with the
//! next batch when its re-send is due, until the span is there or `export.phoenix.span_wait_ms`
//! (from the first refusal) has passed. The events held are bounded by
//! `export.phoenix.span_wait_capacity`; the target's loop never waits on them, so the other events
//! go out as they come.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::VerdictEvent;
use crate::clock::Instant;

/// The wait before a held event is first sent again; it doubles up to [`RECHECK_MAX`].
pub(super) const RECHECK_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two sends of a held event.
pub(super) const RECHECK_MAX: Duration = Duration::from_secs(2);

/// One held event.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) event: Arc<VerdictEvent>,
    deadline: Instant,
    recheck: Duration,
}

/// What became of an event whose span the target did not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Held, to be sent again.
    Waiting,
    /// Not held: as many events as the capacity already wait.
    Full,
    /// Not held: its deadline has passed.
    Expired,
}

/// The held events, by when each is due to be sent again (then by arrival).
#[derive(Debug)]
pub(super) struct SpanWait {
    due: BTreeMap<(Instant, u64), Waiting>,
    next_seq: u64,
    wait: Duration,
    capacity: usize,
}

impl SpanWait {
    /// Holds events up to `wait` after their first refusal, `capacity` of them at most.
    pub(super) fn new(wait: Duration, capacity: usize) -> Self {
        SpanWait {
            due: BTreeMap::new(),
            next_seq: 0,
            wait,
            capacity,
        }
    }

    /// How many events are held.
    pub(super) fn len(&self) -> usize {
        self.due.len()
    }

    /// When the earliest held event is due to be sent again.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.keys().next().map(|k| k.0)
    }

    /// An event sent for the first time whose span the target did not know at `now`.
    pub(super) fn hold(&mut self, event: Arc<VerdictEvent>, now: Instant) -> Held {
        if self.due.len() >= self.capacity {
            return Held::Full;
        }
        if self.wait.is_zero() {
            return Held::Expired;
        }
        let w = Waiting {
            event,
            deadline: now + self.wait,
            recheck: RECHECK_FIRST,
        };
        self.schedule(w, now);
        Held::Waiting
    }

    /// A held event sent again whose span the target still did not know at `now`: held again, or
    /// expired once its deadline has passed. (It left its place when it was taken, so it always
    /// has one to come back to.)
    pub(super) fn again(&mut self, mut w: Waiting, now: Instant) -> Held {
        if now >= w.deadline {
            return Held::Expired;
        }
        w.recheck = (w.recheck * 2).min(RECHECK_MAX);
        self.schedule(w, now);
        Held::Waiting
    }

    /// Up to `max` held events due to be sent again at `now`, the earliest first.
    pub(super) fn take_due(&mut self, now: Instant, max: usize) -> Vec<Waiting> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(entry) = self.due.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            out.push(entry.remove());
        }
        out
    }

    /// The last send of an event falls on its deadline.
    fn schedule(&mut self, w: Waiting, now: Instant) {
        let at = (now + w.recheck).min(w.deadline);
        self.due.insert((at, self.next_seq), w);
        self.next_seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimensions::{JudgeKind, Quality};
    use crate::export::VerdictLabel;

    fn event(span: u8) -> Arc<VerdictEvent> {
        Arc::new(VerdictEvent {
            trace_id: [1; 16],
            span_id: [span; 8],
            ragwatch_trace_id: "t".into(),
            metric: Quality::Faithfulness,
            judge: JudgeKind::Offline,
            score: Some(0.5),
            label: VerdictLabel::Failed,
            explanation: None,
            error_type: None,
            judge_model: "m".into(),
            prompt_version: None,
            stratum: "default".into(),
            variant: None,
            response_id: None,
            time_unix_nano: 0,
        })
    }

    /// A held event is due after half a second, then after waits doubling to 2 s, the last send
    /// on its deadline, and it expires when refused then.
    #[test]
    fn a_held_event_is_sent_again_until_its_deadline_then_expires() {
        let t0 = Instant::now();
        let mut w = SpanWait::new(Duration::from_secs(5), 10);
        assert_eq!(w.hold(event(1), t0), Held::Waiting);
        let mut sends = Vec::new();
        let end = loop {
            let now = w.next_due().unwrap();
            let mut due = w.take_due(now, 10);
            assert_eq!(due.len(), 1);
            sends.push((now - t0).as_millis());
            if w.again(due.pop().unwrap(), now) == Held::Expired {
                break now;
            }
        };
        assert_eq!(sends, [500, 1500, 3500, 5000]);
        assert_eq!(end - t0, Duration::from_secs(5));
        assert_eq!(w.len(), 0);
    }

    /// Nothing is due before its time; what is due comes earliest first, `max` at a time; a full
    /// set refuses more (an event taken out and refused again still finds its place).
    #[test]
    fn the_capacity_is_kept_and_due_events_come_earliest_first() {
        let t0 = Instant::now();
        let mut w = SpanWait::new(Duration::from_secs(30), 3);
        for (i, span) in [1, 2, 3].into_iter().enumerate() {
            let at = t0 + Duration::from_millis(10 * i as u64);
            assert_eq!(w.hold(event(span), at), Held::Waiting);
        }
        assert_eq!(w.hold(event(4), t0), Held::Full);
        assert!(w.take_due(t0, 10).is_empty());
        let due = w.take_due(t0 + Duration::from_secs(1), 2);
        let spans: Vec<u8> = due.iter().map(|d| d.event.span_id[0]).collect();
        assert_eq!(spans, [1, 2]);
        assert_eq!(w.len(), 1);
        for d in due {
            assert_eq!(w.again(d, t0 + Duration::from_secs(1)), Held::Waiting);
        }
        assert_eq!(w.len(), 3);
        assert_eq!(w.hold(event(5), t0), Held::Full);
    }

    /// With no wait, an event whose span is not stored is not held.
    #[test]
    fn no_wait_holds_nothing() {
        let mut w = SpanWait::new(Duration::ZERO, 3);
        assert_eq!(w.hold(event(1), Instant::now()), Held::Expired);
        assert_eq!(w.len(), 0);
    }
}
