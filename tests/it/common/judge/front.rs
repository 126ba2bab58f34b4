//! The TCP front of the judge stand-in: it passes each connection through to the API, and while
//! the API is down resets every open connection and every new one (RST), as a crashed or
//! unreachable server looks to a client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::ServerState;

/// Serves the front for the API at `inner` from `runtime`: its address, and the switch that takes
/// the API down (`true`) or brings it back.
pub(super) fn start(
    runtime: &tokio::runtime::Runtime,
    inner: SocketAddr,
    state: Arc<ServerState>,
) -> (SocketAddr, watch::Sender<bool>) {
    let front = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = front.local_addr().unwrap();
    let (down, down_rx) = watch::channel(false);
    runtime.spawn(async move {
        while let Ok((client, _)) = front.accept().await {
            tokio::spawn(pass(client, inner, down_rx.clone(), Arc::clone(&state)));
        }
    });
    (addr, down)
}

/// One connection: reset at once while down, else copied both ways until either side closes or
/// the API goes down.
async fn pass(
    mut client: TcpStream,
    inner: SocketAddr,
    mut down: watch::Receiver<bool>,
    state: Arc<ServerState>,
) {
    let reset = |c: TcpStream| {
        state.connection_resets.fetch_add(1, Ordering::SeqCst);
        let _ = c.set_zero_linger();
    };
    if *down.borrow() {
        return reset(client);
    }
    let Ok(mut server) = TcpStream::connect(inner).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = down.wait_for(|d| *d) => reset(client),
    }
}
