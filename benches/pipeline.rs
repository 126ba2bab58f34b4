//! Hot-path benchmarks on ~2 KB traces (tests/gen_traces.py --pad 1500):
//! - `ingest_front`: decode + stratify + sample, the per-message cost every trace pays before judging;
//! - `offline_judge`: the offline judge's features and score, as the ingest path runs it (without
//!   the verdict's `details` JSON, which only verdict records need);
//! - `ingest_full`: the whole `Pipeline::ingest` (decode, stratify, offline judge, histograms, windows, sample);
//!   `ingest_full_without_changes` without the what-changed summaries, `ingest_full_with_estimate`
//!   with the LLM judge on the sample (each trace's term of the combined estimate's population).
//! - `export_*`: `ingest_full` on the same traces with W3C ids (a span id in the metadata), without
//!   verdict export (`export_off`), with every verdict event built and queued (`export_queued`: a
//!   target keeping up), and with the queues full (`export_full`: a target that is down).
//! - `render_text`, `render_openmetrics`: one `/metrics` body after those traces, in each format
//!   (OpenMetrics with the exemplars); the throughput figure there is scrapes per second.
//! - `exemplar_record`: three scores' trace ids per trace into the exemplar store, as the ingest
//!   path records them (throughput in traces per second).
//!
//! Throughput is reported in traces per second (criterion's elements/s).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main,
};
use ragwatch::config::Config;
use ragwatch::export::Exporter;
use ragwatch::judge::OfflineJudge;
use ragwatch::judge::config::SampledJudge;
use ragwatch::pipeline::Pipeline;
use ragwatch::recorder::Shared;
use ragwatch::sample::{Sampler, Stratifier};
use ragwatch::trace::Decoder;

fn traces() -> Vec<Vec<u8>> {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen_traces.py"))
        .args(["2000", "--seed", "3", "--pad", "1500"])
        .output()
        .expect("python3 runs tests/gen_traces.py");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| l.as_bytes().to_vec())
        .collect()
}

/// `Pipeline::ingest` of every line on a fresh pipeline of `config`.
fn ingest_full(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    config: &Config,
    lines: &[Vec<u8>],
) {
    g.bench_function(name, |b| {
        b.iter_batched_ref(
            || {
                Pipeline::new(
                    &config.decode,
                    &config.sample,
                    Shared::new(config.recorder_setup()),
                    None,
                )
            },
            |p| {
                for l in lines {
                    p.ingest(l, None);
                }
            },
            BatchSize::LargeInput,
        )
    });
}

fn bench(c: &mut Criterion) {
    let lines = traces();
    let mean_len = lines.iter().map(Vec::len).sum::<usize>() / lines.len();
    eprintln!("{} traces, mean {mean_len} bytes", lines.len());
    let config = Config::default();
    let decoder = Decoder::new(&config.decode);
    let stratifier = Stratifier::new(&config.strata);
    let mut sampler = Sampler::new(&config.sample, 300, stratifier.names());
    let judge = OfflineJudge::default();

    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Elements(lines.len() as u64));
    g.bench_function("ingest_front", |b| {
        b.iter(|| {
            let mut sampled = 0usize;
            for l in &lines {
                if let Ok(t) = decoder.decode(l) {
                    let s = stratifier.assign(&t);
                    sampled += usize::from(sampler.decide(s, &t.trace_id, 0, false).sampled());
                }
            }
            sampled
        })
    });
    let decoded: Vec<_> = lines
        .iter()
        .filter_map(|l| decoder.decode(l).ok())
        .collect();
    g.bench_function("offline_judge", |b| {
        b.iter(|| {
            decoded
                .iter()
                .filter_map(|t| judge.score(t).faithfulness)
                .sum::<f64>()
        })
    });
    ingest_full(&mut g, "ingest_full", &config, &lines);
    // The same without the what-changed summaries (sketches, question sample): their cost.
    let mut bare = config.clone();
    bare.changes.enabled = false;
    ingest_full(&mut g, "ingest_full_without_changes", &bare, &lines);
    // The same with the LLM judge on the sample (no pool attached, so nothing is judged): every
    // trace also adds its term to the combined estimate's population, under a second windows lock.
    let mut estimated = config.clone();
    estimated.judge.sampled = SampledJudge::Llm;
    ingest_full(&mut g, "ingest_full_with_estimate", &estimated, &lines);
    // Verdict export on the judging path: the same traces with W3C ids, so that every verdict has
    // its span. The queues are not drained while a round runs: `export_queued` holds every event
    // (a target that keeps up costs judging this, the send is on its own task), `export_full`
    // has room for one (a target that is down).
    let w3c: Vec<Vec<u8>> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut v: serde_json::Value = serde_json::from_slice(l).unwrap();
            v["trace_id"] = serde_json::Value::from(format!("{:032x}", i + 1));
            v["metadata"]["otel_span_id"] = serde_json::Value::from(format!("{:016x}", i + 1));
            serde_json::to_vec(&v).unwrap()
        })
        .collect();
    // The same config but for the target: `export_off` has none.
    let export = |capacity: Option<usize>| {
        let target = capacity.map_or(String::new(), |c| {
            format!("queue_capacity = {c}\n[export.otlp]\nendpoint = \"http://127.0.0.1:9\"\n")
        });
        Config::from_toml_with_env(
            &format!("[export]\nspan_id_field = \"/otel_span_id\"\n{target}"),
            &std::collections::HashMap::new(),
        )
        .unwrap()
    };
    for (name, capacity) in [
        ("export_off", None),
        ("export_queued", Some(16 * w3c.len())),
        ("export_full", Some(1)),
    ] {
        let c = export(capacity);
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || {
                    let shared = Shared::new(c.recorder_setup());
                    let tasks = Exporter::try_new(
                        c.export_setup(),
                        &Default::default(),
                        shared.metrics.clone(),
                    )
                    .unwrap()
                    .map(|(exporter, tasks)| {
                        shared.attach_export(exporter);
                        tasks
                    });
                    (Pipeline::new(&c.decode, &c.sample, shared, None), tasks)
                },
                |(p, _tasks)| {
                    for l in &w3c {
                        p.ingest(l, None);
                    }
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();

    let shared = Shared::new(config.recorder_setup());
    let mut p = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
    for l in &lines {
        p.ingest(l, None);
    }
    let m = &shared.metrics;
    eprintln!(
        "/metrics: text {} bytes, OpenMetrics {} bytes, {} exemplars",
        m.render().len(),
        m.render_openmetrics().len(),
        m.exemplars.len()
    );
    let mut g = c.benchmark_group("metrics");
    g.throughput(Throughput::Elements(1));
    g.bench_function("render_text", |b| b.iter(|| m.render().len()));
    g.bench_function("render_openmetrics", |b| {
        b.iter(|| m.render_openmetrics().len())
    });
    // What the ingest path adds per trace for exemplars: three scores' trace ids into the store.
    g.throughput(Throughput::Elements(decoded.len() as u64));
    g.bench_function("exemplar_record", |b| {
        b.iter(|| {
            for (i, t) in decoded.iter().enumerate() {
                let stratum = ["head", "tail", "default"][i % 3];
                for v in [0.3, 0.6, 0.9] {
                    m.exemplars.record(
                        "ragwatch_faithfulness_ratio",
                        &[stratum, "offline"],
                        v,
                        &t.trace_id,
                        i as u64,
                    );
                }
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
