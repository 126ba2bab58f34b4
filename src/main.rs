//! The `ragwatch` binary: logging, config, runtime, run, exit code. The logic lives in the library.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use ragwatch::config::{Config, LogFormat};

#[derive(Parser)]
#[command(
    version,
    about = "Watch live RAG traces for faithfulness and answer relevancy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the monitor until SIGTERM or SIGINT.
    Run {
        /// Config file.
        #[arg(long, default_value = "config/ragwatch.toml")]
        config: PathBuf,
    },
    /// Evaluate JSONL trace files (or OTLP span files) once and print a per-stratum summary.
    Replay(ReplayArgs),
    /// Check a replay summary against floors and maximum drops, or compare two variants of it;
    /// exits 1 when a check fails.
    Gate(GateArgs),
    /// Train the offline judge's model on labelled traces (5-fold CV grouped by question).
    TrainOffline {
        /// Labelled JSONL traces (`label_faithful`).
        data: PathBuf,
        /// Where to write the model JSON.
        #[arg(long, default_value = "src/judge/offline_model.json")]
        out: PathBuf,
        /// The date recorded in the report (YYYY-MM-DD).
        #[arg(long)]
        date: String,
    },
    /// Write the Prometheus rules, their unit tests, the PrometheusRule, the Grafana dashboard and
    /// the runbook from the metric list, and the Helm chart's copies of deploy/'s files (run from
    /// the repository root after changing a metric or a copied file).
    Rules {
        /// The repository root to write into.
        #[arg(long, default_value = ".")]
        root: PathBuf,
        /// Write nothing; exit 1 if a file differs from what would be written.
        #[arg(long)]
        check: bool,
        /// Divide every duration of the rules by this factor (15: 5m -> 20s, 24h -> 96m): the
        /// shipped rules at another timescale, for a test that runs them in minutes. Needs --out.
        /// A window, health range or pending duration given by its own flag is written as given.
        #[arg(long, value_name = "F", value_parser = ragwatch::rules::parse_scale)]
        scale: Option<ragwatch::rules::Scale>,
        /// The short window (shipped 5m, divided by --scale).
        #[arg(long, value_parser = humantime::parse_duration)]
        short: Option<std::time::Duration>,
        /// The middle window (shipped 1h, divided by --scale).
        #[arg(long, value_parser = humantime::parse_duration)]
        middle: Option<std::time::Duration>,
        /// The baseline window (shipped 24h, divided by --scale).
        #[arg(long, value_parser = humantime::parse_duration)]
        baseline: Option<std::time::Duration>,
        /// One range for every health alert (shipped 10m and 15m, divided by --scale).
        #[arg(long, value_parser = humantime::parse_duration)]
        health: Option<std::time::Duration>,
        /// One pending duration (`for:`) for every alert shipped with 1m, 5m, 10m or 15m (divided
        /// by --scale).
        #[arg(long, value_parser = humantime::parse_duration)]
        pending: Option<std::time::Duration>,
        /// The label that names a cluster, kept apart by every rule (shipped `cluster`).
        #[arg(long, default_value = "cluster")]
        cluster_label: String,
        /// The label that names one install of ragwatch, kept apart by every rule (shipped `job`,
        /// the scrape job).
        #[arg(long, default_value = "job")]
        install_label: String,
        /// Write the tuned rules (rules.yaml) and their PrometheusRule (prometheusrule.yaml) into
        /// this directory instead of the repository's files; required by the tuning flags below.
        #[arg(long, conflicts_with = "check")]
        out: Option<PathBuf>,
        /// A label added to every alert (`team=rag`); repeatable.
        #[arg(long = "rule-label", value_name = "NAME=VALUE", value_parser = ragwatch::rules::key_value)]
        rule_labels: Vec<(String, String)>,
        /// An alert left out; repeatable.
        #[arg(long = "disable-alert", value_name = "ALERT")]
        disabled: Vec<String>,
        /// One alert's pending duration (`RagwatchNoTraces=30m`); repeatable.
        #[arg(long = "alert-for", value_name = "ALERT=DURATION", value_parser = ragwatch::rules::key_value)]
        alert_for: Vec<(String, String)>,
        /// One alert's threshold (`RagwatchConsumerLagGrowing.lag_messages=50000`); repeatable.
        /// `--list-thresholds` names them.
        #[arg(long = "alert-threshold", value_name = "ALERT.PARAM=VALUE", value_parser = ragwatch::rules::key_value)]
        alert_thresholds: Vec<(String, String)>,
        /// Every rule group's evaluation interval (`1m`), instead of Prometheus's global one.
        #[arg(long, value_name = "DURATION")]
        group_interval: Option<String>,
        /// Print every tunable threshold with its shipped value, and exit.
        #[arg(long)]
        list_thresholds: bool,
    },
    /// Turn the review queue's file into a labelling sheet, or post a filled sheet back as labels.
    #[command(subcommand)]
    Review(ReviewCommand),
    /// Validate the config and print it with environment overrides applied, secrets redacted.
    CheckConfig {
        /// Config file.
        #[arg(long, default_value = "config/ragwatch.toml")]
        config: PathBuf,
    },
}

