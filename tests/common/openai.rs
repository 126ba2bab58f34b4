//! A real HTTP server on loopback that speaks the OpenAI chat-completions and embeddings API, standing
//! in for the judge model. Its "model" is a deterministic rule: a claim is supported when every word of
//! four letters or more appears in the contexts, contradicted when it carries a number the contexts do
//! not have, else unsupported; a context is relevant when it shares a word of five letters or more
//! with the question. Faults are scripted per request: 429 with Retry-After, 500, a delay,
//! malformed JSON, a truncated (`finish_reason = "length"`) answer. A TCP front can take the whole API
//! down: while down, every open connection and every new one is reset (RST), as a crashed or
//! unreachable server looks to a client.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

/// A scripted fault for one request.
#[derive(Debug, Clone)]
pub enum Fault {
    RateLimited { retry_after_secs: u64 },
    ServerError,
    Delay(Duration),
    Malformed,
    Truncated,
}

#[derive(Default)]
pub struct ServerState {
    pub faults: Mutex<VecDeque<Fault>>,
    /// A fault applied to every request while set.
    pub always: Mutex<Option<Fault>>,
    pub chat_requests: AtomicU64,
    pub embedding_requests: AtomicU64,
    /// Tokens the server reported as used (prompt + completion), as a provider would bill them.
    pub tokens_billed: AtomicU64,
    pub last_auth: Mutex<Option<String>>,
    /// Connections reset while the API was down.
    pub connection_resets: AtomicU64,
    pub max_tokens_seen: Mutex<Vec<u64>>,
}

pub struct FakeOpenAi {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
    down: tokio::sync::watch::Sender<bool>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeOpenAi {
    pub fn start() -> FakeOpenAi {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(ServerState::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .with_state(Arc::clone(&state));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let inner = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        let front = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = front.local_addr().unwrap();
        let (down, down_rx) = tokio::sync::watch::channel(false);
        let resets = Arc::clone(&state);
        runtime.spawn(async move {
            while let Ok((client, _)) = front.accept().await {
                let mut down_rx = down_rx.clone();
                let resets = Arc::clone(&resets);
                tokio::spawn(async move {
                    let reset = |c: tokio::net::TcpStream| {
                        resets.connection_resets.fetch_add(1, Ordering::SeqCst);
                        let _ = c.set_zero_linger();
                    };
                    if *down_rx.borrow() {
                        return reset(client);
                    }
                    let Ok(mut server) = tokio::net::TcpStream::connect(inner).await else {
                        return;
                    };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = down_rx.wait_for(|d| *d) => reset(client),
                    }
                });
            }
        });
        FakeOpenAi {
            addr,
            state,
            down,
            _runtime: runtime,
        }
    }

    /// Takes the API down (every connection reset) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.send_replace(down);
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.faults.lock().unwrap().extend(faults);
    }

    pub fn set_always(&self, fault: Option<Fault>) {
        *self.state.always.lock().unwrap() = fault;
    }

    pub fn chat_requests(&self) -> u64 {
        self.state.chat_requests.load(Ordering::SeqCst)
    }

    pub fn tokens_billed(&self) -> u64 {
        self.state.tokens_billed.load(Ordering::SeqCst)
    }
}

fn next_fault(state: &ServerState) -> Option<Fault> {
    state
        .faults
        .lock()
        .unwrap()
        .pop_front()
        .or_else(|| state.always.lock().unwrap().clone())
}

async fn apply(fault: &Option<Fault>) -> Option<Response> {
    match fault {
        Some(Fault::RateLimited { retry_after_secs }) => Some(
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", retry_after_secs.to_string())],
                "slow down",
            )
                .into_response(),
        ),
        Some(Fault::ServerError) => {
            Some((StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response())
        }
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(*d).await;
            None
        }
        _ => None,
    }
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        let after = &rest[i + open.len()..];
        let start = after.find('>').map(|j| j + 1).unwrap_or(0);
        let body = &after[start..];
        match body.find(close) {
            Some(end) => {
                out.push(&body[..end]);
                rest = &body[end + close.len()..];
            }
            None => break,
        }
    }
    out
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect()
}

fn sentences(answer: &str) -> Vec<String> {
    answer
        .split(['.', '!', '?'])
        .map(str::trim)
        .filter(|s| s.split_whitespace().count() >= 3)
        .map(str::to_owned)
        .collect()
}

fn verdict(claim: &str, contexts: &str) -> &'static str {
    let ctx: std::collections::HashSet<String> = words(contexts).into_iter().collect();
    let w = words(claim);
    if w.iter()
        .any(|w| w.chars().all(|c| c.is_ascii_digit()) && !ctx.contains(w))
    {
        "contradicted"
    } else if w.iter().filter(|w| w.len() >= 4).all(|w| ctx.contains(w)) {
        "supported"
    } else {
        "unsupported"
    }
}

