//! The invariant the decoder fuzz target (`fuzz/`) checks, and the corpus regression test replays:
//! any bytes become a trace within the configured limits, with a declared or fallback stratum and
//! finite offline scores in [0, 1], or a reject reason; never a panic. Both the native schema and a
//! JSON-pointer mapping (the OpenInference shape of `config/openinference.toml`) are exercised.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::config::Config;
use crate::judge::{Metric, OfflineJudge};
use crate::sample::Stratifier;
use crate::trace::config::DecodeConfig;
use crate::trace::{Decoder, RejectReason};

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
                let stratum = c.stratifier.assign(&trace);
                assert!(stratum < c.stratifier.names().len());
                let verdict = c.judge.judge(&trace);
                for metric in Metric::ALL {
                    if let Some(v) = verdict.score(metric) {
                        assert!((0.0..=1.0).contains(&v), "{metric:?} = {v}");
                    }
                }
            }
            Err(e) => assert!(RejectReason::ALL.contains(&e.reason)),
        }
    }
}