/// `ragwatch rules --out DIR`: the rules and the PrometheusRule with `tuning`, into `out`.
fn write_tuned(
    out: &Path,
    windows: &ragwatch::rules::Windows,
    pooling: &ragwatch::rules::Pooling,
    tuning: &ragwatch::rules::Tuning,
) -> ExitCode {
    let (rules, manifest) = match ragwatch::rules::tuned(windows, pooling, tuning) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("ragwatch: {e}");
            return ExitCode::from(2);
        }
    };
    let written = std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(out.join("rules.yaml"), rules))
        .and_then(|()| std::fs::write(out.join("prometheusrule.yaml"), manifest));
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ragwatch: cannot write into {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

/// `ragwatch review`'s subcommands.
#[derive(Subcommand)]
enum ReviewCommand {
    /// Write a labelling sheet (one row per picked trace, an empty `faithful` column) from the
    /// queue's file (`review.path`).
    Sheet {
        /// The queue's file.
        queue: PathBuf,
        /// `csv` for a spreadsheet, `jsonl` for a labelling tool.
        #[arg(long, value_enum, default_value = "csv")]
        format: ragwatch::review::sheet::SheetFormat,
        /// Where to write the sheet; stdout when absent.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Post the rows of a filled sheet (CSV or JSON lines) whose `faithful` is filled to the write
    /// listener's `POST /v1/labels`.
    Post {
        /// The filled sheet.
        sheet: PathBuf,
        /// The labels endpoint, e.g. `https://ragwatch.rag.svc:4318/v1/labels`.
        #[arg(long)]
        url: String,
        /// The environment variable that holds the bearer token (a token with the `labels` scope).
        #[arg(long, default_value = "RAGWATCH_LABELS_TOKEN")]
        token_env: String,
    },
}

/// `ragwatch gate`'s arguments.
#[derive(clap::Args)]
struct GateArgs {
    /// The summary of the run under test (`replay --summary`).
    results: PathBuf,
    /// The gate file (see config/gate.toml); its `[compare]` sets `--compare`'s defaults.
    #[arg(long, required_unless_present = "compare")]
    gate: Option<PathBuf>,
    /// Summaries of baseline runs; give several repeated runs to let the gate see their spread.
    #[arg(long)]
    baseline: Vec<PathBuf>,
    /// Compare two variants of the summary (replayed with `[variants]` on): fails when the
    /// candidate is confidently worse than the baseline by more than the margin.
    #[arg(long, value_name = "CANDIDATE=BASELINE")]
    compare: Option<String>,
    /// The config whose `[variants]` gives the comparison's margin and min_judged.
    #[arg(long, requires = "compare")]
    config: Option<PathBuf>,
    /// A metric to compare (repeat for several); default faithfulness.
    #[arg(long = "metric", requires = "compare")]
    metrics: Vec<String>,
    /// Worse means confidently worse by more than this (default `[variants].margin`, 0.05).
    #[arg(long, requires = "compare")]
    margin: Option<f64>,
    /// Scores each variant needs before a verdict (default `[variants].min_judged`, 30).
    #[arg(long, requires = "compare")]
    min_judged: Option<u64>,
    /// An undecided comparison fails instead of passing with a note.
    #[arg(long, requires = "compare")]
    require_decided: bool,
}

/// `ragwatch replay`'s arguments.
#[derive(clap::Args)]
struct ReplayArgs {
    /// Trace files; `-` reads stdin.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Config file.
    #[arg(long, default_value = "config/ragwatch.toml")]
    config: PathBuf,
    /// What the files hold, in place of the config's `decode.format`: `native` JSONL traces, or
    /// OTLP spans as the Collector's file exporter writes them (`otlp_json` and `otlp_proto`
    /// both read either form, told apart by each file's first byte).
    #[arg(long, value_parser = ["native", "otlp_json", "otlp_proto"])]
    format: Option<String>,
    /// Judge to use.
    #[arg(long, value_enum, default_value_t = JudgeArg::Offline)]
    judge: JudgeArg,
    /// Write verdicts here instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Cut-offs for recall@k, precision@k and nDCG@k (traces with `relevant_ids`/`relevance`).
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,10")]
    k: Vec<usize>,
    /// Write the per-stratum figures as JSON here (the input of `ragwatch gate`).
    #[arg(long)]
    summary: Option<PathBuf>,
    /// Audit the judges on the labelled traces (`label_faithful`): agreement with intervals,
    /// length correlation, and with the LLM judge the position check (a second call per
    /// labelled trace, contexts reversed). Prints a table to stderr.
    #[arg(long)]
    audit: bool,
    /// Write the audit's figures per judge as JSON here (the input of `ragwatch gate`).
    #[arg(long, requires = "audit")]
    audit_out: Option<PathBuf>,
    /// Seed of the audit's bootstrap resamples: the same seed gives the same intervals.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Bootstrap resamples of the audit's intervals.
    #[arg(long, default_value_t = 1000)]
    resamples: usize,
    /// Human labels to join to the traces by id (JSON lines: trace_id, faithful, source).
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Earlier traces to compare the suspects with (repeatable): judged by the offline judge
    /// first, so the suspects list what changed between them and the files, and the chronic
    /// ones apart. Without it the suspects are the whole run's associations.
    #[arg(long)]
    suspects_baseline: Vec<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum JudgeArg {
    Offline,
    Llm,
    /// The classifier judge (`[classifier]`; a build with the feature `classifier`).
    Classifier,
}

/// Logs go to stderr, as text or as one JSON object per line (`[log] format`). Text is coloured only
/// when stderr is a terminal and `NO_COLOR` is unset or empty (no-color.org): in a pod stderr is a
/// pipe, and log shippers want plain text. Called once the config is loaded, so a bad config is one
/// plain line on stderr.
fn init_logging(format: LogFormat, env: &HashMap<String, String>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let colour = format == LogFormat::Text
        && std::io::stderr().is_terminal()
        && env.get("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// A config that cannot be used: said once, exit code 2.
fn config_refused(e: ragwatch::config::ConfigError) -> ExitCode {
    eprintln!("ragwatch: {e}");
    ExitCode::from(2)
}

fn load(path: &std::path::Path, env: &HashMap<String, String>) -> Result<Config, ExitCode> {
    Config::load(path, env).map_err(config_refused)
}

/// A config `run` can start from: valid, and naming its source.
fn load_for_run(path: &std::path::Path, env: &HashMap<String, String>) -> Result<Config, ExitCode> {
    let config = load(path, env)?;
    config.source_kind().map_err(config_refused)?;
    Ok(config)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env: HashMap<String, String> = std::env::vars().collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ragwatch: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Rules {
            root,
            check,
            scale,
            short,
            middle,
            baseline,
            health,
            pending,
            cluster_label,
            install_label,
            out,
            rule_labels,
            disabled,
            alert_for,
            alert_thresholds,
            group_interval,
            list_thresholds,
        } => {
            let scaled =
                ragwatch::rules::Windows::at_scale(scale.unwrap_or(ragwatch::rules::Scale::ONE));
            let windows = ragwatch::rules::Windows {
                short: short.unwrap_or(scaled.short),
                middle: middle.unwrap_or(scaled.middle),
                baseline: baseline.unwrap_or(scaled.baseline),
                health,
                pending,
                ..scaled
            };
            let pooling = ragwatch::rules::Pooling {
                cluster_label,
                install_label,
            };
            if list_thresholds {
                for t in ragwatch::rules::thresholds() {
                    println!("{} {}", t.key(), t.default);
                }
                return ExitCode::SUCCESS;
            }
            let tuning = ragwatch::rules::Tuning {
                labels: rule_labels.into_iter().collect(),
                disabled: disabled.into_iter().collect(),
                pending: alert_for.into_iter().collect(),
                thresholds: alert_thresholds.into_iter().collect(),
                interval: group_interval,
            };
            if let Some(out) = out {
                return write_tuned(&out, &windows, &pooling, &tuning);
            }
            if !tuning.is_empty() || scale.is_some() {
                eprintln!(
                    "ragwatch: tuned or scaled rules are written with --out DIR; the repository's files stay as shipped"
                );
                return ExitCode::from(2);
            }
            match ragwatch::rules::write(&root, &windows, &pooling, check) {
                Ok(stale) if check && !stale.is_empty() => {
                    eprintln!(
                        "ragwatch: not what `ragwatch rules` writes: {}",
                        stale.join(", ")
                    );
                    ExitCode::FAILURE
                }
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ragwatch: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::CheckConfig { config } => match load_for_run(&config, &env) {
            Ok(c) => {
                println!("{}", c.to_redacted_toml());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::TrainOffline { data, out, date } => {
            init_logging(LogFormat::Text, &env);
            train_offline(&data, &out, &date)
        }
        Command::Run { config } => {
            let config = match load_for_run(&config, &env) {
                Ok(c) => c,
                Err(code) => return code,
            };
            init_logging(config.log.format, &env);
            runtime.block_on(async move {
                let stop = CancellationToken::new();
                tokio::spawn(signal(stop.clone()));
                match ragwatch::app::run(config, env, stop).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("ragwatch: {e}");
                        ExitCode::FAILURE
                    }
                }
            })
        }
        Command::Gate(args) => {
            init_logging(LogFormat::Text, &env);
            run_gate(&args, &env)
        }
        Command::Replay(args) => replay(&runtime, args, &env),
        Command::Review(command) => review(&runtime, command, &env),
    }
}

/// `ragwatch review sheet` and `ragwatch review post`.
fn review(
    runtime: &tokio::runtime::Runtime,
    command: ReviewCommand,
    env: &HashMap<String, String>,
) -> ExitCode {
    use ragwatch::review::sheet;
    match command {
        ReviewCommand::Sheet { queue, format, out } => {
            let mut buffer = Vec::new();
            let written = sheet::sheet(&queue, format, &mut buffer).and_then(|counts| {
                match &out {
                    Some(path) => std::fs::write(path, &buffer)?,
                    None => std::io::Write::write_all(&mut std::io::stdout(), &buffer)?,
                }
                Ok(counts)
            });
            match written {
                Ok((rows, skipped)) => {
                    eprintln!(
                        "{rows} rows; {skipped} lines of {} were not queue items",
                        queue.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ragwatch: {}: {e}", queue.display());
                    ExitCode::FAILURE
                }
            }
        }
        ReviewCommand::Post {
            sheet: path,
            url,
            token_env,
        } => {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("ragwatch: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            };
            let (labels, unfilled) = match sheet::labels(&text) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("ragwatch: {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            };
            let token = env.get(&token_env).map(String::as_str);
            match runtime.block_on(sheet::post(&labels, &url, token)) {
                Ok(counts) => {
                    eprintln!(
                        "posted {} labels ({unfilled} rows unfilled): {}",
                        labels.len(),
                        serde_json::Value::Object(counts)
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("ragwatch: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Prints the audit table to stderr and writes its figures (per judge, with the seed and the
/// number of resamples) to `out`.
fn write_audit(
    audited: &std::collections::BTreeMap<String, ragwatch::audit::JudgeAudit>,
    out: Option<&std::path::Path>,
    seed: u64,
    resamples: usize,
) -> Result<(), ExitCode> {
    let mut table = ragwatch::audit::JudgeAudit::header();
    for (judge, a) in audited {
        table.push_str(&a.row(judge));
    }
    if audited.is_empty() {
        table.push_str("no labelled trace was scored: nothing to audit\n");
    }
    eprint!("{table}");
    let Some(path) = out else { return Ok(()) };
    let figures: std::collections::BTreeMap<&str, _> = audited
        .iter()
        .map(|(judge, a)| {
            let mut f = a.figures();
            f.insert("bootstrap_seed".into(), seed as f64);
            f.insert("bootstrap_resamples".into(), resamples as f64);
            (judge.as_str(), f)
        })
        .collect();
    let json = serde_json::to_string_pretty(&figures).expect("figures serialise");
    std::fs::write(path, json + "\n").map_err(|e| {
        eprintln!("ragwatch: cannot write {}: {e}", path.display());
        ExitCode::FAILURE
    })
}

/// `ragwatch gate`: the gate file's checks, then the comparison of `--compare`; exit 1 when any
/// fails, 2 when they cannot run.
fn run_gate(args: &GateArgs, env: &HashMap<String, String>) -> ExitCode {
    use ragwatch::gate;
    let variants = match &args.config {
        Some(path) => match load(path, env) {
            Ok(c) => Some(c.variants),
            Err(code) => return code,
        },
        None => None,
    };
    let run = || -> Result<bool, gate::GateError> {
        let file = args.gate.as_deref().map(gate::read_gate).transpose()?;
        let r = gate::read_figures(&args.results)?;
        let compare = match &args.compare {
            Some(pair) => {
                let mut c = gate::Compare::new(pair)?;
                if let Some(v) = &variants {
                    c.margin = v.margin;
                    c.min_judged = v.min_judged;
                }
                if let Some(cc) = file.as_ref().and_then(|g| g.compare.as_ref()) {
                    c = c.with_file(cc);
                }
                if !args.metrics.is_empty() {
                    c.metrics.clone_from(&args.metrics);
                }
                c.margin = args.margin.unwrap_or(c.margin);
                c.min_judged = args.min_judged.unwrap_or(c.min_judged);
                c.require_decided |= args.require_decided;
                c.validate()?;
                Some(c)
            }
            None => None,
        };
        let mut passed = true;
        if let Some(g) = &file
            && (!g.checks.is_empty() || compare.is_none())
        {
            let b = args
                .baseline
                .iter()
                .map(|p| gate::read_figures(p))
                .collect::<Result<Vec<_>, _>>()?;
            let outcomes = gate::evaluate(g, &r, &b)?;
            print!("{}", gate::table(&outcomes));
            passed &= outcomes.iter().all(gate::Outcome::passed);
        }
        if let Some(c) = &compare {
            let comparisons = gate::compare(c, &r)?;
            print!("{}", gate::compare_table(c, &comparisons));
            passed &= comparisons.iter().all(|o| o.passed(c.require_decided));
        } else if file.as_ref().is_some_and(|g| g.compare.is_some()) {
            eprintln!("ragwatch: the gate file's [compare] applies only with --compare");
        }
        Ok(passed)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ragwatch: {e}");
            ExitCode::from(2)
        }
    }
}

fn train_offline(data: &std::path::Path, out: &std::path::Path, date: &str) -> ExitCode {
    use ragwatch::judge::trainer;
    let text = match std::fs::read_to_string(data) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ragwatch: cannot read {}: {e}", data.display());
            return ExitCode::FAILURE;
        }
    };
    let decoder = ragwatch::trace::Decoder::new(&Default::default());
    let traces: Vec<_> = text
        .lines()
        .filter_map(|l| decoder.decode(l.as_bytes()).ok())
        .collect();
    let cfg = trainer::TrainConfig::default();
    let examples = trainer::examples(&traces, cfg.folds);
    let name = data
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Ok(path) = std::env::var("RAGWATCH_FEATURES_CSV") {
        // Development aid: dump the feature matrix for analysis outside ragwatch.
        let mut csv = format!(
            "fold,label,{}\n",
            ragwatch::judge::Features::NAMES.join(",")
        );
        for e in &examples {
            let row: Vec<String> = e.x.iter().map(|v| format!("{v}")).collect();
            csv.push_str(&format!("{},{},{}\n", e.fold, u8::from(e.y), row.join(",")));
        }
        let _ = std::fs::write(path, csv);
    }
    let model = trainer::train(&examples, &cfg, &name, date);
    let json = serde_json::to_string_pretty(&model).expect("a model serialises");
    if let Err(e) = std::fs::write(out, json + "\n") {
        eprintln!("ragwatch: cannot write {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&model.report).expect("a report serialises")
    );
    ExitCode::SUCCESS
}

/// Cancels `stop` on SIGTERM or SIGINT.
async fn signal(stop: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot install SIGTERM handler");
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
    }
    stop.cancel();
}

/// The classifier judge of `[classifier]`, loaded for `replay --judge classifier`.
#[cfg(feature = "classifier")]
fn classifier(config: &Config) -> Result<std::sync::Arc<Classifier>, String> {
    Classifier::from_config(&config.classifier)
        .map(std::sync::Arc::new)
        .map_err(|e| format!("classifier judge: {e}"))
}

#[cfg(feature = "classifier")]
type Classifier = ragwatch::judge::classifier::Classifier;

#[cfg(feature = "classifier")]
fn replay_classifier(
    c: Option<&std::sync::Arc<Classifier>>,
) -> Option<ragwatch::replay::ReplayJudge<'_>> {
    c.map(ragwatch::replay::ReplayJudge::Classifier)
}

/// Without the feature there is no classifier to load.
#[cfg(not(feature = "classifier"))]
fn classifier(_: &Config) -> Result<(), String> {
    Err("--judge classifier needs a ragwatch built with the cargo feature `classifier`".into())
}

#[cfg(not(feature = "classifier"))]
fn replay_classifier(_: Option<&()>) -> Option<ragwatch::replay::ReplayJudge<'_>> {
    None
}

/// `ragwatch replay`: judges the files once, writes the verdicts, the summary and the audit.
fn replay(
    runtime: &tokio::runtime::Runtime,
    args: ReplayArgs,
    env: &HashMap<String, String>,
) -> ExitCode {
    let ReplayArgs {
        files,
        config,
        format,
        judge,
        output,
        k,
        summary,
        audit,
        audit_out,
        seed,
        resamples,
        labels,
        suspects_baseline,
    } = args;
    let mut config = match load(&config, env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(f) = format {
        config.decode.format = serde_json::from_value(serde_json::Value::String(f))
            .expect("the parser takes only the format names");
    }
    init_logging(config.log.format, env);
    runtime.block_on(async move {
        let mut out: Box<dyn std::io::Write> = match &output {
            Some(path) => match std::fs::File::create(path) {
                Ok(f) => Box::new(std::io::BufWriter::new(f)),
                Err(e) => {
                    eprintln!("ragwatch: cannot create {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            },
            None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
        };
        let llm = match judge {
            JudgeArg::Offline | JudgeArg::Classifier => None,
            JudgeArg::Llm => {
                let metrics = std::sync::Arc::new(ragwatch::metrics::Metrics::new(&[], "replay"));
                match ragwatch::judge::llm::LlmJudge::try_new(
                    ragwatch::app::llm_setup(&config, env),
                    env,
                    metrics,
                ) {
                    Ok(j) => Some(j),
                    Err(e) => {
                        eprintln!("ragwatch: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
        };
        let classifier = match judge {
            JudgeArg::Classifier => match classifier(&config) {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("ragwatch: {e}");
                    return ExitCode::from(2);
                }
            },
            _ => None,
        };
        let labels = match labels.as_deref().map(ragwatch::replay::ReplayLabels::read) {
            None => None,
            Some(Ok(l)) => Some(l),
            Some(Err(e)) => {
                eprintln!("ragwatch: cannot read the labels file: {e}");
                return ExitCode::from(2);
            }
        };
        let started = ragwatch::clock::Instant::now();
        let second = llm
            .as_ref()
            .map(ragwatch::replay::ReplayJudge::Llm)
            .or_else(|| replay_classifier(classifier.as_ref()));
        let files = ragwatch::replay::ReplayFiles {
            traces: &files,
            suspects_baseline: &suspects_baseline,
        };
        let replayed = ragwatch::replay::replay_with(
            &config,
            files,
            second,
            &k,
            audit,
            labels.as_ref(),
            &mut out,
        );
        match replayed.await {
            Ok(result) => {
                if let Some(path) = &summary {
                    let json =
                        serde_json::to_string_pretty(&result.figures()).expect("figures serialise");
                    if let Err(e) = std::fs::write(path, json + "\n") {
                        eprintln!("ragwatch: cannot write {}: {e}", path.display());
                        return ExitCode::FAILURE;
                    }
                }
                if audit {
                    let audited = result.audit(&config, resamples, seed);
                    if let Err(code) = write_audit(&audited, audit_out.as_deref(), seed, resamples)
                    {
                        return code;
                    }
                }
                let summary = result;
                let secs = started.elapsed().as_secs_f64();
                eprint!("{}", summary.table());
                eprintln!(
                    "{:.0} traces/s ({} in {:.2} s)",
                    summary.lines as f64 / secs.max(1e-9),
                    summary.lines,
                    secs
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("ragwatch: replay failed: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
