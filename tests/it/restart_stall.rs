//! Where does the stall after kill -9 come from: the broker, librdkafka, or ragwatch? The same kill
//! schedule is run against three kinds of consumer group member, each on a fresh tansu broker:
//! ragwatch itself, a plain rdkafka consumer (this test binary re-run as a child, librdkafka 2.12.1
//! as in ragwatch, none of ragwatch's code), and an aiokafka consumer (Python, its own protocol
//! code). Three members in a row live about 3 s each and are killed with SIGKILL; then a fourth
//! starts, and the time from its start to its first assignment of at least one partition is
//! measured, watched for up to 150 s. Each kind runs with librdkafka's default session (45 s,
//! heartbeat 3 s), a short one (6 s, heartbeat 500 ms), 10 s with a 1 s heartbeat, and with
//! static membership (every run the same `group.instance.id`, as a restarted pod has).
//! `RAGWATCH_BIN=path` runs another ragwatch build; `RESTART_STALL_KINDS=ragwatch,rdkafka,aiokafka`
//! and `RESTART_STALL_ROWS=0,2` pick kinds and settings.
//!
//! What it showed, and tansu-broker 0.6's group coordinator explains: when a dead member's session
//! runs out during a live member's Heartbeat, the coordinator answers that heartbeat before it
//! expires the member, then drops the group from Formed to Forming without a new generation, so
//! the live member's heartbeats keep succeeding and it never rejoins. It keeps the share the last
//! rebalance gave it while the dead members still counted, often none ("assigned 0"), for as long
//! as we watched, whatever the client. With a short session the dead members usually expire during
//! the newcomer's JoinGroup instead, and it gets everything. Static members are not expired at all
//! by requests carrying a group instance id; each of their JoinGroup and SyncGroup calls is held 3 s.
//!
//! It takes about 25 minutes, so it is ignored by default:
//! `cargo test --release --features broker --test it restart_stall:: -- --ignored --nocapture --test-threads=1`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;

/// How long each killed member lives.
const LIFETIME: Duration = Duration::from_secs(3);
/// How long the last member is watched.
const WATCH: Duration = Duration::from_secs(150);
/// The child-process mode of this binary: the plain rdkafka member's arguments.
const MEMBER_ENV: &str = "RESTART_STALL_RDKAFKA_MEMBER";

#[derive(Clone, Copy, Debug)]
enum Kind {
    Ragwatch,
    Rdkafka,
    Aiokafka,
}

#[derive(Clone, Copy, Debug)]
struct Settings {
    name: &'static str,
    session_ms: u32,
    heartbeat_ms: u32,
    instance_id: Option<&'static str>,
}

/// One running member, whichever its kind.
enum Member {
    Ragwatch(Ragwatch),
    Child(Child, mpsc::Receiver<usize>),
}

