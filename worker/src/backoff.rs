//! How long to wait before trying Redis again: every loop of the worker
//! that retries a failed Redis call waits by one of these.

use std::time::Duration;

/// Exponential backoff from 100 ms up to 5 s.
pub(crate) struct Backoff {
    next: Duration,
    failures: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    pub(crate) fn new() -> Backoff {
        Backoff { next: Backoff::FIRST, failures: 0 }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(Backoff::MAX);
        self.failures += 1;
        delay
    }

    pub(crate) fn failed(&self) -> bool {
        self.failures > 0
    }

    pub(crate) fn reset(&mut self) {
        *self = Backoff::new();
    }
}
