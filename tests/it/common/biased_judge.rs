//! An LLM judge stand-in with a bias built in, for the judge audit: a real HTTP server on loopback
//! speaking the OpenAI chat-completions and embeddings API as `tests/it/common/label_judge.rs` does
//! (structured output `json_schema`), whose faithfulness depends on what an honest judge ignores.
//!
//! - [`Bias::Length`]: the score is the answer's length in words over `full_words` (at most 1),
//!   realised as ten claims of which that share (rounded) is supported. Labels play no part, so the
//!   score correlates with length inside each label class; the contexts play no part either.
//! - [`Bias::Order`]: every claim is supported when the first context contains `marker`, four in
//!   ten otherwise. The answer plays no part: reversing the contexts flips the verdict of every
//!   trace whose marker context was first and not last.
//!
//! Answer relevancy: the generated questions are the question itself, never noncommittal.
//! Embeddings: label_judge's hashed bag of words. Requests are counted.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::common::label_judge::{
    between, claims_of, completion, embeddings_reply, first, questions_asked, serve,
};

/// What the stand-in's faithfulness depends on.
#[derive(Debug, Clone)]
pub enum Bias {
    /// Longer answers score higher, up to 1 at `full_words` words.
    Length { full_words: usize },
    /// Faithful when the first context contains `marker`.
    Order { marker: String },
}

struct Inner {
    bias: Bias,
    faithfulness_requests: Arc<AtomicU64>,
}

/// The running stand-in; stops with its runtime when dropped.
pub struct BiasedJudge {
    pub addr: SocketAddr,
    /// Faithfulness requests served.
    pub faithfulness_requests: Arc<AtomicU64>,
    _runtime: tokio::runtime::Runtime,
}

impl BiasedJudge {
    pub fn start(bias: Bias) -> BiasedJudge {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let faithfulness_requests = Arc::new(AtomicU64::new(0));
        let inner = Arc::new(Inner {
            bias,
            faithfulness_requests: Arc::clone(&faithfulness_requests),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .with_state(inner);
        let addr = serve(&runtime, app);
        BiasedJudge {
            addr,
            faithfulness_requests,
            _runtime: runtime,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// Ten claims of which `supported` are supported.
fn claims(supported: usize) -> Vec<Value> {
    (0..10)
        .map(|i| {
            let verdict = if i < supported {
                "supported"
            } else {
                "unsupported"
            };
            json!({"claim": format!("Claim {i}."), "verdict": verdict})
        })
        .collect()
}

async fn chat(State(inner): State<Arc<Inner>>, Json(body): Json<Value>) -> Json<Value> {
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    let format = &body["response_format"];
    let (question, answer) = (first(user, "question"), first(user, "answer"));
    let content = match format["json_schema"]["name"].as_str().unwrap_or_default() {
        "faithfulness" => {
            inner.faithfulness_requests.fetch_add(1, Ordering::SeqCst);
            let contexts = between(user, "<context", "</context>");
            let supported = match &inner.bias {
                Bias::Length { full_words } => {
                    let words = answer.split_whitespace().count() as f64;
                    (10.0 * (words / *full_words as f64).min(1.0)).round() as usize
                }
                Bias::Order { marker } => {
                    if contexts
                        .first()
                        .is_some_and(|c| c.contains(marker.as_str()))
                    {
                        10
                    } else {
                        4
                    }
                }
            };
            let mut reply = json!({"claims": claims(supported)});
            if format["json_schema"]["schema"]["properties"]["contexts"].is_object() {
                let rated: Vec<Value> = (0..contexts.len())
                    .map(|i| json!({"n": i + 1, "relevant": true}))
                    .collect();
                reply["contexts"] = Value::from(rated);
            }
            reply.to_string()
        }
        "claims" => json!({"claims": claims_of(&answer)}).to_string(),
        "relevancy" => {
            let n = questions_asked(system);
            let questions: Vec<Value> = (0..n)
                .map(|_| json!({"question": question, "noncommittal": false}))
                .collect();
            json!({"questions": questions}).to_string()
        }
        _ => "{}".to_owned(),
    };
    Json(completion(
        "chatcmpl-biased",
        &body,
        system.len() + user.len(),
        content,
    ))
}

async fn embeddings(Json(body): Json<Value>) -> Json<Value> {
    Json(embeddings_reply(&body))
}
