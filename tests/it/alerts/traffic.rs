//! The traffic of the alert chain: both strata streamed to the topic from the labelled data, and a
//! reviewer posting human labels.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

use super::RATE_PER_SEC;
use crate::common::ragtruth::Data;
use crate::common::{http_post, stream_traces};

/// A reviewer: every 2 s, labels one trace in four of those sent before the previous round (so
/// ragwatch has seen them) with the answer's human label, through `POST /v1/labels`. The label
/// agreement and AUROC panels then have data from real human labels.
pub(super) fn review(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<HashMap<String, bool>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        let mut due: Vec<(String, bool)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(2));
            let body: String = due
                .drain(..)
                .map(|(id, faithful)| {
                    format!(
                        "{{\"trace_id\":\"{id}\",\"faithful\":{faithful},\"source\":\"review\"}}\n"
                    )
                })
                .collect();
            if !body.is_empty() {
                let _ = std::panic::catch_unwind(|| http_post(addr, "/v1/labels", &body));
            }
            for (id, faithful) in sent.lock().unwrap().iter() {
                let every_fourth = id
                    .rsplit('-')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n % 4 == 0);
                if every_fourth && seen.insert(id.clone()) {
                    due.push((id.clone(), *faithful));
                }
            }
        }
    })
}

/// Produces both strata at `RATE_PER_SEC` each, evenly spaced, until `stop`: each trace a random
/// faithful answer with probability 0.9, else a random unfaithful one; 0.5 for `degrading` once
/// `degraded` is set. Each trace id sent goes into `labels` with its answer's human label.
pub(super) fn stream(
    data: Data,
    brokers: String,
    topic: String,
    degraded: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    labels: Arc<Mutex<HashMap<String, bool>>>,
) -> std::thread::JoinHandle<()> {
    let mut rng = StdRng::seed_from_u64(12);
    let mut n = 0u64;
    stream_traces(brokers, topic, RATE_PER_SEC, stop, move || {
        ["stable", "degrading"]
            .map(|stratum| {
                let share = if stratum == "degrading" && degraded.load(Ordering::Relaxed) {
                    0.5
                } else {
                    0.9
                };
                let faithful = rng.random::<f64>() < share;
                let pool = if faithful {
                    &data.faithful
                } else {
                    &data.unfaithful
                };
                let mut trace = pool[rng.random_range(0..pool.len())].clone();
                n += 1;
                let id = format!("{stratum}-{n}");
                trace["trace_id"] = Value::from(id.as_str());
                labels.lock().unwrap().insert(id, faithful);
                trace["stratum"] = Value::from(stratum);
                sent.fetch_add(1, Ordering::Relaxed);
                trace
            })
            .into()
    })
}
