//! The write listener (`[write]`): `POST /v1/traces` (the OTLP/HTTP receiver, `source.kind =
//! "otlp"`) and `POST /v1/labels` (`labels.enabled`), on a port of their own, apart from the
//! read-only admin port. Every request passes the guard first: the per-client rate limit (keyed by
//! peer IP address; 429 with `Retry-After` over it), then
//! the credentials (a bearer token with the endpoint's scope, or a verified client certificate).
//! Refusals are counted by endpoint and reason on `ragwatch_write_refused_total` and logged
//! (rate-limited) with the reason and the peer address, never with a token.
//!
//! The listener is bound only when one of its endpoints is on, and runs on the main runtime: it
//! feeds the pipeline, unlike the admin server, which must answer while the pipeline is stuck.

pub mod config;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::auth::{Denied, Endpoint, TokenError, Tokens, authorize};
use super::tls::{ReloadingTls, TlsError};
use crate::events::LogLimiter;
use crate::metrics::Metrics;
use crate::metrics::otlp::Outcome;
use crate::recorder::{LabelOutcome, Shared};
use config::{RateLimitConfig, WriteConfig};

/// Why the write listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The address could not be bound.
    #[error("write listener: cannot listen on {0}: {1}")]
    Listen(String, #[source] std::io::Error),
    /// Neither tokens nor client certificates, and unauthenticated writes not allowed.
    #[error(
        "write listener: no credentials: set ${0}, write.auth.tokens_file or \
         write.tls.client_ca_file (or write.auth.allow_unauthenticated = true for a listener \
         only the pod reaches)"
    )]
    NoCredentials(String),
    /// A token list could not be read.
    #[error("write listener: tokens from {0}: {1}")]
    Tokens(String, String),
    /// The TLS certificate, key or client CA could not be loaded.
    #[error("write listener: TLS: {0}")]
    Tls(#[from] TlsError),
}

/// A running write listener.
#[derive(Debug)]
pub(crate) struct WriteServer {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl WriteServer {
    /// Stops taking connections and waits (a few seconds at most) for requests in flight.
    pub(crate) async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// What the listener serves: the OTLP receiver's routes, and the labels endpoint when `labels` is
/// set (the recorder that joins them).
pub(crate) struct WriteRoutes {
    /// `POST /v1/traces`, with its state applied.
    pub traces: Option<Router>,
    /// Where labels are joined; `None` leaves `/v1/labels` out.
    pub labels: Option<Shared>,
}

/// What the guard of every write route reads.
#[derive(Debug, Clone)]
struct Guard {
    credentials: Arc<Credentials>,
    limiter: Option<Arc<ClientLimiter>>,
    metrics: Arc<Metrics>,
}

/// Whose requests a rate-limit bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    Ip(IpAddr),
    /// Every client seen while `max_clients` are tracked already: one shared bucket, so memory
    /// stays bounded and a flood of addresses is still limited.
    Overflow,
}

/// The per-client rate limit (GCRA, governor), keyed by peer IP address.
#[derive(Debug)]
struct ClientLimiter {
    limiter: governor::DefaultKeyedRateLimiter<Client>,
    max_clients: usize,
}

impl ClientLimiter {
    fn new(config: &RateLimitConfig) -> Option<ClientLimiter> {
        let rate = std::num::NonZeroU32::new(config.requests_per_sec)?;
        let burst = std::num::NonZeroU32::new(config.burst).unwrap_or(rate);
        let quota = governor::Quota::per_second(rate).allow_burst(burst);
        Some(ClientLimiter {
            limiter: governor::RateLimiter::keyed(quota),
            max_clients: config.max_clients,
        })
    }

    /// `Err(wait)` when `ip` is over its rate.
    fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        use governor::clock::Clock;
        let key = if self.limiter.len() >= self.max_clients {
            Client::Overflow
        } else {
            Client::Ip(ip)
        };
        self.limiter
            .check_key(&key)
            .map_err(|not| not.wait_time_from(self.limiter.clock().now()))
    }

