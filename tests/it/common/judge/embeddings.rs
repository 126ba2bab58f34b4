//! The judge stand-in's embeddings endpoint: a hashed bag of words (texts sharing words of four
//! letters or more point the same way), pooled or one vector per word, as floats or, when asked
//! (`encoding_format = "base64"`), as base64 of little-endian f32s; with its scripted faults.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use base64::Engine;
use serde_json::{Value, json};

use super::faults::EmbedFault;
use super::markup::words;
use super::{Billed, ServerState};

/// The dimension of every vector unless a fault says otherwise.
const DIM: usize = 64;

/// How embeddings come back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EmbedShape {
    /// One vector per input (OpenAI, vLLM, Ollama).
    #[default]
    Pooled,
    /// One vector per word of each input (llama-cpp-python with a model without pooling).
    PerToken,
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

/// `v` as little-endian f32s in standard base64, the `encoding_format = "base64"` form.
fn base64_f32(v: &[f64]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One input's `embedding` field.
fn vector(
    text: &str,
    first: bool,
    fault: Option<EmbedFault>,
    shape: EmbedShape,
    encoding: &str,
) -> Value {
    let dim = match fault {
        Some(EmbedFault::Dimension(d)) => d,
        _ => DIM,
    };
    match (fault, shape, encoding) {
        (Some(EmbedFault::NaN), _, _) if first => {
            let mut v = embed(text, dim);
            v[0] = f64::NAN;
            json!(base64_f32(&v))
        }
        (_, EmbedShape::PerToken, _) => json!(embed_tokens(text, dim)),
        (_, EmbedShape::Pooled, "base64") => json!(base64_f32(&embed(text, dim))),
        (_, EmbedShape::Pooled, _) => json!(embed(text, dim)),
    }
}

/// `POST /v1/embeddings`: billed at four bytes a token, counted, the next scripted fault applied.
pub(super) async fn embeddings(
    State(state): State<Arc<ServerState>>,
    Json(body): Json<Value>,
) -> Json<Value> {
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
    state.bill(Billed {
        arrived,
        tokens: tokens as u64,
        chat: false,
    });
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let embedding = vector(s, i == 0, fault, shape, &encoding);
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let mut answer = json!({"object": "list", "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
    if state.no_usage.load(Ordering::SeqCst) {
        answer.as_object_mut().unwrap().remove("usage");
    }
    Json(answer)
}
