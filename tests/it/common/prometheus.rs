//! A real Prometheus (and Alertmanager) on loopback for the tests that run the shipped rules:
//! starting Debian's daemons, the rules generated with the tests' windows or at a timescale
//! ([`Timescale`]), a healthy history backfilled into Prometheus's TSDB before it starts
//! ([`backfill_history`]), and the HTTP query API.

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
        scale: ragwatch::rules::Scale::ONE,
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

/// The shipped rules at a timescale: every duration divided by one factor (`ragwatch rules
/// --scale F`), ragwatch's windows divided as the rules' are, and Prometheus's scrape and
/// evaluation intervals divided too, so that a run of a few minutes is a run of the shipped rules
/// over hours.
#[derive(Debug, Clone, Copy)]
pub struct Timescale(pub f64);

/// The timescale of the tests that page: 15 (5m -> 20 s, 1h -> 4 min, 24h -> 96 min).
pub const SCALE: Timescale = Timescale(15.0);

/// The evaluation interval the simulation of the page (benches/page_power.rs) and the sizing table
/// assume, as shipped: 30 s.
pub const SHIPPED_EVALUATION: Duration = Duration::from_secs(30);

impl Timescale {
    fn scale(&self) -> ragwatch::rules::Scale {
        ragwatch::rules::Scale::new(self.0).unwrap()
    }

    /// `shipped`, at this timescale.
    pub fn of(&self, shipped: Duration) -> Duration {
        self.scale().of(shipped)
    }

    /// The rules' windows: the shipped ones divided.
    pub fn windows(&self) -> ragwatch::rules::Windows {
        ragwatch::rules::Windows::at_scale(self.scale())
    }

    /// The shipped rules at this timescale, as `ragwatch rules --scale F` writes them.
    pub fn rules(&self) -> String {
        ragwatch::rules::rules_yaml(&self.windows(), &ragwatch::rules::Pooling::shipped())
    }

    /// The shipped dashboard at this timescale.
    pub fn dashboard(&self) -> Value {
        serde_json::from_str(&ragwatch::rules::dashboard_json(
            &self.windows(),
            &ragwatch::rules::Pooling::shipped(),
        ))
        .unwrap()
    }

    /// Prometheus's evaluation interval: the shipped 30 s divided (2 s at 15).
    pub fn evaluation(&self) -> Duration {
        self.of(SHIPPED_EVALUATION)
    }

    /// Prometheus's scrape interval: 1 s, the shortest the test bed runs (ragwatch updates its
    /// counters as it judges; a scrape per evaluation or more keeps every delta fresh).
    pub fn scrape(&self) -> Duration {
        Duration::from_secs(1).min(self.evaluation())
    }

    /// ragwatch's windows at this timescale (its short window paces the guaranteed samples and its
    /// own drift flags), as `RAGWATCH__WINDOWS__*` overrides.
    pub fn ragwatch_env(&self) -> Vec<(&'static str, String)> {
        let w = self.windows();
        let secs = |d: Duration| d.as_secs().max(1);
        vec![
            (
                "RAGWATCH__WINDOWS__WINDOW_SECS",
                format!(
                    "[{}, {}, {}]",
                    secs(w.short),
                    secs(w.middle),
                    secs(w.baseline)
                ),
            ),
            ("RAGWATCH__WINDOWS__SHORT_SECS", secs(w.short).to_string()),
            (
                "RAGWATCH__WINDOWS__BASELINE_SECS",
                secs(w.baseline).to_string(),
            ),
        ]
    }

    /// The drop scan's longest look-back at this timescale: where its reference ends.
    pub fn horizon(&self) -> Duration {
        let w = self.windows();
        ragwatch::window::scan::horizon(w.short, w.baseline).unwrap()
    }