async fn chat(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    state.chat_requests.fetch_add(1, Ordering::SeqCst);
    *state.last_auth.lock().unwrap() = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    state
        .max_tokens_seen
        .lock()
        .unwrap()
        .push(body["max_tokens"].as_u64().unwrap_or(0));
    let fault = next_fault(&state);
    if let Some(r) = apply(&fault).await {
        return r;
    }
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let user = body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // JSON mode (no schema in response_format): the schema is in the system prompt.
    let schema = match body["response_format"]["json_schema"]["name"].as_str() {
        Some(name) => name.to_owned(),
        None if system.contains("\"noncommittal\"") => "relevancy".to_owned(),
        None if system.contains("\"verdict\"") => "faithfulness".to_owned(),
        None => "claims".to_owned(),
    };
    let contexts = between(&user, "<context", "</context>").join(" ");
    let answer = between(&user, "<answer", "</answer>")
        .first()
        .copied()
        .unwrap_or_default()
        .to_owned();
    let content = match schema.as_str() {
        "faithfulness" => {
            let claims: Vec<String> = if user.contains("<claims>") {
                serde_json::from_str(between(&user, "<claims", "</claims>")[0]).unwrap_or_default()
            } else {
                sentences(&answer)
            };
            let items: Vec<Value> = claims
                .iter()
                .map(|c| json!({"claim": c, "verdict": verdict(c, &contexts)}))
                .collect();
            let asked = body["response_format"]["json_schema"]["schema"]["properties"]["contexts"]
                .is_object()
                || system.contains("Also judge each context");
            if asked {
                let question: Vec<String> = between(&user, "<question", "</question>")
                    .first()
                    .map(|q| words(q).into_iter().filter(|w| w.len() >= 5).collect())
                    .unwrap_or_default();
                let rated: Vec<Value> = between(&user, "<context", "</context>")
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let relevant = words(c).iter().any(|w| question.contains(w));
                        json!({"n": i + 1, "relevant": relevant})
                    })
                    .collect();
                json!({"claims": items, "contexts": rated}).to_string()
            } else {
                json!({"claims": items}).to_string()
            }
        }
        "claims" => json!({"claims": sentences(&answer)}).to_string(),
        "relevancy" => {
            let n: usize = system
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(3);
            let lower = answer.to_lowercase();
            let noncommittal = ["sorry", "cannot", "do not contain", "unable"]
                .iter()
                .any(|p| lower.contains(p));
            let gist: Vec<String> = words(&answer)
                .into_iter()
                .filter(|w| w.len() >= 4)
                .take(8)
                .collect();
            let qs: Vec<Value> = (0..n)
                .map(|i| json!({"question": format!("what {} {}", gist.join(" "), i), "noncommittal": noncommittal}))
                .collect();
            json!({"questions": qs}).to_string()
        }
        _ => "{}".to_owned(),
    };
    let (content, finish) = match fault {
        Some(Fault::Malformed) => ("{\"claims\": [{\"claim\": oops".to_owned(), "stop"),
        Some(Fault::Truncated) => (content[..content.len() / 2].to_owned(), "length"),
        _ => (content, "stop"),
    };
    let usage = json!({"prompt_tokens": (system.len() + user.len()) / 4, "completion_tokens": content.len() / 4});
    state.tokens_billed.fetch_add(
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap(),
        Ordering::SeqCst,
    );
    Json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": usage,
    }))
    .into_response()
}

/// A hashed bag-of-words embedding: texts sharing words point the same way.
fn embed(text: &str) -> Vec<f64> {
    let mut v = vec![0.0; 64];
    for w in words(text).into_iter().filter(|w| w.len() >= 4) {
        let h = w.bytes().fold(1469598103934665603u64, |h, b| {
            (h ^ b as u64).wrapping_mul(1099511628211)
        });
        v[(h % 64) as usize] += 1.0;
    }
    v
}

async fn embeddings(State(state): State<Arc<ServerState>>, Json(body): Json<Value>) -> Response {
    state.embedding_requests.fetch_add(1, Ordering::SeqCst);
    let inputs: Vec<String> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let tokens: usize = inputs.iter().map(|s| s.len() / 4).sum();
    state
        .tokens_billed
        .fetch_add(tokens as u64, Ordering::SeqCst);
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"object": "embedding", "index": i, "embedding": embed(s)}))
        .collect();
    Json(json!({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})).into_response()
}
