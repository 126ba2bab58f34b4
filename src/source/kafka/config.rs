//! The Kafka consumer group's settings and the librdkafka settings every Kafka client shares.

use std::collections::BTreeMap;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// Kafka consumer group settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma separated.
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// Topics to subscribe to.
    #[serde(default = "default_topics")]
    pub topics: Vec<String>,
    /// Consumer group id; replicas with the same id share the partitions.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// How often stored offsets are committed.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// How often librdkafka reports statistics (consumer lag per partition).
    #[serde(default = "default_stats_interval_ms")]
    pub stats_interval_ms: u64,
    /// Static group membership (KIP-345): this replica's stable name in the group, so a restarted
    /// process takes its partitions back at once, without a rebalance, if it returns within
    /// `session_timeout_ms`. Absent: `$POD_NAME`, else `$HOSTNAME`, when set; empty: dynamic
    /// membership. Two live processes must never share one (the broker fences the older).
    #[serde(default)]
    pub group_instance_id: Option<String>,
    /// How long the group waits for a silent member before moving its partitions to the others:
    /// the longest a dead replica's partitions go unread, and how long a restart may take without
    /// a rebalance under static membership.
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
    /// How often the member tells the group it is alive, and so how soon it learns of a rebalance.
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// Any librdkafka property, passed through verbatim (TLS, SASL mechanism, fetch sizes...).
    /// Secrets such as `sasl.password` must come from `KAFKA_SASL_PASSWORD` instead.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Environment variable holding the SASL password, if any.
    #[serde(default = "default_sasl_password_env")]
    pub sasl_password_env: String,
}

impl KafkaConfig {
    /// The static member name to use: `group_instance_id` when set (empty: none), else the first
    /// of `$POD_NAME` and `$HOSTNAME` that is set and valid. `env` is the process environment.
    pub(crate) fn effective_group_instance_id(
        &self,
        env: &HashMap<String, String>,
    ) -> Option<String> {
        match &self.group_instance_id {
            Some(id) => Some(id.clone()).filter(|id| !id.is_empty()),
            None => ["POD_NAME", "HOSTNAME"]
                .iter()
                .filter_map(|var| env.get(*var))
                .find(|v| !v.is_empty() && Self::check_group_instance_id(v).is_ok())
                .cloned(),
        }
    }

    /// Kafka's rule for a `group.instance.id`: at most 249 of `[A-Za-z0-9._-]`, not `.` or `..`.
    /// Empty means dynamic membership and passes.
    pub(crate) fn check_group_instance_id(id: &str) -> Result<(), String> {
        let legal = id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if id.len() > 249 || !legal || id == "." || id == ".." {
            Err(format!(
                "`{id}` is not a Kafka group instance id (at most 249 of A-Z a-z 0-9 . _ -)"
            ))
        } else {
            Ok(())
        }
    }
}

crate::section::fields::default_from_serde!(KafkaConfig);

fn default_brokers() -> String {
    "127.0.0.1:9092".into()
}

fn default_topics() -> Vec<String> {
    vec!["rag-traces".into()]
}

fn default_group_id() -> String {
    "ragwatch".into()
}

fn default_commit_interval_ms() -> u64 {
    1000
}

fn default_stats_interval_ms() -> u64 {
    5000
}

// With static membership a restarted sidecar keeps its partitions if it is back within the session:
// 30 s covers the first restarts of a crash loop (Kubernetes waits 10 s, then 20 s) and rides out broker
// or network blips shorter than that without a rebalance (Kafka raised its own default from 10 s to
// 45 s for the blips, KIP-735), while a replica that leaves for good (a rolling update renames the pod)
// holds its partitions 30 s rather than 45. Brokers refuse less than 6 s.
fn default_session_timeout_ms() -> u64 {
    30_000
}

// Members hear of a rebalance at their next heartbeat, so the whole group waits for the slowest: 1 s
// keeps rebalances short, at one small request a second per replica.
fn default_heartbeat_interval_ms() -> u64 {
    1_000
}

fn default_sasl_password_env() -> String {
    "KAFKA_SASL_PASSWORD".into()
}

use rdkafka::config::ClientConfig;

impl KafkaConfig {
    /// Its own checks; the consumer's keys only when the source reads Kafka (`consumed`), as the
    /// verdict-records producer shares the connection settings.
    pub(crate) fn validate(&self, consumed: bool, p: &mut Problems) {
        if consumed {
            if self.brokers.trim().is_empty() {
                p.add("kafka.brokers", "must not be empty");
            }
            if self.topics.is_empty() {
                p.add("kafka.topics", "must name at least one topic");
            }
            if self.group_id.trim().is_empty() {
                p.add("kafka.group_id", "must not be empty");
            }
        }
        if let Some(id) = &self.group_instance_id
            && let Err(e) = Self::check_group_instance_id(id)
        {
            p.add("kafka.group_instance_id", e);
        }
        if self.session_timeout_ms == 0 {
            p.add("kafka.session_timeout_ms", "must be > 0");
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms >= self.session_timeout_ms
        {
            p.add(
                "kafka.heartbeat_interval_ms",
                "must be > 0 and below kafka.session_timeout_ms (a third of it or less is usual)",
            );
        }
        for key in self.properties.keys() {
            let field = format!("kafka.properties.{key}");
            if key.contains("password") || key.contains("secret") {
                p.add(
                    &field,
                    format!(
                        "secrets are read from the environment (${}), never from the config file",
                        self.sasl_password_env
                    ),
                );
            }
            if key == "enable.auto.offset.store" || key == "group.id" {
                p.add(&field, "is managed by ragwatch");
            }
            let own_key = match key.as_str() {
                "group.instance.id" => Some("group_instance_id"),
                "session.timeout.ms" => Some("session_timeout_ms"),
                "heartbeat.interval.ms" => Some("heartbeat_interval_ms"),
                _ => None,
            };
            if let Some(own) = own_key {
                p.add(&field, format!("is set by kafka.{own}"));
            }
        }
    }

    /// The connection settings: the user's `properties`, then the brokers, the statistics interval
    /// and the SASL password from the environment variable `sasl_password_env` names.
    pub(crate) fn client_config(&self, env: &HashMap<String, String>) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c.set("bootstrap.servers", &self.brokers)
            .set("statistics.interval.ms", self.stats_interval_ms.to_string());
        if let Some(pw) = env.get(&self.sasl_password_env) {
            c.set("sasl.password", pw);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_settings_carry_no_consumer_group_keys() {
        let config: KafkaConfig = toml::from_str(
            "brokers = \"b:9092\"\nproperties = { \"security.protocol\" = \"SASL_SSL\" }",
        )
        .unwrap();
        let env = HashMap::from([(config.sasl_password_env.clone(), "pw".to_owned())]);
        let c = config.client_config(&env);
        assert_eq!(c.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(c.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(c.get("sasl.password"), Some("pw"));
        for key in ["group.id", "enable.auto.commit", "session.timeout.ms"] {
            assert_eq!(c.get(key), None, "{key}");
        }
    }
}
