//! What the what-changed summaries hold at 1,000,000 distinct document ids: traces with three
//! contexts of never-repeated ids (and never-repeated questions) through the real pipeline, their
//! arrival times spread over more than the baseline window so that every epoch of every ring
//! opens, for each of several `changes.capacity` settings. The allocator counts every byte: the
//! growth from a warmed-up pipeline to the end is what the summaries added, beside what
//! `Changes::heap_bytes` accounts for and the bound the configuration sets.
//!
//! `cargo bench --bench changes_memory`; docs/performance.md has the figures.

#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::collections::HashMap;

use ragwatch::config::Config;
use ragwatch::pipeline::Pipeline;
use ragwatch::recorder::Shared;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes the allocator holds now.
fn held() -> isize {
    let s = GLOBAL.stats();
    (s.bytes_allocated + s.bytes_reallocated.max(0) as usize) as isize
        - s.bytes_deallocated as isize
        + s.bytes_reallocated.min(0)
}

const IDS: u64 = 1_000_000;
const BASELINE_MS: u64 = 86_400_000;

fn line(i: u64, ids: [u64; 3]) -> String {
    format!(
        r#"{{"trace_id":"t{i}","query":"question {i} about topic {} and item {}","contexts":[{{"id":"kb/collection-{}/document-{:09}.md#chunk-3","text":"a passage"}},{{"id":"kb/collection-{}/document-{:09}.md#chunk-3","text":"another passage"}},{{"id":"kb/collection-{}/document-{:09}.md#chunk-3","text":"a third passage"}}],"answer":"an answer","stratum":"qa"}}"#,
        i % 997,
        i % 101,
        ids[0] % 7,
        ids[0],
        ids[1] % 7,
        ids[1],
        ids[2] % 7,
        ids[2]
    )
}

fn run(capacity: usize) {
    let env: HashMap<String, String> = [
        ("RAGWATCH__STRATA__DECLARED", "qa".to_owned()),
        ("RAGWATCH__STRATA__OUT_OF_SCOPE", "[]".to_owned()),
        ("RAGWATCH__CHANGES__CAPACITY", capacity.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let config = Config::from_toml_with_env("", &env).unwrap();
    let shared = Shared::new(config.recorder_setup());
    let mut pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
    let start = 1_800_000_000_000u64;
    // Warm up every other structure (series, rings) on a few repeated ids.
    for i in 0..1000 {
        pipeline.ingest_at(line(i, [0, 1, 2]).as_bytes(), None, start);
    }
    let before = held();
    let traces = IDS.div_ceil(3);
    let span = BASELINE_MS + BASELINE_MS / 4;
    let mut peak = 0isize;
    for t in 0..traces {
        let now = start + t * span / traces;
        pipeline.ingest_at(line(t, [3 * t, 3 * t + 1, 3 * t + 2]).as_bytes(), None, now);
        if t % 10_000 == 0 {
            peak = peak.max(held() - before);
        }
    }
    let after = held() - before;
    let changes = shared.changes().unwrap();
    println!(
        "capacity {capacity:>5}, novelty {}: {} distinct ids in {traces} traces over {:.1} h; \
         allocator growth {:.2} MB at the end, {:.2} MB at most; summaries account {:.2} MB",
        config.changes.novelty.capacity,
        3 * traces,
        span as f64 / 3.6e6,
        after as f64 / 1e6,
        peak.max(after) as f64 / 1e6,
        changes.heap_bytes() as f64 / 1e6,
    );
}

fn main() {
    // `cargo test --benches` runs each bench once with `--bench` absent: keep that quick.
    let full = std::env::args().any(|a| a == "--bench");
    if !full {
        return;
    }
    for capacity in [128, 512, 2048] {
        run(capacity);
    }
}
