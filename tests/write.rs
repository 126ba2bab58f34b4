//! The write listener: writes refused without valid credentials and counted by reason, accepted
//! with them; tokens rotated through the tokens file without a restart; no listener without a
//! credential; no token in the log.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

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

fn refused(rw: &Ragwatch, endpoint: &str, reason: &str) -> f64 {
    rw.metrics().unwrap().sum(
        "ragwatch_write_refused_total",
        &[("endpoint", endpoint), ("reason", reason)],
    )
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
    assert_eq!(refused(&rw, "labels", "missing_credentials"), 1.0);
    assert_eq!(refused(&rw, "labels", "malformed_credentials"), 1.0);
    assert_eq!(refused(&rw, "labels", "unknown_token"), 1.0);
    assert_eq!(refused(&rw, "labels", "forbidden"), 1.0);
    let m = rw.metrics().unwrap();
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
        rw.metrics()
            .unwrap()
            .sum("ragwatch_labels_total", &[("outcome", "joined")]),
        3.0
    );
    // The admin port takes no writes, with a token or without.
    let (code, _) = http_post(rw.addr, "/v1/labels", &body);
    assert_eq!(code, 404);

    // Rotation through the file: a new token in, the old one out, no restart.
    std::fs::write(&tokens_file, "rotated-token labels\n").unwrap();
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
    let (code, _) = http_post_as(w, "/v1/labels", &body, Some("rotated-token"));
    assert_eq!(code, 200);
    let (code, _) = http_post_as(w, "/v1/labels", &body, Some("file-labels-token"));
    assert_eq!(code, 401);
    // A broken file keeps the tokens in force, and says so.
    std::fs::write(&tokens_file, "rotated-token nonsense-scope\n").unwrap();
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
    let (code, _) = http_post_as(w, "/v1/labels", &body, Some("rotated-token"));
    assert_eq!(code, 200);

    promtool_check_metrics(&rw.scrape().unwrap()).unwrap();
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
