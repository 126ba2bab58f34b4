//! The rules' windows: the three scoring windows, the health alerts' ranges and the alerts'
//! pending durations, as Prometheus durations.

use std::time::Duration;

/// The windows the rules are written with. [`Windows::SHIPPED`] is what deploy/ carries; a test
/// running the rules in a real Prometheus for a minute generates them with shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// The short window the floors, drops and shifts judge (5m).
    pub short: Duration,
    /// The middle window: refusal, citation, label agreement and AUROC ratios, the live audit, and
    /// how far back a delta looks for the previous reading (1h).
    pub middle: Duration,
    /// The baseline: drift and shift compare the short window with the rest of it (24h).
    pub baseline: Duration,
    /// Replaces the ranges of the health alerts (traffic, rejects, judge errors, budget, lag;
    /// 10m and 15m as shipped) when set.
    pub health: Option<Duration>,
    /// Replaces every `for:` of 1m (the variant comparison's), 5m, 10m and 15m when set.
    pub pending: Option<Duration>,
}

impl Windows {
    /// The shipped windows.
    pub const SHIPPED: Windows = Windows {
        short: Duration::from_secs(300),
        middle: Duration::from_secs(3_600),
        baseline: Duration::from_secs(86_400),
        health: None,
        pending: None,
    };

    /// The template variables: each window, each window one millisecond short (the exact window
    /// sums), the health ranges and the pending durations.
    pub(super) fn vars(&self) -> Vec<(&'static str, String)> {
        let health = |d: u64| prom_duration(self.health.unwrap_or(Duration::from_secs(d)));
        vec![
            ("short", prom_duration(self.short)),
            ("middle", prom_duration(self.middle)),
            ("baseline", prom_duration(self.baseline)),
            ("short_sum", sum_range(self.short)),
            ("middle_sum", sum_range(self.middle)),
            ("baseline_sum", sum_range(self.baseline)),
            ("review", prom_duration(self.baseline * 7)),
            ("review_sum", sum_range(self.baseline * 7)),
            ("health_10m", health(600)),
            ("health_15m", health(900)),
            ("for_1m", self.pending_for(60)),
            ("for_5m", self.pending_for(300)),
            ("for_10m", self.pending_for(600)),
            ("for_15m", self.pending_for(900)),
        ]
    }

    /// A `for:` duration of `secs` as shipped, or the replacement.
    pub(super) fn pending_for(&self, secs: u64) -> String {
        prom_duration(self.pending.unwrap_or(Duration::from_secs(secs)))
    }
}

/// A window one millisecond short: a delta recorded at the window's start is not counted twice
/// (Prometheus 2 ranges include their start, Prometheus 3 ranges do not).
pub(super) fn sum_range(d: Duration) -> String {
    prom_duration(d.saturating_sub(Duration::from_millis(1)))
}

/// A Prometheus duration in hours, minutes, seconds and milliseconds: `23h59m59s999ms`, `5m`.
pub(crate) fn prom_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let parts = [
        (ms / 3_600_000, "h"),
        (ms % 3_600_000 / 60_000, "m"),
        (ms % 60_000 / 1_000, "s"),
        (ms % 1_000, "ms"),
    ];
    let mut out = String::new();
    for (n, unit) in parts.into_iter().filter(|(n, _)| *n > 0) {
        out.push_str(&format!("{n}{unit}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_written_as_prometheus_writes_them() {
        assert_eq!(prom_duration(Duration::from_secs(300)), "5m");
        assert_eq!(prom_duration(Duration::from_secs(86_400)), "24h");
        assert_eq!(sum_range(Duration::from_secs(86_400)), "23h59m59s999ms");
        assert_eq!(sum_range(Duration::from_secs(3_600)), "59m59s999ms");
        assert_eq!(sum_range(Duration::from_secs(20)), "19s999ms");
        assert_eq!(prom_duration(Duration::from_secs(300 + 1)), "5m1s");
        assert_eq!(prom_duration(Duration::ZERO), "0s");
    }
}
