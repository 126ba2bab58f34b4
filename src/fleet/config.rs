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
