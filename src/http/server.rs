//! Serving a router from a program without an async runtime (the CLI): a
//! small current-thread tokio runtime on a thread of its own, stopped
//! gracefully when the [`BackgroundServer`] is dropped.

use super::HttpError;
use axum::Router;
use std::net::SocketAddr;
use std::thread::JoinHandle;

/// A router served on a thread of its own; dropping it stops the server
/// (requests in progress are answered first) and joins the thread.
pub struct BackgroundServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundServer {
    /// Binds `addr` (`127.0.0.1:0` picks a free port) on the calling
    /// thread, so a bad or busy address is an error here, then serves
    /// `router` on a new thread.
    pub fn start(addr: &str, router: Router) -> Result<Self, HttpError> {
        let bind = |source| HttpError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(HttpError::Start)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("floe-http".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(error = %e, "HTTP endpoint not started");
                            return;
                        }
                    };
                    let shutdown = async {
                        // A dropped sender stops the server as well.
                        let _ = stopped.await;
                    };
                    if let Err(e) = axum::serve(listener, router)
                        .with_graceful_shutdown(shutdown)
                        .await
                    {
                        tracing::warn!(error = %e, "HTTP endpoint stopped");
                    }
                })
            })
            .map_err(HttpError::Start)?;
        Ok(BackgroundServer {
            addr: local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address served (with the port chosen when `0` was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for BackgroundServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
