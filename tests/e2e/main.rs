//! End-to-end tests of the whole service: each test starts its own
//! `redis-server` on a free port and real `runbox-api` and `runbox-worker`
//! processes, and talks to them over real HTTP.
//!
//! The binaries are taken from `target/debug` (or `RUNBOX_BIN_DIR`);
//! `scripts/test` builds them first.

mod api;
mod backpressure;
mod batches;
mod callbacks;
mod cancel;
mod cli;
mod cluster;
mod egress;
mod events;
mod fairness;
mod faults;
mod job_made;
mod longpoll;
mod mcp;
mod openapi;
mod quotas;
mod recovery;
mod redis_setups;
mod roundtrip;
mod session_capacity;
mod session_files;
mod sessions;
mod shutdown;
mod signing;
mod tenancy;
mod util;
mod verdicts;
mod verify;
mod warm;
