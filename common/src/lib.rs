//! The contract between the runbox api and its workers.
//!
//! Both sides must agree on everything in this crate, and nothing else lives
//! here.
//!
//! # Layout
//!
//! - `config`: reading typed configuration from the environment.
//! - `job`: what a client asks to run ([`Language`], [`JobSpec`]) and what
//!   comes back ([`Status`], [`Outcome`]).

mod config;
mod job;

pub use config::{ConfigError, env_or, env_required};
pub use job::{JobSpec, Language, Outcome, Status};