    /// Forgets clients whose buckets are full again (as good as new).
    fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The tokens in force and where they come from.
#[derive(Debug)]
struct Credentials {
    from_env: Tokens,
    file: Option<PathBuf>,
    /// The last tokens file read, as bytes, to see a change.
    file_bytes: RwLock<Vec<u8>>,
    current: RwLock<Arc<Tokens>>,
    allow_unauthenticated: bool,
}

impl Credentials {
    fn load(config: &WriteConfig, env: &HashMap<String, String>) -> Result<Self, WriteError> {
        let auth = &config.auth;
        let from_env = match env.get(&auth.tokens_env) {
            Some(v) => Tokens::parse(v)
                .map_err(|e| WriteError::Tokens(format!("${}", auth.tokens_env), e.to_string()))?,
            None => Tokens::default(),
        };
        let (file_bytes, from_file) = match &auth.tokens_file {
            Some(path) => {
                let shown = path.display().to_string();
                let bytes = std::fs::read(path)
                    .map_err(|e| WriteError::Tokens(shown.clone(), e.to_string()))?;
                let tokens =
                    parse_file(&bytes).map_err(|e| WriteError::Tokens(shown, e.to_string()))?;
                (bytes, tokens)
            }
            None => (Vec::new(), Tokens::default()),
        };
        let current = from_env.merged(&from_file);
        Ok(Credentials {
            from_env,
            file: auth.tokens_file.clone(),
            file_bytes: RwLock::new(file_bytes),
            current: RwLock::new(Arc::new(current)),
            allow_unauthenticated: auth.allow_unauthenticated,
        })
    }

    fn tokens(&self) -> Arc<Tokens> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Reads the tokens file again when its bytes changed. `None` when unchanged or absent.
    fn reload(&self) -> Option<Result<usize, String>> {
        let path = self.file.as_ref()?;
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => return Some(Err(e.to_string())),
        };
        if *self.file_bytes.read().unwrap_or_else(|p| p.into_inner()) == bytes {
            return None;
        }
        let result = parse_file(&bytes).map(|from_file| {
            let merged = self.from_env.merged(&from_file);
            let n = merged.len();
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(merged);
            n
        });
        // A broken file is reported once, not at every check, until it changes again.
        *self.file_bytes.write().unwrap_or_else(|p| p.into_inner()) = bytes;
        Some(result.map_err(|e| e.to_string()))
    }
}

fn parse_file(bytes: &[u8]) -> Result<Tokens, TokenError> {
    Tokens::parse(&String::from_utf8_lossy(bytes))
}

/// The peer of a connection, put on each of its requests.
#[derive(Debug, Clone, Copy)]
struct Peer {
    ip: IpAddr,
    /// The TLS handshake verified a client certificate.
    client_certificate: bool,
}

static REFUSED_LOG: LogLimiter = LogLimiter::new();

/// Largest label request body; a reviewer tool posts batches, not archives.
const MAX_LABEL_BODY_BYTES: usize = 4 << 20;

/// Binds `config.listen` (writing the address to `write.port_file`) and serves `routes`
/// until [`WriteServer::shutdown`]. Fails before binding when no credential is configured and
/// unauthenticated writes are not allowed.
pub fn spawn(
    config: &WriteConfig,
    env: &HashMap<String, String>,
    routes: WriteRoutes,
    metrics: Arc<Metrics>,
) -> Result<WriteServer, WriteError> {
    let w = config;
    let credentials = Arc::new(Credentials::load(config, env)?);
    let tokens = credentials.tokens();
    let tls = ReloadingTls::load(&w.tls)?.map(Arc::new);
    let certificates = tls.as_ref().is_some_and(|t| t.verifies_clients());
    if tokens.is_empty() && !certificates && !credentials.allow_unauthenticated {
        return Err(WriteError::NoCredentials(w.auth.tokens_env.clone()));
    }
    if credentials.allow_unauthenticated {
        tracing::warn!(listen = %w.listen, "the write listener takes writes without credentials (write.auth.allow_unauthenticated)");
    }
    metrics.write.tokens.set(tokens.len() as i64);
    let limiter = ClientLimiter::new(&w.rate_limit).map(Arc::new);
    let guard = Guard {
        credentials: Arc::clone(&credentials),
        limiter: limiter.clone(),
        metrics: Arc::clone(&metrics),
    };
    let mut app = Router::new();
    let mut endpoints = Vec::new();
    if let Some(traces) = routes.traces {
        app = app.merge(guarded(traces, &guard, Endpoint::Traces));
        endpoints.push(Endpoint::Traces);
    }
    if let Some(recorder) = routes.labels {
        let labels = Router::new()
            .route(
                "/v1/labels",
                post(labels).layer(axum::extract::DefaultBodyLimit::max(MAX_LABEL_BODY_BYTES)),
            )
            .route("/v1/review", axum::routing::get(review_items))
            .with_state(recorder);
        app = app.merge(guarded(labels, &guard, Endpoint::Labels));
        endpoints.push(Endpoint::Labels);
    }
    for e in &endpoints {
        for r in Denied::ALL {
            metrics
                .write
                .refused
                .with_label_values(&[e.as_str(), r.as_str()]);
        }
    }
    for outcome in ["ok", "error"] {
        metrics
            .write
            .reloads
            .with_label_values(&["tokens", outcome]);
        if tls.is_some() {
            metrics.write.reloads.with_label_values(&["tls", outcome]);
        }
    }

    let (listener, addr) = bind(&w.listen, w.port_file.as_deref())?;
    let grpc_listener = match &w.grpc_listen {
        Some(listen) => Some(bind(listen, w.grpc_port_file.as_deref())?),
        None => None,
    };
    let stop = CancellationToken::new();
    let reload_every = Duration::from_secs(w.tls.reload_interval_secs);
    let connections = Connections {
        app,
        tls: tls.clone(),
        handshake_timeout: Duration::from_millis(w.tls.handshake_timeout_ms),
        metrics: Arc::clone(&metrics),
    };
    tokio::spawn(watch_files(
        credentials,
        tls,
        limiter,
        metrics,
        reload_every,
        stop.clone(),
    ));
    let grpc_addr = grpc_listener.as_ref().map(|(_, a)| *a);
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            match grpc_listener {
                Some((grpc, _)) => {
                    tokio::join!(
                        serve(listener, connections.clone(), stop.clone()),
                        serve(grpc, connections, stop)
                    );
                }
                None => serve(listener, connections, stop).await,
            }
        })
    };
    let names: Vec<&str> = endpoints.iter().map(|e| e.as_str()).collect();
    tracing::info!(
        %addr,
        grpc = ?grpc_addr,
        endpoints = ?names,
        tokens = tokens.len(),
        tls = w.tls_enabled(),
        client_certificates = certificates,
        "write listener listening"
    );
    Ok(WriteServer { stop, task })
}

