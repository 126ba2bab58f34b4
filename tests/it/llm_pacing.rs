//! The LLM judge's budget in `ragwatch replay --judge llm`, against the judge stand-in: replay
//! paces to the per-minute budget and skips only on the day's, keeps `judge.workers` traces in
//! flight, judges every trace of the shipped config at the budget's pace, and the cost per judged
//! trace of both faithfulness forms is measured.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::judge::JudgeServer;
use crate::common::*;
use crate::llm::{replay, setup, setup_with, trace};
use serde_json::Value;

fn museum_traces(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            trace(
                &format!("b{i}"),
                &format!("The museum opens at 9. Entry is free for {i} children."),
            )
        })
        .collect()
}

/// Replay waits for the per-minute budget instead of skipping: every trace is judged, and what the
/// server billed stays within the tokens a minute allows over the run. Only the daily budget skips.
#[test]
fn replay_paces_to_the_minute_budget_and_skips_only_on_the_day() {
    let server = JudgeServer::start();
    let s = setup(
        &server,
        "max_output_tokens = 100\n[budget]\ntokens_per_minute = 3000\nrequests_per_minute = 1000\ntokens_per_day = 1000000",
    );
    let started = Instant::now();
    let (records, _) = replay(&s, &museum_traces(7));
    let elapsed_min = started.elapsed().as_secs_f64() / 60.0;
    let judged = records.iter().filter(|r| r["status"] == "judged").count();
    assert_eq!(judged, 7, "paced, not skipped: {records:?}");
    let billed = server.tokens_billed() as f64;
    eprintln!(
        "paced: billed {billed} tokens in {:.1} s",
        elapsed_min * 60.0
    );
    assert!(
        billed > 3000.0,
        "the run needed more than a minute's tokens ({billed}), so it had to wait"
    );
    let allowed = 3000.0 * (1.0 + elapsed_min);
    assert!(billed <= allowed, "billed {billed} > allowed {allowed}");
    let waited: u64 = records
        .iter()
        .map(|r| r["details"]["details"]["budget_wait_ms"].as_u64().unwrap())
        .sum();
    assert!(waited > 0);

    // A day's budget for a few traces: the rest are skipped at once, by reason.
    let server = JudgeServer::start();
    let s = setup(
        &server,
        "max_output_tokens = 100\n[budget]\ntokens_per_minute = 100000\nrequests_per_minute = 1000\ntokens_per_day = 2500",
    );
    let started = Instant::now();
    let (records, _) = replay(&s, &museum_traces(12));
    let judged = records.iter().filter(|r| r["status"] == "judged").count();
    let budget = records
        .iter()
        .filter(|r| r["reason"] == "budget_exhausted")
        .count();
    assert!(
        judged > 0 && budget > 0,
        "judged {judged}, over budget {budget}"
    );
    assert_eq!(judged + budget, 12, "every trace accounted for");
    assert!(server.tokens_billed() <= 2500);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "no waiting on the day"
    );
}

/// Replay keeps `judge.workers` traces in flight: a slow trace holds one slot while the other goes
/// on through the rest, rather than batches that each wait for their slowest; output stays in input
/// order.
#[test]
fn replay_keeps_workers_in_flight_not_batches() {
    let server = JudgeServer::start();
    // Each slow trace takes two chat calls of 1.5 s.
    server.set_slow("sluggish", Duration::from_millis(1500));
    let s = setup_with(&server, 2, "");
    let mut lines = museum_traces(10);
    for i in [0, 2] {
        lines[i] = trace(
            &format!("b{i}"),
            &format!("The museum opens at 9. A sluggish queue forms at {i}."),
        );
    }
    let (records, _) = replay(&s, &lines);
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    assert_eq!(ids, expected, "input order");
    assert!(records.iter().all(|r| r["status"] == "judged"));
    // In flight: the two slow traces (b0, b2) are served at once. In batches of two they fall in
    // different batches (b0 b1, b2 b3) and never overlap.
    assert_eq!(
        server.state.slow_in_flight_max.load(Ordering::SeqCst),
        2,
        "both slow traces in flight together"
    );
}

/// Seconds the budget needs for `requests` calls at `per_minute` (a minute's burst at once, then
/// one every 60 / per_minute s), for the pacing checks.
fn seconds_allowed(requests: f64, per_minute: f64) -> f64 {
    (requests - per_minute).max(0.0) * 60.0 / per_minute
}

