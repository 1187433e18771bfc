//! Stopping: the signals that ask a binary to shut down.

/// Resolves on SIGTERM or SIGINT. The handlers are installed by the call,
/// not at the first poll: a signal that comes once the service says it is
/// ready, but before it waits for one, must not kill it outright. Call it
/// inside the tokio runtime, before the service starts.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    async fn recv(signal: Option<Signal>) {
        match signal {
            Some(mut signal) => {
                signal.recv().await;
            }
            // Not handled, so it keeps its default action: it ends the process.
            None => std::future::pending().await,
        }
    }
    let term = signal(SignalKind::terminate()).ok();
    let int = signal(SignalKind::interrupt()).ok();
    async move {
        tokio::select! {
            () = recv(term) => {}
            () = recv(int) => {}
        }
    }
}
