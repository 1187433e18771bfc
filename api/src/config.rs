use std::time::Duration;

use runbox_common::{ConfigError, SharedConfig, Timeouts, env_or, env_required};

use crate::callback_urls::CallbackConfig;
use crate::egress::EgressConfig;
use crate::quotas::Quotas;
use crate::tokens::Tokens;

/// The api's settings, read from the environment once at start-up.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `RUNBOX_API_TOKENS`: `name:token` pairs, comma-separated. Required.
    pub tokens: Tokens,
    /// Redis, the queue, the signing key and the result TTL.
    pub shared: SharedConfig,
    /// `PORT`: where the api listens.
    pub port: u16,
    pub limits: ApiLimits,
    /// `RUNBOX_CALLBACK_SECRETS` and `RUNBOX_CALLBACK_ALLOW`.
    pub callbacks: CallbackConfig,
    /// `RUNBOX_QUOTAS`.
    pub quotas: Quotas,
    /// Idle timeouts, lifetime and per-token cap of sessions.
    pub sessions: SessionLimits,
    /// `RUNBOX_MCP_ALLOWED_HOSTS`.
    pub mcp_hosts: McpHosts,
    /// `RUNBOX_EGRESS` and `RUNBOX_EGRESS_SECRETS_FILE`.
    pub egress: EgressConfig,
}

/// The bounds the api puts on sessions. A checkpoint's TTL and size cap
/// are the workers' (they store checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// `RUNBOX_SESSION_IDLE_S`: the idle timeout of a session that names none.
    pub default_idle: Duration,
    /// `RUNBOX_SESSION_MAX_IDLE_S`: the longest idle timeout one may ask for.
    pub max_idle: Duration,
    /// `RUNBOX_SESSION_LIFETIME_S`: every session ends this long after it began.
    pub lifetime: Duration,
    /// `RUNBOX_SESSIONS_PER_TOKEN`: live sessions one token may hold, at
    /// most (see [`SessionLimits::fair_share`]); 0 sets no cap of its own.
    pub per_token: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            default_idle: Duration::from_secs(600),
            max_idle: Duration::from_secs(3600),
            lifetime: Duration::from_secs(6 * 3600),
            per_token: 4,
        }
    }
}

impl SessionLimits {
    /// The live sessions one token may hold in a fleet of `capacity`
    /// session places: half of them (at least one), and at most
    /// `RUNBOX_SESSIONS_PER_TOKEN`. Half, so that whatever one token holds,
    /// as many places stay for the others; a fixed fraction rather than
    /// one that shrinks with the tokens holding sessions, so that a token's
    /// cap does not change under it when another token arrives.
    pub fn fair_share(&self, capacity: u64) -> u64 {
        let half = (capacity / 2).max(1);
        if self.per_token == 0 { half } else { half.min(self.per_token) }
    }

    pub fn from_env() -> Result<SessionLimits, ConfigError> {
        let d = SessionLimits::default();
        let limits = SessionLimits {
            default_idle: Duration::from_secs(env_or("RUNBOX_SESSION_IDLE_S", d.default_idle.as_secs())?),
            max_idle: Duration::from_secs(env_or("RUNBOX_SESSION_MAX_IDLE_S", d.max_idle.as_secs())?),
            lifetime: Duration::from_secs(env_or("RUNBOX_SESSION_LIFETIME_S", d.lifetime.as_secs())?),
            per_token: env_or("RUNBOX_SESSIONS_PER_TOKEN", d.per_token)?,
        };
        if limits.default_idle > limits.max_idle || limits.default_idle.is_zero() {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_SESSION_IDLE_S",
                value: limits.default_idle.as_secs().to_string(),
                reason: "must be at least 1 and at most RUNBOX_SESSION_MAX_IDLE_S".into(),
            });
        }
        Ok(limits)
    }
}

/// The `Host` values `/mcp` answers. A server reachable from a browser's
/// machine could be reached through DNS rebinding by any web page that
/// names its own domain; checking `Host` refuses those requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpHosts {
    /// Only these host names, each optionally with `:port`.
    Only(Vec<String>),
    /// Any `Host`: `RUNBOX_MCP_ALLOWED_HOSTS=*`.
    Any,
}

impl McpHosts {
    /// Loopback only, so a local stack works and nothing else does until
    /// a deployment names its host.
    pub const DEFAULT: &str = "localhost,127.0.0.1,::1";

    /// Parses a comma-separated list of `host` or `host:port`, or `*`.
    pub fn parse(text: &str) -> Result<McpHosts, ConfigError> {
        let invalid =
            |reason: String| ConfigError::Invalid { name: "RUNBOX_MCP_ALLOWED_HOSTS", value: text.to_owned(), reason };
        let hosts: Vec<String> = text.split(',').map(str::trim).filter(|h| !h.is_empty()).map(str::to_owned).collect();
        if hosts == ["*"] {
            return Ok(McpHosts::Any);
        }
        if hosts.is_empty() {
            return Err(invalid("name at least one host, or * for any".into()));
        }
        if let Some(bad) = hosts.iter().find(|h| h.contains(['*', '/', ' ', '@'])) {
            return Err(invalid(format!("{bad:?} is not a host name or host:port (use * alone to allow any host)")));
        }
        Ok(McpHosts::Only(hosts))
    }
}

