//! Sources: where traces come from. Kafka (a consumer group) in production; a JSONL file or stdin
//! for the demo and for replays; OTLP/HTTP requests pushed by a service or a Collector.
//!
//! A source feeds an [`Ingest`]: the [`Pipeline`] itself for native traces (one message, one
//! trace), or a [`SpanIngest`] for OTLP formats (one message, many spans of many traces, a trace's
//! spans across messages), which tells the source which messages are accounted for and when.

pub mod config;
mod file;
pub(crate) mod kafka;
mod offsets;
mod otlp;
mod spans;

#[cfg(test)]
pub(crate) use file::read_frame_bounded;
pub(crate) use file::{FileSource, read_line_bounded};
pub(crate) use otlp::OtlpReceiver;
pub use spans::SpanIngest;

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::pipeline::{Disposition, Pipeline, Position};

/// Where messages come from. Every kind has this one shape: what it needs (its config, the ack
/// channel, the budget it shares out) goes into its value when `app` builds it, and `run` feeds
/// `ingest` until the input ends or `stop` fires, storing a message's position only once `ingest`
/// has accounted for it. Returns the number of messages read. A new kind is a value and an impl
/// here, and one arm where `app` builds it.
pub trait Source<I: Ingest> {
    /// Reads until the input ends or `stop` fires, then drains what it must (the Kafka source waits
    /// for the sampled judge's acks and commits).
    fn run(
        self,
        ingest: &mut I,
        stop: &CancellationToken,
    ) -> impl Future<Output = Result<u64, SourceError>>;
}

/// A source that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading the input failed.
    #[error("cannot read {0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The Kafka client could not be created or subscribed.
    #[error("kafka: {0}")]
    Kafka(String),
}

/// What a source feeds, one message at a time. Positions a call accounts for, other than the
/// message it was given, go to `released`, in any order; the source stores them.
pub trait Ingest {
    /// Takes one message; `Done` when it is accounted for already.
    fn message(
        &mut self,
        bytes: &[u8],
        position: Option<Position>,
        released: &mut Vec<Position>,
    ) -> Disposition;
    /// The sampled judge finished the job it was handed with `token`.
    fn ack(&mut self, token: Position, released: &mut Vec<Position>);
    /// Time passed (traces idle too long complete).
    fn tick(&mut self, released: &mut Vec<Position>);
    /// A partition was revoked or assigned anew: whatever was pending there will be redelivered.
    fn forget(&mut self, stream: usize, partition: i32);
    /// The input ended: nothing more will come.
    fn end_of_input(&mut self);
    /// Closes the sampled judge's queue.
    fn close_queue(&mut self);
}

impl Ingest for Pipeline {
    #[inline]
    fn message(
        &mut self,
        bytes: &[u8],
        position: Option<Position>,
        _released: &mut Vec<Position>,
    ) -> Disposition {
        self.ingest(bytes, position)
    }

    fn ack(&mut self, token: Position, released: &mut Vec<Position>) {
        released.push(token);
    }

    fn tick(&mut self, _released: &mut Vec<Position>) {}

    fn forget(&mut self, _stream: usize, _partition: i32) {}

    fn end_of_input(&mut self) {}

    fn close_queue(&mut self) {
        Pipeline::close_queue(self);
    }
}
