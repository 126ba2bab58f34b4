//! The write listener: writes refused without valid credentials and counted by reason, accepted
//! with them; tokens rotated through the tokens file without a restart; no listener without a
//! credential; no token in the log.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn sample_ids(n: usize) -> Vec<String> {
    let sample = std::fs::read_to_string(root().join("config/sample-traces.jsonl")).unwrap();
    sample
        .lines()
        .take(n)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["trace_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn label(id: &str) -> String {
    format!("{{\"trace_id\": \"{id}\", \"faithful\": true}}\n")
}

/// How long a write's counts may take to stop moving: the tests' own wait for the listener.
const SETTLE: Duration = Duration::from_secs(10);

/// The write listener's counts once they stop moving: refusals and labels, compared with what
/// the clients were answered.
fn write_counts(rw: &Ragwatch) -> Samples {
    rw.settled_metrics(
        &["ragwatch_write_refused_total", "ragwatch_labels_total"],
        SETTLE,
    )
}

fn refused(m: &Samples, endpoint: &str, reason: &str) -> f64 {
    m.sum(
        "ragwatch_write_refused_total",
        &[("endpoint", endpoint), ("reason", reason)],
    )
}

/// Rotation through the tokens file: a new token in, the old one out, no restart; a broken file
/// keeps the tokens in force, and says so.
fn rotate_through_the_file(rw: &Ragwatch, tokens_file: &Path, body: &str) {
    let w = rw.write_addr();
    std::fs::write(tokens_file, "rotated-token labels\n").unwrap();
    wait_for(
        "the tokens file to be read again",
        Duration::from_secs(10),
        || {
            let m = rw.metrics()?;
            (m.sum(
                "ragwatch_write_reloads_total",
                &[("file", "tokens"), ("outcome", "ok")],
            ) >= 1.0)
                .then_some(())
        },
    );
    let (code, _) = http_post_as(w, "/v1/labels", body, Some("rotated-token"));
    assert_eq!(code, 200);
    let (code, _) = http_post_as(w, "/v1/labels", body, Some("file-labels-token"));
    assert_eq!(code, 401);
    // A broken file keeps the tokens in force, and says so.
    std::fs::write(tokens_file, "rotated-token nonsense-scope\n").unwrap();
    wait_for(
        "the broken file to be seen",
        Duration::from_secs(10),
        || {
            let m = rw.metrics()?;
            (m.sum(
                "ragwatch_write_reloads_total",
                &[("file", "tokens"), ("outcome", "error")],
            ) >= 1.0)
                .then_some(())
        },
    );
    let (code, _) = http_post_as(w, "/v1/labels", body, Some("rotated-token"));
    assert_eq!(code, 200);
}

/// Labels over plain HTTP: no token, a malformed header, a wrong token and a token scoped to
/// traces are refused (401, 401, 401, 403) and counted by reason; the environment's two tokens
/// (the old and the new of a rotation) and the file's labels-scoped token are accepted; a token
/// added to the file is taken and a removed one refused without a restart. No token reaches the log.
#[test]
fn writes_need_a_valid_token_and_refusals_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let tokens_file = dir.path().join("tokens");
    std::fs::write(
        &tokens_file,
        "# reviewers\nfile-labels-token labels\nfile-traces-token traces\n",
    )
    .unwrap();
    let rw = Ragwatch::start(
        &root().join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH_WRITE_TOKENS", "old-token,new-token".into()),
            (
                "RAGWATCH__WRITE__AUTH__TOKENS_FILE",
                tokens_file.display().to_string(),
            ),
            ("RAGWATCH__WRITE__TLS__RELOAD_INTERVAL_SECS", "1".into()),
        ],
    );
    let w = rw.write_addr();
    assert_ne!(w, rw.addr, "writes and metrics are separate listeners");
    let ids = sample_ids(3);
    wait_for("the sample to be read", Duration::from_secs(30), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_source_messages_total", &[]) >= 3.0).then_some(())
    });
    let body = label(&ids[0]);

    let (code, reply) = http_post_as(w, "/v1/labels", &body, None);
    assert_eq!((code, reply.trim()), (401, "missing_credentials"));
    let raw = raw_post(
        w,
        "/v1/labels",
        &body,
        "Authorization: Basic b2xkLXRva2VuOg==\r\n",
    );
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{raw}"
    );
    let (code, _) = http_post_as(w, "/v1/labels", &body, Some("guessed-token"));
    assert_eq!(code, 401);
    let (code, _) = http_post_as(w, "/v1/labels", &body, Some("file-traces-token"));
    assert_eq!(code, 403);
    let m = write_counts(&rw);
    assert_eq!(refused(&m, "labels", "missing_credentials"), 1.0);
    assert_eq!(refused(&m, "labels", "malformed_credentials"), 1.0);
    assert_eq!(refused(&m, "labels", "unknown_token"), 1.0);
    assert_eq!(refused(&m, "labels", "forbidden"), 1.0);
    assert_eq!(
        m.sum("ragwatch_labels_total", &[]),
        0.0,
        "no refused label was taken"
    );
    assert_eq!(m.sum("ragwatch_write_tokens", &[]), 4.0);

    for token in ["old-token", "new-token", "file-labels-token"] {
        let (code, reply) = http_post_as(w, "/v1/labels", &body, Some(token));
        assert_eq!(code, 200, "{token}: {reply}");
    }
    assert_eq!(
        write_counts(&rw).sum("ragwatch_labels_total", &[("outcome", "joined")]),
        3.0
    );
    // The admin port takes no writes, with a token or without.
    let (code, _) = http_post(rw.addr, "/v1/labels", &body);
    assert_eq!(code, 404);

    rotate_through_the_file(&rw, &tokens_file, &body);

    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
    let log = rw.log_text();
    assert!(log.contains("write refused"), "{log}");
    for secret in [
        "old-token",
        "new-token",
        "file-labels-token",
        "rotated-token",
        "guessed-token",
        "b2xkLXRva2VuOg",
    ] {
        assert!(!log.contains(secret), "{secret} in the log");
    }
}

