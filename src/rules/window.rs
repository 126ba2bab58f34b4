//! The rules' windows: the three scoring windows, the health alerts' ranges and the alerts'
//! pending durations, as Prometheus durations, and the timescale that divides them all.

use std::time::Duration;

/// A timescale factor: every duration of the rules divided by it (15: 5m -> 20s, 24h -> 96m).
/// Finite and positive by construction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale(f64);

// A Scale is never NaN (Scale::new refuses it), so equality is total.
impl Eq for Scale {}

impl Scale {
    /// The shipped timescale: every duration as shipped.
    pub const ONE: Scale = Scale(1.0);

    /// The factor `f`, or why it is not one: it must be finite and positive.
    pub fn new(f: f64) -> Result<Scale, String> {
        if f.is_finite() && f > 0.0 {
            Ok(Scale(f))
        } else {
            Err(format!("the scale {f} is not a finite positive number"))
        }
    }

    /// The factor.
    pub fn factor(self) -> f64 {
        self.0
    }

    /// `d` divided by the factor, to the millisecond (Prometheus's resolution).
    pub fn of(self, d: Duration) -> Duration {
        if self.0 == 1.0 {
            return d;
        }
        Duration::from_millis((d.as_millis() as f64 / self.0).round() as u64)
    }
}

/// Parses `--scale`: a finite positive number.
pub fn parse_scale(s: &str) -> Result<Scale, String> {
    let f: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    Scale::new(f)
}

/// The windows the rules are written with. [`Windows::SHIPPED`] is what deploy/ carries;
/// [`Windows::at_scale`] is the same rules at another timescale, every duration divided by one
/// factor, for a test that runs them in a real Prometheus in minutes.
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
    /// Replaces every `for:` of 1m (the variant comparison's, the partition watch's), 5m, 10m and
    /// 15m when set.
    pub pending: Option<Duration>,
    /// Divides every duration the rules carry besides the three windows: the health ranges and the
    /// pending durations where not replaced, and the look-backs and reference of the drop scan
    /// through the windows they follow. The windows are given as written ([`Windows::at_scale`]
    /// divides them too). The millisecond that keeps a window sum from counting its first delta
    /// twice (`offset 1ms`, `[4m59s999ms]`) is Prometheus's resolution, not a timescale, and stays.
    pub scale: Scale,
}

impl Windows {
    /// The shipped windows.
    pub const SHIPPED: Windows = Windows {
        short: Duration::from_secs(300),
        middle: Duration::from_secs(3_600),
        baseline: Duration::from_secs(86_400),
        health: None,
        pending: None,
        scale: Scale::ONE,
    };

    /// The shipped windows at timescale `scale`: every duration of the shipped rules divided by
    /// it, so that the rules generated with them are the shipped rules, run faster.
    pub fn at_scale(scale: Scale) -> Windows {
        let s = Self::SHIPPED;
        Windows {
            short: scale.of(s.short),
            middle: scale.of(s.middle),
            baseline: scale.of(s.baseline),
            health: None,
            pending: None,
            scale,
        }
    }

    /// The template variables: each window, each window one millisecond short (the exact window
    /// sums), the health ranges and the pending durations.
    pub(super) fn vars(&self) -> Vec<(&'static str, String)> {
        let health = |d: u64| {
            prom_duration(
                self.health
                    .unwrap_or_else(|| self.scale.of(Duration::from_secs(d))),
            )
        };
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
            (
                "horizon",
                crate::window::scan::horizon(self.short, self.baseline)
                    .map_or_else(|| "window".to_owned(), super::scan::window_label),
            ),
        ]
    }

    /// A `for:` duration of `secs` as shipped, or the replacement.
    pub(super) fn pending_for(&self, secs: u64) -> String {
        prom_duration(
            self.pending
                .unwrap_or_else(|| self.scale.of(Duration::from_secs(secs))),
        )
    }
}

/// A window one millisecond short: a delta recorded at the window's start is not counted twice
/// (Prometheus 2 ranges include their start, Prometheus 3 ranges do not).
pub(super) fn sum_range(d: Duration) -> String {
    prom_duration(d.saturating_sub(Duration::from_millis(1)))
}

/// A Prometheus duration in hours, minutes, seconds and milliseconds: `23h59m59s999ms`, `5m`.
pub fn prom_duration(d: Duration) -> String {
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
