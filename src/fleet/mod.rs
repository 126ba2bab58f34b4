//! Fleet membership: this replica's share of the fleet, and the judge budget following it.
//!
//! The `[budget]` limits are a promise for the whole fleet, so each replica spends only its share.
//! Who knows the share depends on the source: a Kafka replica holds a share of the topics'
//! partitions (`membership = "partitions"`, sent by the Kafka source), an OTLP replica counts the
//! ready replicas behind a headless Service (`"peers"`, [`PeerWatcher`]), and anything else is
//! told the number of replicas (`"replicas"`). Whichever it is sends the share on one channel,
//! [`ShareTx`]; the judge side follows its [`ShareRx`] with [`follow_share`], which sets
//! `ragwatch_budget_share_ratio` and rescales the LLM judge's budget. Sources hold only the sending
//! end, so they never name the judge.

pub mod config;
mod peers;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::judge::llm::Budget;
use crate::metrics::Metrics;
use config::{FleetConfig, Membership};

pub use peers::{POD_IP, PeerWatcher};

/// Shares closer than this are the same share: no rescale, no log line.
const SAME_SHARE: f64 = 1e-9;

/// The sending end of this replica's share of the fleet, a number in [0, 1].
#[derive(Debug, Clone)]
pub struct ShareTx(Arc<watch::Sender<f64>>);

/// The receiving end: the latest share, and a wake-up when it changes.
#[derive(Debug, Clone)]
pub struct ShareRx(watch::Receiver<f64>);

/// A share channel starting at `initial`.
pub fn share_channel(initial: f64) -> (ShareTx, ShareRx) {
    let (tx, rx) = watch::channel(clamp(initial));
    (ShareTx(Arc::new(tx)), ShareRx(rx))
}

fn clamp(share: f64) -> f64 {
    if share.is_finite() {
        share.clamp(0.0, 1.0)
    } else {
        1.0
    }
}

impl ShareTx {
    /// Sends `share` (clamped to [0, 1]); returns whether it differs from the last one sent.
    pub fn send(&self, share: f64) -> bool {
        let share = clamp(share);
        self.0.send_if_modified(|current| {
            let changed = (*current - share).abs() > SAME_SHARE;
            if changed {
                *current = share;
            }
            changed
        })
    }

    /// The share last sent.
    pub fn current(&self) -> f64 {
        *self.0.borrow()
    }
}

impl ShareRx {
    /// The latest share.
    pub fn current(&self) -> f64 {
        *self.0.borrow()
    }
}

/// This replica's membership, joined: the share channel and what feeds it.
#[derive(Debug)]
pub struct Fleet {
    /// The membership `fleet.membership` resolved to for this source.
    pub membership: Membership,
    /// For the Kafka source with `membership = "partitions"`: where it sends its share.
    pub partitions_tx: Option<ShareTx>,
    /// Keeps the channel open while the fleet lives, whoever else sends.
    _share_tx: ShareTx,
    share_rx: ShareRx,
    peers: Option<PeerWatcher>,
}

impl Fleet {
    /// Whether other replicas may already be spending when this one starts: a share below one,
    /// or peers counted by DNS, whose first answer may miss replicas that are not ready yet (a
    /// fresh rollout's pods each see only themselves at first). Such a replica's budget starts
    /// with empty per-minute buckets.
    pub fn others_may_be_spending(&self) -> bool {
        self.membership == Membership::Peers || self.share_rx.current() < 1.0
    }

