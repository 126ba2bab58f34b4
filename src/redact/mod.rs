//! Redaction: what matches a pattern (built-in: e-mail addresses, phone numbers, card numbers that
//! pass the Luhn check, API keys and tokens, IP addresses; or the config's own regexes) is replaced
//! before a trace's question, contexts and answer leave the process (the LLM judge's API) or are
//! written (verdict records, which hold only what the judge was shown and said). The offline judge
//! reads the original text in memory and never sees a mask.
//!
//! `mask` writes `[REDACTED:<pattern>]`; `hash` writes `[<pattern>:<12 hex>]`, a keyed hash
//! (HMAC-SHA-256) of the text, so the same e-mail address gives the same token across traces and
//! replicas that share the key, without the text being recoverable from it.
//!
//! A trace with no match costs one pass of a `RegexSet` over each text and allocates nothing.

pub mod config;
use std::borrow::Cow;
use std::collections::HashMap;

use hmac::{Hmac, Mac};
use regex::{Regex, RegexSet};
use sha2::Sha256;

use crate::redact::config::{BUILTIN_NAMES, RedactConfig, RedactMode};
use crate::trace::Trace;

/// A built-in pattern's name and its regex.
pub(crate) const BUILTINS: [(&str, &str); 5] = [
    (
        BUILTIN_NAMES[0],
        r"(?i)\b[a-z0-9][a-z0-9._%+-]*@[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.[a-z]{2,}\b",
    ),
    (
        BUILTIN_NAMES[1],
        r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?|\b\d{2,4}[ .-])\d{3,4}[ .-]\d{3,5}\b",
    ),
    // Candidates: 13 to 19 digits, single spaces or dashes between; only those passing the Luhn
    // check are redacted, so order numbers and phone numbers of that length mostly stay.
    (BUILTIN_NAMES[2], r"\b\d(?:[ -]?\d){12,18}\b"),
    (
        BUILTIN_NAMES[3],
        concat!(
            r"\bsk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_-]{20,}",
            r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{22,}",
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{35}",
            r"|\bglpat-[A-Za-z0-9_-]{20,}|\b[rs]k_live_[A-Za-z0-9]{20,}",
            r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/-]{16,}=*",
            r"|-----BEGIN [A-Z ]*PRIVATE KEY-----",
            r#"|(?i:\b(?:api[_-]?key|secret|token|password|passwd)\b\s*[:=]\s*)["']?[^\s"']{8,}"#,
        ),
    ),
    (
        BUILTIN_NAMES[4],
        concat!(
            r"\b(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\b",
            // IPv6 candidates, kept only when they parse.
            r"|(?i:\b[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}\b)",
        ),
    ),
];

/// Why a redactor could not be built. Never carries the hash key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    /// A built-in name that does not exist.
    #[error("redact.builtins: unknown pattern {0:?} (email, phone, card, secret, ip)")]
    UnknownBuiltin(String),
    /// A regex that does not compile.
    #[error("redact.patterns.{0}: {1}")]
    Regex(String, String),
}

/// An extra check on a match.
#[derive(Debug, Clone, Copy)]
enum Check {
    None,
    Luhn,
    Ipv6,
}

#[derive(Debug)]
struct Pattern {
    name: String,
    regex: Regex,
    check: Check,
}

/// Replaces what the configured patterns match. Cheap to share.
#[derive(Debug)]
pub struct Redactor {
    patterns: Vec<Pattern>,
    set: RegexSet,
    mode: RedactMode,
    key: Vec<u8>,
}

/// Matches per pattern, in [`Redactor::names`] order.
pub type Counts = Vec<u64>;

