//! The fleet's replicas: each a pod whose incarnations are kept (the last scrape of each that
//! exited), what the fleet has counted, and the waits that make a batch's traffic settle: every
//! trace received and judged, the counters flat, Prometheus caught up; partitions assigned, offsets
//! committed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::PARTITIONS;
use crate::common::prometheus::{query, unix_secs};
use crate::common::*;

/// One replica (a pod): its incarnations, the final scrapes of those that exited.
pub(super) struct Replica {
    pub(super) pod: String,
    pub(super) port: u16,
    pub(super) records: PathBuf,
    pub(super) process: Option<Ragwatch>,
    pub(super) retired: Vec<Samples>,
}

impl Replica {
    pub(super) fn start(&mut self, config: &Path, env: &[(&'static str, String)]) {
        let mut env = env.to_vec();
        env.push(("POD_NAME", self.pod.clone()));
        env.push(("RAGWATCH__HTTP__LISTEN", format!("127.0.0.1:{}", self.port)));
        env.push((
            "RAGWATCH__LLM__RECORDS_PATH",
            self.records.display().to_string(),
        ));
        self.process = Some(Ragwatch::start(config, &env));
    }

    /// SIGTERM, wait for the exit, keep the last scrape (taken while settled, just before).
    pub(super) fn stop(&mut self) {
        let mut rw = self.process.take().unwrap();
        self.retired.push(rw.metrics().unwrap());
        rw.sigterm();
        let status = rw.wait_exit(Duration::from_secs(60));
        assert!(
            status.success(),
            "{} exited with {status}: {}",
            self.pod,
            rw.log_text()
        );
    }
}

/// What the fleet has counted: every incarnation's last scrape (live ones scraped now).
pub(super) fn fleet_samples(replicas: &[Replica]) -> Vec<Samples> {
    let mut out = Vec::new();
    for r in replicas {
        for s in &r.retired {
            out.push(Samples(s.0.clone()));
        }
        if let Some(p) = &r.process {
            out.push(p.metrics().expect("a live replica answers /metrics"));
        }
    }
    out
}

pub(super) fn total(samples: &[Samples], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples.iter().map(|s| s.sum(name, labels)).sum()
}

/// Counters that must not move while the fleet is quiet.
fn signature(samples: &[Samples]) -> Vec<f64> {
    let mut v = Vec::new();
    for name in [
        "ragwatch_traces_received_total",
        "ragwatch_traces_sampled_total",
        "ragwatch_traces_judged_total",
        "ragwatch_traces_skipped_total",
        "ragwatch_faithfulness_ratio_sum",
        "ragwatch_answer_relevancy_ratio_sum",
        "ragwatch_score_squares_total",
        "ragwatch_estimate_terms_total",
    ] {
        v.extend(samples.iter().map(|s| s.sum(name, &[])));
    }
    v
}

/// Waits until the fleet has received everything produced so far, every sampled trace is judged or
/// skipped, the counters are flat, and Prometheus has scraped every live replica twice since they
/// went flat. Returns when (Unix seconds).
pub(super) fn settle(replicas: &[Replica], produced: &BTreeMap<String, f64>, prom: u16) -> f64 {
    let flat_since = wait_for(
        "the fleet to take in the batch and go quiet",
        Duration::from_secs(60),
        || {
            let before = unix_secs();
            let first = fleet_samples(replicas);
            for (s, n) in produced {
                if total(&first, "ragwatch_traces_received_total", &[("stratum", s)]) != *n {
                    return None;
                }
            }
            for r in replicas.iter().filter_map(|r| r.process.as_ref()) {
                let m = r.metrics()?;
                let sampled = m.sum("ragwatch_traces_sampled_total", &[]);
                let done = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")])
                    + m.sum("ragwatch_traces_skipped_total", &[]);
                if sampled != done || m.sum("ragwatch_judge_queue_depth", &[]) != 0.0 {
                    return None;
                }
            }
            // Quiet means unchanged over 300 ms: the pause is the stability check itself.
            std::thread::sleep(Duration::from_millis(300));
            (signature(&first) == signature(&fleet_samples(replicas))).then_some(before)
        },
    );
    let live: Vec<&Replica> = replicas.iter().filter(|r| r.process.is_some()).collect();
    wait_for(
        "Prometheus to scrape every replica twice after the batch",
        Duration::from_secs(30),
        || {
            for r in &live {
                let q = format!("timestamp(up{{job=\"ragwatch\", pod=\"{}\"}})", r.pod);
                let t: f64 = query(prom, &q)?.first()?["value"][1]
                    .as_str()?
                    .parse()
                    .ok()?;
                if t < flat_since + 1.0 {
                    return None;
                }
                // The value Prometheus holds is the one the replica shows.
                let q = format!(
                    "sum(ragwatch_traces_received_total{{job=\"ragwatch\", pod=\"{}\"}})",
                    r.pod
                );
                let got: f64 = query(prom, &q)?.first()?["value"][1]
                    .as_str()?
                    .parse()
                    .ok()?;
                let m = r.process.as_ref()?.metrics()?;
                if got != m.sum("ragwatch_traces_received_total", &[]) {
                    return None;
                }
            }
            Some(())
        },
    );
    unix_secs()
}

/// Waits until every live replica holds partitions and together they hold all of them, twice in a
/// row a second apart.
pub(super) fn wait_assigned(replicas: &[Replica]) {
    let held = || -> Option<Vec<f64>> {
        replicas
            .iter()
            .filter_map(|r| r.process.as_ref())
            .map(|p| {
                p.metrics()
                    .map(|m| m.sum("ragwatch_kafka_assigned_partitions", &[]))
            })
            .collect()
    };
    let mut last: Option<Vec<f64>> = None;
    wait_for(
        "every live replica to hold partitions",
        Duration::from_secs(90),
        || {
            let h = held()?;
            let ok = h.iter().all(|n| *n > 0.0) && h.iter().sum::<f64>() == PARTITIONS as f64;
            let stable = ok && last.as_ref() == Some(&h);
            last = ok.then_some(h);
            if !stable {
                // Stable means the same over two looks about a second apart.
                std::thread::sleep(Duration::from_millis(900));
            }
            stable.then_some(())
        },
    );
}

/// Waits until the group has committed every partition to its end (before a member joins or
/// leaves: nothing is redelivered).
pub(super) fn wait_committed(brokers: &str, group: &str, topic: &str) {
    wait_for(
        "the group to commit to the end of the log",
        Duration::from_secs(30),
        || {
            committed_and_high(brokers, group, topic, PARTITIONS)
                .iter()
                .all(|(c, h)| c == h)
                .then_some(())
        },
    );
}
