//! The Phoenix target: each verdict event as a span annotation on the judged span, through
//! Phoenix's REST API (`POST /v1/span_annotations?sync=true`). The annotation's name is the metric,
//! its identifier `ragwatch.<judge>` (so the offline and the LLM judge's verdicts on one span
//! stand side by side, and the same verdict sent again replaces itself), its annotator kind `LLM`
//! for the LLM judge and `CODE` for the offline judge.
//!
//! Phoenix answers 404 for a whole request when one of its spans has not arrived yet (the service
//! sends its spans to Phoenix while ragwatch judges them): the annotations of the spans it knows
//! are sent again at once without the others, and the others wait for their spans (see
//! `SpanWait` in the module above).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::config::PhoenixExportConfig;
use super::{ExportSetupError, SendError, VerdictEvent, hex};
use crate::dimensions::JudgeKind;

/// The Phoenix target.
#[derive(Debug)]
pub(super) struct PhoenixTarget {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
}

impl PhoenixTarget {
    /// Builds the target; the key, when `config.api_key_env` is set in `env`.
    pub(super) fn try_new(
        config: &PhoenixExportConfig,
        env: &HashMap<String, String>,
    ) -> Result<Self, ExportSetupError> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| ExportSetupError::Client("phoenix", e.to_string()))?;
        Ok(PhoenixTarget {
            client,
            url: format!(
                "{}/v1/span_annotations?sync=true",
                config.base_url.trim_end_matches('/')
            ),
            key: env
                .get(&config.api_key_env)
                .map(|k| k.trim().to_owned())
                .filter(|k| !k.is_empty()),
        })
    }

    /// Sends the batch's annotations. Phoenix refuses a whole request naming a span it has not
    /// stored; the annotations of the spans it knows are sent again without the others, and the
    /// span ids it named come back (`Ok` with none: every annotation accepted).
    pub(super) async fn send(
        &self,
        batch: &[Arc<VerdictEvent>],
    ) -> Result<Vec<[u8; 8]>, SendError> {
        let mut pending: Vec<([u8; 8], Value)> =
            batch.iter().map(|e| (e.span_id, annotation(e))).collect();
        let mut not_stored = Vec::new();
        // Each round takes out at least one annotation, so this ends.
        while !pending.is_empty() {
            let annotations: Vec<&Value> = pending.iter().map(|(_, a)| a).collect();
            let Err(PostError { missing, error }) = self.post(&annotations).await else {
                break;
            };
            let named = |id: &[u8; 8]| {
                let id = hex(id);
                missing.iter().any(|m| m.eq_ignore_ascii_case(&id))
            };
            if !pending.iter().any(|(id, _)| named(id)) {
                return Err(error);
            }
            pending.retain(|(id, _)| {
                let named = named(id);
                if named && !not_stored.contains(id) {
                    not_stored.push(*id);
                }
                !named
            });
        }
        Ok(not_stored)
    }

    async fn post(&self, annotations: &[&Value]) -> Result<(), PostError> {
        let mut request = self
            .client
            .post(&self.url)
            .json(&json!({"data": annotations}));
        if let Some(k) = &self.key {
            request = request.bearer_auth(k);
        }
        let response = request.send().await.map_err(|e| PostError {
            missing: Vec::new(),
            error: SendError::Transport(e.without_url().to_string()),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let after = crate::judge::llm::retry_after(response.headers());
        let missing = if status.as_u16() == 404 {
            // Phoenix answers in plain text; a JSON `detail` is read too.
            let body = response.text().await.unwrap_or_default();
            let detail = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["detail"].as_str().map(str::to_owned))
                .unwrap_or(body);
            missing_ids(detail.trim())
        } else {
            Vec::new()
        };
        Err(PostError {
            missing,
            error: SendError::Status(status.as_u16(), after),
        })
    }
}

/// A failed post: the span ids Phoenix said it does not know (a 404), and the error.
struct PostError {
    missing: Vec<String>,
    error: SendError,
}

/// The span ids of Phoenix's `Spans with IDs a, b do not exist.`
fn missing_ids(detail: &str) -> Vec<String> {
    detail
        .strip_prefix("Spans with IDs ")
        .and_then(|d| d.split(" do not exist").next())
        .map(|ids| ids.split(", ").map(|s| s.trim().to_owned()).collect())
        .unwrap_or_default()
}

/// The event as a span annotation.
pub(super) fn annotation(e: &VerdictEvent) -> Value {
    let mut metadata = json!({
        "judge": e.judge.name(),
        "judge_model": &*e.judge_model,
        "stratum": e.stratum,
        "trace_id": e.ragwatch_trace_id,
    });
    if let Some(p) = &e.prompt_version {
        metadata["prompt_version"] = json!(&**p);
    }
    if let Some(v) = &e.variant {
        metadata["variant"] = json!(v);
    }
    if let Some(t) = e.error_type {
        metadata["error_type"] = json!(t);
    }
    if let Some(r) = &e.response_id {
        metadata["response_id"] = json!(r);
    }
    json!({
        "span_id": hex(&e.span_id),
        "name": e.metric.name(),
        "identifier": format!("ragwatch.{}", e.judge.name()),
        "annotator_kind": if e.judge == JudgeKind::Llm { "LLM" } else { "CODE" },
        "result": {"label": e.label.name(), "score": e.score, "explanation": e.explanation},
        "metadata": metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phoenix_names_the_spans_it_does_not_know() {
        assert_eq!(
            missing_ids("Spans with IDs 00000000000000aa, 00000000000000bb do not exist."),
            ["00000000000000aa", "00000000000000bb"]
        );
        assert!(missing_ids("Not Found").is_empty());
    }
}
