//! Sources: where traces come from. Kafka (a consumer group) in production; a JSONL file or stdin
//! for the demo and for replays.

mod file;
mod kafka;
mod offsets;

pub use file::{read_line_bounded, run_file_source};
pub use kafka::{client_config, run_kafka_source};
pub use offsets::OffsetTracker;

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
