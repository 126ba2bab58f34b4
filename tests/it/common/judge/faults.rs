//! What the judge stand-in can be told to do wrong: scripted faults per chat request (429 with
//! `Retry-After`, 500, a delay, malformed JSON, a truncated answer, a rewritten answer) and per
//! embeddings request (another dimension, a NaN), and the refusals real servers send for a
//! `response_format` they do not take.

use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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
    /// The answer the model would give, rewritten (a context list numbered from 0, a bad question).
    Rewrite(fn(Value) -> Value),
}

impl Fault {
    /// The answer this fault sends instead of the model's, if it answers at once (after its delay,
    /// a [`Fault::Delay`] lets the model answer).
    pub(super) async fn answer_first(&self) -> Option<Response> {
        match self {
            Fault::RateLimited { retry_after_secs } => Some(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", retry_after_secs.to_string())],
                    "slow down",
                )
                    .into_response(),
            ),
            Fault::ServerError => Some((StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()),
            Fault::Delay(d) => {
                tokio::time::sleep(*d).await;
                None
            }
            _ => None,
        }
    }

    /// The model's `content` as this fault spoils it, with its `finish_reason`.
    pub(super) fn spoil(&self, content: String) -> (String, &'static str) {
        match self {
            Fault::Malformed => ("{\"claims\": [{\"claim\": oops".to_owned(), "stop"),
            Fault::Truncated => (content[..content.len() / 2].to_owned(), "length"),
            Fault::Rewrite(f) => (
                f(serde_json::from_str(&content).unwrap()).to_string(),
                "stop",
            ),
            _ => (content, "stop"),
        }
    }
}

/// A scripted fault for one embeddings request.
#[derive(Debug, Clone, Copy)]
pub enum EmbedFault {
    /// Vectors of this dimension instead of 64.
    Dimension(usize),
    /// A NaN in the first vector (sent as base64: JSON has no NaN).
    NaN,
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

/// The 400 OpenAI and vLLM send for a response_format they do not take, the 422 of a FastAPI
/// server whose request model has no such variant, or the 500 llama-cpp-python 0.3 wraps that
/// validation error in (its body as measured).
pub(super) fn refusal(kind: &str, status: u16) -> Response {
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