/// Binds `listen` (port 0 picks one) and writes the bound address to `port_file`.
fn bind(
    listen: &str,
    port_file: Option<&std::path::Path>,
) -> Result<(TcpListener, SocketAddr), WriteError> {
    let listen_error = |e| WriteError::Listen(listen.to_owned(), e);
    let std_listener = std::net::TcpListener::bind(listen).map_err(listen_error)?;
    std_listener.set_nonblocking(true).map_err(listen_error)?;
    let addr = std_listener.local_addr().map_err(listen_error)?;
    let listener = TcpListener::from_std(std_listener).map_err(listen_error)?;
    if let Some(path) = port_file
        && let Err(e) = std::fs::write(path, addr.to_string())
    {
        tracing::warn!(error = %e, path = %path.display(), "cannot write the write listener's port file");
    }
    Ok((listener, addr))
}

fn guarded(router: Router, guard: &Guard, endpoint: Endpoint) -> Router {
    router.route_layer(axum::middleware::from_fn_with_state(
        (guard.clone(), endpoint),
        check,
    ))
}

/// The guard in front of every write route.
async fn check(
    State((g, endpoint)): State<(Guard, Endpoint)>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request.extensions().get::<Peer>().copied();
    // A refused OTLP export request ends here: its outcome is counted with the receiver's, so
    // those outcomes cover every request to the traces route.
    let otlp = (endpoint == Endpoint::Traces).then(|| {
        let grpc = request
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        if grpc { "grpc" } else { "http" }
    });
    let refused = |refusal: Denied| {
        if let Some(protocol) = otlp {
            g.metrics.otlp.request(protocol).end(match refusal {
                Denied::RateLimited => Outcome::RateLimited,
                _ => Outcome::Unauthenticated,
            });
        }
        refuse(&g.metrics, endpoint, refusal, peer)
    };
    // The rate limit first: a client guessing tokens is slowed down like any other.
    if let (Some(limiter), Some(p)) = (&g.limiter, peer)
        && let Err(wait) = limiter.check(p.ip)
    {
        let mut response = refused(Denied::RateLimited);
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs.max(1)));
        return response;
    }
    if !g.credentials.allow_unauthenticated {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        let certificate = peer.is_some_and(|p| p.client_certificate);
        let tokens = g.credentials.tokens();
        if let Err(refusal) = authorize(&tokens, authorization, certificate, endpoint) {
            return refused(refusal);
        }
    }
    next.run(request).await
}