impl Redactor {
    /// The redactor of `config`; the hash key comes from `env[config.hash_key_env]`, else a random
    /// key of this process (hashes then match within one process only).
    pub fn try_new(
        config: &RedactConfig,
        env: &HashMap<String, String>,
    ) -> Result<Redactor, RedactError> {
        let mut patterns = Vec::new();
        for name in &config.builtins {
            let Some((_, re)) = BUILTINS.iter().find(|(n, _)| n == name) else {
                return Err(RedactError::UnknownBuiltin(name.clone()));
            };
            let check = match name.as_str() {
                "card" => Check::Luhn,
                "ip" => Check::Ipv6,
                _ => Check::None,
            };
            patterns.push(Pattern {
                name: name.clone(),
                regex: Regex::new(re)
                    .map_err(|e| RedactError::Regex(name.clone(), e.to_string()))?,
                check,
            });
        }
        for p in &config.patterns {
            patterns.push(Pattern {
                name: p.name.clone(),
                regex: Regex::new(&p.regex)
                    .map_err(|e| RedactError::Regex(p.name.clone(), e.to_string()))?,
                check: Check::None,
            });
        }
        let set = RegexSet::new(patterns.iter().map(|p| p.regex.as_str()))
            .map_err(|e| RedactError::Regex("*".into(), e.to_string()))?;
        let key = match env.get(&config.hash_key_env).filter(|k| !k.is_empty()) {
            Some(k) => k.as_bytes().to_vec(),
            None => {
                if config.mode == RedactMode::Hash {
                    tracing::warn!(
                        var = %config.hash_key_env,
                        "redact.mode = \"hash\" without a key: a random key of this process (hashes differ across replicas and restarts)"
                    );
                }
                rand::random::<[u8; 32]>().to_vec()
            }
        };
        Ok(Redactor {
            patterns,
            set,
            mode: config.mode,
            key,
        })
    }

    /// The pattern names, in counting order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.patterns.iter().map(|p| p.name.as_str())
    }

    /// Whether no pattern is on.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `text` with every match replaced; adds the matches to `counts`. Borrowed when nothing
    /// matched.
    pub fn redact<'a>(&self, text: &'a str, counts: &mut Counts) -> Cow<'a, str> {
        if self.patterns.is_empty() {
            return Cow::Borrowed(text);
        }
        let hits = self.set.matches(text);
        if !hits.matched_any() {
            return Cow::Borrowed(text);
        }
        counts.resize(self.patterns.len(), 0);
        let mut spans: Vec<(usize, usize, usize)> = Vec::new();
        for i in hits.iter() {
            let p = &self.patterns[i];
            for m in p.regex.find_iter(text) {
                let keep = match p.check {
                    Check::None => true,
                    Check::Luhn => luhn(m.as_str()),
                    Check::Ipv6 => {
                        !m.as_str().contains(':')
                            || m.as_str().parse::<std::net::Ipv6Addr>().is_ok()
                    }
                };
                if keep {
                    spans.push((m.start(), m.end(), i));
                }
            }
        }
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        // Earliest first, the longest of those starting together; a span inside or across one
        // already taken is dropped.
        spans.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, i) in spans {
            if start < at {
                continue;
            }
            out.push_str(&text[at..start]);
            self.replacement(&self.patterns[i].name, &text[start..end], &mut out);
            counts[i] += 1;
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    fn replacement(&self, name: &str, matched: &str, out: &mut String) {
        match self.mode {
            RedactMode::Mask => {
                out.push_str("[REDACTED:");
                out.push_str(name);
                out.push(']');
            }
            RedactMode::Hash => {
                let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
                    .expect("HMAC takes a key of any length");
                mac.update(matched.as_bytes());
                let tag = mac.finalize().into_bytes();
                out.push('[');
                out.push_str(name);
                out.push(':');
                for b in &tag[..6] {
                    out.push_str(&format!("{b:02x}"));
                }
                out.push(']');
            }
        }
    }

    /// The trace as it may leave the process: question, contexts and answer redacted (borrowed
    /// when nothing matched); adds the matches to `counts`.
    pub fn redact_trace<'a>(&self, trace: &'a Trace, counts: &mut Counts) -> Cow<'a, Trace> {
        let query = self.redact(&trace.query, counts);
        let answer = self.redact(&trace.answer, counts);
        let contexts: Vec<Cow<str>> = trace
            .contexts
            .iter()
            .map(|c| self.redact(&c.text, counts))
            .collect();
        let changed = matches!(query, Cow::Owned(_))
            || matches!(answer, Cow::Owned(_))
            || contexts.iter().any(|c| matches!(c, Cow::Owned(_)));
        if !changed {
            return Cow::Borrowed(trace);
        }
        let mut t = trace.clone();
        t.query = query.into_owned();
        t.answer = answer.into_owned();
        for (c, text) in t.contexts.iter_mut().zip(contexts) {
            if let Cow::Owned(s) = text {
                c.text = s;
            }
        }
        Cow::Owned(t)
    }
}

