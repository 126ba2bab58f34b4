//! A real HTTP server on loopback that speaks the OpenAI chat-completions and embeddings API, standing
//! in for the judge model. Its "model" is a deterministic rule: a claim is supported when every word of
//! four letters or more appears in the contexts, contradicted when it carries a number the contexts do
//! not have, else unsupported; a context is relevant when it shares a word of five letters or more
//! with the question. Faults are scripted per request: 429 with Retry-After, 500, a delay,
//! malformed JSON, a truncated (`finish_reason = "length"`) answer, a rewritten answer. A TCP front
//! can take the whole API down: while down, every open connection and every new one is reset (RST),
//! as a crashed or unreachable server looks to a client.
//!
//! Like real servers, it can refuse structured-output modes: `refuse_formats` makes it answer a
//! `response_format` of the given kinds with a 400 naming the parameter (OpenAI, vLLM) or a 422 with
//! the field's path (llama-cpp-python). Its embeddings come pooled or per token, as floats or, when
//! asked (`encoding_format = "base64"`), as base64 of little-endian f32s; scripted embedding faults
//! change the dimension or send a NaN.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

/// A scripted fault for one request.
#[derive(Debug, Clone)]
pub enum Fault {
    RateLimited {
        retry_after_secs: u64,
    },
    ServerError,
    Delay(Duration),
    Malformed,
    Truncated,
    /// The answer the rule would give, rewritten (a context list numbered from 0, a bad question).
    Rewrite(fn(Value) -> Value),
}

/// A scripted fault for one embeddings request.
#[derive(Debug, Clone, Copy)]
pub enum EmbedFault {
    /// Vectors of this dimension instead of 64.
    Dimension(usize),
    /// A NaN in the first vector (sent as base64: JSON has no NaN).
    NaN,
}

/// How embeddings come back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmbedShape {
    /// One vector per input (OpenAI, vLLM, Ollama).
    #[default]
    Pooled,
    /// One vector per word of each input (llama-cpp-python with a model without pooling).
    PerToken,
}

/// The kind of a request's `response_format`, as `refuse_formats` names it: `json_schema`,
/// `json_object_schema` (json_object with a schema), `json_object`, or `none`.
pub fn format_kind(body: &Value) -> &'static str {
    let rf = &body["response_format"];
    match rf["type"].as_str() {
        Some("json_schema") => "json_schema",
        Some("json_object") if rf.get("schema").is_some() => "json_object_schema",
        Some("json_object") => "json_object",
        Some(_) => "other",
        None => "none",
    }
}

/// One billed request, as a provider's usage log has it: when it arrived, and the tokens it billed.
#[derive(Debug, Clone, Copy)]
pub struct Billed {
    pub arrived: Instant,
    pub tokens: u64,
    /// A chat completion (else an embeddings request).
    pub chat: bool,
}

