//! The peer watcher (`fleet.membership = "peers"`): resolves `fleet.peers`, a headless Service
//! whose answer holds every ready replica's address, and sends one over their number as the share.
//!
//! A pod that is not ready yet is not in the answer, though it may already judge: so this
//! replica's own address (`POD_IP`), when known and missing, counts as one more. A failed
//! resolution or an empty answer keeps the last share: a DNS hiccup must not hand every replica
//! the whole budget. Each resolution is counted in `ragwatch_fleet_peer_lookups_total` by outcome.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::ShareTx;
use super::config::FleetConfig;
use crate::events::LogLimiter;
use crate::metrics::{FLEET_LOOKUP_OUTCOMES, Metrics};

static LOOKUP_LOG: LogLimiter = LogLimiter::new();

/// The environment variable holding this replica's own address (the downward API's `status.podIP`).
pub const POD_IP: &str = "POD_IP";

/// Resolves the fleet's DNS name every `peers_refresh_secs` and sends the share on change.
#[derive(Debug)]
pub struct PeerWatcher {
    name: String,
    own: Option<IpAddr>,
    refresh: Duration,
    metrics: Arc<Metrics>,
    share_tx: ShareTx,
    /// Replicas counted at the last answer that counted.
    replicas: Option<usize>,
}

/// How one resolution went, in the order of its label values ([`FLEET_LOOKUP_OUTCOMES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// At least one address.
    Ok,
    /// The resolver failed (no such name, no DNS server).
    Failed,
    /// The name exists with no address: no replica is ready.
    Empty,
}

impl Lookup {
    /// The label value of `ragwatch_fleet_peer_lookups_total{outcome}`.
    fn as_str(self) -> &'static str {
        FLEET_LOOKUP_OUTCOMES[self as usize]
    }
}