/// Counts, logs (rate-limited, never a token) and answers a refusal.
fn refuse(metrics: &Metrics, endpoint: Endpoint, refusal: Denied, peer: Option<Peer>) -> Response {
    metrics
        .write
        .refused
        .with_label_values(&[endpoint.as_str(), refusal.as_str()])
        .inc();
    if let Some(suppressed) = REFUSED_LOG.allow() {
        let peer = peer.map(|p| p.ip.to_string()).unwrap_or_default();
        tracing::warn!(
            endpoint = endpoint.as_str(),
            reason = refusal.as_str(),
            peer,
            suppressed,
            "write refused"
        );
    }
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::UNAUTHORIZED);
    let mut response = (status, format!("{}\n", refusal.as_str())).into_response();
    let challenge = match refusal {
        Denied::MissingCredentials => Some("Bearer"),
        Denied::MalformedCredentials => Some("Bearer error=\"invalid_request\""),
        Denied::UnknownToken => Some("Bearer error=\"invalid_token\""),
        Denied::Forbidden => Some("Bearer error=\"insufficient_scope\""),
        Denied::RateLimited => None,
    };
    if let Some(c) = challenge {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static(c),
        );
    }
    response
}

async fn labels(State(recorder): State<Shared>, body: Bytes) -> impl IntoResponse {
    if recorder.feedback.is_none() {
        return (
            StatusCode::NOT_FOUND,
            "labels are off (labels.enabled = false)\n".to_string(),
        );
    }
    let counts = recorder.label_lines(&body, crate::clock::now_ms());
    let summary: serde_json::Map<String, serde_json::Value> = LabelOutcome::ALL
        .iter()
        .zip(counts)
        .map(|(o, n)| (o.as_str().to_string(), n.into()))
        .collect();
    (
        StatusCode::OK,
        format!("{}\n", serde_json::Value::Object(summary)),
    )
}

/// How many picked traces a `GET /v1/review` takes at most.
#[derive(Debug, serde::Deserialize)]
struct ReviewQuery {
    max: Option<usize>,
}

/// Items at most per `GET /v1/review`.
const MAX_REVIEW_ITEMS: usize = 100;

/// `GET /v1/review?max=N`: up to N (default and at most 100) traces the review queue picked, oldest
/// first, as JSON lines; each is handed out once. Behind the `labels` scope: whoever posts the
/// labels reads the queue.
async fn review_items(
    State(recorder): State<Shared>,
    query: Result<axum::extract::Query<ReviewQuery>, axum::extract::rejection::QueryRejection>,
) -> axum::response::Response {
    let Some(review) = recorder.review().filter(|r| r.pulls()) else {
        return (
            StatusCode::NOT_FOUND,
            "no review queue to pull (review.enabled with review.pull_buffer > 0)\n",
        )
            .into_response();
    };
    let max = query
        .ok()
        .and_then(|q| q.0.max)
        .unwrap_or(MAX_REVIEW_ITEMS)
        .min(MAX_REVIEW_ITEMS);
    let body: String = review
        .take(max)
        .iter()
        .map(|item| format!("{item}\n"))
        .collect();
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        body,
    )
        .into_response()
}

/// Checks the tokens file and the TLS files for a change every `every`, until `stop`.
async fn watch_files(
    credentials: Arc<Credentials>,
    tls: Option<Arc<ReloadingTls>>,
    limiter: Option<Arc<ClientLimiter>>,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Some(l) = &limiter {
            l.forget_idle();
        }
        match credentials.reload() {
            None => {}
            Some(Ok(n)) => {
                metrics
                    .write
                    .reloads
                    .with_label_values(&["tokens", "ok"])
                    .inc();
                metrics.write.tokens.set(n as i64);
                tracing::info!(tokens = n, "write tokens reloaded");
            }
            Some(Err(e)) => {
                metrics
                    .write
                    .reloads
                    .with_label_values(&["tokens", "error"])
                    .inc();
                tracing::warn!(error = %e, "write tokens file unreadable; the tokens read before stay in force");
            }
        }
        match tls.as_ref().and_then(|t| t.reload()) {
            None => {}
            Some(Ok(())) => {
                metrics
                    .write
                    .reloads
                    .with_label_values(&["tls", "ok"])
                    .inc();
                tracing::info!("write listener TLS certificate reloaded");
            }
            Some(Err(e)) => {
                metrics
                    .write
                    .reloads
                    .with_label_values(&["tls", "error"])
                    .inc();
                tracing::warn!(error = %e, "write listener TLS files not loaded; the certificate before stays in force");
            }
        }
    }
}

