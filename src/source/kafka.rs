//! The Kafka source: a consumer group member that never slows to the judge's pace.
//!
//! Offsets: `enable.auto.offset.store=false`. An offset is stored (and then committed by librdkafka's
//! periodic auto-commit) only when its message and all earlier ones of the partition are accounted
//! for ([`OffsetTracker`]). Rebalance protocol, as the callbacks below implement it:
//! - before partitions are revoked, the stored offsets are committed synchronously, so the next owner
//!   starts after what this replica accounted for; the tracker forgets the partitions, and any judge
//!   work still in flight for them will be redelivered to the new owner (at-least-once);
//! - after partitions are assigned, the loop starts tracking them from their first message.
//!
//! The callbacks run synchronously inside `recv()`, so they only count, commit, and hand events over a
//! channel to the loop.
//!
//! With OTLP formats a message holds spans of several traces and a trace's spans may sit in several
//! messages ([`super::SpanIngest`]): a message counts as accounted for only when every trace with
//! spans in it is, so its offset waits for the last of them (their root span, their idle timeout,
//! or the sampled judge). Spans of one trace on different partitions join only within one
//! consumer: keep a trace on one partition (the Collector's `partition_traces_by_id`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, TopicPartitionList};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::offsets::OffsetTracker;
use super::{Ingest, SourceError};
use crate::config::KafkaConfig;
use crate::events::LogLimiter;
use crate::judge::llm::Budget;
use crate::metrics::Metrics;
use crate::pipeline::{Disposition, Position};

static ERROR_LOG: LogLimiter = LogLimiter::new();

/// A partition change the loop must apply to its tracker.
#[derive(Debug)]
enum Assignment {
    Revoked(Vec<(String, i32)>),
    Assigned(Vec<(String, i32)>),
}

/// Client context: counts, commits on revoke, forwards assignment changes.
struct SourceContext {
    metrics: Arc<Metrics>,
    assignment_tx: mpsc::UnboundedSender<Assignment>,
    topics: Vec<String>,
    budget: Option<Arc<Budget>>,
}

impl SourceContext {
    /// The judge budget is for the fleet: this replica spends the share of partitions it holds.
    fn update_share(&self, consumer: &BaseConsumer<Self>, held: usize) {
        let mut total = 0usize;
        for topic in &self.topics {
            match consumer.fetch_metadata(Some(topic), Duration::from_secs(2)) {
                Ok(md) => {
                    total += md
                        .topics()
                        .iter()
                        .map(|t| t.partitions().len())
                        .sum::<usize>()
                }
                Err(e) => {
                    tracing::warn!(error = %e, topic, "cannot read partition count; keeping budget share");
                    return;
                }
            }
        }
        if total == 0 {
            return;
        }
        let share = held as f64 / total as f64;
        self.metrics.budget_share.set(share);
        if let Some(b) = &self.budget {
            b.set_share(share);
        }
        tracing::info!(held, total, share, "judge budget share");
    }
}

fn partitions(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

impl ClientContext for SourceContext {
    fn stats(&self, stats: Statistics) {
        let up = stats
            .brokers
            .values()
            .filter(|b| b.nodeid >= 0 && b.state == "UP")
            .count();
        self.metrics.kafka_brokers_up.set(up as i64);
        for (topic, t) in &stats.topics {
            for (id, p) in &t.partitions {
                if *id >= 0 && p.consumer_lag >= 0 && p.fetch_state == "active" {
                    self.metrics
                        .kafka_lag
                        .with_label_values(&[topic.as_str(), &id.to_string()])
                        .set(p.consumer_lag);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let kind = match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::BrokerTransportFailure) => "transport",
            Some(RDKafkaErrorCode::AllBrokersDown) => "all_brokers_down",
            Some(RDKafkaErrorCode::Resolve) => "resolve",
            Some(RDKafkaErrorCode::Authentication) => "authentication",
            _ => "other",
        };
        self.metrics.kafka_errors.with_label_values(&[kind]).inc();
        if let Some(suppressed) = ERROR_LOG.allow() {
            tracing::warn!(kind, error = %error, reason, suppressed, "kafka client error");
        }
    }
}

impl ConsumerContext for SourceContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = partitions(tpl);
            tracing::info!(partitions = ?revoked, "partitions revoked: committing stored offsets");
            match consumer.commit_consumer_state(CommitMode::Sync) {
                Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {}
                Err(e) => tracing::warn!(error = %e, "commit on revoke failed"),
            }
            for (topic, partition) in &revoked {
                let _ = self
                    .metrics
                    .kafka_lag
                    .remove_label_values(&[topic.as_str(), &partition.to_string()]);
            }
            let _ = self.assignment_tx.send(Assignment::Revoked(revoked));
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let assigned = partitions(tpl);
            tracing::info!(partitions = ?assigned, "partitions assigned");
            let _ = self.assignment_tx.send(Assignment::Assigned(assigned));
        }
        let held = consumer.assignment().map(|a| a.count()).unwrap_or(0);
        self.metrics.kafka_partitions.set(held as i64);
        self.update_share(consumer, held);
    }

    fn commit_callback(&self, result: KafkaResult<()>, _offsets: &TopicPartitionList) {
        let outcome = match result {
            Ok(()) => "ok",
            Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => "nothing",
            Err(_) => "error",
        };
        self.metrics
            .kafka_commits
            .with_label_values(&[outcome])
            .inc();
    }
}

