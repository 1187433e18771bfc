//! Long-poll and live output without a Redis connection per waiter.
//!
//! Each api process holds one pub/sub subscription to the done channel and
//! the output channel, and fans each id out to the in-process waiters for
//! it: finished jobs to `done`, jobs whose live output grew to `output`. A waiter
//! registers first and reads the job second, so a result that lands in
//! between is never missed; after a lost subscription every waiter is woken
//! to read again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use runbox_common::{Queue, keys};
use tokio::sync::Notify;

#[derive(Default)]
pub struct Waiters {
    by_id: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
}

/// One waiter's interest in one job; dropping it unregisters.
pub struct Registration {
    waiters: Arc<Waiters>,
    id: String,
    pub notify: Arc<Notify>,
}

impl Waiters {
    pub fn register(self: &Arc<Self>, id: &str) -> Registration {
        let mut map = self.by_id.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(id.to_owned()).or_insert_with(|| (Arc::new(Notify::new()), 0));
        entry.1 += 1;
        Registration { waiters: self.clone(), id: id.to_owned(), notify: entry.0.clone() }
    }

    fn notify(&self, id: &str) {
        if let Some((notify, _)) = self.by_id.lock().unwrap_or_else(|p| p.into_inner()).get(id) {
            notify.notify_waiters();
        }
    }

    fn notify_all(&self) {
        for (notify, _) in self.by_id.lock().unwrap_or_else(|p| p.into_inner()).values() {
            notify.notify_waiters();
        }
    }

    /// How many requests are waiting.
    pub fn len(&self) -> usize {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner()).values().map(|(_, n)| n).sum()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut map = self.waiters.by_id.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = map.get_mut(&self.id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                map.remove(&self.id);
            }
        }
    }
}

/// Keeps the subscription alive for the life of the process.
pub async fn listen(queue: Queue, done: Arc<Waiters>, output: Arc<Waiters>) {
    let mut delay = Duration::from_millis(100);
    let wake_all = || {
        done.notify_all();
        output.notify_all();
    };
    loop {
        match queue.subscribe(&[keys::DONE_CHANNEL, keys::OUTPUT_CHANNEL]).await {
            Ok(mut pubsub) => {
                delay = Duration::from_millis(100);
                tracing::info!("subscribed to job completions and live output");
                // Whatever happened while we were not subscribed.
                wake_all();
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let Ok(id) = message.get_payload::<String>() else { continue };
                    match message.get_channel_name() {
                        keys::OUTPUT_CHANNEL => output.notify(&id),
                        _ => done.notify(&id),
                    }
                }
                tracing::warn!("lost the completion subscription; reconnecting");
                wake_all();
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?delay, "could not subscribe to job completions");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}
