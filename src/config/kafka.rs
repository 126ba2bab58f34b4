//! The librdkafka settings every Kafka client of ragwatch shares: the trace source's consumer and
//! the verdict-records producer. The consumer's own settings (group, offsets, membership) are the
//! source's (`source::kafka`).

use std::collections::HashMap;

use rdkafka::config::ClientConfig;

use super::KafkaConfig;

impl KafkaConfig {
    /// The connection settings: the user's `properties`, then the brokers, the statistics interval
    /// and the SASL password from the environment variable `sasl_password_env` names.
    pub fn client_config(&self, env: &HashMap<String, String>) -> ClientConfig {
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
