//! The sandbox probe suite: every escape we know of, tried against a real
//! Deno child, each asserting the exact way it must fail.
//!
//! Probes are permanent. When a new escape is found, its probe goes here.
//! One module per topic; `util` holds the shared sandbox and helpers.

mod descriptors;
mod disk;
mod filesystem;
mod floods;
mod harness;
mod homes;
mod host;
mod imports;
mod integrity;
mod job_made;
mod measures;
mod network;
mod packages;
mod processes;
mod realms;
mod results;
mod runaway;
mod shared_lane;
mod state;
mod util;
