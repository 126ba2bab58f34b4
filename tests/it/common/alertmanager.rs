//! Alertmanager's side of the chain: the shipped config pointed at a webhook of the test, the
//! webhook that collects what it posts, the alerts as delivered, and Prometheus's own alerts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;

use crate::common::prometheus::query;
use crate::common::repo;

/// One webhook post: when it arrived, the path (the receiver), the body.
pub type Post = (Instant, String, Value);

/// Collects Alertmanager's webhook posts.
pub fn webhook() -> (u16, Arc<Mutex<Vec<Post>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut path = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if path.is_empty() {
                    path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(v) = serde_json::from_slice::<Value>(&body)
            {
                store.lock().unwrap().push((Instant::now(), path, v));
            }
            let mut s = stream;
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

/// One alert as delivered: arrival, receiver path, status, labels, annotations.
pub struct Delivered {
    pub at: Instant,
    pub receiver: String,
    pub status: String,
    pub labels: Value,
    pub annotations: Value,
}

pub fn delivered(seen: &Mutex<Vec<Post>>) -> Vec<Delivered> {
    seen.lock()
        .unwrap()
        .iter()
        .flat_map(|(at, path, post)| {
            post["alerts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|a| Delivered {
                    at: *at,
                    receiver: path.trim_matches('/').to_owned(),
                    status: a["status"].as_str().unwrap_or_default().to_owned(),
                    labels: a["labels"].clone(),
                    annotations: a["annotations"].clone(),
                })
        })
        .collect()
}

/// The shipped Alertmanager config with every receiver's URL pointed at the test's webhook, under a
/// path naming the receiver, and its waits shortened with the rules' `for:` (a shipped 10 s
/// `group_wait` would swallow alerts the shortened rules hold for a few seconds). Routes and inhibit
/// rules stay as shipped.
pub fn alertmanager_config(hook_port: u16) -> String {
    let shipped =
        std::fs::read_to_string(repo().join("deploy/alertmanager/alertmanager.yml")).unwrap();
    let mut receiver = String::new();
    let mut out = String::new();
    for line in shipped.lines() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("- name:") {
            receiver = name.trim().trim_matches('"').to_owned();
        }
        if let Some(key) = ["group_wait:", "group_interval:"]
            .into_iter()
            .find(|k| t.starts_with(k))
        {
            let indent = &line[..line.len() - t.len()];
            out.push_str(&format!("{indent}{key} 1s\n"));
            continue;
        }
        if let Some(url) = t.strip_prefix("- url:").or_else(|| t.strip_prefix("url:")) {
            assert!(url.contains("REPLACE-ME"), "a placeholder URL: {line}");
            let indent = &line[..line.len() - t.len()];
            let key = if t.starts_with('-') { "- url:" } else { "url:" };
            out.push_str(&format!(
                "{indent}{key} http://127.0.0.1:{hook_port}/{receiver}\n"
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(
        out.contains("/ragwatch-pager"),
        "the shipped config has a ragwatch-pager receiver"
    );
    out
}

/// The alerts Prometheus holds in `state` (firing or pending), as label sets.
pub fn prom_alerts(prom: u16, state: &str) -> Vec<Value> {
    query(prom, &format!("ALERTS{{alertstate=\"{state}\"}}"))
        .unwrap_or_default()
        .into_iter()
        .map(|r| r["metric"].clone())
        .collect()
}

pub fn describe(labels: &Value) -> String {
    format!(
        "{}{{stratum={}, severity={}}}",
        labels["alertname"].as_str().unwrap_or("?"),
        labels["stratum"].as_str().unwrap_or("-"),
        labels["severity"].as_str().unwrap_or("-")
    )
}