#[derive(Default)]
pub struct ServerState {
    /// Every billed request, in the order billed.
    pub billing: Mutex<Vec<Billed>>,
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
    /// Kinds of `response_format` refused, and with which status (400 or 422).
    pub refused_formats: Mutex<(Vec<&'static str>, u16)>,
    /// The `response_format` kind of every chat request, in order.
    pub formats_seen: Mutex<Vec<&'static str>>,
    /// The last chat request bodies (at most 64).
    pub recent_chats: Mutex<VecDeque<Value>>,
    pub embed_faults: Mutex<VecDeque<EmbedFault>>,
    pub embed_shape: Mutex<EmbedShape>,
    /// `encoding_format` of every embeddings request.
    pub encodings_seen: Mutex<Vec<String>>,
    /// Leave `usage` out of every answer.
    pub no_usage: std::sync::atomic::AtomicBool,
    /// Chat requests whose user message holds this text take this long (a slow trace).
    pub slow: Mutex<Option<(String, Duration)>>,
    /// Slow chat requests being served now, and the most ever served at once.
    pub slow_in_flight: AtomicU64,
    pub slow_in_flight_max: AtomicU64,
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

    pub fn embedding_requests(&self) -> u64 {
        self.state.embedding_requests.load(Ordering::SeqCst)
    }

    /// The billed requests so far, each with its arrival time and billed tokens.
    pub fn billing(&self) -> Vec<Billed> {
        self.state.billing.lock().unwrap().clone()
    }

    /// Refuses `response_format` of these kinds with `status` (400 as OpenAI and vLLM do, 422 as
    /// FastAPI servers do, 500 as llama-cpp-python 0.3 does).
    pub fn refuse_formats(&self, kinds: &[&'static str], status: u16) {
        *self.state.refused_formats.lock().unwrap() = (kinds.to_vec(), status);
    }

    pub fn formats_seen(&self) -> Vec<&'static str> {
        self.state.formats_seen.lock().unwrap().clone()
    }

    pub fn script_embeddings(&self, faults: impl IntoIterator<Item = EmbedFault>) {
        self.state.embed_faults.lock().unwrap().extend(faults);
    }

    pub fn set_embed_shape(&self, shape: EmbedShape) {
        *self.state.embed_shape.lock().unwrap() = shape;
    }

    pub fn recent_chats(&self) -> Vec<Value> {
        self.state
            .recent_chats
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect()
    }
}

/// The 400 OpenAI and vLLM send for a response_format they do not take, the 422 of a FastAPI
/// server whose request model has no such variant, or the 500 llama-cpp-python 0.3 wraps that
/// validation error in (its body as measured).
fn refusal(kind: &str, status: u16) -> Response {
    if status == 500 {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"message": format!("1 validation error:\n  {{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': '{kind}'}}"),
                "type": "internal_server_error", "param": null, "code": null}})),
        )
            .into_response()
    } else if status == 422 {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                "msg": format!("Input should be 'text' or 'json_object', not {kind}")}]})),
        )
            .into_response()
    } else {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": format!("Invalid parameter: 'response_format' of type '{kind}' is not supported with this model."),
                "type": "invalid_request_error", "param": "response_format", "code": null}})),
        )
            .into_response()
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
    let arrived = Instant::now();
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
    let kind = format_kind(&body);
    state.formats_seen.lock().unwrap().push(kind);
    {
        let mut recent = state.recent_chats.lock().unwrap();
        recent.push_back(body.clone());
        if recent.len() > 64 {
            recent.pop_front();
        }
    }
    let (refused, status) = state.refused_formats.lock().unwrap().clone();
    if refused.contains(&kind) {
        return refusal(kind, status);
    }
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
    let slow = state.slow.lock().unwrap().clone();
    if let Some((_, delay)) = slow.filter(|(m, _)| user.contains(m.as_str())) {
        let now = state.slow_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.slow_in_flight_max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        state.slow_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    // Without a schema in response_format, the reply's shape is described in the system prompt.
    let rf = &body["response_format"];
    let given = rf["json_schema"]["schema"]
        .as_object()
        .or_else(|| rf["schema"].as_object());
    let schema = match (rf["json_schema"]["name"].as_str(), given) {
        (Some(name), _) => name.to_owned(),
        (None, Some(s)) if s["properties"].get("questions").is_some() => "relevancy".to_owned(),
        (None, Some(s)) if s["properties"].get("ok").is_some() => "probe".to_owned(),
        (None, Some(s)) if s["properties"]["claims"]["items"]["type"] == "object" => {
            "faithfulness".to_owned()
        }
        (None, Some(_)) => "claims".to_owned(),
        (None, None) if system.contains("\"noncommittal\"") => "relevancy".to_owned(),
        (None, None) if system.contains("\"verdict\"") => "faithfulness".to_owned(),
        (None, None) if system.contains("\"ok\"") => "probe".to_owned(),
        (None, None) => "claims".to_owned(),
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
            let asked = given.is_some_and(|s| s["properties"]["contexts"].is_object())
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
        "probe" => json!({"ok": true}).to_string(),
        _ => "{}".to_owned(),
    };
    let (content, finish) = match fault {
        Some(Fault::Malformed) => ("{\"claims\": [{\"claim\": oops".to_owned(), "stop"),
        Some(Fault::Truncated) => (content[..content.len() / 2].to_owned(), "length"),
        Some(Fault::Rewrite(f)) => (
            f(serde_json::from_str(&content).unwrap()).to_string(),
            "stop",
        ),
        _ => (content, "stop"),
    };
    // Every message counts, as a provider bills a re-ask's history too.
    let sent: usize = body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["content"].as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    let usage = json!({"prompt_tokens": sent / 4, "completion_tokens": content.len() / 4});
    let billed =
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap();
    state.tokens_billed.fetch_add(billed, Ordering::SeqCst);
    state.billing.lock().unwrap().push(Billed {
        arrived,
        tokens: billed,
        chat: true,
    });
    let mut answer = json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": usage,
    });
    if state.no_usage.load(Ordering::SeqCst) {
        answer.as_object_mut().unwrap().remove("usage");
    }
    Json(answer).into_response()
}