    /// Joins the fleet (`kafka`: the source is a Kafka consumer group): `replicas` sends one over
    /// `fleet.replicas`; `peers` resolves `fleet.peers` once now (within `peers_refresh_secs`;
    /// until an answer the share is one over `fleet.replicas`), so the first trace is judged at the
    /// right share; `partitions` waits for the Kafka source.
    pub async fn join(
        config: &FleetConfig,
        kafka: bool,
        env: &HashMap<String, String>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let membership = config.resolved(kafka);
        let (share_tx, share_rx) = share_channel(config.initial_share());
        let mut fleet = Self {
            membership,
            partitions_tx: None,
            _share_tx: share_tx.clone(),
            share_rx,
            peers: None,
        };
        match membership {
            Membership::Partitions => fleet.partitions_tx = Some(share_tx),
            Membership::Peers => {
                let mut watcher = PeerWatcher::new(config, env, metrics, share_tx);
                let first = std::time::Duration::from_secs(config.peers_refresh_secs.max(1));
                if tokio::time::timeout(first, watcher.resolve_once())
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        peers = config.peers.as_deref().unwrap_or_default(),
                        share = config.initial_share(),
                        "the fleet's peers did not resolve in time; starting at one over fleet.replicas"
                    );
                }
                fleet.peers = Some(watcher);
            }
            Membership::Replicas | Membership::Auto => {
                metrics
                    .budget
                    .fleet_peers
                    .set(i64::from(config.replicas.max(1)));
            }
        }
        tracing::info!(membership = ?membership, share = fleet.share_rx.current(), "fleet membership");
        fleet
    }

    /// The share as it is now, and its changes.
    pub fn share_rx(&self) -> ShareRx {
        self.share_rx.clone()
    }

    /// Starts the peer watcher (`membership = "peers"`), which resolves again every
    /// `peers_refresh_secs` until `stop`.
    pub fn spawn_peers(&mut self, stop: CancellationToken) -> Option<tokio::task::JoinHandle<()>> {
        self.peers.take().map(|w| tokio::spawn(w.run(stop)))
    }
}

/// Follows the share: applies the current one at once (before this returns, so the budget holds
/// its share before the first trace), then every change until `stop` or until every sender is
/// gone. Each change sets `ragwatch_budget_share_ratio`, rescales `budget` when there is an LLM
/// judge, and is logged once.
pub fn follow_share(
    mut share_rx: ShareRx,
    metrics: Arc<Metrics>,
    budget: Option<Arc<Budget>>,
    stop: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let first = *share_rx.0.borrow_and_update();
    apply(first, &metrics, budget.as_deref());
    tracing::info!(share = first, "judge budget share");
    async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                changed = share_rx.0.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let share = *share_rx.0.borrow_and_update();
                    if (metrics.budget.share.get() - share).abs() > SAME_SHARE {
                        tracing::info!(share, "judge budget share");
                    }
                    apply(share, &metrics, budget.as_deref());
                }
            }
        }
    }
}

fn apply(share: f64, metrics: &Metrics, budget: Option<&Budget>) {
    metrics.budget.share.set(share);
    if let Some(b) = budget {
        b.set_share(share);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::llm::config::BudgetConfig;

    #[tokio::test]
    async fn the_follower_applies_the_first_share_at_once_and_every_change() {
        let metrics = Arc::new(Metrics::new(&["default".into()], "m"));
        let budget = Arc::new(Budget::new(&BudgetConfig::default()));
        let (tx, rx) = share_channel(0.5);
        let stop = CancellationToken::new();
        let follower = follow_share(
            rx,
            Arc::clone(&metrics),
            Some(Arc::clone(&budget)),
            stop.clone(),
        );
        assert_eq!(metrics.budget.share.get(), 0.5, "before the first poll");
        assert_eq!(budget.share(), 0.5);
        let task = tokio::spawn(follower);
        assert!(tx.send(0.25));
        assert!(!tx.send(0.25 + 1e-12), "the same share again is no change");
        for _ in 0..100 {
            if budget.share() == 0.25 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!((metrics.budget.share.get(), budget.share()), (0.25, 0.25));
        assert!(tx.send(7.0));
        assert_eq!(tx.current(), 1.0, "clamped to [0, 1]");
        stop.cancel();
        task.await.unwrap();
    }
}
