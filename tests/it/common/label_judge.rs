//! An LLM judge stand-in whose faithfulness verdicts follow human labels, with noise: a real HTTP
//! server on loopback speaking the OpenAI chat-completions and embeddings API the way ragwatch calls
//! it (`response_format` with a JSON schema named `faithfulness`, `claims` or `relevancy`; the
//! content of the chat completion is JSON that follows that schema).
//!
//! The server is given a label per answer text (built by the test from a labelled data file) and
//! looks up the answer of every faithfulness request in it. Its verdict model is the one
//! `tests/it/detection.rs` uses in process: the judge reads an answer the way the humans did 90 % of
//! the time; an answer it reads as faithful gets a score of 1 (70 %) or uniform in [0.6, 1], one it
//! reads as unfaithful a score uniform in [0.2, 0.7]. The score is realised as claims: the answer's
//! sentences, each supported with the score's probability on average (so the share of supported
//! claims, ragwatch's faithfulness, has the score as its expectation). Contexts sharing a word of five
//! letters or more with the question are relevant. Answer relevancy is not what the test is about:
//! the generated questions are the real question and variants of it, never noncommittal.
//!
//! Only the one-call faithfulness form carries the answer; a request whose answer is not in the map
//! is answered as faithful and counted in `unknown_answers`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

/// The share of answers the judge reads against their human label.
pub const DISAGREEMENT: f64 = 0.1;

/// Counters of what the stand-in was asked and answered.
#[derive(Default)]
pub struct Counts {
    pub chat_requests: AtomicU64,
    pub embedding_requests: AtomicU64,
    /// Faithfulness requests by the human label of their answer.
    pub labelled_faithful: AtomicU64,
    pub labelled_unfaithful: AtomicU64,
    /// Faithfulness requests whose verdict went against the human label.
    pub disagreements: AtomicU64,
    /// Faithfulness requests whose answer was not in the map.
    pub unknown_answers: AtomicU64,
}

struct Inner {
    labels: HashMap<String, bool>,
    rng: Mutex<StdRng>,
    counts: Arc<Counts>,
}

/// The running stand-in; stops with its runtime when dropped.
pub struct LabelJudge {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
    _runtime: tokio::runtime::Runtime,
}

