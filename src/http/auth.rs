//! Who may write: bearer tokens (from an environment variable and a file, several at once so a
//! token can be rotated without a gap) and client certificates verified by the TLS listener.
//!
//! Tokens are held as SHA-256 digests only, and a presented token is compared with every one of
//! them in constant time (`subtle`), so neither the comparison's timing nor a memory dump gives a
//! token away. No token, presented or configured, is ever logged.

use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

/// A write endpoint: the scope a token may be limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `POST /v1/traces`, the OTLP/HTTP receiver.
    Traces,
    /// `POST /v1/labels`.
    Labels,
}

impl Endpoint {
    /// The label value and the scope name.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Traces => "traces",
            Endpoint::Labels => "labels",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Endpoint::Traces => 1,
            Endpoint::Labels => 2,
        }
    }
}

/// Why a write was refused; label values of `ragwatch_write_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No `Authorization` header and no verified client certificate (401).
    MissingCredentials,
    /// An `Authorization` header that is not `Bearer <token>` (401).
    MalformedCredentials,
    /// A bearer token that matches none configured (401).
    UnknownToken,
    /// A known token whose scopes leave this endpoint out (403).
    Forbidden,
    /// The client is over its rate limit (429).
    RateLimited,
}

impl Denied {
    /// Every reason, in label order.
    pub const ALL: [Denied; 5] = [
        Denied::MissingCredentials,
        Denied::MalformedCredentials,
        Denied::UnknownToken,
        Denied::Forbidden,
        Denied::RateLimited,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Denied::MissingCredentials => "missing_credentials",
            Denied::MalformedCredentials => "malformed_credentials",
            Denied::UnknownToken => "unknown_token",
            Denied::Forbidden => "forbidden",
            Denied::RateLimited => "rate_limited",
        }
    }

    /// The HTTP status of the answer.
    pub fn status(self) -> u16 {
        match self {
            Denied::MissingCredentials | Denied::MalformedCredentials | Denied::UnknownToken => 401,
            Denied::Forbidden => 403,
            Denied::RateLimited => 429,
        }
    }
}

/// Why a token list could not be read. Never carries a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenError {
    /// A scope other than `traces` and `labels`.
    #[error("entry {entry}: unknown scope {scope:?} (traces, labels)")]
    UnknownScope {
        /// 1-based entry number.
        entry: usize,
        /// The scope as written (scopes are not secret).
        scope: String,
    },
    /// A token with characters a bearer token cannot have (RFC 6750 `b64token`).
    #[error("entry {0}: a token is letters, digits and -._~+/ (then = padding) only")]
    BadToken(usize),
}

/// One configured token: its digest and the endpoints it may write to.
#[derive(Debug, Clone)]
struct Entry {
    digest: [u8; 32],
    scopes: u8,
}

/// A set of tokens.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<Entry>,
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

