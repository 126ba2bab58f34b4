//! The source's families: the messages it delivers and how long it has been silent.

use prometheus::{Gauge, IntCounter, Registry};

use super::family::{families, single};

families! {
    /// What the source (Kafka, a file, the OTLP receivers) reports.
    pub(crate) struct SourceMetrics(r: &Registry) {
        /// Messages the source delivered, accounted or not yet.
        pub(crate) messages: IntCounter = single(
            r,
            IntCounter::new(
                "ragwatch_source_messages_total",
                "Messages delivered by the source.",
            ),
        ),
        /// Seconds since the source last delivered a message.
        pub(crate) idle_seconds: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_source_idle_seconds",
                "Seconds since the source last delivered a message.",
            ),
        ),
    }
}
