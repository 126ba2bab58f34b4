//! One stand-in for the judge model: a real HTTP server on loopback that speaks the OpenAI
//! chat-completions and embeddings API the way ragwatch calls it, with the model a test picks:
//!
//! - [`JudgeServer::start`]: a deterministic rule (`rule.rs`), for the judge's own tests;
//! - [`JudgeServer::following_labels`]: verdicts that follow human labels with noise (`labels.rs`),
//!   for the alert chain, the fleet, paging and the label AUROC;
//! - [`JudgeServer::biased`]: a length or context-order bias built in (`bias.rs`), for the audit.
//!
//! Whatever the model, the server can misbehave as real ones do (`faults.rs`): scripted faults per
//! request (429 with Retry-After, 500, a delay, malformed JSON, a truncated answer, a rewritten
//! answer), a fault on every request, slow requests, refused structured-output modes (400, 422 or
//! 500 as OpenAI, vLLM, FastAPI servers and llama-cpp-python send them), no `usage`, and a TCP front
//! (`front.rs`) that takes the whole API down. Its embeddings (`embeddings.rs`) come pooled or per
//! token, as floats or base64, and scripted embedding faults change the dimension or send a NaN.
//! Everything it is asked is counted and billed as a provider's usage log would have it.

mod bias;
mod chat;
mod embeddings;
mod faults;
mod front;
mod labels;
mod markup;
mod rule;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use serde_json::Value;

pub use bias::Bias;
pub use embeddings::EmbedShape;
pub use faults::{EmbedFault, Fault};
pub use labels::LabelCounts;

/// The model behind the answers.
#[derive(Default)]
enum Model {
    #[default]
    Rule,
    Labels(Box<labels::Labels>),
    Bias(Bias),
}

/// One billed request, as a provider's usage log has it: when it arrived, and the tokens it billed.
#[derive(Debug, Clone, Copy)]
pub struct Billed {
    pub arrived: Instant,
    pub tokens: u64,
    /// A chat completion (else an embeddings request).
    pub chat: bool,
}

/// What the server was told, and what it saw.
#[derive(Default)]
pub struct ServerState {
    model: Model,
    /// Every billed request, in the order billed.
    pub billing: Mutex<Vec<Billed>>,
    pub faults: Mutex<VecDeque<Fault>>,
    /// A fault applied to every request while set.
    pub always: Mutex<Option<Fault>>,
    pub chat_requests: AtomicU64,
    pub embedding_requests: AtomicU64,
    /// Chat requests whose reply follows the `faithfulness` schema.
    pub faithfulness_requests: AtomicU64,
    /// What the label-following model was asked.
    pub label_counts: LabelCounts,
    /// Tokens the server reported as used (prompt + completion), as a provider would bill them.
    pub tokens_billed: AtomicU64,
    pub last_auth: Mutex<Option<String>>,
    /// Connections reset while the API was down.
    pub connection_resets: AtomicU64,
    pub max_tokens_seen: Mutex<Vec<u64>>,
    /// Kinds of `response_format` refused, and with which status (400 or 422).
    pub refused_formats: Mutex<(Vec<&'static str>, u16)>,
    /// The `response_format` kind of every chat request, in order.
    pub formats_seen: Mutex<Vec<&'static str>>,
    /// The last chat request bodies (at most 64).
    pub recent_chats: Mutex<VecDeque<Value>>,
    pub embed_faults: Mutex<VecDeque<EmbedFault>>,
    pub embed_shape: Mutex<EmbedShape>,
    /// `encoding_format` of every embeddings request.
    pub encodings_seen: Mutex<Vec<String>>,
    /// Leave `usage` out of every answer.
    pub no_usage: AtomicBool,
    /// Chat requests whose user message holds this text take this long (a slow trace).
    pub slow: Mutex<Option<(String, Duration)>>,
    /// Slow chat requests being served now, and the most ever served at once.
    pub slow_in_flight: AtomicU64,
    pub slow_in_flight_max: AtomicU64,
}

impl ServerState {
    fn next_fault(&self) -> Option<Fault> {
        self.faults
            .lock()
            .unwrap()
            .pop_front()
            .or_else(|| self.always.lock().unwrap().clone())
    }

