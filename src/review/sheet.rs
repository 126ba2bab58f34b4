//! `ragwatch review`: a labelling sheet from the review queue's file, and the filled sheet posted
//! back as labels, so a team can start reviewing without a labelling tool.
//!
//! `sheet` writes one row per picked trace (CSV for a spreadsheet, JSON lines for a labelling tool),
//! with an empty `faithful` column; `post` reads the filled sheet (either form) and posts one label
//! line per row whose `faithful` is filled (`true`/`false`, `1`/`0`, `yes`/`no`) to the write
//! listener's `POST /v1/labels`, in batches, and adds up the outcomes it answers.

use std::io::{self, BufRead, Write};
use std::path::Path;

use serde_json::{Value, json};

/// Lines per `POST /v1/labels`.
const BATCH: usize = 500;

/// The sheet's columns, in order.
pub const COLUMNS: [&str; 9] = [
    "trace_id",
    "stratum",
    "reasons",
    "llm_scores",
    "offline_scores",
    "question",
    "contexts",
    "answer",
    "faithful",
];

/// What a sheet is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SheetFormat {
    /// Comma-separated values, one row per trace.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// One row of the sheet from one queue item.
fn row(item: &Value) -> [String; 9] {
    let text = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let contexts: Vec<String> = item["contexts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("[{}] {}", text(&c["id"]), text(&c["text"])))
        .collect();
    // Each judge's scores, "metric value" pairs.
    let scores = |v: &Value| -> String {
        v.as_object()
            .into_iter()
            .flatten()
            .filter(|(_, s)| !s.is_null())
            .map(|(m, s)| format!("{m} {}", text(s)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let reasons: Vec<String> = item["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    [
        text(&item["trace_id"]),
        text(&item["stratum"]),
        reasons.join(" "),
        scores(&item["verdicts"]["llm"]),
        scores(&item["verdicts"]["offline"]),
        text(&item["query"]),
        contexts.join("\n\n"),
        text(&item["answer"]),
        String::new(),
    ]
}

/// Writes the sheet of the queue file `queue` to `out`; returns the rows written. Lines that are
/// not queue items are skipped and counted in the second number.
pub fn sheet(queue: &Path, format: SheetFormat, out: &mut dyn Write) -> io::Result<(usize, usize)> {
    let reader = io::BufReader::new(std::fs::File::open(queue)?);
    let (mut rows, mut skipped) = (0, 0);
    let mut csv = (format == SheetFormat::Csv).then(|| csv::Writer::from_writer(Vec::new()));
    if let Some(w) = &mut csv {
        w.write_record(COLUMNS).map_err(io::Error::other)?;
    }
    for line in reader.lines() {
        let line = line?;
        let Ok(item) = serde_json::from_str::<Value>(&line) else {
            skipped += usize::from(!line.trim().is_empty());
            continue;
        };
        if item["trace_id"].as_str().is_none() {
            skipped += 1;
            continue;
        }
        let cells = row(&item);
        match &mut csv {
            Some(w) => w.write_record(&cells).map_err(io::Error::other)?,
            None => {
                let mut o = serde_json::Map::new();
                for (k, v) in COLUMNS.iter().zip(cells) {
                    o.insert(
                        (*k).into(),
                        if *k == "faithful" {
                            Value::Null
                        } else {
                            json!(v)
                        },
                    );
                }
                writeln!(out, "{}", Value::Object(o))?;
            }
        }
        rows += 1;
    }
    if let Some(w) = csv {
        out.write_all(
            &w.into_inner()
                .map_err(|e| io::Error::other(e.to_string()))?,
        )?;
    }
    Ok((rows, skipped))
}

/// A filled `faithful` cell: `true`/`false`, `1`/`0`, `yes`/`no`; empty or anything else is unfilled.
fn verdict(cell: &str) -> Option<bool> {
    match cell.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" => Some(true),
        "false" | "0" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// The label lines of a filled sheet (CSV, or JSON lines when its first character is `{`), and the
/// rows left unfilled.
pub fn labels(sheet: &str) -> io::Result<(Vec<String>, usize)> {
    let mut labels = Vec::new();
    let mut unfilled = 0;
    let mut add = |id: &str, cell: Option<bool>| match cell {
        Some(faithful) if !id.is_empty() => labels
            .push(json!({"trace_id": id, "faithful": faithful, "source": "review"}).to_string()),
        _ => unfilled += 1,
    };
    if sheet.trim_start().starts_with('{') {
        for line in sheet.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).map_err(io::Error::other)?;
            let cell = match &v["faithful"] {
                Value::Bool(b) => Some(*b),
                Value::String(s) => verdict(s),
                Value::Number(n) => verdict(&n.to_string()),
                _ => None,
            };
            add(v["trace_id"].as_str().unwrap_or_default(), cell);
        }
    } else {
        let mut reader = csv::Reader::from_reader(sheet.as_bytes());
        let headers = reader.headers().map_err(io::Error::other)?.clone();
        let col = |name: &str| headers.iter().position(|h| h == name);
        let (Some(id), Some(faithful)) = (col("trace_id"), col("faithful")) else {
            return Err(io::Error::other(
                "the sheet needs trace_id and faithful columns",
            ));
        };
        for record in reader.records() {
            let record = record.map_err(io::Error::other)?;
            add(
                record.get(id).unwrap_or_default(),
                verdict(record.get(faithful).unwrap_or_default()),
            );
        }
    }
    Ok((labels, unfilled))
}

/// Posts `labels` to `url` (the write listener's `/v1/labels`) in batches, with `token` as the
/// bearer token; returns the outcomes the listener counted (`joined`, `unknown_trace`...).
pub async fn post(
    labels: &[String],
    url: &str,
    token: Option<&str>,
) -> Result<serde_json::Map<String, Value>, String> {
    let client = reqwest::Client::new();
    let mut totals = serde_json::Map::new();
    for batch in labels.chunks(BATCH) {
        let mut request = client.post(url).body(batch.join("\n") + "\n");
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{url} answered {status}: {}", text.trim()));
        }
        let counts: serde_json::Map<String, Value> =
            serde_json::from_str(text.trim()).map_err(|e| e.to_string())?;
        for (k, v) in counts {
            let sum = totals.get(&k).and_then(Value::as_u64).unwrap_or(0) + v.as_u64().unwrap_or(0);
            totals.insert(k, json!(sum));
        }
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(dir: &Path) -> std::path::PathBuf {
        let item = json!({"trace_id": "t-1", "stratum": "qa", "reasons": ["disagreement"],
            "query": "q, with \"quotes\"", "contexts": [{"id": "d1", "text": "c1"}], "answer": "a",
            "verdicts": {"llm": {"m": 0.2}, "offline": {"m": 0.9}}});
        let path = dir.join("queue.jsonl");
        std::fs::write(&path, format!("{item}\nnot json\n")).unwrap();
        path
    }

    #[test]
    fn a_sheet_round_trips_in_both_forms() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path());
        for format in [SheetFormat::Csv, SheetFormat::Jsonl] {
            let mut out = Vec::new();
            assert_eq!(sheet(&q, format, &mut out).unwrap(), (1, 1));
            let text = String::from_utf8(out).unwrap();
            // Unfilled: nothing to post.
            assert_eq!(labels(&text).unwrap(), (vec![], 1));
            let filled = match format {
                SheetFormat::Csv => text
                    .replacen("\"a\",\n", "\"a\",no\n", 1)
                    .replace(",a,\n", ",a,no\n"),
                SheetFormat::Jsonl => text.replace("\"faithful\":null", "\"faithful\":false"),
            };
            let (lines, unfilled) = labels(&filled).unwrap();
            assert_eq!(unfilled, 0, "{filled}");
            assert_eq!(
                lines,
                vec![r#"{"faithful":false,"source":"review","trace_id":"t-1"}"#.to_owned()]
            );
        }
    }
}
