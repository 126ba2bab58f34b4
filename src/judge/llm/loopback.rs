//! A judge API on loopback for unit tests, served by a task of the test's own runtime: its delays
//! run on the test's clock, so a test on tokio's paused clock steps through them exactly (with
//! client and server in one runtime, a loopback write is readable before the runtime next idles,
//! so paused time does not jump while a request is on the wire).
//!
//! It answers every chat request with one supported claim or one generated question (by the
//! schema's name), and embeddings with one unit vector per input; or, when told, with a status
//! (a 429 with `Retry-After`, a 500). It records when each request arrived.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::clock::Instant;

/// What the server answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reply {
    /// A valid answer after `delay`.
    Verdict {
        /// Time spent on each request.
        delay: Duration,
    },
    /// This status at once, with `Retry-After` in seconds when given.
    Status(u16, Option<u64>),
}

#[derive(Debug)]
pub(crate) struct Loopback {
    pub(crate) addr: SocketAddr,
    reply: Arc<Mutex<Reply>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Shared {
    reply: Arc<Mutex<Reply>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Loopback {
    /// Serves on a free port of 127.0.0.1 until dropped.
    pub(crate) async fn start(reply: Reply) -> Loopback {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Shared {
            reply: Arc::new(Mutex::new(reply)),
            arrivals: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Loopback {
            addr,
            reply: shared.reply,
            arrivals: shared.arrivals,
            task,
        }
    }

    /// `[llm]` keys pointing the judge at this server (strict `json_schema`, so no probe).
    pub(crate) fn llm_toml(&self) -> String {
        format!(
            "[llm]\nbase_url = \"http://{}/v1\"\nstructured_output = \"json_schema\"\n",
            self.addr
        )
    }

    /// `[llm]` pointed at this server, with `extra` keys of the section.
    pub(crate) fn llm_config(&self, extra: &str) -> crate::judge::llm::config::LlmConfig {
        let section = self.llm_toml().replace("[llm]\n", "");
        toml::from_str(&format!("{section}{extra}")).expect("a valid [llm] section")
    }

    /// Requests received so far.
    pub(crate) fn requests(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }

    /// When each request arrived, after `start`.
    pub(crate) fn arrivals_since(&self, start: Instant) -> Vec<Duration> {
        let arrivals = self.arrivals.lock().unwrap();
        arrivals.iter().map(|t| *t - start).collect()
    }

    /// Changes what the server answers from the next request on.
    pub(crate) fn set_reply(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The status reply, or the delay before a valid one.
async fn arrive(shared: &Shared) -> Result<(), Response> {
    shared.arrivals.lock().unwrap().push(Instant::now());
    let reply = *shared.reply.lock().unwrap();
    match reply {
        Reply::Verdict { delay } => {
            tokio::time::sleep(delay).await;
            Ok(())
        }
        Reply::Status(code, retry_after) => {
            let status = StatusCode::from_u16(code).unwrap();
            Err(match retry_after {
                Some(s) => (status, [("retry-after", s.to_string())], "").into_response(),
                None => (status, "").into_response(),
            })
        }
    }
}

async fn chat(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    if let Err(r) = arrive(&shared).await {
        return r;
    }
    let content = match body["response_format"]["json_schema"]["name"].as_str() {
        Some("relevancy") => {
            json!({"questions": [{"question": "When does the museum open?", "noncommittal": false}]})
        }
        _ => json!({"claims": [{"claim": "It opens at 9.", "verdict": "supported"}]}),
    };
    Json(json!({
        "choices": [{"message": {"content": content.to_string()}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }))
    .into_response()
}

async fn embeddings(State(shared): State<Shared>, Json(body): Json<Value>) -> Response {
    if let Err(r) = arrive(&shared).await {
        return r;
    }
    let n = body["input"].as_array().map_or(1, Vec::len);
    let data: Vec<Value> = (0..n)
        .map(|i| json!({"embedding": [1.0, 0.0], "index": i}))
        .collect();
    Json(json!({"data": data, "usage": {"prompt_tokens": 4, "completion_tokens": 0}}))
        .into_response()
}