impl Member {
    fn start(kind: Kind, s: Settings, brokers: &str, topic: &str, group: &str) -> Member {
        let session = s.session_ms.to_string();
        let heartbeat = s.heartbeat_ms.to_string();
        match kind {
            Kind::Ragwatch => {
                let config =
                    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/ragwatch.toml"));
                let mut env = Ragwatch::kafka_env(brokers, topic, group);
                match std::env::var_os("RAGWATCH_BIN") {
                    // Another (older) build, from before the session settings were ragwatch's own
                    // keys: they go through as librdkafka properties.
                    Some(bin) => {
                        env.push(("RAGWATCH__KAFKA__PROPERTIES__SESSION.TIMEOUT.MS", session));
                        env.push((
                            "RAGWATCH__KAFKA__PROPERTIES__HEARTBEAT.INTERVAL.MS",
                            heartbeat,
                        ));
                        if let Some(id) = s.instance_id {
                            env.push(("RAGWATCH__KAFKA__PROPERTIES__GROUP.INSTANCE.ID", id.into()));
                        }
                        // Its defaults: today's example config has keys it does not know.
                        let empty = Path::new("/dev/null");
                        Member::Ragwatch(Ragwatch::start_bin(Path::new(&bin), empty, &env))
                    }
                    None => {
                        env.push(("RAGWATCH__KAFKA__SESSION_TIMEOUT_MS", session));
                        env.push(("RAGWATCH__KAFKA__HEARTBEAT_INTERVAL_MS", heartbeat));
                        let id = s.instance_id.unwrap_or("").to_owned();
                        env.push(("RAGWATCH__KAFKA__GROUP_INSTANCE_ID", id));
                        Member::Ragwatch(Ragwatch::start(config, &env))
                    }
                }
            }
            Kind::Rdkafka => {
                let args = [
                    brokers,
                    topic,
                    group,
                    &session,
                    &heartbeat,
                    s.instance_id.unwrap_or(""),
                ]
                .join(",");
                let cmd = Command::new(std::env::current_exe().unwrap())
                    .args(["rdkafka_member", "--exact", "--ignored", "--nocapture"])
                    .env(MEMBER_ENV, args)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                Self::child(cmd)
            }
            Kind::Aiokafka => {
                let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/aiokafka_member.py");
                let mut cmd = Command::new("python3");
                cmd.arg(script)
                    .args([brokers, topic, group, &session, &heartbeat])
                    .args(s.instance_id)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null());
                Self::child(
                    cmd.spawn()
                        .expect("python3 with aiokafka (python3 -m pip install aiokafka)"),
                )
            }
        }
    }

    /// A child that prints `assigned N` on each assignment: a thread forwards the counts.
    fn child(mut child: Child) -> Member {
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("assigned ") {
                    let _ = tx.send(n.trim().parse().unwrap_or(0));
                }
            }
        });
        Member::Child(child, rx)
    }

    /// Partitions held now, as far as the member has told.
    fn held(&mut self, last: &mut usize) -> usize {
        match self {
            Member::Ragwatch(rw) => {
                if let Some(m) = rw.metrics() {
                    *last = m.sum("ragwatch_kafka_assigned_partitions", &[]) as usize;
                }
            }
            Member::Child(_, rx) => {
                while let Ok(n) = rx.try_recv() {
                    *last = n;
                }
            }
        }
        *last
    }

    /// Polls until the member holds a partition or `deadline`; returns when it first did.
    fn first_assignment(&mut self, start: Instant, deadline: Duration) -> Option<Duration> {
        let mut last = 0;
        while start.elapsed() < deadline {
            if self.held(&mut last) > 0 {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn kill(self) {
        match self {
            Member::Ragwatch(rw) => drop(rw), // Drop sends SIGKILL.
            Member::Child(mut c, _) => {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Three members killed after `LIFETIME` each, then a fourth: (did each killed member hold
/// partitions, time from the fourth's start to its first assignment).
fn scenario(kind: Kind, s: Settings) -> (Vec<Option<Duration>>, Option<Duration>) {
    let broker = Broker::start();
    let topic = unique("stall");
    let group = unique("g");
    broker.create_topic(&topic, 3);
    produce(&broker.brokers(), &topic, &gen_traces(30, &["--seed", "5"]));
    let mut killed = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let mut m = Member::start(kind, s, &broker.brokers(), &topic, &group);
        let held = m.first_assignment(start, LIFETIME);
        // Live out the lifetime whether or not partitions came.
        let mut last = 0;
        while start.elapsed() < LIFETIME {
            m.held(&mut last);
            std::thread::sleep(Duration::from_millis(50));
        }
        m.kill();
        killed.push(held);
    }
    let start = Instant::now();
    let mut last = Member::start(kind, s, &broker.brokers(), &topic, &group);
    let took = last.first_assignment(start, WATCH);
    last.kill();
    (killed, took)
}

fn show(d: Option<Duration>) -> String {
    d.map_or("never".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

#[test]
#[ignore = "about 20 minutes; run by hand to compare consumers after kill -9"]
fn stall_after_kill_9_by_consumer_kind() {
    let settings = [
        Settings {
            name: "session 45 s (librdkafka default), heartbeat 3 s",
            session_ms: 45_000,
            heartbeat_ms: 3_000,
            instance_id: None,
        },
        Settings {
            name: "session 6 s, heartbeat 500 ms",
            session_ms: 6_000,
            heartbeat_ms: 500,
            instance_id: None,
        },
        Settings {
            name: "session 10 s, heartbeat 1 s",
            session_ms: 10_000,
            heartbeat_ms: 1_000,
            instance_id: None,
        },
        Settings {
            name: "static membership, session 45 s, heartbeat 3 s",
            session_ms: 45_000,
            heartbeat_ms: 3_000,
            instance_id: Some("pod-0"),
        },
    ];
    let kinds = match std::env::var("RESTART_STALL_KINDS") {
        Ok(list) => list
            .split(',')
            .map(|k| match k {
                "ragwatch" => Kind::Ragwatch,
                "rdkafka" => Kind::Rdkafka,
                _ => Kind::Aiokafka,
            })
            .collect(),
        Err(_) => vec![Kind::Ragwatch, Kind::Rdkafka, Kind::Aiokafka],
    };
    // RESTART_STALL_ROWS=0,3 runs only those rows of `settings`.
    let rows_wanted: Option<Vec<usize>> = std::env::var("RESTART_STALL_ROWS")
        .ok()
        .map(|r| r.split(',').filter_map(|i| i.parse().ok()).collect());
    let mut rows = Vec::new();
    for (i, s) in settings.into_iter().enumerate() {
        if rows_wanted.as_ref().is_some_and(|w| !w.contains(&i)) {
            continue;
        }
        for &kind in &kinds {
            let (killed, took) = scenario(kind, s);
            let row = format!(
                "| {} | {kind:?} | {} | {} |",
                s.name,
                killed
                    .iter()
                    .map(|d| show(*d))
                    .collect::<Vec<_>>()
                    .join(", "),
                show(took)
            );
            eprintln!("{row}");
            rows.push(row);
        }
    }
    eprintln!(
        "| settings | member | killed members' first assignment | last member's first assignment |"
    );
    eprintln!("|---|---|---|---|");
    for r in rows {
        eprintln!("{r}");
    }
}

/// The plain rdkafka member, run as a child process by the test above (does nothing otherwise).
#[test]
#[ignore = "a child process of stall_after_kill_9_by_consumer_kind"]
fn rdkafka_member() {
    use rdkafka::ClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

    struct Report;
    impl ClientContext for Report {}
    impl ConsumerContext for Report {
        fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
            if let Rebalance::Assign(tpl) = rebalance {
                println!("assigned {}", tpl.count());
            }
        }
    }

    let Ok(args) = std::env::var(MEMBER_ENV) else {
        return;
    };
    let a: Vec<&str> = args.split(',').collect();
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", a[0])
        .set("group.id", a[2])
        .set("session.timeout.ms", a[3])
        .set("heartbeat.interval.ms", a[4])
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "5");
    if !a[5].is_empty() {
        c.set("group.instance.id", a[5]);
    }
    let consumer: BaseConsumer<Report> = c.create_with_context(Report).unwrap();
    consumer.subscribe(&[a[1]]).unwrap();
    loop {
        let _ = consumer.poll(Duration::from_millis(100));
    }
}
