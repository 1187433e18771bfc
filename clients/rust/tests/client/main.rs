//! The Rust client against a real stack: each test starts its own
//! `redis-server`, `runbox-api` and `runbox-worker` (through
//! `runbox_tests`, the spawners the end-to-end tests use) and drives them
//! only through `runbox_client`.
//!
//! The binaries are taken from `target/debug` (or `RUNBOX_BIN_DIR`): run
//! `cargo build --workspace` first (`scripts/test` does).

mod batches;
mod errors;
mod files;
mod jobs;
mod sessions;
mod util;