/// What each connection needs.
#[derive(Clone)]
struct Connections {
    app: Router,
    tls: Option<Arc<ReloadingTls>>,
    handshake_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Connections {
    /// Serves one connection: the TLS handshake first when TLS is on (bounded, counted when it
    /// fails), then HTTP/1.1 until the client or the shutdown closes it.
    async fn serve(self, stream: tokio::net::TcpStream, addr: SocketAddr, watcher: Watcher) {
        let mut peer = Peer {
            ip: addr.ip(),
            client_certificate: false,
        };
        let Some(tls) = &self.tls else {
            return serve_http(stream, self.app, peer, watcher).await;
        };
        let handshake = tokio::time::timeout(self.handshake_timeout, tls.acceptor().accept(stream));
        match handshake.await {
            Ok(Ok(stream)) => {
                peer.client_certificate = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty());
                serve_http(stream, self.app, peer, watcher).await;
            }
            Ok(Err(e)) => {
                self.metrics.write.tls_handshake_failures.inc();
                tracing::debug!(error = %e, peer = %addr.ip(), "write listener: TLS handshake failed");
            }
            Err(_) => {
                self.metrics.write.tls_handshake_failures.inc();
                tracing::debug!(peer = %addr.ip(), "write listener: TLS handshake timed out");
            }
        }
    }
}

async fn serve_http<S>(stream: S, app: Router, peer: Peer, watcher: Watcher)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = tower::ServiceExt::map_request(
        app,
        move |mut r: axum::http::Request<hyper::body::Incoming>| {
            r.extensions_mut().insert(peer);
            r
        },
    );
    // HTTP/1.1 for OTLP/HTTP and labels, HTTP/2 (prior knowledge, or ALPN under TLS) for OTLP/gRPC.
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "write listener: connection ended with an error");
    }
}

/// Accepts connections until `stop`, then lets requests in flight finish (up to 5 s).
async fn serve(listener: TcpListener, connections: Connections, stop: CancellationToken) {
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, addr) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(error = %e, "write listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        tokio::spawn(connections.clone().serve(stream, addr, graceful.watcher()));
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    /// The guard's refusals of OTLP export requests are outcomes of `ragwatch_otlp_requests_total`
    /// too (by the protocol the request came in), so those outcomes cover every request to the
    /// traces route; a request let through is left for the receiver to count.
    #[tokio::test]
    async fn refused_export_requests_are_counted_as_otlp_outcomes() {
        let config: WriteConfig =
            toml::from_str("[rate_limit]\nrequests_per_sec = 1\nburst = 3").unwrap();
        let env = HashMap::from([("RAGWATCH_WRITE_TOKENS".to_owned(), "sekrit".to_owned())]);
        let metrics = Arc::new(Metrics::new(&[], "test"));
        let guard = Guard {
            credentials: Arc::new(Credentials::load(&config, &env).unwrap()),
            limiter: ClientLimiter::new(&config.rate_limit).map(Arc::new),
            metrics: Arc::clone(&metrics),
        };
        let app = guarded(
            Router::new().route("/v1/traces", post(|| async { "taken" })),
            &guard,
            Endpoint::Traces,
        );
        let request = |content_type: &str, token: Option<&str>| {
            let mut b = Request::builder()
                .method("POST")
                .uri("/v1/traces")
                .header(header::CONTENT_TYPE, content_type);
            if let Some(t) = token {
                b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
            }
            let mut r = b.body(Body::empty()).unwrap();
            r.extensions_mut().insert(Peer {
                ip: IpAddr::from([127, 0, 0, 1]),
                client_certificate: false,
            });
            r
        };
        let status = |r: Response| r.status().as_u16();
        let send = |r| app.clone().oneshot(r);
        assert_eq!(
            status(send(request("application/x-protobuf", None)).await.unwrap()),
            401
        );
        assert_eq!(
            status(
                send(request("application/grpc", Some("wrong")))
                    .await
                    .unwrap()
            ),
            401
        );
        assert_eq!(
            status(
                send(request("application/x-protobuf", Some("sekrit")))
                    .await
                    .unwrap()
            ),
            200
        );
        assert_eq!(
            status(
                send(request("application/x-protobuf", Some("sekrit")))
                    .await
                    .unwrap()
            ),
            429
        );
        let count = |protocol: &str, outcome: &str| {
            metrics
                .otlp
                .requests
                .with_label_values(&[protocol, outcome])
                .get()
        };
        assert_eq!(count("http", "unauthenticated"), 1);
        assert_eq!(count("grpc", "unauthenticated"), 1);
        assert_eq!(count("http", "rate_limited"), 1);
        // The one let through is the receiver's to count.
        let total: u64 = crate::metrics::otlp::Outcome::ALL
            .iter()
            .flat_map(|o| ["http", "grpc"].map(|p| count(p, o.as_str())))
            .sum();
        assert_eq!(total, 3);
        assert_eq!(
            metrics
                .write
                .refused
                .with_label_values(&["traces", "rate_limited"])
                .get(),
            1
        );
    }
}
