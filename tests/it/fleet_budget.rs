//! The judge budget is the fleet's over OTLP too: replicas that find each other through DNS spend
//! the configured tokens per minute together, whatever their number.
//!
//! Each replica is `ragwatch run` with `source.kind = "otlp"`, the LLM judge on every trace
//! (`judge.sampled = "llm"`, `sample.default_rate = 1.0`) against the loopback OpenAI stand-in
//! (`common/judge/`, which logs every billed request with its arrival time), a `[budget]` whose
//! tokens per minute bind, and `fleet.peers = "peers.ragwatch.test"` refreshed every second. Peer
//! discovery is real: each replica runs in a mount namespace of its own (`unshare -m`) with a
//! hosts file of the test's bind-mounted over `/etc/hosts`, so the resolver (getaddrinfo, through
//! the C library's `files` source) answers the name with every address the file lists for it.
//! Each replica has a loopback address of its own (127.0.0.11, .12, ...), its listeners bound
//! there and `POD_IP` set to it. The file lists the ready replicas, as a headless Service with
//! `publishNotReadyAddresses: false` does; it is rewritten in place (truncated and written once: a
//! rename would leave the bind mount on the old file) whenever the fleet changes.
//!
//! A feeder thread posts OTLP/HTTP JSON well above what the budget can judge, each trace to one
//! live replica by a hash of its trace id (as the Collector's loadbalancing exporter routes). Three
//! phases: three replicas; one stopped (first taken out of the hosts file and the feeder's list, as
//! Kubernetes removes a terminating pod's endpoint); two more started (added to the file once they
//! listen). In each phase, after a settle time (a couple of refresh intervals; where replicas
//! started, also the full bucket each starts with, a minute of its share, spent), the stand-in's
//! log gives the billed tokens and requests
//! per minute over the phase's steady part: tokens within 5 % of the configured fleet
//! `tokens_per_minute`, requests never above 105 % of `requests_per_minute`, and every replica's
//! `ragwatch_budget_share_ratio` is 1/n.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::judge::JudgeServer;
use crate::common::{Ragwatch, WRITE_TOKEN, wait_for};
use serde_json::json;

const PEERS: &str = "peers.ragwatch.test";
/// The fleet's tokens per minute: the binding limit, about four judged traces a second.
const TOKENS_PER_MINUTE: u64 = 240_000;
/// Generous: the fleet makes about ten calls a second.
const REQUESTS_PER_MINUTE: u32 = 6_000;
/// Traces posted per second, all replicas together: over ten times what the budget judges, so
/// any burst a replica's buckets allowed would show within seconds.
const TRACES_PER_SEC: u64 = 60;
/// Settle time after replicas start, before the steady part is measured: a couple of refresh
/// intervals. (Replicas that join a spending fleet start with empty per-minute buckets, so the
/// phase is also held to the budget from the change on.)
const SETTLE_NEW: Duration = Duration::from_secs(10);
/// Settle time after a replica stops: a couple of refresh intervals (the others' shares grow, and
/// a share that grows adds no tokens at once).
const SETTLE_STOPPED: Duration = Duration::from_secs(5);
/// The steady part of each phase measured.
const MEASURE: Duration = Duration::from_secs(40);
/// Binds the hosts file over /etc/hosts in a mount namespace of the process's own, then runs the
/// command after the script's arguments.
const IN_NAMESPACE: &str = "mount --bind \"$HOSTS\" /etc/hosts && exec \"$@\"";

/// The hosts file the replicas read as /etc/hosts.
struct Hosts(PathBuf);

