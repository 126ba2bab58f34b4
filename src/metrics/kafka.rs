//! The Kafka consumer's families: its lag, errors and commits, the partitions it holds and its
//! group shares, the brokers it sees, its session timeout.

use prometheus::{Gauge, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::family::{counter, families, int_gauge, single};

families! {
    /// What the Kafka consumer reports, from librdkafka's statistics and callbacks.
    pub(crate) struct KafkaMetrics(r: &Registry) {
        /// Consumer lag by topic and partition, from librdkafka statistics.
        pub(crate) lag: IntGaugeVec = int_gauge(
            r,
            "ragwatch_kafka_consumer_lag_messages",
            "Consumer lag per assigned partition.",
            &["topic", "partition"],
        ),
        /// Kafka client errors by kind.
        pub(crate) errors: IntCounterVec = counter(
            r,
            "ragwatch_kafka_errors_total",
            "Kafka client errors, by kind.",
            &["kind"],
        ),
        /// Offset commits by outcome.
        pub(crate) commits: IntCounterVec = counter(
            r,
            "ragwatch_kafka_commits_total",
            "Offset commits, by outcome.",
            &["outcome"],
        ),
        /// Partitions this replica holds.
        pub(crate) partitions: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_kafka_assigned_partitions",
                "Partitions this replica holds.",
            ),
        ),
        /// Brokers librdkafka sees as up.
        pub(crate) brokers_up: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_kafka_brokers_up",
                "Brokers librdkafka reports as UP.",
            ),
        ),
        /// Seconds since this replica's partition assignment last changed (since start before the
        /// first).
        pub(crate) assignment_age: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_kafka_assignment_age_seconds",
                "Seconds since this replica's partition assignment last changed (since start before the first).",
            ),
        ),
        /// 1 while this replica holds no partition though its topics have some (a spare replica,
        /// or one the group leaves out: the fleet's metrics together tell which).
        pub(crate) without_partitions: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_kafka_without_partitions",
                "1 while this replica holds no partition though its subscribed topics have some.",
            ),
        ),
        /// Partitions of the subscribed topics: what the group shares.
        pub(crate) topic_partitions: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_kafka_topic_partitions",
                "Partitions of the subscribed topics, shared by the consumer group.",
            ),
        ),
        /// The consumer's session timeout: how long the group waits for a silent member.
        pub(crate) session_timeout: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_kafka_session_timeout_seconds",
                "The consumer group session timeout: how long the group waits for a silent member.",
            ),
        ),
    }
}
