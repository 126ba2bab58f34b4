//! What redaction costs per trace: a 1.4 KB trace (a question, three contexts, an answer) through
//! `Redactor::redact_trace` with every built-in and one pattern of the config's own on, once with
//! nothing to redact and once with an e-mail address, a card number, an API key, a phone number and
//! an IP address in it; beside it, the offline judge on the same trace, as the peer of the same run.
//!
//! `cargo bench --bench redact`; docs/performance.md has the figures.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use criterion::{Criterion, criterion_group, criterion_main};
use ragwatch::judge::OfflineJudge;
use ragwatch::redact::config::{RedactConfig, RedactMode, RedactPattern};
use ragwatch::redact::{Counts, Redactor};
use ragwatch::trace::Decoder;
use ragwatch::trace::config::DecodeConfig;

fn trace_json(pii: bool) -> String {
    let (mail, card, key, phone, ip) = if pii {
        (
            "jane.doe@example.com",
            "4111 1111 1111 1111",
            "sk-proj-Zq8fT2mW9xLr4Kp7Vn3Bc6Hd",
            "+44 20 7946 0958",
            "10.0.12.7",
        )
    } else {
        (
            "the customer",
            "the card on file",
            "the service key",
            "the hotline",
            "the gateway",
        )
    };
    let context = "Canada introduced a carbon contract for difference in 2023 to guarantee a \
                   price on carbon for low-carbon projects, backed by the Canada Growth Fund, \
                   which committed up to 7 billion dollars over the following years to projects \
                   in hydrogen, carbon capture and clean electricity across the provinces. ";
    serde_json::json!({
        "trace_id": "bench",
        "query": format!("What did {mail} ask about the carbon pricing mechanism Canada implemented in 2023?"),
        "contexts": [
            format!("{context}Support tickets are answered by {phone}."),
            format!("{context}Payments go through {card} by default."),
            format!("{context}Requests from {ip} authenticate with {key}."),
        ],
        "answer": format!("Canada introduced a carbon contract for difference in 2023; {mail} was told that {card} is \
                           charged through {key} and that {phone} answers from {ip}."),
        "stratum": "head",
    })
    .to_string()
}

fn bench(c: &mut Criterion) {
    let config = RedactConfig {
        builtins: ["email", "phone", "card", "secret", "ip"]
            .map(String::from)
            .to_vec(),
        patterns: vec![RedactPattern {
            name: "employee_id".into(),
            regex: r"\bEMP-\d{6}\b".into(),
        }],
        mode: RedactMode::Mask,
        hash_key_env: "RAGWATCH_REDACT_HASH_KEY".into(),
    };
    let redactor = Redactor::try_new(&config, &HashMap::new()).unwrap();
    let decoder = Decoder::new(&DecodeConfig::default());
    let offline = OfflineJudge::default();
    let mut group = c.benchmark_group("redact");
    for (name, pii) in [("clean", false), ("pii", true)] {
        let json = trace_json(pii);
        let trace = decoder.decode(json.as_bytes()).unwrap();
        eprintln!("{name}: {} bytes of JSON", json.len());
        group.bench_function(format!("redact_trace_{name}"), |b| {
            b.iter(|| {
                let mut counts = Counts::new();
                let out = redactor.redact_trace(std::hint::black_box(&trace), &mut counts);
                std::hint::black_box((out.answer.len(), counts));
            })
        });
        group.bench_function(format!("offline_judge_{name}"), |b| {
            b.iter(|| std::hint::black_box(offline.judge(std::hint::black_box(&trace))))
        });
    }
    let mut hash = config.clone();
    hash.mode = RedactMode::Hash;
    let hasher = Redactor::try_new(&hash, &HashMap::new()).unwrap();
    let trace = decoder.decode(trace_json(true).as_bytes()).unwrap();
    group.bench_function("redact_trace_pii_hash", |b| {
        b.iter(|| {
            let mut counts = Counts::new();
            let out = hasher.redact_trace(std::hint::black_box(&trace), &mut counts);
            std::hint::black_box((out.answer.len(), counts));
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