    /// `prometheus.yml` scraping ragwatch at `target` (with the namespace and pod labels a
    /// cluster's scrape adds), evaluating `rules.yaml`, sending alerts to `alertmanager` if given.
    pub fn prometheus_yml(&self, target: &str, alertmanager: Option<u16>) -> String {
        let alerting = alertmanager
            .map(|p| {
                format!(
                    "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{p}\"]\n"
                )
            })
            .unwrap_or_default();
        format!(
            "global:\n  scrape_interval: {}\n  evaluation_interval: {}\nrule_files: [rules.yaml]\n{alerting}\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{target}\"]\n\
             \x20       labels: {{{}}}\n",
            ragwatch::rules::prom_duration(self.scrape()),
            ragwatch::rules::prom_duration(self.evaluation()),
            TARGET_LABELS
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

/// The labels [`Timescale::prometheus_yml`]'s scrape adds to ragwatch's series, besides `job`
/// (`ragwatch`) and `instance` (the target).
pub const TARGET_LABELS: [(&str, &str); 2] = [("namespace", "rag-test"), ("pod", "ragwatch-0")];

/// Backfills a healthy history into `dir/tsdb` (Prometheus's data directory, before it starts) with
/// `promtool tsdb create-blocks-from openmetrics`: what ragwatch at `target` counted so far
/// (`scrape`, its `/metrics` text), written as the rules would have recorded it had it been
/// counted evenly over `span` up to `end` (Unix seconds), one evaluation every `step`. For every
/// counter the rules turn into exact window sums (a `ragwatch:X:last` and `ragwatch:X:delta` pair in
/// `rules`), each series gets its deltas (the total divided evenly over the steps) and its readings
/// (rising to the total at the last step), so that the first live evaluation's delta is what
/// ragwatch counted after the history. The baseline's sums then hold the history as a day of
/// steady traffic would; a look-back of the drop scan holds it only in proportion to its length.
/// Returns the series written.
pub fn backfill_history(
    dir: &Path,
    rules: &str,
    scrape: &str,
    target: &str,
    end: f64,
    span: Duration,
    step: Duration,
) -> usize {
    let families: std::collections::BTreeSet<String> = rules
        .lines()
        .zip(rules.lines().skip(1))
        .filter_map(|(record, expr)| {
            let name = record.trim().strip_prefix("- record: ragwatch:")?;
            let name = name.strip_suffix(":last")?;
            (expr.trim() == format!("expr: ragwatch_{name}")).then(|| name.to_owned())
        })
        .collect();
    let steps = (span.as_secs_f64() / step.as_secs_f64()).round().max(1.0) as usize;
    let samples = crate::common::Samples::parse(scrape);
    let mut delta = String::new();
    let mut last = String::new();
    let mut series = 0;
    for (name, labels, value) in &samples.0 {
        let Some(family) = name.strip_prefix("ragwatch_") else {
            continue;
        };
        if !families.contains(family) || *value <= 0.0 {
            continue;
        }
        let mut all: BTreeMap<&str, &str> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        all.insert("job", "ragwatch");
        all.insert("instance", target);
        for (k, v) in TARGET_LABELS {
            all.insert(k, v);
        }
        let labels = all
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(",");
        series += 1;
        for i in 0..steps {
            let t = end - (steps - i) as f64 * step.as_secs_f64();
            let share = value / steps as f64;
            delta.push_str(&format!(
                "ragwatch:{family}:delta{{{labels}}} {share} {t:.3}\n"
            ));
            let reading = value * (i + 1) as f64 / steps as f64;
            last.push_str(&format!(
                "ragwatch:{family}:last{{{labels}}} {reading} {t:.3}\n"
            ));
        }
    }
    // OpenMetrics wants each family's lines together: group the lines by family name.
    let mut by_family: BTreeMap<String, String> = BTreeMap::new();
    for line in delta.lines().chain(last.lines()) {
        let family = line.split('{').next().unwrap().to_owned();
        let text = by_family.entry(family).or_default();
        text.push_str(line);
        text.push('\n');
    }
    let mut text = String::new();
    for (family, lines) in by_family {
        text.push_str(&format!("# TYPE {family} gauge\n{lines}"));
    }
    text.push_str("# EOF\n");
    let file = dir.join("history.om");
    std::fs::write(&file, text).unwrap();
    let out = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(dir.join("tsdb"))
        .output()
        .expect("promtool is installed by tests/run.sh");
    assert!(
        out.status.success(),
        "promtool could not backfill: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    series
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

/// The simulated delay to the page of a 90 % -> 50 % drop at `verdicts` LLM verdicts per stratum
/// per short window, in shipped minutes, from the sizing table of docs/judges.md (written by
/// `benches/page_power.rs`, combined rule): `"p95"`, its 95th percentile, or `"all"`, the first of
/// its 15 and 30 minute columns within which every simulated drop paged. With the figure, what it is.
pub fn simulated_delay(verdicts: u32, which: &str) -> (f64, String) {
    let doc = std::fs::read_to_string(crate::common::repo().join("docs/judges.md")).unwrap();
    let row: Vec<String> = doc
        .lines()
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .find(|c| {
            c.len() > 10
                && c[1].starts_with("combined (r = ")
                && c[2] == verdicts.to_string()
                && c[3] == "90->50 %"
        })
        .unwrap_or_else(|| panic!("docs/judges.md's sizing table has the {verdicts} row"));
    match which {
        "p95" => (row[5].parse().unwrap(), "95 %".to_owned()),
        _ => {
            let (minutes, share) = [(15.0, &row[9]), (30.0, &row[10])]
                .into_iter()
                .find(|(_, share)| share.as_str() == "100 %")
                .unwrap_or_else(|| panic!("no column of the {verdicts} row reaches 100 %"));
            (minutes, format!("{share} "))
        }
    }
}

/// The chain's own latency to a page beyond the rules': a scrape, two evaluations (the recording
/// rules and the alert may fall in consecutive ones), Alertmanager's group wait and Prometheus's
/// resend delay (1 s each as the tests run them).
pub fn chain_latency(scale: Timescale) -> Duration {
    scale.scrape() + scale.evaluation() * 2 + Duration::from_secs(2)
}
