//! The judge budget's families: the tokens this replica may still spend, its share of the
//! fleet's budget, and the peers that share is computed from.

use prometheus::{Gauge, IntCounterVec, IntGauge, Registry};

use super::family::{counter, families, single};

/// Outcomes of a resolution of `fleet.peers`; label values of
/// `ragwatch_fleet_peer_lookups_total{outcome}`. `empty`: the name exists with no address.
pub(crate) const FLEET_LOOKUP_OUTCOMES: [&str; 3] = ["ok", "failed", "empty"];

families! {
    /// What the budget limiter and the fleet's membership report.
    pub(crate) struct BudgetMetrics(r: &Registry) {
        /// Tokens this replica may still spend now (the tighter of the minute and day budgets).
        pub(crate) remaining: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_budget_remaining_tokens",
                "Judge tokens this replica may still spend now.",
            ),
        ),
        /// This replica's share of the fleet's judge budget.
        pub(crate) share: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_budget_share_ratio",
                "This replica's share of the fleet's judge budget (fleet.membership: its share of the partitions, or one over the replicas).",
            ),
        ),
        /// Resolutions of `fleet.peers`, by outcome (`ok`, `failed`, `empty`).
        pub(crate) fleet_peer_lookups: IntCounterVec = counter(
            r,
            "ragwatch_fleet_peer_lookups_total",
            "Resolutions of fleet.peers, by outcome (ok, failed, empty); failed and empty keep the last budget share.",
            &["outcome"],
        ),
        /// Replicas the share is computed from (`fleet.membership` peers or replicas).
        pub(crate) fleet_peers: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_fleet_peers",
                "Replicas this replica's budget share is computed from (fleet.membership peers or replicas; 0 with partitions).",
            ),
        ),
    }
}

impl BudgetMetrics {
    /// Starts with the whole budget (the share of a replica alone) and every lookup outcome at
    /// zero.
    pub(super) fn start(&self) {
        self.share.set(1.0);
        for outcome in FLEET_LOOKUP_OUTCOMES {
            self.fleet_peer_lookups.with_label_values(&[outcome]);
        }
    }
}
