//! A real Prometheus (and Alertmanager) on loopback for the tests that run the shipped rules:
//! starting Debian's daemons, the rules generated with the tests' windows, and the HTTP query API.
//!
//! Used as `#[path = "common/prometheus.rs"] mod prometheus;` beside `mod common;`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{http_get, spawn_on_free_port, wait_for};

/// ragwatch's windows in the tests that run the rules in a real Prometheus: short, middle,
/// baseline (seconds). The baseline is shortened less than the rest (24h is 288 short windows;
/// here 15): a baseline only a few short windows long is contaminated by a drop within a minute
/// and no longer measures the drop.
pub const WINDOWS: [u64; 3] = [20, 40, 300];

/// The rules' windows for those tests: [`WINDOWS`], health ranges of 20 s, alerts pending 3 s.
pub fn test_windows() -> ragwatch::rules::Windows {
    ragwatch::rules::Windows {
        short: Duration::from_secs(WINDOWS[0]),
        middle: Duration::from_secs(WINDOWS[1]),
        baseline: Duration::from_secs(WINDOWS[2]),
        health: Some(Duration::from_secs(20)),
        pending: Some(Duration::from_secs(3)),
    }
}

/// The shipped rules as `ragwatch rules` writes them with [`test_windows`].
pub fn test_rules() -> String {
    ragwatch::rules::rules_yaml(&test_windows(), &ragwatch::rules::Pooling::shipped())
}

/// The shipped dashboard as `ragwatch rules` writes it with [`test_windows`].
pub fn test_dashboard() -> Value {
    serde_json::from_str(&ragwatch::rules::dashboard_json(
        &test_windows(),
        &ragwatch::rules::Pooling::shipped(),
    ))
    .unwrap()
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

/// Loads `rules` into the Prometheus on `port` (`process`, started on `dir/prometheus.yml` with an
/// empty `dir/rules.yaml`) once it scrapes ragwatch, as in a cluster where Prometheus has been
/// running: right after its start, Prometheus evaluates rules for up to 5 s before service
/// discovery hands it its first target, and an absence alert would fire. Writes the rules, sends
/// SIGHUP (Prometheus reloads its configuration and rule files), and returns once its rules API
/// lists `marker`.
pub fn load_rules_after_first_scrape(
    dir: &Path,
    port: u16,
    process: &Killed,
    rules: &str,
    marker: &str,
) {
    wait_for(
        "Prometheus to scrape ragwatch",
        Duration::from_secs(30),
        || (!query(port, "up{job=\"ragwatch\"} == 1")?.is_empty()).then_some(()),
    );
    std::fs::write(dir.join("rules.yaml"), rules).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &process.0.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for(
        "Prometheus to load the rules",
        Duration::from_secs(30),
        || {
            let (code, body) = http_get(([127, 0, 0, 1], port).into(), "/api/v1/rules")?;
            (code == 200 && body.contains(marker)).then_some(())
        },
    );
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
