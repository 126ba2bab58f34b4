//! A fixed amount of offline-judge work for profilers, without criterion's timing loop:
//! decodes the bench's 2,000 traces of ~2.2 KB once, then scores them `ROUNDS` times (default 5)
//! as the ingest path does (`OfflineJudge::score`, no `details` JSON).
//! Under callgrind it gives instructions per trace, which a busy machine does not disturb:
//!
//! ```sh
//! cargo bench --bench judge_profile --no-run
//! valgrind --tool=callgrind --toggle-collect='*judge_all*' target/release/deps/judge_profile-*[!.d]
//! ```

#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::process::Command;

use ragwatch::config::Config;
use ragwatch::judge::OfflineJudge;
use ragwatch::trace::{Decoder, Trace};

#[inline(never)]
fn judge_all(judge: &OfflineJudge, traces: &[Trace]) -> f64 {
    traces
        .iter()
        .filter_map(|t| judge.score(black_box(t)).faithfulness)
        .sum()
}

fn main() {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen_traces.py"))
        .args(["2000", "--seed", "3", "--pad", "1500"])
        .output()
        .unwrap();
    let decoder = Decoder::new(&Config::default().decode);
    let traces: Vec<Trace> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| decoder.decode(l.as_bytes()).ok())
        .collect();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let judge = OfflineJudge::default();
    let started = ragwatch::clock::Instant::now();
    let cpu_started = thread_cpu_secs();
    let mut sum = 0.0;
    for _ in 0..rounds {
        sum += judge_all(&judge, black_box(&traces));
    }
    let n = (rounds * traces.len()) as f64;
    let cpu = thread_cpu_secs()
        .zip(cpu_started)
        .map(|(end, start)| end - start);
    // Per CPU second as well as per wall second: on a shared machine the thread may wait for a core,
    // and traces per CPU second is what one core would do if it were ours.
    println!(
        "{n} judgements, {:.0} traces/s wall, {} (checksum {sum})",
        n / started.elapsed().as_secs_f64(),
        cpu.map_or("no CPU time".into(), |c| format!(
            "{:.0} traces per CPU second",
            n / c
        )),
    );
}

/// This thread's user + system CPU time, from /proc (clock ticks of 10 ms).
fn thread_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
