//! OTLP in: spans from real OpenTelemetry instrumentation, through ragwatch's OTLP/HTTP receiver and
//! through a tansu topic as the Collector's Kafka exporter writes them (one request per message,
//! several traces per message, a trace's spans across messages), assembled into traces that score
//! exactly as the same traces in ragwatch's native form. Also: kill -9 during assembly loses no
//! trace, every compression codec is readable, hostile OTLP is rejected with reasons and blocks
//! nothing, and the receiver speaks OTLP/gRPC. (OTLP/HTTP itself is in tests/it/otlp_receiver.rs.)

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::judge::JudgeServer;
use crate::common::*;
use crate::otlp_receiver::{id16, rag_spans, start_receiver, start_receivers, write_config};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use ragwatch::trace::otlp::build::{request, str_attr as kv};
use rand::RngExt;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

/// Runs tests/otlp_app.py (the instrumented RAG service).
fn run_app(
    preset: &str,
    n: usize,
    seed: u64,
    endpoints: [Option<SocketAddr>; 2],
    batches: &Path,
    json: bool,
    native: &Path,
) {
    let [endpoint, grpc_endpoint] = endpoints;
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_app.py"))
        .args([
            "--preset",
            preset,
            "--n",
            &n.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .args(["--batch-size", "7", "--batches"])
        .arg(batches)
        .arg("--native")
        .arg(native);
    if json {
        cmd.arg("--json");
    }
    if let Some(addr) = endpoint {
        cmd.args(["--endpoint", &format!("http://{addr}/v1/traces")])
            .env("OTEL_EXPORTER_OTLP_TRACES_HEADERS", otel_auth_header());
    }
    if let Some(addr) = grpc_endpoint {
        cmd.args(["--grpc-endpoint", &addr.to_string()])
            .args(["--grpc-token", WRITE_TOKEN]);
    }
    run_ok(&mut cmd);
}

/// The messages the app wrote: length-prefixed protobuf, or JSON lines.
fn read_batches(path: &Path, json: bool) -> Vec<Vec<u8>> {
    if !json {
        return length_prefixed_messages(path);
    }
    std::fs::read(path)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Produces each payload as one record (one record per batch, as tansu needs) to `partition`
/// (or by key), compressed with `codec`.
fn produce_otlp(brokers: &str, topic: &str, messages: &[(i32, Vec<u8>)], codec: &str) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("batch.num.messages", "1")
        .set("compression.codec", codec)
        .set("message.max.bytes", "10000000")
        .create()
        .unwrap();
    for (partition, payload) in messages {
        let record = BaseRecord::<(), [u8]>::to(topic)
            .partition(*partition)
            .payload(payload.as_slice());
        send(&producer, record);
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn declared_or_other(stratum: &str) -> &str {
    match stratum {
        "head" | "tail" | "known_failure" | "out_of_scope" => stratum,
        _ => "other",
    }
}

/// The score-bearing series of one stratum that must agree between two ways in.
const COMPARED: [(&str, &[(&str, &str)]); 12] = [
    ("ragwatch_traces_received_total", &[]),
    ("ragwatch_faithfulness_ratio_sum", &[("judge", "offline")]),
    ("ragwatch_faithfulness_ratio_count", &[("judge", "offline")]),
    (
        "ragwatch_answer_relevancy_ratio_sum",
        &[("judge", "offline")],
    ),
    (
        "ragwatch_context_relevance_ratio_sum",
        &[("judge", "offline")],
    ),
    ("ragwatch_retrieval_score_sum", &[]),
    ("ragwatch_retrieval_score_count", &[]),
    ("ragwatch_contexts_retrieved_sum", &[]),
    ("ragwatch_citations_total", &[("valid", "true")]),
    ("ragwatch_citations_total", &[("valid", "false")]),
    ("ragwatch_no_claims_total", &[("judge", "offline")]),
    ("ragwatch_refusals_total", &[("judge", "offline")]),
];

/// The families compared with what was sent (and between ways in): a trace is counted
/// assembled, received, then judged and scored, one count after the other, so they are read
/// once all have stopped moving.
const COUNTED: &[&str] = &[
    "ragwatch_traces_",
    "ragwatch_spans_",
    "ragwatch_source_messages_total",
    "ragwatch_faithfulness_ratio",
    "ragwatch_answer_relevancy_ratio",
    "ragwatch_context_relevance_ratio",
    "ragwatch_retrieval_score",
    "ragwatch_contexts_retrieved",
    "ragwatch_citations_total",
    "ragwatch_no_claims_total",
    "ragwatch_refusals_total",
];

fn assert_same_scores(
    what: &str,
    native: &Samples,
    otlp: &Samples,
    strata: &BTreeMap<String, f64>,
) {
    for stratum in strata.keys() {
        for (name, labels) in COMPARED {
            let mut l = labels.to_vec();
            l.push(("stratum", stratum.as_str()));
            let (a, b) = (native.sum(name, &l), otlp.sum(name, &l));
            assert!(
                (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                "{what}: {name}{l:?}: native {a}, otlp {b}"
            );
        }
    }
}

/// The instrumented app exports to the receiver and writes the same spans as Kafka messages; the
/// native form of the same traces goes through a file. All three agree, stratum by stratum.
fn same_scores_three_ways(preset: &str, kafka_json: bool) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let topic = unique(&format!("otlp-{preset}"));
    broker.create_topic(&topic, 1);
    let format = if kafka_json {
        "otlp_json"
    } else {
        "otlp_proto"
    };
    let decode = |format: &str| format!("[decode]\nformat = \"{format}\"\npreset = \"{preset}\"\n");

    let (receiver, addr) = start_receiver(dir.path(), "", &decode("otlp_proto"), &[]);
    // The OTLP/gRPC receiver of a second ragwatch: the app exports every span to both.
    let (grpc_receiver, _, grpc_addr) =
        start_receivers(dir.path(), "", &decode("otlp_proto"), &[], true);
    let n = 40;
    let batches = dir.path().join("batches");
    let native = dir.path().join("native.jsonl");
    run_app(
        preset,
        n,
        21,
        [Some(addr), grpc_addr],
        &batches,
        kafka_json,
        &native,
    );

    let messages = read_batches(&batches, kafka_json);
    assert!(messages.len() > n / 3, "several traces per message");
    produce_otlp(
        &broker.brokers(),
        &topic,
        &messages.into_iter().map(|m| (0, m)).collect::<Vec<_>>(),
        "none",
    );
    let kafka_config = write_config(dir.path(), "kafka.toml", &decode(format));
    let kafka = Ragwatch::start(
        &kafka_config,
        &Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g")),
    );
    let file_config = write_config(
        dir.path(),
        "native.toml",
        &format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 0\nloop = false\n",
            native.display()
        ),
    );
    let from_file = Ragwatch::start(&file_config, &[]);

    let mut strata: BTreeMap<String, f64> = BTreeMap::new();
    let mut spans_per_trace = 0.0;
    for line in std::fs::read_to_string(&native).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        *strata
            .entry(declared_or_other(v["stratum"].as_str().unwrap()).to_owned())
            .or_default() += 1.0;
    }
    assert_eq!(strata.values().sum::<f64>(), n as f64);
    let deadline = Duration::from_secs(90);
    // Every trace received, then the counts once they stop moving: a trace is counted received
    // before its verdict and scores, so the last trace's may still be counting when it is seen.
    let settled = |rw: &Ragwatch| {
        wait_for(&format!("{preset}: {n} traces"), deadline, || {
            let m = rw.metrics()?;
            (m.sum("ragwatch_traces_received_total", &[]) == n as f64).then_some(())
        });
        rw.settled_metrics(COUNTED, deadline)
    };
    let native_m = settled(&from_file);
    for (what, rw) in [
        ("receiver", &receiver),
        ("grpc receiver", &grpc_receiver),
        ("kafka", &kafka),
    ] {
        let m = settled(rw);
        for (stratum, count) in &strata {
            assert_eq!(
                m.sum("ragwatch_traces_received_total", &[("stratum", stratum)]),
                *count,
                "{preset} {what}: stratum {stratum}"
            );
        }
        assert_same_scores(&format!("{preset} {what}"), &native_m, &m, &strata);
        assert_eq!(
            m.sum("ragwatch_traces_rejected_total", &[]),
            0.0,
            "{preset} {what}"
        );
        assert_eq!(
            m.sum("ragwatch_traces_unjudged_total", &[]),
            0.0,
            "{preset} {what}"
        );
        assert_eq!(
            m.sum("ragwatch_spans_dropped_total", &[]),
            0.0,
            "{preset} {what}"
        );
        assert_eq!(
            m.sum("ragwatch_traces_assembled_total", &[("trigger", "root")]),
            n as f64,
            "{preset} {what}: every trace completed by its root span"
        );
        spans_per_trace = m.sum("ragwatch_spans_received_total", &[]) / n as f64;
    }
    assert!(
        spans_per_trace >= 3.0,
        "{preset}: {spans_per_trace} spans per trace"
    );
    for (protocol, rw) in [("http", &receiver), ("grpc", &grpc_receiver)] {
        let m = rw.settled_metrics(&["ragwatch_otlp_requests_total"], deadline);
        let ok = m.sum(
            "ragwatch_otlp_requests_total",
            &[("protocol", protocol), ("outcome", "ok")],
        );
        assert!(ok > 1.0, "{preset}: {ok} {protocol} requests ok");
        assert_eq!(
            m.sum("ragwatch_otlp_requests_total", &[]),
            ok,
            "{preset}: every {protocol} request ok"
        );
    }
    // The Kafka consumer commits every message once each trace in it is judged.
    wait_for("kafka lag at zero", Duration::from_secs(30), || {
        let m = kafka.metrics()?;
        let lags: Vec<f64> =
            m.0.iter()
                .filter(|s| s.0 == "ragwatch_kafka_consumer_lag_messages")
                .map(|s| s.2)
                .collect();
        (!lags.is_empty() && lags.iter().all(|&l| l == 0.0)).then_some(())
    });
}

#[test]
fn openinference_spans_score_as_native_traces() {
    same_scores_three_ways("openinference", false);
}

#[test]
fn openllmetry_spans_score_as_native_traces() {
    same_scores_three_ways("openllmetry", false);
}

#[test]
fn gen_ai_spans_score_as_native_traces_and_otlp_json_reads() {
    same_scores_three_ways("gen_ai", true);
}

/// Traces `first..first + n` as protobuf messages of `per_message` spans: several traces per
/// message, traces across messages.
fn batches(first: u64, n: u64, per_message: usize) -> Vec<Vec<u8>> {
    let spans: Vec<Span> = (first..first + n).flat_map(rag_spans).collect();
    spans
        .chunks(per_message)
        .map(|c| request(c.to_vec()).encode_to_vec())
        .collect()
}

#[test]
fn kill_9_during_assembly_accounts_for_every_trace() {
    let server = JudgeServer::start();
    let broker = Broker::start();
    let topic = unique("otlp-crash");
    let group = unique("g");
    broker.create_topic(&topic, 3);
    // Each partition carries its own traces (as with partition_traces_by_id), 5 spans a message.
    let per_partition = 300u64;
    let mut messages = Vec::new();
    let mut per_partition_messages = [0i64; 3];
    for p in 0..3u64 {
        for m in batches(p * per_partition, per_partition, 5) {
            messages.push((p as i32, m));
            per_partition_messages[p as usize] += 1;
        }
    }
    let total_messages: i64 = per_partition_messages.iter().sum();
    produce_otlp(&broker.brokers(), &topic, &messages, "none");

    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let config = write_config(
        dir.path(),
        "c.toml",
        &format!(
            "[decode]\nformat = \"otlp_proto\"\n[assembly]\nidle_timeout_ms = 2000\n\
             [judge]\nsampled = \"llm\"\nworkers = 8\nqueue_capacity = 100000\n[sample]\ndefault_rate = 1.0\n\
             [llm]\nbase_url = \"{}\"\ncache_capacity = 0\nrecords_path = \"{}\"\n\
             [budget]\nrequests_per_minute = 10000000\ntokens_per_minute = 10000000000\ntokens_per_day = 100000000000\n",
            server.base_url(),
            records.display()
        ),
    );
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.push(("RAGWATCH__KAFKA__SESSION_TIMEOUT_MS", "6000".into()));
    env.push(("RAGWATCH__KAFKA__HEARTBEAT_INTERVAL_MS", "500".into()));
    let committed = || -> i64 {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker.brokers())
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition(&topic, p);
        }
        let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
        got.elements()
            .iter()
            .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
            .sum()
    };
    let mut rng = rand::rng();
    let mut last = 0;
    let kills = 8;
    for run in 0..kills {
        let rw = Ragwatch::start(&config, &env);
        // A random lifetime before the kill is what this test varies, not a wait.
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1200)));
        drop(rw); // SIGKILL
        let c = committed();
        assert!(c >= last, "run {run}: committed offsets went back");
        last = c;
    }
    // Not a wait for ragwatch: the test broker only hands the partitions to a new member once the
    // killed members' sessions (session.timeout.ms = 6 s above) have expired, and a member that
    // joins before then is not given them at all (measured: no commit within 120 s).
    std::thread::sleep(Duration::from_secs(7));
    let mut final_run = Ragwatch::start(&config, &env);
    wait_for(
        "the last run to commit every message",
        Duration::from_secs(120),
        || (committed() == total_messages).then_some(()),
    );
    final_run.sigterm();
    assert!(final_run.wait_exit(Duration::from_secs(30)).success());

    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in std::fs::read_to_string(&records).unwrap().lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            *seen
                .entry(v["trace_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    let missing: Vec<String> = (0..3 * per_partition)
        .map(|t| {
            id16(t)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        })
        .filter(|id| !seen.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} traces never judged, e.g. {:?}",
        missing.len(),
        3 * per_partition,
        &missing[..missing.len().min(3)]
    );
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    eprintln!(
        "{kills} kills: {} judgements for {} traces in {total_messages} messages, {duplicates} duplicates, {last} committed before the last run",
        seen.values().sum::<usize>(),
        3 * per_partition
    );
}