impl Hosts {
    /// Lists `replicas` (their numbers: 127.0.0.1n) for the peers name, in place.
    fn list(&self, replicas: &[u8]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for n in replicas {
            text.push_str(&format!("{} {PEERS}\n", address(*n)));
        }
        // Truncate and write once: the bind mounts hold this inode.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&self.0)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }
}

fn address(n: u8) -> String {
    format!("127.0.0.{}", 10 + n)
}

/// Fails, saying why, when this machine cannot give a process its own /etc/hosts: the test needs
/// `unshare -m` and `mount --bind` (root, or CAP_SYS_ADMIN), and a resolver that reads the file.
fn check_namespaces(hosts: &Hosts) {
    hosts.list(&[1, 2]);
    let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            IN_NAMESPACE,
            "sh",
            "getent",
            "ahostsv4",
            PEERS,
        ])
        .env("HOSTS", &hosts.0)
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => panic!("fleet_budget needs unshare(1) (util-linux) to run: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("127.0.0.11") && text.contains("127.0.0.12"),
        "fleet_budget gives each replica its own /etc/hosts with `unshare -m` and `mount --bind`, \
         which this machine refused (root or CAP_SYS_ADMIN is needed): status {}, stdout {text:?}, \
         stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One replica: its number, the process, and its write listener.
struct Replica {
    n: u8,
    rw: Ragwatch,
    write: SocketAddr,
}

fn start_replica(n: u8, config: &Path, hosts: &Hosts) -> Replica {
    let ip = address(n);
    let env = [
        ("HOSTS", hosts.0.display().to_string()),
        ("POD_IP", ip.clone()),
        ("RAGWATCH__HTTP__LISTEN", format!("{ip}:0")),
        ("RAGWATCH__WRITE__LISTEN", format!("{ip}:0")),
    ];
    let rw = Ragwatch::start_wrapped(
        &["unshare", "-m", "sh", "-c", IN_NAMESPACE, "sh"],
        config,
        &env,
    );
    let write = rw.write_addr();
    assert_eq!(write.ip().to_string(), ip);
    Replica { n, rw, write }
}

fn config(dir: &Path, server: &JudgeServer) -> PathBuf {
    let path = dir.join("ragwatch.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\nkind = \"otlp\"\n\
             [sample]\ndefault_rate = 1.0\n\
             [judge]\nsampled = \"llm\"\nworkers = 4\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             structured_output = \"json_schema\"\ncache_capacity = 0\nmax_output_tokens = 200\n\
             request_timeout_ms = 5000\ntrace_deadline_ms = 20000\n\
             [budget]\ntokens_per_minute = {TOKENS_PER_MINUTE}\nrequests_per_minute = {REQUESTS_PER_MINUTE}\n\
             tokens_per_day = 1000000000\nreserve_ratio = 0.1\n\
             [fleet]\npeers = \"{PEERS}\"\npeers_refresh_secs = 1\n\
             [shutdown]\ngrace_secs = 5\n",
            server.base_url()
        ),
    )
    .unwrap();
    path
}

/// One RAG trace as OTLP JSON spans (OpenInference): a retriever with two documents under the
/// chain span that carries the question and the answer.
fn spans(trace_id: &str, i: u64) -> Vec<serde_json::Value> {
    let root = format!("{:016x}", i * 2 + 1);
    let child = format!("{:016x}", i * 2 + 2);
    let attr = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    vec![
        json!({"traceId": trace_id, "spanId": child, "parentSpanId": root, "name": "retrieve",
            "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [
                attr("openinference.span.kind", "RETRIEVER"),
                attr("retrieval.documents.0.document.content",
                    &format!("The museum opens at nine on weekdays and at ten on Sundays; visit {i} is free.")),
                attr("retrieval.documents.1.document.content",
                    "Tickets are sold at the entrance and online until the afternoon.")]}),
        json!({"traceId": trace_id, "spanId": root, "name": "rag",
            "startTimeUnixNano": "1", "endTimeUnixNano": "3",
            "attributes": [
                attr("openinference.span.kind", "CHAIN"),
                attr("input.value", &format!("When does the museum open for visit {i}?")),
                attr("output.value",
                    &format!("The museum opens at nine on weekdays. Visit {i} is free of charge."))]}),
    ]
}

/// POSTs OTLP JSON to a write listener; true on 200.
fn post(addr: SocketAddr, body: &[u8]) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {WRITE_TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).is_err() || s.write_all(body).is_err() {
        return false;
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    raw.starts_with(b"HTTP/1.1 200")
}

