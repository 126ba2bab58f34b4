//! A loopback OTLP/HTTP sink standing in for an export target: it keeps every request's path and
//! body, and answers each after a delay with 200.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The requests a [`Sink`] received: path and body.
pub type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A loopback OTLP/HTTP sink: keeps every request's path and body; answers each after `delay`
/// with 200.
pub struct Sink {
    pub addr: SocketAddr,
    pub received: Received,
    _runtime: tokio::runtime::Runtime,
}

impl Sink {
    pub fn start(delay: Duration) -> Sink {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let received: Received = Arc::default();
        let kept = Arc::clone(&received);
        let app =
            axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
                let kept = Arc::clone(&kept);
                async move {
                    tokio::time::sleep(delay).await;
                    kept.lock()
                        .unwrap()
                        .push((uri.path().to_owned(), body.to_vec()));
                    axum::http::StatusCode::OK
                }
            });
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        Sink {
            addr,
            received,
            _runtime: runtime,
        }
    }
}