#[test]
fn every_compression_codec_is_readable() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "c.toml", "[decode]\nformat = \"otlp_proto\"\n");
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = unique(&format!("otlp-{codec}"));
        broker.create_topic(&topic, 1);
        let messages: Vec<(i32, Vec<u8>)> = batches(0, 30, 7).into_iter().map(|m| (0, m)).collect();
        produce_otlp(&broker.brokers(), &topic, &messages, codec);
        let rw = Ragwatch::start(
            &config,
            &Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g")),
        );
        let deadline = Duration::from_secs(60);
        wait_for(&format!("{codec}: 30 traces"), deadline, || {
            let m = rw.metrics()?;
            (m.sum("ragwatch_traces_received_total", &[]) == 30.0).then_some(())
        });
        let m = rw.settled_metrics(COUNTED, deadline);
        assert_eq!(
            m.sum("ragwatch_traces_received_total", &[]),
            30.0,
            "{codec}"
        );
        assert_eq!(m.sum("ragwatch_traces_rejected_total", &[]), 0.0, "{codec}");
        assert_eq!(
            m.sum("ragwatch_traces_received_total", &[("stratum", "tail")]),
            10.0,
            "{codec}"
        );
        eprintln!("{codec}: 30 traces in {} messages read", messages.len());
    }
}

