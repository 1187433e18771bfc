//! Logging to stderr, and panics logged the same way.
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
