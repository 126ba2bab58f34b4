#![allow(clippy::unwrap_used)]
//! Test harness: real processes on loopback. A tansu broker (a Kafka-protocol broker), the ragwatch
//! binary itself, and a scraper for its `/metrics`. Every test makes its own topic and group.

#![allow(dead_code)]

pub mod alertmanager;
pub mod dockerfile;
pub mod judge;
pub mod manifests;
pub mod prometheus;
pub mod ragtruth;
pub mod rollout;
pub mod sink;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// A loopback port that was free a moment ago (bound then released): for daemons that must be
/// told their port, start them with [`spawn_on_free_port`], which survives losing the port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts a daemon that must be told its port up front (tansu advertises its listener URL;
/// Prometheus, Alertmanager, moto and llama.cpp's server take it as a flag, and none reports a
/// port it chose itself): `spawn(port)` on a port found free, until `ready(port)` holds. When the
/// daemon exits before it is ready (another process took the port between the check and the
/// bind), it is started again on another port, up to five times. Readiness counts only while the
/// daemon is still running, so an answer from whoever took the port is not mistaken for it.
pub fn spawn_on_free_port(
    what: &str,
    timeout: Duration,
    mut spawn: impl FnMut(u16) -> Child,
    mut ready: impl FnMut(u16) -> bool,
) -> (u16, Child) {
    for attempt in 1..=5 {
        let port = free_port();
        let mut child = spawn(port);
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                eprintln!(
                    "{what} exited ({status}) on port {port} (attempt {attempt}): another port"
                );
                break;
            }
            if ready(port) {
                std::thread::sleep(Duration::from_millis(100));
                if child.try_wait().unwrap().is_none() {
                    return (port, child);
                }
                continue;
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                panic!("{what} was not ready on port {port} within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("{what} exited on five ports in a row");
}

/// The repository's root: the crate's manifest directory.
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU_BIN") {
        return p.into();
    }
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(&std::env::var("HOME").unwrap_or_default()).join(".cargo"));
    let cargo = cargo_home.join("bin/tansu");
    if cargo.exists() {
        return cargo;
    }
    PathBuf::from("tansu")
}

/// A tansu broker with in-memory storage, killed on drop.
pub struct Broker {
    pub port: u16,
    child: Child,
}

/// An S3-compatible object store on loopback (moto's server, from PyPI) with one bucket, `tansu`:
/// storage that outlives a broker process, so a broker can be killed and restarted with its data.
pub struct ObjectStore {
    pub port: u16,
    child: Child,
}

impl ObjectStore {
    pub fn start() -> ObjectStore {
        let (port, child) = spawn_on_free_port(
            "the object store",
            Duration::from_secs(30),
            |port| {
                Command::new("python3")
                    .args(["-m", "moto.server", "-p", &port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("moto's server is installed (tests/run.sh installs it)")
            },
            // Creating the bucket is the readiness check.
            |port| {
                http_request(([127, 0, 0, 1], port).into(), "PUT", "/tansu")
                    .is_some_and(|(code, _)| code == 200)
            },
        );
        ObjectStore { port, child }
    }
}

impl Drop for ObjectStore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    /// A broker with in-memory storage on a port of its own.
    pub fn start() -> Broker {
        Self::spawn(None, "memory://tansu/", &[])
    }

    /// A broker that keeps its topics, records and group offsets in `store`; on `port` (a
    /// restart of an earlier broker) or, with `None`, on a port of its own.
    pub fn start_persistent(port: Option<u16>, store: &ObjectStore) -> Broker {
        let endpoint = format!("http://127.0.0.1:{}", store.port);
        Self::spawn(
            port,
            "s3://tansu/",
            &[
                ("AWS_ENDPOINT", endpoint.as_str()),
                ("AWS_ALLOW_HTTP", "true"),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_DEFAULT_REGION", "us-east-1"),
            ],
        )
    }

    fn spawn(port: Option<u16>, storage: &str, env: &[(&str, &str)]) -> Broker {
        let spawn = |port: u16| {
            let url = format!("tcp://127.0.0.1:{port}");
            Command::new(tansu_bin())
                .args([
                    "broker",
                    "--listener-url",
                    &url,
                    "--advertised-listener-url",
                    &url,
                    "--storage-engine",
                    storage,
                ])
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("tansu is installed (tests/run.sh installs it)")
        };
        let listening = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
        let timeout = Duration::from_secs(20);
        let (port, child) = match port {
            None => spawn_on_free_port("tansu", timeout, spawn, listening),
            Some(port) => {
                let child = spawn(port);
                wait_for("tansu to listen", timeout, || listening(port).then_some(()));
                (port, child)
            }
        };
        Broker { port, child }
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let status = Command::new(tansu_bin())
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.port),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "tansu topic create {name}");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A producer to the test broker, batching what comes within 5 ms.
fn producer_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("message.max.bytes", "10000000");
    config
}

