//! `GET /v1/suspects`: what changed in a stratum's low-scoring traces (`changes::Report`), as
//! JSON. The short window is compared with the baseline window before it: the documents and
//! sources whose low rate rose more than the rest of the stratum's (`documents`, `sources`, each
//! with its change and interval), and apart the chronic ones, as strongly associated before
//! (`chronic_documents`, `chronic_sources`). Each report says how many candidates it tested and
//! how many were too thin to test (`tested`, `too_thin`). The baseline window, or a short window
//! with too few verdicts before it, is one of associations (`basis`).
//!
//! Query parameters, all optional: `stratum` (default: every stratum), `judge` (`offline` or
//! `llm`; default: every judge that gives verdicts), `window` (`short`, the default, or
//! `baseline`), `limit` (per list, at most 100; default `changes.limit`), `all=true` (the
//! strongest candidates even below the listing thresholds, each marked `listed` or not). The
//! answer is bounded: strata x judges x 4 lists x `limit` entries, each id cut to 128 bytes.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AdminState;
use crate::changes::{StratumReport, Window};
use crate::dimensions::{JudgeKind, StratumId};
use crate::recorder::Shared;

/// What the handler reads.
#[derive(Debug, Clone)]
pub(crate) struct SuspectsState {
    /// The recorder's state (its change attribution and strata).
    pub shared: Shared,
    /// The judges that give verdicts.
    pub judges: Vec<JudgeKind>,
    /// The windows' lengths, in seconds, for the answer.
    pub windows: (u64, u64),
}

/// The query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SuspectsQuery {
    stratum: Option<String>,
    judge: Option<String>,
    window: Option<Window>,
    limit: Option<usize>,
    all: Option<bool>,
}

/// The answer.
#[derive(Debug, Serialize)]
struct Answer {
    /// When it was computed, in ms since the epoch.
    generated_at_ms: u64,
    /// The short and baseline windows' lengths.
    short_secs: u64,
    baseline_secs: u64,
    /// One report per stratum and judge.
    reports: Vec<StratumReport>,
}

fn refuse(status: StatusCode, message: String) -> Response {
    (status, format!("{message}\n")).into_response()
}

pub(crate) async fn suspects(
    State(s): State<AdminState>,
    query: Result<Query<SuspectsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "parameters: stratum, judge (offline|llm), window (short|baseline), limit, all".into(),
        );
    };
    let state = &s.suspects;
    let Some(changes) = state.shared.changes() else {
        return refuse(
            StatusCode::NOT_FOUND,
            "the change attribution is off (changes.enabled = false)".into(),
        );
    };
    let names = state.shared.stratifier.names();
    let strata: Vec<StratumId> = match &q.stratum {
        None => (0..names.len()).collect(),
        Some(name) => match state.shared.stratifier.id(name) {
            Some(id) if names.get(id) == Some(name) => vec![id],
            _ => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    format!("no stratum `{name}`; strata: {}", names.join(", ")),
                );
            }
        },
    };
    let judges: Vec<JudgeKind> = match q.judge.as_deref() {
        None => state.judges.clone(),
        Some(j) => match state.judges.iter().find(|k| k.name() == j) {
            Some(k) => vec![*k],
            None => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    format!("no verdicts of judge `{j}` here"),
                );
            }
        },
    };
    let window = q.window.unwrap_or(Window::Short);
    let now = crate::clock::now_ms();
    let mut reports = Vec::new();
    for &stratum in &strata {
        for &judge in &judges {
            let all = q.all.unwrap_or(false);
            if let Some(report) = changes.report(stratum, judge, window, now, all, q.limit) {
                reports.push(StratumReport {
                    stratum: names[stratum].clone(),
                    judge: judge.name(),
                    window,
                    report,
                });
            }
        }
    }
    Json(Answer {
        generated_at_ms: now,
        short_secs: state.windows.0,
        baseline_secs: state.windows.1,
        reports,
    })
    .into_response()
}
