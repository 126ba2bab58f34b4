//! A real Prometheus (and Alertmanager) on loopback for the tests that run the shipped rules:
//! starting Debian's daemons, shortening the rules' ranges for a test, and the HTTP query API.
//!
//! Used as `#[path = "common/prometheus.rs"] mod prometheus;` beside `mod common;`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{http_get, spawn_on_free_port};

/// The shipped rules' ranges and the tests': 5m is the short window, 1h the middle one, 24h the
/// baseline; 10m and 15m only appear in health alerts.
pub const RANGES: [(&str, &str); 5] = [
    ("5m", "20s"),
    ("1h", "40s"),
    ("24h", "300s"),
    ("10m", "20s"),
    ("15m", "20s"),
];

/// ragwatch's windows, as the rules' ranges above: short, middle, baseline (seconds). The baseline
/// is shortened less than the rest (24h is 288 short windows; here 15): a baseline only a few short
/// windows long is contaminated by a drop within a minute and no longer measures the drop.
pub const WINDOWS: [u64; 3] = [20, 40, 300];

/// The rules (or a query) with the tests' ranges and `for:` durations.
pub fn shorten_windows(rules: &str) -> String {
    let mut s = rules.to_owned();
    for (from, to) in RANGES {
        s = s.replace(&format!("[{from}]"), &format!("[{to}]"));
    }
    // The exact window sums read deltas over a window one millisecond short of it.
    for (from, to) in [
        ("4m59s999ms", "19s999ms"),
        ("59m59s999ms", "39s999ms"),
        ("23h59m59s999ms", "299s999ms"),
    ] {
        s = s.replace(&format!("[{from}]"), &format!("[{to}]"));
    }
    for d in ["5m", "10m", "15m"] {
        s = s.replace(&format!("for: {d}"), "for: 3s");
    }
    s
}

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a Debian-packaged daemon with `args(port)` on a loopback port of its own, its output in
/// `log`, killed when dropped; returns once its `/-/ready` answers 200.
pub fn daemon(program: &str, args: impl Fn(u16) -> Vec<String>, log: &Path) -> (u16, Killed) {
    let (port, child) = spawn_on_free_port(
        program,
        Duration::from_secs(30),
        |port| {
            let out = std::fs::File::create(log).unwrap();
            Command::new(program)
                .args(args(port))
                .stdout(Stdio::null())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("{program} is installed by tests/run.sh: {e}"))
        },
        |port| {
            http_get(([127, 0, 0, 1], port).into(), "/-/ready").is_some_and(|(code, _)| code == 200)
        },
    );
    (port, Killed(child))
}

/// Starts Prometheus on `dir/prometheus.yml`, its TSDB in `dir/tsdb` and its log in
/// `dir/prometheus.log`, with `extra` flags; killed when dropped.
pub fn start_prometheus(dir: &Path, extra: &[&str]) -> (u16, Killed) {
    daemon(
        "prometheus",
        |port| {
            let mut args = vec![
                format!("--config.file={}", dir.join("prometheus.yml").display()),
                format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
            ];
            args.extend(extra.iter().map(|a| a.to_string()));
            args
        },
        &dir.join("prometheus.log"),
    )
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The result vector of instant query `q` now; `None` when Prometheus does not answer 200.
pub fn query(prom: u16, q: &str) -> Option<Vec<Value>> {
    instant(prom, &format!("query={}", urlencode(q)))
}

/// The result vector of instant query `q` at `time` (Unix seconds).
pub fn query_at(prom: u16, q: &str, time: f64) -> Option<Vec<Value>> {
    instant(prom, &format!("query={}&time={time:.3}", urlencode(q)))
}

fn instant(prom: u16, params: &str) -> Option<Vec<Value>> {
    let (code, body) = http_get(
        ([127, 0, 0, 1], prom).into(),
        &format!("/api/v1/query?{params}"),
    )?;
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array().cloned()
}

pub fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `q`'s value per stratum.
pub fn by_stratum(prom: u16, q: &str) -> BTreeMap<String, f64> {
    query(prom, q)
        .unwrap_or_default()
        .iter()
        .filter_map(|r| {
            Some((
                r["metric"]["stratum"].as_str()?.to_owned(),
                r["value"][1].as_str()?.parse().ok()?,
            ))
        })
        .collect()
}