/// The replicas an answer stands for: its distinct addresses, plus this replica when its own
/// address is known and not among them. `None` when that is nobody. In a dual-stack cluster a
/// headless Service answers an IPv4 and an IPv6 address for each pod: each family is counted
/// apart and the larger count taken, so no pod counts twice.
pub(crate) fn replicas_in(
    answer: impl IntoIterator<Item = IpAddr>,
    own: Option<IpAddr>,
) -> Option<usize> {
    let mut seen: BTreeSet<IpAddr> = answer.into_iter().map(canonical).collect();
    if let Some(own) = own {
        seen.insert(canonical(own));
    }
    let v4 = seen.iter().filter(|ip| ip.is_ipv4()).count();
    let replicas = v4.max(seen.len() - v4);
    (replicas > 0).then_some(replicas)
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.1`) is the same replica as `10.0.0.1`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl PeerWatcher {
    /// A watcher of `config.peers` (empty: it never answers) sending on `share_tx`; this
    /// replica's address from `POD_IP` in `env`, when it parses.
    pub fn new(
        config: &FleetConfig,
        env: &HashMap<String, String>,
        metrics: Arc<Metrics>,
        share_tx: ShareTx,
    ) -> Self {
        let own = env.get(POD_IP).and_then(|v| match v.trim().parse() {
            Ok(ip) => Some(ip),
            Err(_) => {
                tracing::warn!(value = %v, "POD_IP is not an address: this replica counts only when the peers' answer holds it");
                None
            }
        });
        metrics
            .budget
            .fleet_peers
            .set(i64::from(config.replicas.max(1)));
        Self {
            name: config.peers.clone().unwrap_or_default(),
            own,
            refresh: Duration::from_secs(config.peers_refresh_secs.max(1)),
            metrics,
            share_tx,
            replicas: None,
        }
    }

    /// Resolves once, counts the outcome and, when the answer counts, sends its share.
    pub async fn resolve_once(&mut self) {
        let answer = tokio::net::lookup_host((self.name.as_str(), 0))
            .await
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>());
        let (outcome, replicas) = match &answer {
            Err(_) => (Lookup::Failed, None),
            Ok(ips) if ips.is_empty() => (Lookup::Empty, None),
            Ok(ips) => (Lookup::Ok, replicas_in(ips.iter().copied(), self.own)),
        };
        self.metrics
            .budget
            .fleet_peer_lookups
            .with_label_values(&[outcome.as_str()])
            .inc();
        let Some(replicas) = replicas else {
            if let Some(suppressed) = LOOKUP_LOG.allow() {
                match &answer {
                    Err(e) => {
                        tracing::warn!(peers = %self.name, error = %e, suppressed, "cannot resolve the fleet's peers; keeping the budget share")
                    }
                    Ok(_) => {
                        tracing::warn!(peers = %self.name, suppressed, "the fleet's peers resolve to no address; keeping the budget share")
                    }
                }
            }
            return;
        };
        if self.replicas != Some(replicas) {
            tracing::info!(peers = %self.name, replicas, own = ?self.own, "fleet peers");
            self.replicas = Some(replicas);
        }
        self.metrics.budget.fleet_peers.set(replicas as i64);
        self.share_tx.send(1.0 / replicas as f64);
    }

    /// Resolves every `peers_refresh_secs` until `stop`, which also ends a resolution in progress
    /// (a resolver waiting out its timeouts must not hold up the shutdown).
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate; the wiring has just resolved once.
        tick.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = async {
                    tick.tick().await;
                    self.resolve_once().await;
                } => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn outcomes_are_their_label_values() {
        let names = [Lookup::Ok, Lookup::Failed, Lookup::Empty].map(Lookup::as_str);
        assert_eq!(names, ["ok", "failed", "empty"]);
    }

    #[test]
    fn distinct_addresses_count_and_a_missing_own_address_is_one_more() {
        let answer = || vec![ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.1")];
        assert_eq!(replicas_in(answer(), None), Some(2), "distinct addresses");
        assert_eq!(
            replicas_in(answer(), Some(ip("10.0.0.2"))),
            Some(2),
            "own address already in the answer"
        );
        assert_eq!(
            replicas_in(answer(), Some(ip("10.0.0.3"))),
            Some(3),
            "a replica not ready yet counts itself"
        );
        assert_eq!(replicas_in([], Some(ip("10.0.0.3"))), Some(1));
        assert_eq!(replicas_in([], None), None);
        assert_eq!(
            replicas_in([ip("::ffff:10.0.0.1")], Some(ip("10.0.0.1"))),
            Some(1),
            "an IPv4-mapped address is the same replica"
        );
        let dual = [ip("10.0.0.1"), ip("fd00::1"), ip("10.0.0.2"), ip("fd00::2")];
        assert_eq!(replicas_in(dual, None), Some(2), "dual stack: two pods");
        assert_eq!(
            replicas_in(dual, Some(ip("10.0.0.3"))),
            Some(3),
            "dual stack, not ready yet"
        );
    }

    fn watcher(peers: &str, pod_ip: Option<&str>) -> (PeerWatcher, super::super::ShareRx) {
        let config = FleetConfig {
            peers: Some(peers.into()),
            replicas: 2,
            ..FleetConfig::default()
        };
        let env = pod_ip
            .map(|v| HashMap::from([(POD_IP.to_owned(), v.to_owned())]))
            .unwrap_or_default();
        let (tx, rx) = super::super::share_channel(config.initial_share());
        let metrics = Arc::new(Metrics::new(&["default".into()], "m"));
        (PeerWatcher::new(&config, &env, metrics, tx), rx)
    }

    #[tokio::test]
    async fn an_answer_sends_its_share_and_a_failure_keeps_the_last() {
        // An address literal resolves without a DNS server.
        let (mut w, rx) = watcher("127.0.0.1", Some("127.0.0.2"));
        w.resolve_once().await;
        assert_eq!(rx.current(), 0.5, "the answer and this replica");
        assert_eq!(w.metrics.budget.fleet_peers.get(), 2);
        let ok = |w: &PeerWatcher, o: Lookup| {
            w.metrics
                .budget
                .fleet_peer_lookups
                .with_label_values(&[o.as_str()])
                .get()
        };
        assert_eq!(ok(&w, Lookup::Ok), 1);
        // A name the resolver refuses outright: a failure without a DNS server's timeout.
        w.name = "no\0such-host".into();
        w.resolve_once().await;
        assert_eq!(rx.current(), 0.5, "a failed lookup keeps the share");
        assert_eq!((ok(&w, Lookup::Failed), ok(&w, Lookup::Ok)), (1, 1));
        let (mut alone, rx) = watcher("127.0.0.1", Some("127.0.0.1"));
        alone.resolve_once().await;
        assert_eq!(rx.current(), 1.0);
        let (bad, _) = watcher("127.0.0.1", Some("pod"));
        assert_eq!(bad.own, None, "an unparsable POD_IP is ignored");
    }
}