/// Posts `TRACES_PER_SEC` traces a second, each to the live replica its trace id hashes to,
/// until `stop`.
fn feed(
    live: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    posted: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let tick = Duration::from_millis(100);
        let per_tick = TRACES_PER_SEC / 10;
        let mut i = 0u64;
        let mut next = Instant::now();
        while !stop.load(Ordering::SeqCst) {
            let targets = live.lock().unwrap().clone();
            if !targets.is_empty() {
                let mut batches: Vec<Vec<serde_json::Value>> = vec![Vec::new(); targets.len()];
                for _ in 0..per_tick {
                    i += 1;
                    let trace_id = format!("{:032x}", rand::random::<u128>());
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    trace_id.hash(&mut h);
                    let target = (h.finish() % targets.len() as u64) as usize;
                    batches[target].extend(spans(&trace_id, i));
                }
                for (addr, batch) in targets.iter().zip(batches) {
                    if batch.is_empty() {
                        continue;
                    }
                    let n = batch.len() as u64 / 2;
                    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": batch}]}]});
                    if post(*addr, body.to_string().as_bytes()) {
                        posted.fetch_add(n, Ordering::SeqCst);
                    }
                }
            }
            next += tick;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    })
}

/// Every replica's share gauge and peer count, once each says 1/n and n.
fn wait_for_shares(replicas: &[&Replica], timeout: Duration) -> Vec<(u8, f64, f64)> {
    let n = replicas.len() as f64;
    wait_for(
        &format!("every replica at a share of 1/{n}"),
        timeout,
        || {
            let mut shares = Vec::new();
            for r in replicas {
                let m = r.rw.metrics()?;
                let share = m.sum("ragwatch_budget_share_ratio", &[]);
                let peers = m.sum("ragwatch_fleet_peers", &[]);
                if (share - 1.0 / n).abs() > 1e-9 || peers != n {
                    return None;
                }
                shares.push((r.n, share, peers));
            }
            Some(shares)
        },
    )
}

/// Billed tokens and requests per minute in `[from, to)`, from the stand-in's log.
fn per_minute(server: &JudgeServer, from: Instant, to: Instant) -> (f64, f64, u64) {
    let billing = server.billing();
    let inside: Vec<_> = billing
        .iter()
        .filter(|b| b.arrived >= from && b.arrived < to)
        .collect();
    let tokens: u64 = inside.iter().map(|b| b.tokens).sum();
    let minutes = (to - from).as_secs_f64() / 60.0;
    (
        tokens as f64 / minutes,
        inside.len() as f64 / minutes,
        tokens,
    )
}

/// Waits `settle`, measures `MEASURE`, checks the figures and the shares; returns a report line.
fn phase(name: &str, server: &JudgeServer, replicas: &[&Replica], settle: Duration) -> String {
    let began = Instant::now();
    std::thread::sleep(settle);
    let shares = wait_for_shares(replicas, Duration::from_secs(10));
    let from = Instant::now();
    std::thread::sleep(MEASURE);
    let to = Instant::now();
    let after = wait_for_shares(replicas, Duration::from_secs(5));
    let (tokens, requests, total) = per_minute(server, from, to);
    // From the change on, the settle time included: no burst of a new replica's bucket either.
    let (whole, whole_requests, _) = per_minute(server, began, to);
    // The settle time and the measured part, five seconds at a time, in tokens a minute.
    let slices: Vec<String> = (0..(to - began).as_secs() / 5)
        .map(|i| {
            let start = began + Duration::from_secs(5 * i);
            let (t, _, _) = per_minute(server, start, start + Duration::from_secs(5));
            format!("{:.0}k", t / 1000.0)
        })
        .collect();
    let report = format!(
        "MEASURED {name}: {} replicas, {:.0} s: {tokens:.0} tokens/min ({:+.2} % of {TOKENS_PER_MINUTE}; \
         {total} billed), {requests:.0} requests/min (limit {REQUESTS_PER_MINUTE}); from the change on \
         {whole:.0} tokens/min; shares {:?}; \
         tokens/min by 5 s from the change: {}",
        replicas.len(),
        (to - from).as_secs_f64(),
        (tokens / TOKENS_PER_MINUTE as f64 - 1.0) * 100.0,
        after
            .iter()
            .map(|(n, share, _)| format!("{}={share:.4}", address(*n)))
            .collect::<Vec<_>>(),
        slices.join(" ")
    );
    eprintln!("{report}");
    assert_eq!(shares.len(), after.len());
    assert!(
        (tokens - TOKENS_PER_MINUTE as f64).abs() <= 0.05 * TOKENS_PER_MINUTE as f64,
        "{report}"
    );
    assert!(
        requests <= 1.05 * f64::from(REQUESTS_PER_MINUTE),
        "{report}"
    );
    assert!(
        whole <= 1.05 * TOKENS_PER_MINUTE as f64
            && whole_requests <= 1.05 * f64::from(REQUESTS_PER_MINUTE),
        "from the change on: {whole:.0} tokens/min, {whole_requests:.0} requests/min; {report}"
    );
    report
}