/// Queues one record, waiting while the producer's queue is full.
pub fn send<K: rdkafka::message::ToBytes + ?Sized, P: rdkafka::message::ToBytes + ?Sized>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, K, P>,
) {
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((_, r)) => {
                record = r;
                producer.poll(Duration::from_millis(5));
            }
        }
    }
}

/// Produces `messages` (key, payload) and waits until all are acknowledged.
pub fn produce(brokers: &str, topic: &str, messages: &[(String, Vec<u8>)]) {
    // tansu 0.6 answers a fetch that starts inside a record batch with the next batch, so a
    // consumer resuming mid-batch (the restart and rebalance tests) would skip the batch tail; one
    // record per batch avoids it.
    let producer: ThreadedProducer<DefaultProducerContext> = producer_config(brokers)
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    for (key, payload) in messages {
        send(
            &producer,
            BaseRecord::to(topic)
                .key(key.as_str())
                .payload(payload.as_slice()),
        );
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Produces, on a thread of its own, the traces `next` gives at each tick, `ticks_per_sec` ticks a
/// second evenly spaced, until `stop`: live traffic at a steady rate while the test watches. Each
/// trace is keyed by its `trace_id`. Records are batched as a service's producer batches them:
/// nothing in a test that watches a stream resumes mid-batch, and a request per record would load
/// the broker far beyond the traffic's rate.
pub fn stream_traces(
    brokers: String,
    topic: String,
    ticks_per_sec: u64,
    stop: Arc<AtomicBool>,
    mut next: impl FnMut() -> Vec<serde_json::Value> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer: ThreadedProducer<DefaultProducerContext> =
            producer_config(&brokers).create().unwrap();
        let tick = Duration::from_millis(1000 / ticks_per_sec);
        let mut due = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            for trace in next() {
                let id = trace["trace_id"].as_str().unwrap_or_default().to_owned();
                let payload = serde_json::to_vec(&trace).unwrap();
                send(&producer, BaseRecord::to(&topic).key(&id).payload(&payload));
            }
            due += tick;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        producer.flush(Duration::from_secs(5)).unwrap();
    })
}

/// Produces `messages` on a thread of its own, `chunk` at a time with `pause` after each: a stream
/// that keeps arriving while the test watches the consumer.
pub fn produce_paced(
    brokers: &str,
    topic: &str,
    messages: Vec<(String, Vec<u8>)>,
    chunk: usize,
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let (brokers, topic) = (brokers.to_owned(), topic.to_owned());
    std::thread::spawn(move || {
        for part in messages.chunks(chunk) {
            produce(&brokers, &topic, part);
            std::thread::sleep(pause);
        }
    })
}

/// Each partition's committed offset for `group` (-1 when none) and its high watermark.
pub fn committed_and_high(
    brokers: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    (0..partitions)
        .map(|p| {
            let c = match committed.find_partition(topic, p).unwrap().offset() {
                Offset::Offset(o) => o,
                _ => -1,
            };
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            (c, high)
        })
        .collect()
}