    fn bill(&self, billed: Billed) {
        self.tokens_billed
            .fetch_add(billed.tokens, Ordering::SeqCst);
        self.billing.lock().unwrap().push(billed);
    }
}

/// The running stand-in; stops with its runtime when dropped.
pub struct JudgeServer {
    pub addr: SocketAddr,
    pub state: Arc<ServerState>,
    down: tokio::sync::watch::Sender<bool>,
    _runtime: tokio::runtime::Runtime,
}

impl JudgeServer {
    /// The rule model.
    pub fn start() -> JudgeServer {
        Self::serve(Model::Rule)
    }

    /// The label-following model for `labels` (answer text -> faithful per the humans), its noise
    /// drawn from `seed`.
    pub fn following_labels(
        labels: impl IntoIterator<Item = (String, bool)>,
        seed: u64,
    ) -> JudgeServer {
        Self::serve(Model::Labels(Box::new(labels::Labels::new(labels, seed))))
    }

    /// The biased model.
    pub fn biased(bias: Bias) -> JudgeServer {
        Self::serve(Model::Bias(bias))
    }

    fn serve(model: Model) -> JudgeServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let state = Arc::new(ServerState {
            model,
            ..ServerState::default()
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat::chat))
            .route("/v1/embeddings", post(embeddings::embeddings))
            .with_state(Arc::clone(&state));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let inner = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        let (addr, down) = front::start(&runtime, inner, Arc::clone(&state));
        JudgeServer {
            addr,
            state,
            down,
            _runtime: runtime,
        }
    }

    /// Takes the API down (every connection reset) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.send_replace(down);
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state.faults.lock().unwrap().extend(faults);
    }

    pub fn set_always(&self, fault: Option<Fault>) {
        *self.state.always.lock().unwrap() = fault;
    }

    pub fn chat_requests(&self) -> u64 {
        self.state.chat_requests.load(Ordering::SeqCst)
    }

    pub fn tokens_billed(&self) -> u64 {
        self.state.tokens_billed.load(Ordering::SeqCst)
    }

    pub fn embedding_requests(&self) -> u64 {
        self.state.embedding_requests.load(Ordering::SeqCst)
    }

    /// Chat requests whose reply follows the `faithfulness` schema.
    pub fn faithfulness_requests(&self) -> u64 {
        self.state.faithfulness_requests.load(Ordering::SeqCst)
    }

    /// What the label-following model was asked.
    pub fn label_counts(&self) -> &LabelCounts {
        &self.state.label_counts
    }

    /// The billed requests so far, each with its arrival time and billed tokens.
    pub fn billing(&self) -> Vec<Billed> {
        self.state.billing.lock().unwrap().clone()
    }

    /// Refuses `response_format` of these kinds with `status` (400 as OpenAI and vLLM do, 422 as
    /// FastAPI servers do, 500 as llama-cpp-python 0.3 does).
    pub fn refuse_formats(&self, kinds: &[&'static str], status: u16) {
        *self.state.refused_formats.lock().unwrap() = (kinds.to_vec(), status);
    }

    pub fn formats_seen(&self) -> Vec<&'static str> {
        self.state.formats_seen.lock().unwrap().clone()
    }

    pub fn script_embeddings(&self, faults: impl IntoIterator<Item = EmbedFault>) {
        self.state.embed_faults.lock().unwrap().extend(faults);
    }

    pub fn set_embed_shape(&self, shape: EmbedShape) {
        *self.state.embed_shape.lock().unwrap() = shape;
    }

    /// Chat requests whose user message holds `marker` take `delay`.
    pub fn set_slow(&self, marker: &str, delay: Duration) {
        *self.state.slow.lock().unwrap() = Some((marker.to_owned(), delay));
    }

    pub fn recent_chats(&self) -> Vec<Value> {
        self.state
            .recent_chats
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect()
    }
}