#[test]
fn hostile_otlp_is_rejected_with_reasons_and_blocks_nothing() {
    let broker = Broker::start();
    let topic = unique("otlp-hostile");
    broker.create_topic(&topic, 1);
    let good = batches(0, 10, 4);
    let truncated = {
        let b = &good[0];
        b[..b.len() - 5].to_vec()
    };
    let huge = {
        let mut spans = rag_spans(100);
        spans[2].attributes[1] = kv("input.value", &"why? ".repeat(120_000));
        request(spans).encode_to_vec()
    };
    let cycle = {
        let mut spans = rag_spans(101);
        spans.truncate(2);
        // 2's parent is 1 (absent) made 3; 3's parent made 2: a cycle with no root.
        spans[0].parent_span_id = 3u64.to_be_bytes().to_vec();
        spans[1].parent_span_id = 2u64.to_be_bytes().to_vec();
        request(spans).encode_to_vec()
    };
    let bad_ids = {
        let mut spans = rag_spans(102);
        for s in &mut spans {
            s.trace_id.truncate(3);
        }
        request(spans).encode_to_vec()
    };
    let too_large = request(vec![Span {
        trace_id: id16(103),
        span_id: vec![1; 8],
        name: "x".repeat(2_000_000),
        ..Default::default()
    }])
    .encode_to_vec();
    let mut payloads: Vec<Vec<u8>> = vec![
        truncated,
        b"not protobuf at all".to_vec(),
        Vec::new(),
        huge,
        cycle,
        bad_ids,
        too_large,
    ];
    payloads.extend(good.iter().cloned());
    payloads.extend(batches(10, 10, 4));
    let count = payloads.len() as f64;
    produce_otlp(
        &broker.brokers(),
        &topic,
        &payloads.into_iter().map(|p| (0, p)).collect::<Vec<_>>(),
        "none",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        "c.toml",
        "[decode]\nformat = \"otlp_proto\"\n[assembly]\nidle_timeout_ms = 500\n",
    );
    let rw = Ragwatch::start(
        &config,
        &Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g")),
    );
    let deadline = Duration::from_secs(60);
    wait_for("20 traces and every poison counted", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) == 20.0
            && m.sum(
                "ragwatch_traces_rejected_total",
                &[("reason", "span_cycle")],
            ) == 1.0)
            .then_some(())
    });
    // The other reasons, the dropped spans and the messages are counted apart from the two waited
    // on: read once they all stop moving.
    let m = rw.settled_metrics(COUNTED, deadline);
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), 20.0);
    for (reason, n) in [
        ("truncated", 1.0),
        ("invalid_protobuf", 1.0),
        ("empty", 1.0),
        ("field_too_long", 1.0),
        ("span_cycle", 1.0),
        ("too_large", 1.0),
    ] {
        assert_eq!(
            m.sum("ragwatch_traces_rejected_total", &[("reason", reason)]),
            n,
            "reason {reason}"
        );
    }
    assert_eq!(
        m.sum("ragwatch_spans_dropped_total", &[("reason", "invalid_id")]),
        3.0
    );
    assert_eq!(m.sum("ragwatch_source_messages_total", &[]), count);
    wait_for(
        "every message accounted for (lag 0)",
        Duration::from_secs(30),
        || {
            let m = rw.metrics()?;
            let lag: Vec<f64> =
                m.0.iter()
                    .filter(|s| s.0 == "ragwatch_kafka_consumer_lag_messages")
                    .map(|s| s.2)
                    .collect();
            (lag.len() == 1 && lag[0] == 0.0).then_some(())
        },
    );
}