/// A POST with `headers` (each ending in CRLF); the raw answer.
fn raw_post(addr: std::net::SocketAddr, path: &str, body: &str, headers: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw
}

/// A write listener with no credential at all does not start: ragwatch exits non-zero and names
/// the settings, before anything listens.
#[test]
fn no_credentials_no_write_listener() {
    let out = Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .args(["run", "--config"])
        .arg(root().join("config/ragwatch.toml"))
        .env_remove("RAGWATCH_WRITE_TOKENS")
        .env("RAGWATCH__LABELS__ENABLED", "true")
        .env("RAGWATCH__HTTP__LISTEN", "127.0.0.1:0")
        .env("RAGWATCH__WRITE__LISTEN", "127.0.0.1:0")
        .current_dir(root())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no credentials") && err.contains("RAGWATCH_WRITE_TOKENS"),
        "{err}"
    );
}

// ------------------------------------------------------------------------------------------- TLS

/// A CA made for one test run.
struct Ca {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        Ca {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` signed by this CA: (certificate PEM, key PEM).
    fn issue(&self, names: &[&str], client: bool) -> (String, String) {
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn client(trust: &Ca, identity: Option<&(String, String)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(trust.pem().as_bytes()).unwrap()])
        .timeout(Duration::from_secs(10));
    if let Some((cert, key)) = identity {
        let pem = format!("{cert}{key}");
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// The labels endpoint over TLS with a real TLS client (reqwest on rustls) and certificates made
/// here: the server is verified against the test's CA; no token is 401, a wrong one 401, a valid
/// one 200; a client certificate of the trusted CA is a credential of its own (200 without a
/// token); one of another CA, and plain HTTP, fail the handshake (counted). A new certificate
/// written over the files is served without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_tokens_and_client_certificates_reloaded_on_change() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, other_ca) = (Ca::new("ragwatch test CA"), Ca::new("someone else's CA"));
    let server = ca.issue(&["localhost", "127.0.0.1"], false);
    let writer = ca.issue(&["label-tool"], true);
    let stranger = other_ca.issue(&["label-tool"], true);
    let (cert, key, client_ca) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("ca.crt"),
    );
    std::fs::write(&cert, &server.0).unwrap();
    std::fs::write(&key, &server.1).unwrap();
    std::fs::write(&client_ca, ca.pem()).unwrap();
    let rw = Ragwatch::start(
        &root().join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            (
                "RAGWATCH__WRITE__TLS__CERT_FILE",
                cert.display().to_string(),
            ),
            ("RAGWATCH__WRITE__TLS__KEY_FILE", key.display().to_string()),
            (
                "RAGWATCH__WRITE__TLS__CLIENT_CA_FILE",
                client_ca.display().to_string(),
            ),
            ("RAGWATCH__WRITE__TLS__RELOAD_INTERVAL_SECS", "1".into()),
        ],
    );
    let url = format!("https://localhost:{}/v1/labels", rw.write_addr().port());
    let body = label(&sample_ids(1)[0]);
    let post = |c: &reqwest::Client, token: Option<&str>| {
        let mut r = c.post(&url).body(body.clone());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let plain = client(&ca, None);
    assert_eq!(post(&plain, None).await.unwrap().status(), 401);
    assert_eq!(post(&plain, Some("guessed")).await.unwrap().status(), 401);
    assert_eq!(post(&plain, Some(WRITE_TOKEN)).await.unwrap().status(), 200);
    let mutual = client(&ca, Some(&writer));
    assert_eq!(post(&mutual, None).await.unwrap().status(), 200);
    // A certificate and a wrong token: the token is still checked.
    assert_eq!(post(&mutual, Some("guessed")).await.unwrap().status(), 401);
    let foreign = client(&ca, Some(&stranger));
    assert!(
        post(&foreign, None).await.is_err(),
        "a certificate of another CA"
    );
    let http = format!("http://127.0.0.1:{}/v1/labels", rw.write_addr().port());
    let cleartext = reqwest::Client::new()
        .post(&http)
        .bearer_auth(WRITE_TOKEN)
        .body(body.clone())
        .send()
        .await;
    assert!(
        cleartext.map_or(true, |r| r.status() != 200),
        "plain HTTP on the TLS port"
    );
    let m = write_counts(&rw);
    assert_eq!(
        m.sum(
            "ragwatch_write_refused_total",
            &[("reason", "missing_credentials")]
        ),
        1.0
    );
    assert_eq!(
        m.sum(
            "ragwatch_write_refused_total",
            &[("reason", "unknown_token")]
        ),
        2.0
    );
    // The listener counts a failed handshake after it has dropped the connection, so the client
    // can see the failure first: the count is waited for, not read once.
    wait_for(
        "two TLS handshake failures",
        Duration::from_secs(10),
        || {
            let failures = rw
                .metrics()?
                .sum("ragwatch_write_tls_handshake_failures_total", &[]);
            (failures >= 2.0).then_some(())
        },
    );
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "joined")]),
        2.0
    );

    // A new CA's certificate over the same files (as cert-manager renews it): served without a
    // restart; a client that trusts only the old CA now refuses the server.
    let renewed_ca = Ca::new("ragwatch test CA, renewed");
    let renewed = renewed_ca.issue(&["localhost"], false);
    std::fs::write(&key, &renewed.1).unwrap();
    std::fs::write(&cert, &renewed.0).unwrap();
    let reloaded = |m: &Samples| {
        m.sum(
            "ragwatch_write_reloads_total",
            &[("file", "tls"), ("outcome", "ok")],
        )
    };
    for _ in 0..100 {
        if reloaded(&rw.metrics().unwrap()) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded(&rw.metrics().unwrap()) >= 1.0);
    let renewed_client = client(&renewed_ca, None);
    assert_eq!(
        post(&renewed_client, Some(WRITE_TOKEN))
            .await
            .unwrap()
            .status(),
        200
    );
    // A fresh client: the first one's pooled connection still runs on the old certificate.
    let old_trust = client(&ca, None);
    assert!(
        post(&old_trust, Some(WRITE_TOKEN)).await.is_err(),
        "the old CA no longer verifies it"
    );
    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
}

// ------------------------------------------------------------------------------------ rate limit

/// Each client gets `burst` requests at once and `requests_per_sec` after: beyond, 429 with
/// `Retry-After`, counted, whatever the credentials (guessing tokens is slowed down too).
#[test]
fn a_client_over_its_rate_is_told_to_retry_later_and_counted() {
    let rw = Ragwatch::start(
        &root().join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__WRITE__RATE_LIMIT__REQUESTS_PER_SEC", "1".into()),
            ("RAGWATCH__WRITE__RATE_LIMIT__BURST", "3".into()),
        ],
    );
    let w = rw.write_addr();
    let body = label(&sample_ids(1)[0]);
    let codes: Vec<u16> = (0..8)
        .map(|i| {
            http_post_as(
                w,
                "/v1/labels",
                &body,
                Some(if i % 2 == 0 { WRITE_TOKEN } else { "guess" }),
            )
            .0
        })
        .collect();
    assert_eq!(&codes[..3], [200, 401, 200], "{codes:?}");
    assert!(codes[3..].iter().all(|&c| c == 429), "{codes:?}");
    let raw = raw_post(
        w,
        "/v1/labels",
        &body,
        &format!("Authorization: Bearer {WRITE_TOKEN}\r\n"),
    );
    assert!(raw.starts_with("HTTP/1.1 429"), "{raw}");
    assert!(raw.to_ascii_lowercase().contains("retry-after: 1"), "{raw}");
    let m = write_counts(&rw);
    assert_eq!(refused(&m, "labels", "rate_limited"), 6.0);
    assert_eq!(refused(&m, "labels", "unknown_token"), 1.0);
    // A second later the client has a request again.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(http_post(w, "/v1/labels", &body).0, 200);
}
