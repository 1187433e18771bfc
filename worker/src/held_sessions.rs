//! The sessions this worker holds: for each, where its tasks go and how to
//! end it; and the spare session children booted ahead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use runbox_common::{Claimed, JobSpec, Language};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::sandbox::{BootedSession, Restore, Sandbox, SessionChild, SessionError};

/// The sessions this worker holds: where to send each one's tasks, and how
/// to end it; and for each language it has opened a session in, one spare
/// child booted ahead, so the next session waits only for opening.
pub(crate) struct Sessions {
    live: Mutex<HashMap<String, Held>>,
    spares: Arc<Mutex<HashMap<Language, BootedSession>>>,
    /// Whether to boot spares at all: not when the warm pool is off.
    keep_spares: bool,
    sandbox: Arc<Sandbox>,
}

/// A session held here: where its tasks go, and how to end it.
pub(crate) struct Held {
    pub(crate) tasks: mpsc::UnboundedSender<(Claimed, JobSpec)>,
    pub(crate) end: CancellationToken,
}

impl Sessions {
    pub(crate) fn new(sandbox: Sandbox, keep_spares: bool) -> Sessions {
        Sessions { live: Mutex::default(), spares: Arc::default(), keep_spares, sandbox: Arc::new(sandbox) }
    }

    /// The sessions held here, by id.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A child for a new session of `language`, opened from `restore`, with
    /// a `fetch` through the egress proxy if `egress`: the spare if one is
    /// ready, else one booted now. Either way a new spare is booted behind
    /// it, unless spares are off.
    pub(crate) async fn child(
        &self,
        language: Language,
        restore: Restore,
        egress: bool,
    ) -> Result<SessionChild, SessionError> {
        let spare = self.spares.lock().unwrap_or_else(|p| p.into_inner()).remove(&language);
        let booted = match spare.and_then(|mut spare| spare.is_alive().then_some(spare)) {
            Some(spare) => spare,
            None => BootedSession::boot(&self.sandbox, language).await?,
        };
        if !self.keep_spares {
            return booted.open(restore, egress).await;
        }
        let (spares, sandbox) = (self.spares.clone(), self.sandbox.clone());
        tokio::spawn(async move {
            match BootedSession::boot(&sandbox, language).await {
                Ok(spare) => {
                    // Dropped, and so killed, when one is there already.
                    spares.lock().unwrap_or_else(|p| p.into_inner()).entry(language).or_insert(spare);
                }
                Err(e) => warn!(error = %e, %language, "could not boot a spare session child"),
            }
        });
        booted.open(restore, egress).await
    }

    /// How many sessions this worker holds.
    pub(crate) fn count(&self) -> usize {
        self.lock().len()
    }
}
