//! Fleet membership (`[fleet]`): how this replica learns how many replicas share the judge budget.

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// How this replica's share of the fleet's budget is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Membership {
    /// `partitions` with the Kafka source, else `peers` when `fleet.peers` is set, else `replicas`.
    Auto,
    /// The share of the topics' partitions this replica holds (Kafka only).
    Partitions,
    /// One over the replicas `fleet.peers` resolves to (a headless Service's ready pods), this
    /// one included.
    Peers,
    /// One over `fleet.replicas`, fixed.
    Replicas,
}

/// Fleet membership: the judge budget (`[budget]`) is for the whole fleet, and each replica spends
/// its share.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// `auto`, `partitions`, `peers` or `replicas`.
    #[serde(default = "default_membership")]
    pub membership: Membership,
    /// Replicas in the fleet for `membership = "replicas"` (share 1/replicas), and the share
    /// assumed with `peers` until the first answer.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// A DNS name resolving to every ready replica's address (a headless Service, e.g.
    /// `ragwatch-peers.rag.svc.cluster.local`); `POD_IP` is this replica's own.
    #[serde(default)]
    pub peers: Option<String>,
    /// Seconds between resolutions of `peers`.
    #[serde(default = "default_peers_refresh_secs")]
    pub peers_refresh_secs: u64,
}

crate::section::fields::default_from_serde!(FleetConfig);

fn default_membership() -> Membership {
    Membership::Auto
}

fn default_replicas() -> u32 {
    1
}

fn default_peers_refresh_secs() -> u64 {
    10
}

impl FleetConfig {
    /// The membership `auto` stands for, with a Kafka source (`kafka`) or another.
    pub fn resolved(&self, kafka: bool) -> Membership {
        match self.membership {
            Membership::Auto if kafka => Membership::Partitions,
            Membership::Auto if self.peers.is_some() => Membership::Peers,
            Membership::Auto => Membership::Replicas,
            m => m,
        }
    }

    /// The share before membership has said anything: one over `replicas`.
    pub fn initial_share(&self) -> f64 {
        1.0 / f64::from(self.replicas.max(1))
    }

    /// Checks `[fleet]` against the source it shares (`kafka`: `source.kind = "kafka"`).
    pub(crate) fn validate(&self, kafka: bool, p: &mut Problems) {
        if self.membership == Membership::Partitions && !kafka {
            p.add(
                "fleet.membership",
                "\"partitions\" needs source.kind = \"kafka\" (the share of the topics' \
                 partitions); with another source use \"peers\" or \"replicas\"",
            );
        }
        match self.peers.as_deref() {
            None if self.membership == Membership::Peers => {
                p.add(
                    "fleet.peers",
                    "must name the DNS name of the fleet (a headless Service) for \
                     fleet.membership = \"peers\"",
                );
            }
            Some(name) if name.trim().is_empty() || name.contains(char::is_whitespace) => {
                p.add("fleet.peers", "must be a DNS name");
            }
            _ => {}
        }
        if self.replicas == 0 {
            p.add("fleet.replicas", "must be >= 1");
        }
        if self.peers_refresh_secs == 0 {
            p.add("fleet.peers_refresh_secs", "must be > 0");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::Config;

    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, String> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_toml_with_env(toml, &env).map_err(|e| e.to_string())
    }

    #[test]
    fn auto_is_partitions_with_kafka_then_peers_when_named_else_replicas() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.fleet.membership, Membership::Auto);
        assert_eq!((c.fleet.replicas, c.fleet.peers_refresh_secs), (1, 10));
        assert_eq!(c.fleet.resolved(false), Membership::Replicas);
        let peers = load("[fleet]\npeers = \"ragwatch-peers\"\n", &[]).unwrap();
        assert_eq!(peers.fleet.resolved(false), Membership::Peers);
        assert_eq!(
            peers.fleet.resolved(true),
            Membership::Partitions,
            "a Kafka replica's share is its partitions, peers or not"
        );
        let fixed = load("[fleet]\nmembership = \"replicas\"\nreplicas = 4\n", &[]).unwrap();
        assert_eq!(fixed.fleet.resolved(true), Membership::Replicas);
        assert_eq!(fixed.fleet.initial_share(), 0.25);
    }

    #[test]
    fn environment_overrides_reach_the_fleet_section() {
        let c = load(
            "[source]\nkind = \"otlp\"\n",
            &[
                (
                    "RAGWATCH__FLEET__PEERS",
                    "ragwatch-peers.rag.svc.cluster.local",
                ),
                ("RAGWATCH__FLEET__PEERS_REFRESH_SECS", "3"),
                ("RAGWATCH__FLEET__REPLICAS", "2"),
                ("RAGWATCH__FLEET__MEMBERSHIP", "peers"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.fleet.peers.as_deref(),
            Some("ragwatch-peers.rag.svc.cluster.local")
        );
        assert_eq!((c.fleet.peers_refresh_secs, c.fleet.replicas), (3, 2));
        assert_eq!(c.fleet.membership, Membership::Peers);
        // A name that TOML would read as dotted keys stays a string.
        let c = load("", &[("RAGWATCH__FLEET__PEERS", "peers.ragwatch.test")]).unwrap();
        assert_eq!(c.fleet.peers.as_deref(), Some("peers.ragwatch.test"));
    }

    #[test]
    fn validation_names_the_field() {
        for (toml, field) in [
            (
                "[source]\nkind = \"otlp\"\n[fleet]\nmembership = \"partitions\"\n",
                "fleet.membership",
            ),
            ("[fleet]\nmembership = \"peers\"\n", "fleet.peers"),
            ("[fleet]\npeers = \" \"\n", "fleet.peers"),
            ("[fleet]\nreplicas = 0\n", "fleet.replicas"),
            (
                "[fleet]\npeers_refresh_secs = 0\n",
                "fleet.peers_refresh_secs",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err();
            assert!(e.contains(&format!("`{field}`")), "{toml}: {e}");
        }
        assert!(load("[fleet]\nmembershp = \"auto\"\n", &[]).is_err());
        load(
            "[source]\nkind = \"kafka\"\n[fleet]\nmembership = \"partitions\"\n",
            &[],
        )
        .unwrap();
    }
}