/// Whether the digits of `s` (other characters skipped) pass the Luhn check, 13 to 19 of them.
pub(crate) fn luhn(s: &str) -> bool {
    let digits: Vec<u32> = s.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let d2 = d * 2;
                if d2 > 9 { d2 - 9 } else { d2 }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::config::RedactPattern;

    #[test]
    fn the_config_knows_every_built_in_pattern_by_name() {
        let names: Vec<&str> = BUILTINS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, BUILTIN_NAMES);
    }

    fn redactor(builtins: &[&str], mode: RedactMode) -> Redactor {
        let config = RedactConfig {
            builtins: builtins.iter().map(|s| s.to_string()).collect(),
            patterns: vec![RedactPattern {
                name: "employee_id".into(),
                regex: r"\bEMP-\d{6}\b".into(),
            }],
            mode,
            hash_key_env: "KEY".into(),
        };
        let env = HashMap::from([("KEY".to_owned(), "k".to_owned())]);
        Redactor::try_new(&config, &env).unwrap()
    }

    fn all() -> Redactor {
        redactor(
            &["email", "phone", "card", "secret", "ip"],
            RedactMode::Mask,
        )
    }

    #[test]
    fn each_builtin_masks_its_shape_and_counts_it() {
        let r = all();
        let mut counts = Counts::new();
        let text = "Mail jane.doe+rag@example.co.uk or call +44 20 7946 0958. Card 4111 1111 1111 1111, \
                    key sk-proj-abcdefghijklmnopqrstuvwx, host 10.0.12.7 and 2001:db8::8a2e:370:7334, \
                    badge EMP-123456.";
        let out = r.redact(text, &mut counts);
        assert_eq!(
            out,
            "Mail [REDACTED:email] or call [REDACTED:phone]. Card [REDACTED:card], \
             key [REDACTED:secret], host [REDACTED:ip] and [REDACTED:ip], \
             badge [REDACTED:employee_id]."
        );
        let names: Vec<&str> = r.names().collect();
        assert_eq!(
            names,
            ["email", "phone", "card", "secret", "ip", "employee_id"]
        );
        assert_eq!(counts, [1, 1, 1, 1, 2, 1]);
    }

    #[test]
    fn ordinary_text_is_left_alone_and_not_copied() {
        let r = all();
        let mut counts = Counts::new();
        for text in [
            "Canada introduced a carbon price of 65 dollars per tonne in 2023, rising to 170 by 2030.",
            "Order 1234567890123 shipped on 2023-11-05 at 10:30:00; version 1.2.3; ratio 3:2.",
            "The token bucket refills at 5 per second.",
        ] {
            assert!(
                matches!(r.redact(text, &mut counts), Cow::Borrowed(_)),
                "{text}"
            );
        }
        assert!(counts.iter().all(|&c| c == 0));
    }

    #[test]
    fn card_numbers_need_the_luhn_check() {
        assert!(luhn("4111-1111-1111-1111"));
        assert!(luhn("5500 0000 0000 0004"));
        assert!(!luhn("4111 1111 1111 1112"));
        assert!(!luhn("123456789012"));
        let r = redactor(&["card"], RedactMode::Mask);
        let mut counts = Counts::new();
        assert_eq!(
            r.redact("pay 4111111111111111 not 4111111111111112", &mut counts),
            "pay [REDACTED:card] not 4111111111111112"
        );
    }

    #[test]
    fn hash_mode_is_stable_and_keyed() {
        let r = redactor(&["email"], RedactMode::Hash);
        let mut counts = Counts::new();
        let a = r.redact("from a@example.com", &mut counts).into_owned();
        let b = r.redact("to a@example.com", &mut counts).into_owned();
        let c = r.redact("to b@example.com", &mut counts).into_owned();
        let token = |s: &str| s.split_once('[').unwrap().1.to_owned();
        assert_eq!(token(&a), token(&b));
        assert_ne!(token(&a), token(&c));
        assert!(
            a.starts_with("from [email:") && a.len() == "from [email:".len() + 13,
            "{a}"
        );
        assert!(!a.contains("example"));
    }

    #[test]
    fn a_trace_with_nothing_to_redact_is_borrowed() {
        let r = all();
        let mut counts = Counts::new();
        let t = Trace::of("Who wrote it?", &[("d1", "Ann wrote it.")], "Ann.");
        assert!(matches!(r.redact_trace(&t, &mut counts), Cow::Borrowed(_)));
        let t = Trace::of(
            "Mail ann@example.org?",
            &[("d1", "Ann is ann@example.org.")],
            "Yes.",
        );
        let out = r.redact_trace(&t, &mut counts);
        assert_eq!(out.query, "Mail [REDACTED:email]?");
        assert_eq!(out.contexts[0].text, "Ann is [REDACTED:email].");
        assert_eq!(out.answer, "Yes.");
    }
}
