//! Configuration of the write listener (`[write]`): the one port that takes writes, `POST /v1/traces`
//! (the OTLP/HTTP receiver, `source.kind = "otlp"`) and `POST /v1/labels` (`labels.enabled`), apart
//! from the read-only admin port of `[http]`. Who may write (`[write.auth]`), TLS (`[write.tls]`)
//! and the per-client rate limit (`[write.rate_limit]`).
//!
//! Tokens never live here: the config names the environment variable and the file that hold them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// The write listener.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteConfig {
    /// Listen address of `POST /v1/traces` and `POST /v1/labels`; port 0 picks a free port
    /// (written to `port_file`). Bound only when one of them is on.
    #[serde(default = "default_write_listen")]
    pub listen: String,
    /// Write the bound address here once listening (used by tests and scripts).
    #[serde(default)]
    pub port_file: Option<PathBuf>,
    /// A second address of the same listener, for OTLP/gRPC (the Collector's `otlp` and
    /// `loadbalancing` exporters; 4317 by convention): same routes, credentials, TLS and rate
    /// limit. Unset, no second port (`listen` speaks HTTP/2 and takes gRPC all the same).
    #[serde(default)]
    pub grpc_listen: Option<String>,
    /// Write the gRPC address here once listening.
    #[serde(default)]
    pub grpc_port_file: Option<PathBuf>,
    /// Who may write.
    #[serde(default)]
    pub auth: WriteAuthConfig,
    /// TLS on the write listener; plain HTTP when `cert_file` is unset.
    #[serde(default)]
    pub tls: WriteTlsConfig,
    /// Requests each client (peer IP address) may make.
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
}

/// Who may write: a bearer token (`Authorization: Bearer <token>`) from the environment variable or
/// the file named here, or a client certificate the TLS listener verified (`write.tls.client_ca_file`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteAuthConfig {
    /// The environment variable holding tokens: entries separated by commas or new lines, each
    /// `TOKEN` (any endpoint) or `TOKEN SCOPE...` (`traces`, `labels`).
    #[serde(default = "default_tokens_env")]
    pub tokens_env: String,
    /// A file of tokens, one entry a line as in `tokens_env` (`#` starts a comment); read again
    /// when it changes (a rotated Kubernetes Secret), every `write.tls.reload_interval_secs`.
    #[serde(default)]
    pub tokens_file: Option<PathBuf>,
    /// Take writes with no credentials at all. For a listener only the pod's own containers reach
    /// (`127.0.0.1`); never on an address other pods can reach.
    #[serde(default)]
    pub allow_unauthenticated: bool,
}

/// Whether the TLS listener asks for a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// A certificate is asked for; a client without one may still present a bearer token.
    Optional,
    /// The handshake fails without a certificate signed by `client_ca_file`.
    Required,
}

/// TLS on the write listener (rustls): certificate and key from PEM files, read again when they
/// change; client certificates verified against `client_ca_file` when it is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteTlsConfig {
    /// The server's certificate chain (PEM). TLS is on when set.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must chain to; a verified client
    /// certificate is a credential of its own.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// `optional` or `required`, when `client_ca_file` is set.
    #[serde(default = "default_client_auth")]
    pub client_auth: ClientAuth,
    /// How often the certificate, key, CA and token files are checked for a change.
    #[serde(default = "default_reload_interval_secs")]
    pub reload_interval_secs: u64,
    /// A TLS handshake not done within this long is dropped.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

/// The per-client rate limit of the write endpoints (a generic cell rate, keyed by peer IP
/// address; checked before credentials, so guessing tokens is slowed too).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second one client may make; 0 turns the limit off.
    #[serde(default = "default_requests_per_sec")]
    pub requests_per_sec: u32,
    /// Requests one client may make at once above the sustained rate.
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Clients tracked at once; the least recently seen are forgotten beyond it.
    #[serde(default = "default_max_clients")]
    pub max_clients: usize,
}

fn default_write_listen() -> String {
    "0.0.0.0:4318".into()
}
fn default_tokens_env() -> String {
    "RAGWATCH_WRITE_TOKENS".into()
}
fn default_client_auth() -> ClientAuth {
    ClientAuth::Optional
}
fn default_reload_interval_secs() -> u64 {
    10
}
fn default_handshake_timeout_ms() -> u64 {
    5_000
}
fn default_requests_per_sec() -> u32 {
    50
}
fn default_burst() -> u32 {
    100
}
fn default_max_clients() -> usize {
    10_000
}

crate::section::fields::default_from_serde!(
    WriteConfig,
    WriteAuthConfig,
    WriteTlsConfig,
    RateLimitConfig
);

impl WriteConfig {
    /// Whether TLS is on.
    pub(crate) fn tls_enabled(&self) -> bool {
        self.tls.cert_file.is_some()
    }
}

impl WriteConfig {
    /// Checks `[write]`'s own keys; the listener addresses are checked with the sections that
    /// switch the listener on (see `Config::validate_write`).
    pub(crate) fn validate(&self, p: &mut Problems) {
        let w = self;
        let t = &w.tls;
        if t.cert_file.is_some() != t.key_file.is_some() {
            p.add("write.tls.key_file", "cert_file and key_file go together");
        }
        if t.client_ca_file.is_some() && t.cert_file.is_none() {
            p.add(
                "write.tls.client_ca_file",
                "client certificates need TLS: set cert_file and key_file",
            );
        }
        if t.reload_interval_secs == 0 {
            p.add("write.tls.reload_interval_secs", "must be > 0");
        }
        if t.handshake_timeout_ms == 0 {
            p.add("write.tls.handshake_timeout_ms", "must be > 0");
        }
        if w.auth.tokens_env.trim().is_empty() {
            p.add("write.auth.tokens_env", "must name a variable");
        }
        let r = &w.rate_limit;
        if r.requests_per_sec > 0 && r.burst == 0 {
            p.add("write.rate_limit.burst", "must be > 0 when the limit is on");
        }
        if r.max_clients == 0 {
            p.add("write.rate_limit.max_clients", "must be > 0");
        }
    }
}