/// Runs `cmd` and asserts it succeeded, showing its stderr when not.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The OTLP messages a framework app wrote to a file: each a big-endian u32 length, then the
/// protobuf bytes.
pub fn length_prefixed_messages(path: &Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut rest = &data[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        out.push(rest[4..4 + len].to_vec());
        rest = &rest[4 + len..];
    }
    out
}

/// Generated native traces: (trace_id, json) via tests/gen_traces.py.
pub fn gen_traces(n: usize, extra: &[&str]) -> Vec<(String, Vec<u8>)> {
    let out = run_ok(
        Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen_traces.py"))
            .arg(n.to_string())
            .args(extra),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["trace_id"].as_str().unwrap().to_owned(),
                l.as_bytes().to_vec(),
            )
        })
        .collect()
}

/// The bearer token [`Ragwatch::start`] gives ragwatch's write listener, and [`http_post`] sends.
pub const WRITE_TOKEN: &str = "test-write-token";

/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS` for an OpenTelemetry SDK exporting to [`Ragwatch::start`]'s
/// write listener: the bearer token, its space percent-encoded as the variable's format asks.
pub fn otel_auth_header() -> String {
    format!("Authorization=Bearer%20{WRITE_TOKEN}")
}

/// A running ragwatch process.
pub struct Ragwatch {
    pub child: Child,
    /// The admin (metrics and probes) address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
    pub log: PathBuf,
}

impl Ragwatch {
    /// Starts `ragwatch run` with the given config file and `RAGWATCH__...` overrides, on port 0;
    /// the write listener (when the config turns it on) on port 0 too, taking [`WRITE_TOKEN`].
    pub fn start(config: &Path, env: &[(&str, String)]) -> Ragwatch {
        let mut all = vec![
            ("RAGWATCH__WRITE__LISTEN", "127.0.0.1:0".to_owned()),
            ("RAGWATCH_WRITE_TOKENS", WRITE_TOKEN.to_owned()),
        ];
        all.extend(env.iter().cloned());
        Self::start_bin(Path::new(env!("CARGO_BIN_EXE_ragwatch")), config, &all)
    }

    /// The write listener's address, once it listens.
    pub fn write_addr(&self) -> SocketAddr {
        let file = self._dir.path().join("write-addr");
        wait_for("the write listener", Duration::from_secs(20), || {
            std::fs::read_to_string(&file).ok()?.parse().ok()
        })
    }

    /// The same with another ragwatch binary (an older build, to compare).
    pub fn start_bin(bin: &Path, config: &Path, env: &[(&str, String)]) -> Ragwatch {
        Self::start_command(Command::new(bin), config, env)
    }

    /// [`Ragwatch::start`] through `wrapper`, a program and its arguments that end by running
    /// the command after them (e.g. `unshare -m sh -c '...; exec "$@"' sh`): ragwatch's binary and
    /// its arguments follow, and the process keeps the environment given here.
    pub fn start_wrapped(wrapper: &[&str], config: &Path, env: &[(&str, String)]) -> Ragwatch {
        let mut all = vec![
            ("RAGWATCH__WRITE__LISTEN", "127.0.0.1:0".to_owned()),
            ("RAGWATCH_WRITE_TOKENS", WRITE_TOKEN.to_owned()),
        ];
        all.extend(env.iter().cloned());
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..]).arg(env!("CARGO_BIN_EXE_ragwatch"));
        Self::start_command(cmd, config, &all)
    }

    /// `cmd` (ragwatch's binary, or a wrapper ending in it) with `run --config` and the harness's
    /// environment: admin and write listeners on port 0, their addresses in files.
    fn start_command(mut cmd: Command, config: &Path, env: &[(&str, String)]) -> Ragwatch {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("addr");
        let log = dir.path().join("ragwatch.log");
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            // They would make every ragwatch of a test one static group member (the kafka
            // section's group_instance_id default); a test that wants that sets them below.
            .env_remove("POD_NAME")
            .env_remove("HOSTNAME")
            .env("RAGWATCH__HTTP__LISTEN", "127.0.0.1:0")
            .env("RAGWATCH__HTTP__PORT_FILE", &port_file)
            .env("RAGWATCH__WRITE__PORT_FILE", dir.path().join("write-addr"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let addr = wait_for("ragwatch to listen", Duration::from_secs(20), || {
            std::fs::read_to_string(&port_file).ok()?.parse().ok()
        });
        Ragwatch {
            child,
            addr,
            _dir: dir,
            log,
        }
    }

    /// Kafka overrides for `brokers`, `topic` and `group`, with test-bed fetch settings.
    pub fn kafka_env(brokers: &str, topic: &str, group: &str) -> Vec<(&'static str, String)> {
        vec![
            ("RAGWATCH__SOURCE__KIND", "kafka".into()),
            ("RAGWATCH__KAFKA__BROKERS", brokers.into()),
            ("RAGWATCH__KAFKA__TOPICS", topic.into()),
            ("RAGWATCH__KAFKA__GROUP_ID", group.into()),
            ("RAGWATCH__KAFKA__STATS_INTERVAL_MS", "1000".into()),
            ("RAGWATCH__KAFKA__COMMIT_INTERVAL_MS", "200".into()),
            ("RAGWATCH__KAFKA__PROPERTIES__FETCH.WAIT.MAX.MS", "5".into()),
        ]
    }

    pub fn scrape(&self) -> Option<String> {
        http_get(self.addr, "/metrics")
            .filter(|(code, _)| *code == 200)
            .map(|(_, b)| b)
    }

    pub fn metrics(&self) -> Option<Samples> {
        self.scrape().map(|t| Samples::parse(&t))
    }

    /// The metrics once the samples of `families` have stopped moving: `/metrics` is read every
    /// 100 ms until two reads in a row agree on every sample of those families (names that start
    /// with one of them: `_bucket`, `_sum` and `_count` included), then that read is returned. A
    /// counter compared with what a client saw is read this way, never from one snapshot: the
    /// process may still be counting the last requests when the client has its answers. Panics
    /// after `timeout` if they never settle.
    pub fn settled_metrics(&self, families: &[&str], timeout: Duration) -> Samples {
        settled(|| self.metrics(), families, timeout)
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        wait_for("ragwatch to exit", timeout, || {
            self.child.try_wait().unwrap()
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Ragwatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 GET; returns status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_request(addr, "GET", path)
}

/// A minimal HTTP/1.1 request without a body; returns status and body.
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    http_request_as(addr, method, path, None)
}

/// [`http_request`] with `token` as the bearer token.
pub fn http_request_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let code = raw.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Some((code, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// POSTs `body` to `path` with [`WRITE_TOKEN`]; returns the status and the response body.
pub fn http_post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    http_post_as(addr, path, body, Some(WRITE_TOKEN))
}

/// POSTs `body` to `path` with `token` as the bearer token (none: no `Authorization` header).
pub fn http_post_as(
    addr: SocketAddr,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let code = raw.split(' ').nth(1).unwrap().parse().unwrap();
    (code, raw.split_once("\r\n\r\n").unwrap().1.to_string())
}

/// Reads `read` every 100 ms until two reads in a row agree on every sample of `families` (see
/// [`Ragwatch::settled_metrics`]), and returns the second.
pub fn settled(
    mut read: impl FnMut() -> Option<Samples>,
    families: &[&str],
    timeout: Duration,
) -> Samples {
    let mut last: Option<Vec<Sample>> = None;
    let what = format!("{families:?} to settle");
    wait_for(&what, timeout, || {
        let m = read()?;
        let now = m.of_families(families);
        let agreed = last.as_ref() == Some(&now);
        last = Some(now);
        agreed.then_some(m)
    })
}

/// One sample as [`settled`] compares it: name, sorted labels, value bits.
type Sample = (String, Vec<(String, String)>, u64);

/// Parsed Prometheus text samples.
pub struct Samples(pub Vec<(String, HashMap<String, String>, f64)>);

impl Samples {
    pub fn parse(text: &str) -> Samples {
        let mut v = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let mut m = HashMap::new();
                    for pair in rest.trim_end_matches('}').split("\",") {
                        if let Some((k, v)) = pair.split_once("=\"") {
                            m.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                        }
                    }
                    (n.to_owned(), m)
                }
                None => (series.to_owned(), HashMap::new()),
            };
            v.push((name, labels, value.parse().unwrap_or(f64::NAN)));
        }
        Samples(v)
    }

    /// The samples of `families` (names starting with one of them), in order, labels sorted and
    /// values as bits (so NaN equals NaN): what [`settled`] compares between reads.
    fn of_families(&self, families: &[&str]) -> Vec<Sample> {
        let mut v: Vec<_> = self
            .0
            .iter()
            .filter(|(n, _, _)| families.iter().any(|f| n.starts_with(f)))
            .map(|(n, l, x)| {
                let mut l: Vec<_> = l.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                l.sort();
                (n.clone(), l, x.to_bits())
            })
            .collect();
        v.sort();
        v
    }

    /// Sum of the samples of `name` whose labels include all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.2)
            .sum()
    }
}

impl Samples {
    /// The AUROC of the per-bucket counters of `family` for `judge` and `stratum`, the recording
    /// rules' formula written again here: `sum_b pos_b * (neg_cum_b - neg_b / 2) / (pos * neg)`,
    /// the positive class the samples whose `class` label is `positive`. `None` without both
    /// classes.
    pub fn auroc(
        &self,
        family: &str,
        (class, positive): (&str, &str),
        judge: &str,
        stratum: &str,
    ) -> Option<f64> {
        let mut buckets: Vec<(f64, f64, f64)> = Vec::new();
        for (name, labels, v) in &self.0 {
            if name != family || labels["judge"] != judge || labels["stratum"] != stratum {
                continue;
            }
            let le: f64 = labels["bucket"].parse().unwrap();
            let at = match buckets.iter().position(|b| b.0 == le) {
                Some(i) => i,
                None => {
                    buckets.push((le, 0.0, 0.0));
                    buckets.len() - 1
                }
            };
            if labels[class] == positive {
                buckets[at].1 += v;
            } else {
                buckets[at].2 += v;
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (pos, neg): (f64, f64) = buckets
            .iter()
            .fold((0.0, 0.0), |a, b| (a.0 + b.1, a.1 + b.2));
        let mut cum = 0.0;
        let mut u = 0.0;
        for (_, p, n) in &buckets {
            cum += n;
            u += p * (cum - n / 2.0);
        }
        (pos > 0.0 && neg > 0.0).then(|| u / (pos * neg))
    }
}

/// Runs `cmd` with `input` on its stdin and collects its output.
pub fn pipe(cmd: &mut Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} (tests/run.sh installs what the tests need): {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `promtool check metrics` on `text`, where the `prometheus` tier is built: a suite of the plain
/// tier checks its scrapes' format with promtool only in that tier's run, and everything else it
/// proves in every run.
pub fn promtool_check_metrics_in_tier(text: &str) {
    #[cfg(feature = "prometheus")]
    promtool_check_metrics(text).unwrap();
    #[cfg(not(feature = "prometheus"))]
    let _ = text;
}

/// Runs promtool check metrics on `text`; returns its output on failure.
pub fn promtool_check_metrics(text: &str) -> Result<(), String> {
    let out = pipe(Command::new("promtool").args(["check", "metrics"]), text);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A random suffix for topic and group names.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), rand::random::<u32>())
}

/// A file of the labelled development data: in `$RAGWATCH_DATA`, else in `../shared/data` beside
/// the checkout. Only the `data` tier calls it, and a missing file fails that tier's test: a test
/// that cannot read its data must not pass.
pub fn labelled_data(file: &str) -> PathBuf {
    let dir = std::env::var_os("RAGWATCH_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let path = dir.join(file);
    assert!(
        path.is_file(),
        "the `data` tier needs {} (set RAGWATCH_DATA to its folder, or build without --features data)",
        path.display()
    );
    path
}
