//! The egress proxy: the only way a job's requests leave the worker's host,
//! and only to the hosts its token's rules name.
//!
//! A child cannot open a socket: every permission is denied, the network
//! one included. Each child gets one Unix socket in its private directory
//! ([`Link`]), which its harness connects to while it boots and then
//! revokes the permission for, so nothing in the child can connect again;
//! a Unix socket is a file, so it crosses a network namespace. The harness
//! gives a job whose token has rules a `fetch` that sends each request
//! over it. Here, outside the child, the proxy ([`fetch`]):
//!
//! - checks the URL's host and port against the job's rules (carried in
//!   its signed spec);
//! - resolves the name itself and refuses it if any address it resolves
//!   to is not public ([`runbox_common::addresses`], the callbacks' check);
//!   only an IP literal written in a rule reaches a private address;
//! - connects only to the addresses it checked (reqwest's resolver is this
//!   check, so nothing resolves the name a second time);
//! - follows a redirect only if its target is in the rules too;
//! - swaps each secret's placeholder for its value in the request's
//!   headers, and only for the secret's own host; never in the URL or body;
//! - caps each job's requests, concurrent requests and bytes each way.
//!
//! The child never speaks TLS: the proxy is the TLS client, and verifies
//! upstreams against the system's roots (plus `RUNBOX_EGRESS_CA_FILE`'s,
//! for an internal mirror), so no certificate authority of runbox's exists.

mod fetch;
mod link;

use std::collections::BTreeMap;
use std::sync::Arc;

use runbox_common::{ConfigError, Secrets};

use fetch::TokenSecrets;
pub use link::Link;

/// What one job may use of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// `RUNBOX_EGRESS_MAX_REQUESTS`: requests per job, redirects included.
    pub max_requests: u32,
    /// `RUNBOX_EGRESS_MAX_CONNECTIONS`: requests of one job in flight at once.
    pub max_connections: u32,
    /// `RUNBOX_EGRESS_MAX_BYTES`: bytes per job each way (sent, received).
    pub max_bytes: u64,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits { max_requests: 100, max_connections: 6, max_bytes: 32 * 1024 * 1024 }
    }
}

/// The worker's egress settings.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    pub limits: EgressLimits,
    /// `RUNBOX_EGRESS_SECRETS_FILE`, read.
    pub secrets: Secrets,
    /// `RUNBOX_EGRESS_CA_FILE`: PEM certificates trusted beside the system's roots.
    pub extra_roots: Vec<Vec<u8>>,
}

impl EgressConfig {
    pub fn from_env() -> Result<EgressConfig, ConfigError> {
        let d = EgressLimits::default();
        let limits = EgressLimits {
            max_requests: runbox_common::env_or("RUNBOX_EGRESS_MAX_REQUESTS", d.max_requests)?,
            max_connections: runbox_common::env_or("RUNBOX_EGRESS_MAX_CONNECTIONS", d.max_connections)?,
            max_bytes: runbox_common::env_or("RUNBOX_EGRESS_MAX_BYTES", d.max_bytes)?,
        };
        let invalid = |name: &'static str, value: &str, reason: String| ConfigError::Invalid {
            name,
            value: value.to_owned(),
            reason,
        };
        let secrets = match std::env::var("RUNBOX_EGRESS_SECRETS_FILE").ok().filter(|p| !p.is_empty()) {
            None => Secrets::new(),
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| invalid("RUNBOX_EGRESS_SECRETS_FILE", &path, e.to_string()))?;
                runbox_common::parse_secrets(&text)
                    .map_err(|reason| invalid("RUNBOX_EGRESS_SECRETS_FILE", &path, reason))?
            }
        };
        let extra_roots = match std::env::var("RUNBOX_EGRESS_CA_FILE").ok().filter(|p| !p.is_empty()) {
            None => Vec::new(),
            Some(path) => {
                let pem = std::fs::read(&path).map_err(|e| invalid("RUNBOX_EGRESS_CA_FILE", &path, e.to_string()))?;
                reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| invalid("RUNBOX_EGRESS_CA_FILE", &path, e.to_string()))?;
                vec![pem]
            }
        };
        Ok(EgressConfig { limits, secrets, extra_roots })
    }
}

/// The proxy every child's [`Link`] sends its requests through: one HTTP
/// client (its connection pool shared by every job), the secrets, the caps.
pub struct EgressProxy {
    client: reqwest::Client,
    /// Each token's secrets, by token name.
    secrets: BTreeMap<String, Arc<TokenSecrets>>,
    limits: EgressLimits,
}

impl std::fmt::Debug for EgressProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressProxy").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl EgressProxy {
    pub fn new(config: &EgressConfig) -> Result<Arc<EgressProxy>, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(fetch::PublicOnly))
            .connect_timeout(std::time::Duration::from_secs(10))
            .pool_idle_timeout(std::time::Duration::from_secs(30))
            .tls_built_in_root_certs(true);
        for pem in &config.extra_roots {
            for certificate in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let secrets =
            config.secrets.iter().map(|(token, named)| (token.clone(), Arc::new(TokenSecrets::new(named)))).collect();
        Ok(Arc::new(EgressProxy { client: builder.build()?, secrets, limits: config.limits }))
    }
}