fn b64token(t: &str) -> bool {
    let body = t.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

impl Tokens {
    /// Reads entries separated by commas or new lines, each `TOKEN` or `TOKEN SCOPE...`; `#` to the
    /// end of a line is a comment; empty entries are skipped.
    pub fn parse(text: &str) -> Result<Tokens, TokenError> {
        let mut entries = Vec::new();
        let items = text
            .lines()
            .map(|l| l.split_once('#').map_or(l, |(keep, _)| keep))
            .flat_map(|l| l.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty());
        for (i, item) in items.enumerate() {
            let mut words = item.split_whitespace();
            let token = words.next().unwrap_or_default();
            if !b64token(token) {
                return Err(TokenError::BadToken(i + 1));
            }
            let mut scopes = 0u8;
            for w in words {
                scopes |= match w {
                    "traces" => Endpoint::Traces.bit(),
                    "labels" => Endpoint::Labels.bit(),
                    other => {
                        return Err(TokenError::UnknownScope {
                            entry: i + 1,
                            scope: other.to_owned(),
                        });
                    }
                };
            }
            entries.push(Entry {
                digest: digest(token.as_bytes()),
                scopes: if scopes == 0 { u8::MAX } else { scopes },
            });
        }
        Ok(Tokens { entries })
    }

    /// Both sets.
    pub(crate) fn merged(&self, other: &Tokens) -> Tokens {
        let mut entries = self.entries.clone();
        entries.extend(other.entries.iter().cloned());
        Tokens { entries }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `token` may write to `endpoint`. Every entry is compared, whether or not an earlier
    /// one matched, so the time taken does not depend on which token (if any) it is.
    pub fn check(&self, token: &[u8], endpoint: Endpoint) -> Result<(), Denied> {
        let presented = digest(token);
        let mut found = Choice::from(0);
        let mut scopes = 0u8;
        for e in &self.entries {
            let hit = e.digest.ct_eq(&presented);
            found |= hit;
            // Branch-free: the scopes of a matching entry, nothing of the others.
            scopes |= e.scopes & 0u8.wrapping_sub(hit.unwrap_u8());
        }
        if !bool::from(found) {
            Err(Denied::UnknownToken)
        } else if scopes & endpoint.bit() == 0 {
            Err(Denied::Forbidden)
        } else {
            Ok(())
        }
    }
}

/// The bearer token of an `Authorization` header value: `Ok(None)` without a header,
/// `Err(MalformedCredentials)` for another scheme or an empty token.
pub fn bearer(header: Option<&[u8]>) -> Result<Option<&[u8]>, Denied> {
    let Some(value) = header else {
        return Ok(None);
    };
    let value = value.trim_ascii();
    let scheme = b"bearer ";
    if value.len() <= scheme.len() || !value[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return Err(Denied::MalformedCredentials);
    }
    let token = value[scheme.len()..].trim_ascii();
    if token.is_empty() {
        return Err(Denied::MalformedCredentials);
    }
    Ok(Some(token))
}

/// Whether a request may write to `endpoint`: a verified client certificate suffices; otherwise
/// the bearer token of `authorization` must be one of `tokens` with that scope.
pub(crate) fn authorize(
    tokens: &Tokens,
    authorization: Option<&[u8]>,
    client_certificate: bool,
    endpoint: Endpoint,
) -> Result<(), Denied> {
    if client_certificate && authorization.is_none() {
        return Ok(());
    }
    match bearer(authorization)? {
        None => Err(Denied::MissingCredentials),
        Some(token) => tokens.check(token, endpoint),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_with_and_without_scopes() {
        let t = Tokens::parse(
            "alpha, beta labels\n# old one, kept for the rotation\ngamma traces labels # both\n",
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        assert_eq!(t.check(b"alpha", Endpoint::Traces), Ok(()));
        assert_eq!(t.check(b"alpha", Endpoint::Labels), Ok(()));
        assert_eq!(t.check(b"beta", Endpoint::Labels), Ok(()));
        assert_eq!(t.check(b"beta", Endpoint::Traces), Err(Denied::Forbidden));
        assert_eq!(t.check(b"gamma", Endpoint::Traces), Ok(()));
        assert_eq!(
            t.check(b"alph", Endpoint::Traces),
            Err(Denied::UnknownToken)
        );
        assert_eq!(t.check(b"", Endpoint::Traces), Err(Denied::UnknownToken));
        assert!(Tokens::parse("").unwrap().is_empty());
        assert_eq!(
            Tokens::parse("a b").unwrap_err(),
            TokenError::UnknownScope {
                entry: 1,
                scope: "b".into()
            }
        );
        assert_eq!(
            Tokens::parse("x\n\"quoted\"").unwrap_err(),
            TokenError::BadToken(2)
        );
    }

    #[test]
    fn errors_never_show_the_token() {
        let e = Tokens::parse("s3cr3t!value").unwrap_err().to_string();
        assert!(!e.contains("s3cr3t"), "{e}");
    }

    #[test]
    fn the_header_decides_the_reason() {
        let t = Tokens::parse("tok").unwrap();
        let auth =
            |h: Option<&str>, cert| authorize(&t, h.map(str::as_bytes), cert, Endpoint::Labels);
        assert_eq!(auth(None, false), Err(Denied::MissingCredentials));
        assert_eq!(auth(None, true), Ok(()));
        assert_eq!(
            auth(Some("Basic dG9rOg=="), false),
            Err(Denied::MalformedCredentials)
        );
        assert_eq!(
            auth(Some("Bearer "), false),
            Err(Denied::MalformedCredentials)
        );
        assert_eq!(auth(Some("bearer tok"), false), Ok(()));
        assert_eq!(auth(Some("Bearer tok2"), false), Err(Denied::UnknownToken));
        // A certificate and a wrong token: the token is checked, not waved through.
        assert_eq!(auth(Some("Bearer nope"), true), Err(Denied::UnknownToken));
    }
}