/// The figure: `replay --judge llm --config config/llm.toml` on 200 traces against a fast
/// stand-in judges all 200 (pacing, not skipping), with `judge.workers` calls in flight, in a wall
/// time within 10 % of what the budget allows. The shipped 60 requests a minute make that about
/// nine minutes (600 requests); the test scales the budget (requests and tokens alike) by five.
/// `RAGWATCH_TEST_SHIPPED_BUDGET=1` runs it with the shipped budget untouched.
#[test]
fn replay_with_the_shipped_config_judges_every_trace_at_the_budget_pace() {
    let server = JudgeServer::start();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let lines: Vec<String> = gen_traces(200, &["--seed", "41"])
        .into_iter()
        .map(|(_, l)| String::from_utf8(l).unwrap())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let shipped = std::env::var("RAGWATCH_TEST_SHIPPED_BUDGET").is_ok();
    let rpm = if shipped { 60.0 } else { 300.0 };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["replay", "--judge", "llm", "--config", "config/llm.toml"])
        .arg(&input)
        .env("RAGWATCH_LLM_API_KEY", "sk-test")
        .env("RAGWATCH__LLM__BASE_URL", server.base_url());
    if !shipped {
        cmd.env("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "300")
            .env("RAGWATCH__BUDGET__TOKENS_PER_MINUTE", "1000000");
    }
    let started = Instant::now();
    let out = run_ok(&mut cmd);
    let wall = started.elapsed().as_secs_f64();
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 200);
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["trace_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, expected, "output in input order");
    let judged = records
        .iter()
        .filter(|r| r["status"] == "judged" || r["status"] == "no_claims")
        .count();
    assert_eq!(
        judged,
        200,
        "every trace judged: {:?}",
        records.iter().find(|r| r["status"] == "skipped")
    );
    let requests = (server.chat_requests() + server.embedding_requests()) as f64;
    let allowed = seconds_allowed(requests, rpm);
    eprintln!(
        "MEASURED pacing: {requests} requests at {rpm}/min: allowed {allowed:.1} s, wall {wall:.1} s ({:+.1} %)",
        (wall / allowed - 1.0) * 100.0
    );
    assert!(
        wall >= allowed * 0.98 && wall <= allowed * 1.10,
        "wall {wall:.1} s against {allowed:.1} s allowed"
    );
}

/// Measures (and prints, for docs/performance.md) tokens per judged trace for both faithfulness
/// forms and ragwatch's own CPU time per judged trace outside the API, on 200 generated ~2 KB
/// traces. Asserts only what must hold: every trace judged, and one call cheaper than two.
#[test]
fn cost_per_judged_trace_for_both_forms() {
    let server = JudgeServer::start();
    let mut figures = Vec::new();
    for mode in ["one_call", "two_call"] {
        let s = setup(
            &server,
            &format!(
                "faithfulness_mode = \"{mode}\"\ncache_capacity = 0\n[budget]\nrequests_per_minute = 1000000\ntokens_per_minute = 1000000000\ntokens_per_day = 10000000000"
            ),
        );
        let input = s.dir.path().join("in.jsonl");
        let lines: Vec<String> = gen_traces(200, &["--seed", "31", "--pad", "1500"])
            .into_iter()
            .map(|(_, l)| String::from_utf8(l).unwrap())
            .collect();
        std::fs::write(&input, lines.join("\n")).unwrap();
        let before = server.tokens_billed();
        let out = run_ok(
            Command::new("python3")
                .args(["-c", "import resource,subprocess,sys\nsubprocess.run(sys.argv[1:],check=True,stdout=open(sys.argv[-1]+'.out','w'),stderr=subprocess.DEVNULL)\nr=resource.getrusage(resource.RUSAGE_CHILDREN)\nprint(r.ru_utime+r.ru_stime)"])
                .arg(env!("CARGO_BIN_EXE_ragwatch"))
                .args(["replay", "--judge", "llm", "--config"])
                .arg(&s.config)
                .arg(&input),
        );
        let cpu: f64 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let verdicts = std::fs::read_to_string(format!("{}.out", input.display())).unwrap();
        let judged = verdicts
            .lines()
            .filter(|l| {
                l.contains("\"status\":\"judged\"") || l.contains("\"status\":\"no_claims\"")
            })
            .count();
        assert!(judged >= 190, "{mode}: judged {judged} of 200");
        let tokens = (server.tokens_billed() - before) as f64 / judged as f64;
        figures.push((mode, tokens, cpu * 1000.0 / judged as f64));
    }
    eprintln!("MEASURED tokens/trace and CPU ms/trace: {figures:?}");
    assert!(figures[0].1 < figures[1].1);
}
