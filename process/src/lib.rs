//! What every runbox binary does the same way when it starts, logs and
//! stops. None of it is part of the contract between the api and the
//! workers (that is `runbox-common`); it is how a runbox process behaves.
//!
//! # Layout
//!
//! - `logging`: logging to stderr without ever blocking or panicking the
//!   logger, and panics logged the same way ([`init_tracing`], [`Stderr`]).
//! - `signals`: the signals that stop a binary ([`shutdown_signal`]).
//! - `health`: a container's health check, made by the binary itself
//!   ([`check_health`]).
//! - `metrics`: the Prometheus registry a binary exports its metrics
//!   through ([`MetricsRegistry`]).

mod health;
mod logging;
mod metrics;
mod signals;

pub use health::check_health;
pub use logging::{Stderr, init_tracing};
pub use metrics::MetricsRegistry;
pub use signals::shutdown_signal;