/// A hashed bag-of-words embedding: texts sharing words point the same way.
fn embed(text: &str, dim: usize) -> Vec<f64> {
    let mut v = vec![0.0; dim];
    for w in words(text).into_iter().filter(|w| w.len() >= 4) {
        v[word_slot(&w, dim)] += 1.0;
    }
    v
}

fn word_slot(w: &str, dim: usize) -> usize {
    let h = w.bytes().fold(1469598103934665603u64, |h, b| {
        (h ^ b as u64).wrapping_mul(1099511628211)
    });
    (h % dim as u64) as usize
}

/// Per-token vectors whose mean is `embed(text) / tokens`: one vector per word (a one-hot for
/// words of four letters or more, zeros for the rest), so the mean-pooled vector points where the
/// pooled one does.
fn embed_tokens(text: &str, dim: usize) -> Vec<Vec<f64>> {
    let mut tokens: Vec<Vec<f64>> = words(text)
        .into_iter()
        .map(|w| {
            let mut v = vec![0.0; dim];
            if w.len() >= 4 {
                v[word_slot(&w, dim)] = 1.0;
            }
            v
        })
        .collect();
    if tokens.is_empty() {
        tokens.push(vec![0.0; dim]);
    }
    tokens
}

fn base64_f32(v: &[f64]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
    let mut s = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            s.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    while !s.len().is_multiple_of(4) {
        s.push('=');
    }
    s
}

async fn embeddings(State(state): State<Arc<ServerState>>, Json(body): Json<Value>) -> Response {
    let arrived = Instant::now();
    state.embedding_requests.fetch_add(1, Ordering::SeqCst);
    let inputs: Vec<String> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let encoding = body["encoding_format"]
        .as_str()
        .unwrap_or("float")
        .to_owned();
    state.encodings_seen.lock().unwrap().push(encoding.clone());
    let fault = state.embed_faults.lock().unwrap().pop_front();
    let shape = *state.embed_shape.lock().unwrap();
    let tokens: usize = inputs.iter().map(|s| s.len() / 4).sum();
    state
        .tokens_billed
        .fetch_add(tokens as u64, Ordering::SeqCst);
    state.billing.lock().unwrap().push(Billed {
        arrived,
        tokens: tokens as u64,
        chat: false,
    });
    let dim = match fault {
        Some(EmbedFault::Dimension(d)) => d,
        _ => 64,
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let embedding = match (fault, shape, encoding.as_str()) {
                (Some(EmbedFault::NaN), _, _) if i == 0 => {
                    let mut v = embed(s, dim);
                    v[0] = f64::NAN;
                    json!(base64_f32(&v))
                }
                (_, EmbedShape::PerToken, _) => json!(embed_tokens(s, dim)),
                (_, EmbedShape::Pooled, "base64") => json!(base64_f32(&embed(s, dim))),
                (_, EmbedShape::Pooled, _) => json!(embed(s, dim)),
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let mut answer = json!({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    if state.no_usage.load(Ordering::SeqCst) {
        answer.as_object_mut().unwrap().remove("usage");
    }
    Json(answer).into_response()
}