/// Raw gRPC calls through grpcio (tests/otlp_grpc_client.py): `(method, payload, gzip)` in, the
/// status code name, its details and the answer's bytes out, one per call.
fn grpc_calls(
    target: SocketAddr,
    token: Option<&str>,
    calls: &[(&str, Vec<u8>, bool)],
) -> Vec<(String, String, Vec<u8>)> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let input: String = calls
        .iter()
        .map(|(method, payload, gzip)| {
            format!(
                "{}\n",
                serde_json::json!({"method": method, "payload": hex(payload), "gzip": gzip})
            )
        })
        .collect();
    let out = pipe(
        Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_grpc_client.py"))
            .args(["--target", &target.to_string()])
            .args(token.map_or(Vec::new(), |t| vec!["--token", t])),
        &input,
    );
    assert!(
        out.status.success(),
        "grpc client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let answer = v["answer"].as_str().unwrap();
            let bytes = (0..answer.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&answer[i..i + 2], 16).unwrap())
                .collect();
            (
                v["code"].as_str().unwrap().to_owned(),
                v["details"].as_str().unwrap().to_owned(),
                bytes,
            )
        })
        .collect()
}

/// The gRPC receiver as a real grpcio client meets it: Export with and without gzip, an empty
/// request, spans it cannot keep (partial success), undecodable bytes (INVALID_ARGUMENT, counted as
/// a rejected trace), a message over the size limit and a gzip bomb (RESOURCE_EXHAUSTED or
/// OUT_OF_RANGE), a method it does not serve (UNIMPLEMENTED); every call counted by outcome, and
/// the traces assembled and accounted for.
#[test]
fn the_receiver_speaks_otlp_grpc() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    const EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    let dir = tempfile::tempdir().unwrap();
    let max = 20_000;
    let (rw, write, grpc) = start_receivers(
        dir.path(),
        &format!("max_body_bytes = {max}"),
        "[decode]\nformat = \"otlp_proto\"\n",
        &[],
        true,
    );
    let grpc = grpc.unwrap();
    let valid = |t: u64| request(rag_spans(t)).encode_to_vec();
    let mut bad_ids = rag_spans(9);
    bad_ids[0].trace_id = vec![1];
    let bomb = vec![b'a'; 10 * max];
    let calls = [
        (EXPORT, valid(1), false),
        (EXPORT, valid(2), true),
        (EXPORT, Vec::new(), false),
        (EXPORT, request(bad_ids).encode_to_vec(), false),
        (EXPORT, b"\xff\xff\xff not protobuf".to_vec(), false),
        (EXPORT, vec![0u8; 2 * max], false),
        (EXPORT, bomb, true),
        (
            "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
            valid(3),
            false,
        ),
    ];
    let answers = grpc_calls(grpc, Some(WRITE_TOKEN), &calls);
    // The write listener's guard: no token, an unknown one; the write port itself speaks gRPC too.
    let refused = grpc_calls(grpc, None, &[(EXPORT, valid(4), false)]);
    assert_eq!(refused[0].0, "UNAUTHENTICATED", "{refused:?}");
    let refused = grpc_calls(grpc, Some("not-a-token"), &[(EXPORT, valid(4), false)]);
    assert_eq!(refused[0].0, "UNAUTHENTICATED", "{refused:?}");
    let on_write_port = grpc_calls(write, Some(WRITE_TOKEN), &[(EXPORT, valid(5), false)]);
    assert_eq!(on_write_port[0].0, "OK", "{on_write_port:?}");
    let codes: Vec<&str> = answers.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(&codes[..4], ["OK"; 4], "{answers:?}");
    assert_eq!(codes[4], "INVALID_ARGUMENT", "{answers:?}");
    for (i, code) in codes.iter().enumerate().skip(5).take(2) {
        assert!(
            ["RESOURCE_EXHAUSTED", "OUT_OF_RANGE"].contains(code),
            "call {i}: {code} {answers:?}"
        );
    }
    assert_eq!(codes[7], "UNIMPLEMENTED", "{answers:?}");
    for (code, _, answer) in &answers[..3] {
        assert_eq!(code, "OK");
        let answer = ExportTraceServiceResponse::decode(&answer[..]).unwrap();
        assert!(answer.partial_success.is_none(), "{answer:?}");
    }
    let partial = ExportTraceServiceResponse::decode(&answers[3].2[..])
        .unwrap()
        .partial_success
        .expect("a partial success for the span with a one-byte trace id");
    assert_eq!(partial.rejected_spans, 1, "{partial:?}");

    // Traces 1, 2 and 5 are judged; trace 9, without its retriever span, is received and
    // unjudged; trace 4 was refused.
    let deadline = Duration::from_secs(30);
    wait_for("four traces received", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) == 4.0).then_some(())
    });
    // A trace is judged after it is counted received, and the calls and refusals are counted
    // apart: every count compared with what the client did, once they stop moving.
    let m = rw.settled_metrics(
        &[
            COUNTED,
            &[
                "ragwatch_write_refused_total",
                "ragwatch_otlp_requests_total",
            ],
        ]
        .concat(),
        deadline,
    );
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), 4.0);
    assert_eq!(
        m.sum(
            "ragwatch_write_refused_total",
            &[("endpoint", "traces"), ("reason", "missing_credentials")]
        ),
        1.0
    );
    assert_eq!(
        m.sum(
            "ragwatch_write_refused_total",
            &[("endpoint", "traces"), ("reason", "unknown_token")]
        ),
        1.0
    );
    assert_eq!(
        m.sum(
            "ragwatch_traces_unjudged_total",
            &[("reason", "no_retrieval")]
        ),
        1.0
    );
    let outcome = |o: &str| {
        m.sum(
            "ragwatch_otlp_requests_total",
            &[("protocol", "grpc"), ("outcome", o)],
        )
    };
    assert_eq!(outcome("ok"), 4.0);
    assert_eq!(outcome("partial"), 1.0);
    assert_eq!(outcome("bad_request"), 1.0);
    assert_eq!(outcome("too_large"), 2.0);
    // Another method is not routed to the receiver: UNIMPLEMENTED, and no OTLP request.
    assert_eq!(outcome("unsupported"), 0.0);
    assert_eq!(
        m.sum("ragwatch_otlp_requests_total", &[("protocol", "http")]),
        0.0
    );
    assert_eq!(m.sum("ragwatch_traces_rejected_total", &[]), 1.0);
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]),
        3.0
    );
}
