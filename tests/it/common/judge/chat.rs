//! The judge stand-in's chat-completions endpoint: every request recorded (its authorization, its
//! `max_tokens`, its `response_format` kind, its body), refused formats and scripted faults
//! applied, slow requests held, then the model's answer wrapped as a completion and billed at four
//! bytes a token for every message sent and the content returned.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::faults::{format_kind, refusal};
use super::{Billed, Model, ServerState};

/// A chat request as the model reads it.
pub(super) struct Asked<'a> {
    pub system: &'a str,
    pub user: &'a str,
    /// `faithfulness`, `claims`, `relevancy`, `probe`, or what the schema is named.
    pub schema: &'a str,
    /// Whether the faithfulness request asks for every context's relevance too.
    pub wants_contexts: bool,
}

/// The schema a request's reply must follow: the `json_schema`'s name; with a schema but no name
/// (json_object with a schema), what its properties say; without one (JSON mode), what the
/// system prompt describes.
fn schema_of(rf: &Value, given: Option<&Map<String, Value>>, system: &str) -> String {
    match (rf["json_schema"]["name"].as_str(), given) {
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
    }
}

/// Notes what the request carried that tests look at afterwards.
fn record(state: &ServerState, headers: &HeaderMap, body: &Value, kind: &'static str) {
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
    state.formats_seen.lock().unwrap().push(kind);
    let mut recent = state.recent_chats.lock().unwrap();
    recent.push_back(body.clone());
    if recent.len() > 64 {
        recent.pop_front();
    }
}

/// Holds a request whose user message carries the slow marker for the slow delay, counting how
/// many are held at once.
async fn hold_if_slow(state: &ServerState, user: &str) {
    let slow = state.slow.lock().unwrap().clone();
    if let Some((_, delay)) = slow.filter(|(m, _)| user.contains(m.as_str())) {
        let now = state.slow_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.slow_in_flight_max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        state.slow_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The model's reply content to `body`.
fn content(state: &ServerState, body: &Value) -> String {
    let message = |i: usize| body["messages"][i]["content"].as_str().unwrap_or_default();
    let (system, user) = (message(0), message(1));
    let rf = &body["response_format"];
    let given = rf["json_schema"]["schema"]
        .as_object()
        .or_else(|| rf["schema"].as_object());
    let schema = schema_of(rf, given, system);
    let asked = Asked {
        system,
        user,
        schema: &schema,
        wants_contexts: given.is_some_and(|s| s["properties"]["contexts"].is_object())
            || system.contains("Also judge each context"),
    };
    if schema == "faithfulness" {
        state.faithfulness_requests.fetch_add(1, Ordering::SeqCst);
    }
    match &state.model {
        // The probe `auto` sends: only whether the format is taken matters.
        _ if schema == "probe" => json!({"ok": true}).to_string(),
        Model::Rule => super::rule::content(&asked),
        Model::Labels(labels) => labels.content(&asked, &state.label_counts),
        Model::Bias(bias) => bias.content(&asked),
    }
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let arrived = Instant::now();
    let kind = format_kind(&body);
    record(&state, &headers, &body, kind);
    let (refused, status) = state.refused_formats.lock().unwrap().clone();
    if refused.contains(&kind) {
        return refusal(kind, status);
    }
    let fault = state.next_fault();
    if let Some(fault) = &fault
        && let Some(answer) = fault.answer_first().await
    {
        return answer;
    }
    hold_if_slow(
        &state,
        body["messages"][1]["content"].as_str().unwrap_or_default(),
    )
    .await;
    let content = content(&state, &body);
    let (content, finish) = match &fault {
        Some(fault) => fault.spoil(content),
        None => (content, "stop"),
    };
    Json(completion(&state, &body, arrived, content, finish)).into_response()
}

/// The completion carrying `content`, billed: every message sent counts, as a provider bills a
/// re-ask's history too.
fn completion(
    state: &ServerState,
    body: &Value,
    arrived: Instant,
    content: String,
    finish: &str,
) -> Value {
    let sent: usize = body["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["content"].as_str().map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0);
    let (prompt, completion) = (sent / 4, content.len() / 4);
    state.bill(Billed {
        arrived,
        tokens: (prompt + completion) as u64,
        chat: true,
    });
    let mut answer = json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    });
    if state.no_usage.load(Ordering::SeqCst) {
        answer.as_object_mut().unwrap().remove("usage");
    }
    answer
}
