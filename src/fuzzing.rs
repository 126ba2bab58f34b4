//! The invariant the decoder fuzz target (`fuzz/`) checks, and the corpus regression test replays:
//! any bytes become a trace within the configured limits, with a declared or fallback stratum and
//! finite offline scores in [0, 1], or a reject reason; never a panic. Both the native schema and a
//! JSON-pointer mapping (the OpenInference shape of `config/openinference.toml`) are exercised.
//!
//! The OTLP target ([`check_otlp`]) holds OTLP requests to the same: any bytes, read as protobuf and
//! as OTLP JSON, are a request or a reject reason; a request's spans, assembled under each preset,
//! become traces within the limits (judged with scores in [0, 1]), traces not judged with a known
//! reason, or rejects with a reason, and every span is kept or counted dropped.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::config::Config;
use crate::dimensions::Quality;
use crate::judge::OfflineJudge;
use crate::sample::Stratifier;
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::{AssemblyConfig, Preset, TraceFormat};
use crate::trace::otlp::{Assembler, Outcome, decode_request};
use crate::trace::{Decoder, RejectReason, Trace};

struct Checked {
    limits: DecodeConfig,
    native: Decoder,
    mapped: Decoder,
    stratifier: Stratifier,
    judge: OfflineJudge,
}

fn checked() -> &'static Checked {
    static CHECKED: OnceLock<Checked> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let openinference = Config::from_toml_with_env(
            include_str!("../config/openinference.toml"),
            &HashMap::new(),
        )
        .expect("the bundled OpenInference config is valid");
        // Small limits, so the fuzzer reaches them.
        let limits = DecodeConfig {
            max_message_bytes: 64 * 1024,
            max_contexts: 8,
            max_field_bytes: 4096,
            ..DecodeConfig::default()
        };
        let mapped = DecodeConfig {
            mapping: openinference.decode.mapping.clone(),
            ..limits.clone()
        };
        Checked {
            native: Decoder::new(&limits),
            mapped: Decoder::new(&mapped),
            limits,
            stratifier: Stratifier::new(&openinference.strata),
            judge: OfflineJudge::default(),
        }
    })
}

/// Decodes `data` both ways and checks every outcome; panics (for the fuzzer) on a violation.
pub fn check_decode(data: &[u8]) {
    let c = checked();
    for decoder in [&c.native, &c.mapped] {
        match decoder.decode(data) {
            Ok(trace) => {
                let l = &c.limits;
                assert!(!trace.trace_id.is_empty() && !trace.query.is_empty());
                assert!(trace.contexts.len() <= l.max_contexts);
                for text in [&trace.trace_id, &trace.query, &trace.answer]
                    .into_iter()
                    .chain(trace.contexts.iter().map(|c| &c.text))
                {
                    assert!(text.len() <= l.max_field_bytes, "a field over the limit");
                }
                assert!(
                    trace
                        .contexts
                        .iter()
                        .all(|c| c.score.is_none_or(f64::is_finite))
                );
                check_judged(c, &trace);
            }
            Err(e) => assert!(RejectReason::ALL.contains(&e.reason)),
        }
    }
}

/// A stratum in range and every offline score in [0, 1].
fn check_judged(c: &Checked, trace: &Trace) {
    let stratum = c.stratifier.assign(trace);
    assert!(stratum < c.stratifier.names().len());
    let verdict = c.judge.judge(trace);
    for metric in Quality::ALL {
        if let Some(v) = verdict.score(metric) {
            assert!((0.0..=1.0).contains(&v), "{metric:?} = {v}");
        }
    }
}

/// Decodes `data` as an OTLP request, protobuf and JSON, and assembles its spans under every
/// preset; panics (for the fuzzer) on a violation.
pub fn check_otlp(data: &[u8]) {
    let c = checked();
    let l = &c.limits;
    // Small bounds, so the fuzzer reaches them.
    let assembly = AssemblyConfig {
        max_spans_per_message: 64,
        max_spans_per_trace: 16,
        max_pending_traces: 8,
        ..AssemblyConfig::default()
    };
    for format in [TraceFormat::OtlpProto, TraceFormat::OtlpJson] {
        let max_spans = assembly.max_spans_per_message;
        let req = match decode_request(data, format, l.max_message_bytes, max_spans) {
            Ok(req) => req,
            Err(e) => {
                assert!(RejectReason::ALL.contains(&e.reason));
                continue;
            }
        };
        for preset in [Preset::OpenInference, Preset::OpenLlmetry, Preset::GenAi] {
            let decode = DecodeConfig {
                preset,
                ..l.clone()
            };
            let mut a: Assembler<u32> = Assembler::new(&decode, &assembly);
            let mut out = Vec::new();
            let stats = a.add_request(req.clone(), Some(1), 0, &mut out);
            a.finish(&mut out);
            assert!(stats.dropped_total() <= stats.spans);
            assert!(out.iter().map(|t| t.spans).sum::<usize>() <= stats.spans);
            for done in out {
                assert!(done.tokens.iter().all(|&t| t == 1));
                match done.outcome {
                    Outcome::Trace(trace) => {
                        assert!(!trace.trace_id.is_empty());
                        assert!(trace.contexts.len() <= l.max_contexts);
                        for text in [&trace.query, &trace.answer]
                            .into_iter()
                            .chain(trace.contexts.iter().map(|c| &c.text))
                        {
                            assert!(text.len() <= l.max_field_bytes, "a field over the limit");
                        }
                        check_judged(c, &trace);
                    }
                    Outcome::Unjudged(_, why) => {
                        assert!(crate::metrics::UNJUDGED_REASONS.contains(&why), "{why}")
                    }
                    Outcome::Rejected(e) => assert!(RejectReason::ALL.contains(&e.reason)),
                }
            }
        }
    }
}