#[test]
fn replicas_found_through_dns_spend_the_fleets_budget_together() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = Hosts(dir.path().join("hosts"));
    std::fs::write(&hosts.0, "").unwrap();
    check_namespaces(&hosts);
    hosts.list(&[]);
    let server = JudgeServer::start();
    let config = config(dir.path(), &server);

    // Three replicas; the hosts file lists them once all three listen, as their readiness comes.
    let mut replicas: Vec<Replica> = (1..=3).map(|n| start_replica(n, &config, &hosts)).collect();
    hosts.list(&[1, 2, 3]);
    let all: Vec<&Replica> = replicas.iter().collect();
    wait_for_shares(&all, Duration::from_secs(20));

    let live = Arc::new(Mutex::new(replicas.iter().map(|r| r.write).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let posted = Arc::new(AtomicU64::new(0));
    let feeder = feed(Arc::clone(&live), Arc::clone(&stop), Arc::clone(&posted));
    let mut reports = Vec::new();
    let all: Vec<&Replica> = replicas.iter().collect();
    reports.push(phase("three replicas", &server, &all, SETTLE_NEW));

    // One stops: out of the Service's answer first, then SIGTERM.
    hosts.list(&[1, 2]);
    live.lock().unwrap().retain(|a| *a != replicas[2].write);
    let mut gone = replicas.remove(2);
    gone.rw.sigterm();
    let status = gone.rw.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}");
    let all: Vec<&Replica> = replicas.iter().collect();
    reports.push(phase("one stopped", &server, &all, SETTLE_STOPPED));

    // Two more: in the answer once they listen (the ready pods), then fed.
    for n in [4, 5] {
        replicas.push(start_replica(n, &config, &hosts));
    }
    hosts.list(&[1, 2, 4, 5]);
    *live.lock().unwrap() = replicas.iter().map(|r| r.write).collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    reports.push(phase("two started", &server, &all, SETTLE_NEW));

    stop.store(true, Ordering::SeqCst);
    feeder.join().unwrap();
    let mut judged = 0.0;
    let mut over_budget = 0.0;
    for r in &replicas {
        let m = r.rw.metrics().unwrap();
        judged += m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]);
        over_budget += m.sum("ragwatch_traces_skipped_total", &[("reason", "budget")])
            + m.sum(
                "ragwatch_traces_skipped_total",
                &[("reason", "budget_reserve")],
            );
        let failed = m.sum(
            "ragwatch_fleet_peer_lookups_total",
            &[("outcome", "failed")],
        );
        let ok = m.sum("ragwatch_fleet_peer_lookups_total", &[("outcome", "ok")]);
        eprintln!(
            "{}: lookups ok {ok}, failed {failed}; log tail:\n{}",
            address(r.n),
            r.rw.log_text()
                .lines()
                .filter(|l| l.contains("fleet") || l.contains("share"))
                .take(12)
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(ok > 0.0, "{}", address(r.n));
    }
    eprintln!(
        "MEASURED totals: posted {} traces, LLM-judged {judged} (still running replicas), over budget {over_budget}",
        posted.load(Ordering::SeqCst)
    );
    assert!(
        over_budget > judged,
        "the budget binds: most traces are skipped for it ({judged} judged, {over_budget} over budget)"
    );
    for r in reports {
        eprintln!("{r}");
    }
}