/// The key an answer is looked up by: ragwatch fences `<` and `>` inside data as `‹` and `›`, and
/// whitespace is not a difference.
pub fn answer_key(answer: &str) -> String {
    answer
        .replace('‹', "<")
        .replace('›', ">")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl LabelJudge {
    /// Serves verdicts for `labels` (answer text -> faithful per the humans), noise drawn from `seed`.
    pub fn start(labels: impl IntoIterator<Item = (String, bool)>, seed: u64) -> LabelJudge {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let counts = Arc::new(Counts::default());
        let inner = Arc::new(Inner {
            labels: labels
                .into_iter()
                .map(|(a, l)| (answer_key(&a), l))
                .collect(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            counts: Arc::clone(&counts),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .with_state(inner);
        let addr = serve(&runtime, app);
        LabelJudge {
            addr,
            counts,
            _runtime: runtime,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// Serves `app` on a free loopback port from `runtime` (stopped with it); returns the address.
pub fn serve(runtime: &tokio::runtime::Runtime, app: Router) -> SocketAddr {
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The number of questions a relevancy request asks for (its system prompt's second word), 3 if
/// it does not say.
pub fn questions_asked(system: &str) -> usize {
    system
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}

/// The chat completion for request `body` whose message content is `content`, usage estimated at
/// four bytes a token.
pub fn completion(id: &str, body: &Value, prompt_bytes: usize, content: String) -> Value {
    let usage = json!({
        "prompt_tokens": prompt_bytes / 4,
        "completion_tokens": content.len() / 4,
    });
    json!({
        "id": id, "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": usage,
    })
}

/// The body of the first `<name ...>` element of `text`, or empty.
pub fn first(text: &str, name: &str) -> String {
    between(text, &format!("<{name}"), &format!("</{name}>"))
        .first()
        .map(|b| b.to_string())
        .unwrap_or_default()
}

/// The bodies of every `<open ...>body</close>` in `text`.
pub fn between<'a>(text: &'a str, open: &str, close: &str) -> Vec<&'a str> {
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

pub fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The answer's sentences of three words or more; the whole answer when it has none.
pub fn claims_of(answer: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = answer.char_indices().collect();
    for (i, &(at, c)) in chars.iter().enumerate() {
        let ends = matches!(c, '.' | '!' | '?')
            && chars.get(i + 1).is_none_or(|&(_, n)| n.is_whitespace());
        if ends {
            out.push(answer[start..at + c.len_utf8()].trim().to_owned());
            start = at + c.len_utf8();
        }
    }
    out.push(answer[start..].trim().to_owned());
    out.retain(|s| s.split_whitespace().count() >= 3);
    if out.is_empty() && !answer.trim().is_empty() {
        out.push(answer.trim().to_owned());
    }
    out
}

/// The judge's score for an answer with human label `faithful`: the model of tests/it/detection.rs.
fn score(rng: &mut StdRng, faithful: bool) -> (f64, bool) {
    let agrees = rng.random::<f64>() >= DISAGREEMENT;
    let s = if faithful == agrees {
        if rng.random::<f64>() < 0.7 {
            1.0
        } else {
            0.6 + 0.4 * rng.random::<f64>()
        }
    } else {
        0.2 + 0.5 * rng.random::<f64>()
    };
    (s, agrees)
}

/// Verdicts for `claims` whose share of supported ones is `score` in expectation: round(score * n)
/// up or down at random, the unsupported ones at random places.
fn verdicts(rng: &mut StdRng, claims: &[String], score: f64) -> Vec<Value> {
    let n = claims.len();
    let exact = score * n as f64;
    let mut supported = exact.floor() as usize;
    if rng.random::<f64>() < exact - exact.floor() {
        supported += 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let unsupported: Vec<usize> = order[..n - supported.min(n)].to_vec();
    claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let verdict = if !unsupported.contains(&i) {
                "supported"
            } else if rng.random::<f64>() < 1.0 / 3.0 {
                "contradicted"
            } else {
                "unsupported"
            };
            json!({"claim": c, "verdict": verdict})
        })
        .collect()
}

async fn chat(State(inner): State<Arc<Inner>>, Json(body): Json<Value>) -> Response {
    let counts = &inner.counts;
    counts.chat_requests.fetch_add(1, Ordering::SeqCst);
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let user = body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let format = &body["response_format"];
    let schema = match format["json_schema"]["name"].as_str() {
        Some(name) => name.to_owned(),
        // JSON mode: the schema is in the system prompt.
        None if system.contains("\"noncommittal\"") => "relevancy".to_owned(),
        None if system.contains("\"verdict\"") => "faithfulness".to_owned(),
        None => "claims".to_owned(),
    };
    let (question, answer) = (first(&user, "question"), first(&user, "answer"));
    let content = match schema.as_str() {
        "faithfulness" => {
            let label = inner.labels.get(&answer_key(&answer)).copied();
            match label {
                Some(true) => counts.labelled_faithful.fetch_add(1, Ordering::SeqCst),
                Some(false) => counts.labelled_unfaithful.fetch_add(1, Ordering::SeqCst),
                None => counts.unknown_answers.fetch_add(1, Ordering::SeqCst),
            };
            let claims = if answer.is_empty() {
                // The verification call of the two-call form: the claims come with the request.
                between(&user, "<claims", "</claims>")
                    .first()
                    .and_then(|c| serde_json::from_str::<Vec<String>>(c).ok())
                    .unwrap_or_default()
            } else {
                claims_of(&answer)
            };
            let items = {
                let mut rng = inner.rng.lock().unwrap();
                let (s, agrees) = score(&mut rng, label.unwrap_or(true));
                if label.is_some() && !agrees {
                    counts.disagreements.fetch_add(1, Ordering::SeqCst);
                }
                verdicts(&mut rng, &claims, s)
            };
            let asked_contexts = format["json_schema"]["schema"]["properties"]["contexts"]
                .is_object()
                || system.contains("Also judge each context");
            if asked_contexts {
                let topic: Vec<String> = words(&question)
                    .into_iter()
                    .filter(|w| w.len() >= 5)
                    .collect();
                let rated: Vec<Value> = between(&user, "<context", "</context>")
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let relevant = words(c).iter().any(|w| topic.contains(w));
                        json!({"n": i + 1, "relevant": relevant})
                    })
                    .collect();
                json!({"claims": items, "contexts": rated}).to_string()
            } else {
                json!({"claims": items}).to_string()
            }
        }
        "claims" => json!({"claims": claims_of(&answer)}).to_string(),
        "relevancy" => {
            let n = questions_asked(&system);
            let q = words(&question);
            let questions: Vec<Value> = (0..n)
                .map(|i| {
                    // The question itself, then the question without one of its words.
                    let variant: Vec<&str> = q
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| i == 0 || j != (i - 1) % q.len().max(1))
                        .map(|(_, w)| w.as_str())
                        .collect();
                    json!({"question": format!("{}?", variant.join(" ")), "noncommittal": false})
                })
                .collect();
            json!({"questions": questions}).to_string()
        }
        _ => "{}".to_owned(),
    };
    Json(completion(
        "chatcmpl-labelled",
        &body,
        system.len() + user.len(),
        content,
    ))
    .into_response()
}

/// A hashed bag-of-words embedding: texts sharing words point the same way.
pub fn embed(text: &str) -> Vec<f64> {
    let mut v = vec![0.0; 64];
    for w in words(text).into_iter().filter(|w| w.len() >= 4) {
        let h = w.bytes().fold(1469598103934665603u64, |h, b| {
            (h ^ b as u64).wrapping_mul(1099511628211)
        });
        v[(h % 64) as usize] += 1.0;
    }
    v
}

async fn embeddings(State(inner): State<Arc<Inner>>, Json(body): Json<Value>) -> Response {
    inner
        .counts
        .embedding_requests
        .fetch_add(1, Ordering::SeqCst);
    Json(embeddings_reply(&body)).into_response()
}

/// The embeddings endpoint's reply to `body`: [`embed`] of every input.
pub fn embeddings_reply(body: &Value) -> Value {
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let tokens: usize = inputs.iter().map(|s| s.len() / 4).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| json!({"object": "embedding", "index": i, "embedding": embed(s)}))
        .collect();
    json!({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
}
