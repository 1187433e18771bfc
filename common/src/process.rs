//! What both runbox binaries do the same way when they start and stop.
//!
//! Nothing a binary writes to stderr may block it or panic it: stderr is
//! often a pipe, and its reader can be gone (the write fails with EPIPE,
//! and tracing-subscriber's report of that failure, an `eprintln!`, panics
//! the task that logged) or stuck (the write blocks the thread for good).
//! Either way SIGTERM used to be lost: the shutdown log line took down or
//! froze the task that was to stop the service. So every line goes through
//! a bounded queue that a thread of its own drains into stderr; when the
//! queue is full, lines are dropped rather than waited for.

use std::fmt::Display;
use std::io::Write;
use std::panic::PanicHookInfo;

use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};

/// The process's stderr, written by a thread of its own. Dropping it
/// flushes what is queued, waiting about a second at most.
pub struct Stderr {
    writer: NonBlocking,
    _flush: WorkerGuard,
}

impl Stderr {
    /// Writes `line` and a newline, after every line logged before it.
    /// Never blocks and never fails.
    pub fn line(&self, line: impl Display) {
        let mut writer = self.writer.clone();
        let _ = writer.write_all(format!("{line}\n").as_bytes());
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as JSON lines
/// when `RUST_LOG_FORMAT=json`, without ever blocking or panicking the
/// logger (see the module doc). Panic messages are logged the same way.
/// Keep the returned [`Stderr`] until the process exits.
pub fn init_tracing() -> Stderr {
    let (writer, flush) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("runbox-stderr")
        .finish(std::io::stderr());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer.clone())
        // The queue never fails a write; should one fail anyway, reporting
        // it through `eprintln!` would panic.
        .log_internal_errors(false);
    if std::env::var("RUST_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().init();
    } else {
        builder.init();
    }
    // The default hook writes to stderr directly, and would block there.
    std::panic::set_hook(Box::new(log_panic));
    Stderr { writer, _flush: flush }
}

fn log_panic(info: &PanicHookInfo<'_>) {
    let thread = std::thread::current();
    let thread = thread.name().unwrap_or("unnamed");
    let backtrace = std::backtrace::Backtrace::capture();
    if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
        tracing::error!(thread, panic = %info, %backtrace, "panicked");
    } else {
        tracing::error!(thread, panic = %info, "panicked");
    }
}

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

/// A container's health check: asks this host's `port` for `path` over
/// HTTP/1.0 and succeeds on a 200. Plain std, so an image needs no curl.
pub fn check_health(port: u16, path: &str) -> Result<(), String> {
    use std::io::Read;
    use std::net::{Ipv4Addr, SocketAddr, TcpStream};
    use std::time::Duration;
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let timeout = Duration::from_secs(5);
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(|e| format!("{address}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").map_err(|e| format!("{address}: {e}"))?;
    let mut head = [0u8; 64];
    let read = stream.read(&mut head).map_err(|e| format!("{address}: {e}"))?;
    let status_line = String::from_utf8_lossy(&head[..read]);
    let status = status_line.split_whitespace().nth(1).unwrap_or("none");
    if status == "200" { Ok(()) } else { Err(format!("GET {path} on {address} answered {status}")) }
}