/// The librdkafka configuration ragwatch uses: the user's properties, with the offset discipline
/// ragwatch depends on forced on top.
pub fn client_config(config: &KafkaConfig, env: &HashMap<String, String>) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("auto.offset.reset", "earliest");
    // librdkafka prefetches up to 64 MiB by default, which would dominate a sidecar's memory
    // whenever it lags; 16 MiB still holds over half a second of traces at full speed.
    c.set("queued.max.messages.kbytes", "16384");
    for (k, v) in &config.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.offset.store", "false")
        .set("enable.auto.commit", "true")
        .set(
            "auto.commit.interval.ms",
            config.commit_interval_ms.to_string(),
        )
        .set(
            "statistics.interval.ms",
            config.stats_interval_ms.to_string(),
        );
    if let Some(pw) = env.get(&config.sasl_password_env) {
        c.set("sasl.password", pw);
    }
    c
}

/// Runs the consumer until `stop`; then stops consuming, waits for the sampled judge's acks (the
/// caller bounds that by cancelling the judge pool at the grace deadline), stores and commits.
pub async fn run_kafka_source<I: Ingest>(
    config: &KafkaConfig,
    env: &HashMap<String, String>,
    pipeline: &mut I,
    metrics: Arc<Metrics>,
    mut ack_rx: mpsc::UnboundedReceiver<Position>,
    budget: Option<Arc<Budget>>,
    stop: &CancellationToken,
) -> Result<u64, SourceError> {
    let (assignment_tx, mut assignment_rx) = mpsc::unbounded_channel();
    let context = SourceContext {
        metrics: Arc::clone(&metrics),
        assignment_tx,
        topics: config.topics.clone(),
        budget,
    };
    let consumer: StreamConsumer<SourceContext> = client_config(config, env)
        .create_with_context(context)
        .map_err(|e| SourceError::Kafka(e.to_string()))?;
    let topics: Vec<&str> = config.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|e| SourceError::Kafka(e.to_string()))?;
    tracing::info!(brokers = %config.brokers, topics = ?topics, group = %config.group_id, "kafka source started");

    let topic_index = |name: &str| config.topics.iter().position(|t| t == name).unwrap_or(0);
    let mut tracker = OffsetTracker::new();
    let store = |tracker_topic: usize, partition: i32, upto: i64| {
        let topic = &config.topics[tracker_topic];
        if let Err(e) = consumer.store_offset(topic, partition, upto) {
            tracing::debug!(error = %e, topic, partition, "store_offset failed (partition revoked?)");
        }
    };
    let mut received = 0u64;
    let mut last_message = std::time::Instant::now();
    let mut idle_tick = tokio::time::interval(std::time::Duration::from_secs(1));
    // Span assembly's idle timeouts are checked this often (a no-op for native traces).
    let mut assembly_tick = tokio::time::interval(std::time::Duration::from_millis(200));
    assembly_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut released: Vec<Position> = Vec::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(change) = assignment_rx.recv() => match change {
                Assignment::Revoked(list) => {
                    for (t, p) in list {
                        tracker.forget(topic_index(&t), p);
                        pipeline.forget(topic_index(&t), p);
                    }
                }
                // A fresh assignment starts from the committed offset: no state carries over.
                Assignment::Assigned(list) => {
                    for (t, p) in list {
                        tracker.forget(topic_index(&t), p);
                        pipeline.forget(topic_index(&t), p);
                    }
                }
            },
            Some(token) = ack_rx.recv() => {
                pipeline.ack(token, &mut released);
                for pos in released.drain(..) {
                    if let Some(upto) = tracker.accounted(pos.topic, pos.partition, pos.offset) {
                        store(pos.topic, pos.partition, upto);
                    }
                }
            }
            _ = idle_tick.tick() => {
                metrics.source_idle_seconds.set(last_message.elapsed().as_secs_f64());
            }
            _ = assembly_tick.tick() => {
                pipeline.tick(&mut released);
                for pos in released.drain(..) {
                    if let Some(upto) = tracker.accounted(pos.topic, pos.partition, pos.offset) {
                        store(pos.topic, pos.partition, upto);
                    }
                }
            }
            msg = consumer.recv() => match msg {
                Ok(m) => {
                    received += 1;
                    last_message = std::time::Instant::now();
                    let pos = Position { topic: topic_index(m.topic()), partition: m.partition(), offset: m.offset() };
                    let done = pipeline.message(m.payload().unwrap_or_default(), Some(pos), &mut released) == Disposition::Done;
                    if let Some(upto) = tracker.received(pos.topic, pos.partition, pos.offset, done) {
                        store(pos.topic, pos.partition, upto);
                    }
                    // Traces completed by this message may account for earlier ones.
                    for pos in released.drain(..) {
                        if let Some(upto) = tracker.accounted(pos.topic, pos.partition, pos.offset) {
                            store(pos.topic, pos.partition, upto);
                        }
                    }
                }
                Err(e) => {
                    metrics.kafka_errors.with_label_values(&["consume"]).inc();
                    if let Some(suppressed) = ERROR_LOG.allow() {
                        tracing::warn!(error = %e, suppressed, "kafka receive error");
                    }
                }
            },
        }
    }
    // Stop consuming: close the judge queue, then take acks until the pool is done or abandoned.
    pipeline.close_queue();
    tracing::info!(pending = tracker.pending(), "draining sampled judge work");
    while let Some(token) = ack_rx.recv().await {
        pipeline.ack(token, &mut released);
        for pos in released.drain(..) {
            if let Some(upto) = tracker.accounted(pos.topic, pos.partition, pos.offset) {
                store(pos.topic, pos.partition, upto);
            }
        }
    }
    match consumer.commit_consumer_state(CommitMode::Sync) {
        Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => {
            tracing::info!(
                received,
                unaccounted = tracker.pending(),
                "offsets committed"
            );
        }
        Err(e) => tracing::warn!(error = %e, "final commit failed"),
    }
    Ok(received)
}
