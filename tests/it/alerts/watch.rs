//! The watch over the alert chain: when each alert fired, was pending or held, and when ragwatch
//! raised its own drift flags.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::common::alertmanager::{describe, prom_alerts};
use crate::common::{Ragwatch, http_get};

/// What was seen, and when (seconds from the drop; negative before it): the intervals each alert
/// was firing in Prometheus, when each was first pending there, when Alertmanager first held it
/// (and in which state), and when ragwatch first raised its own drift flags.
#[derive(Default)]
pub(super) struct Watch {
    last: Option<f64>,
    firing: BTreeMap<String, Vec<(f64, f64)>>,
    pending: BTreeMap<String, f64>,
    alertmanager: BTreeMap<String, f64>,
    flags: BTreeMap<String, f64>,
}

impl Watch {
    pub(super) fn poll(&mut self, prom: u16, am: u16, rw: &Ragwatch, t: f64) {
        let firing: std::collections::BTreeSet<String> =
            prom_alerts(prom, "firing").iter().map(describe).collect();
        for key in firing {
            let runs = self.firing.entry(key).or_default();
            match runs.last_mut() {
                Some(run) if Some(run.1) == self.last => run.1 = t,
                _ => runs.push((t, t)),
            }
        }
        self.last = Some(t);
        for labels in prom_alerts(prom, "pending") {
            self.pending.entry(describe(&labels)).or_insert(t);
        }
        if let Some((200, body)) = http_get(([127, 0, 0, 1], am).into(), "/api/v2/alerts")
            && let Ok(Value::Array(alerts)) = serde_json::from_str::<Value>(&body)
        {
            for a in alerts {
                let key = format!(
                    "{} {}",
                    describe(&a["labels"]),
                    a["status"]["state"].as_str().unwrap_or("?")
                );
                self.alertmanager.entry(key).or_insert(t);
            }
        }
        if let Some(m) = rw.metrics() {
            for (name, labels, v) in &m.0 {
                if name == "ragwatch_drift_active" && *v > 0.0 {
                    let key = format!(
                        "{} {} {}/{}",
                        labels["stratum"], labels["metric"], labels["judge"], labels["rule"]
                    );
                    self.flags.entry(key).or_insert(t);
                }
            }
        }
    }

    pub(super) fn report(&self) -> String {
        let first = |m: &BTreeMap<String, f64>| {
            m.iter()
                .map(|(k, t)| format!("{k} at {t:+.0} s"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let firing = self
            .firing
            .iter()
            .map(|(k, runs)| {
                let runs: Vec<String> = runs
                    .iter()
                    .map(|(a, b)| format!("{a:+.0}..{b:+.0} s"))
                    .collect();
                format!("{k} {}", runs.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "firing in Prometheus: [{firing}]\nfirst pending in Prometheus: [{}]\nfirst held by Alertmanager: [{}]\nragwatch's own drift flags, first raised: [{}]",
            first(&self.pending),
            first(&self.alertmanager),
            first(&self.flags)
        )
    }
}