/// What the api accepts.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// `RUNBOX_MAX_QUEUE`: queued plus running jobs before 503 `queue_full`.
    pub max_queue: u64,
    /// What a job without `timeout_ms` gets, and the most it may ask for.
    pub timeouts: Timeouts,
    /// `RUNBOX_MAX_CODE_BYTES`.
    pub max_code_bytes: usize,
    /// `RUNBOX_MAX_STDIN_BYTES`.
    pub max_stdin_bytes: usize,
    /// `RUNBOX_MAX_FILES_BYTES`: the decoded size of a job's `files`, in all.
    pub max_files_bytes: usize,
    /// `RUNBOX_MAX_BATCH`: jobs in one batch.
    pub max_batch: usize,
    /// `RUNBOX_MAX_BATCH_BYTES`: the request body limit of a batch.
    pub max_batch_bytes: usize,
}

/// The longest `?wait=` a request may ask for.
pub const MAX_WAIT_S: u64 = 60;

impl ApiLimits {
    /// The request body limit: room for the largest code, stdin and files
    /// even if JSON escaping or base64 doubles them, plus the other fields.
    pub fn max_body_bytes(&self) -> usize {
        2 * (self.max_code_bytes + self.max_stdin_bytes + self.max_files_bytes) + 64 * 1024
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            max_queue: 1000,
            timeouts: Timeouts::default(),
            max_code_bytes: 256 * 1024,
            max_stdin_bytes: 1024 * 1024,
            max_files_bytes: 1024 * 1024,
            max_batch: 1000,
            max_batch_bytes: 32 * 1024 * 1024,
        }
    }
}

impl ApiConfig {
    pub fn from_env() -> Result<ApiConfig, ConfigError> {
        let tokens = env_required(
            "RUNBOX_API_TOKENS",
            "comma-separated name:token pairs, e.g. `agent:$(openssl rand -hex 24)`",
        )?;
        let d = ApiLimits::default();
        let limits = ApiLimits {
            max_queue: env_or("RUNBOX_MAX_QUEUE", d.max_queue)?,
            timeouts: Timeouts::from_env()?,
            max_code_bytes: env_or("RUNBOX_MAX_CODE_BYTES", d.max_code_bytes)?,
            max_stdin_bytes: env_or("RUNBOX_MAX_STDIN_BYTES", d.max_stdin_bytes)?,
            max_files_bytes: env_or("RUNBOX_MAX_FILES_BYTES", d.max_files_bytes)?,
            max_batch: env_or("RUNBOX_MAX_BATCH", d.max_batch)?,
            max_batch_bytes: env_or("RUNBOX_MAX_BATCH_BYTES", d.max_batch_bytes)?,
        };
        let tokens = Tokens::parse(&tokens)?;
        let shared = SharedConfig::from_env()?;
        if tokens.contains(shared.signing_key.as_bytes()) {
            return Err(ConfigError::Invalid {
                name: "RUNBOX_SIGNING_KEY",
                value: "(hidden)".into(),
                reason: "equals one of RUNBOX_API_TOKENS; a caller with that token could sign jobs itself".into(),
            });
        }
        let egress = EgressConfig::parse(
            &env_or("RUNBOX_EGRESS", String::new())?,
            std::env::var("RUNBOX_EGRESS_SECRETS_FILE").ok().as_deref(),
            &tokens,
        )?;
        Ok(ApiConfig {
            tokens,
            egress,
            shared,
            port: env_or("PORT", 8080)?,
            limits,
            callbacks: CallbackConfig::parse(
                &env_or("RUNBOX_CALLBACK_SECRETS", String::new())?,
                &env_or("RUNBOX_CALLBACK_ALLOW", String::new())?,
            )?,
            quotas: Quotas::parse(&env_or("RUNBOX_QUOTAS", String::new())?)?,
            sessions: SessionLimits::from_env()?,
            mcp_hosts: McpHosts::parse(&env_or("RUNBOX_MCP_ALLOWED_HOSTS", McpHosts::DEFAULT.to_owned())?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_fair_share_is_half_the_fleets_places_within_its_cap() {
        let limits = SessionLimits::default();
        assert_eq!(limits.per_token, 4);
        let shares: Vec<u64> = [0, 1, 2, 3, 4, 7, 8, 100].map(|c| limits.fair_share(c)).to_vec();
        assert_eq!(shares, [1, 1, 1, 1, 2, 3, 4, 4]);
        let uncapped = SessionLimits { per_token: 0, ..limits };
        assert_eq!(uncapped.fair_share(100), 50);
    }

    #[test]
    fn mcp_hosts_parse() {
        assert_eq!(
            McpHosts::parse(McpHosts::DEFAULT).expect("default"),
            McpHosts::Only(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])
        );
        assert_eq!(
            McpHosts::parse(" runbox.example.com , api.internal:8080 ").expect("list"),
            McpHosts::Only(vec!["runbox.example.com".into(), "api.internal:8080".into()])
        );
        assert_eq!(McpHosts::parse("*").expect("any"), McpHosts::Any);
        for bad in ["", " , ", "*.example.com", "a,*", "https://runbox.example.com", "user@host"] {
            assert!(McpHosts::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
