//! The hosts each token's jobs may reach (`RUNBOX_EGRESS`) and the names of
//! its secrets (`RUNBOX_EGRESS_SECRETS_FILE`): put into every job the
//! token queues, shown to the token by `/v1/runtimes` and MCP. The worker's
//! proxy enforces them (see `worker/src/egress`); the api never holds a
//! connection for a job, and keeps no secret's value.

use std::collections::BTreeMap;

use runbox_common::{ConfigError, Egress, EgressGrant, Rule, Secret, SecretGrant, parse_rules, parse_secrets};

use crate::tokens::Tokens;

/// Every token's rules, and its secrets' names and hosts.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    rules: BTreeMap<String, Vec<Rule>>,
    /// By token: each secret's name and the rule it is bound to.
    secrets: BTreeMap<String, Vec<(String, Rule)>>,
}

impl EgressConfig {
    /// Reads the rules and, if a path is given, the secrets file, and checks
    /// both against the configured tokens: each name is a token's, each
    /// secret is bound to a destination its token's rules allow.
    pub fn parse(rules: &str, secrets_file: Option<&str>, tokens: &Tokens) -> Result<EgressConfig, ConfigError> {
        let invalid = |name: &'static str, value: &str, reason: String| ConfigError::Invalid {
            name,
            value: value.to_owned(),
            reason,
        };
        let rules = parse_rules(rules).map_err(|reason| invalid("RUNBOX_EGRESS", rules, reason))?;
        if let Some(name) = rules.keys().find(|name| !tokens.names().any(|token| token == name.as_str())) {
            return Err(invalid("RUNBOX_EGRESS", name, "names no token of RUNBOX_API_TOKENS".into()));
        }
        let mut secrets = BTreeMap::new();
        if let Some(path) = secrets_file.filter(|path| !path.is_empty()) {
            let read = std::fs::read_to_string(path)
                .map_err(|e| invalid("RUNBOX_EGRESS_SECRETS_FILE", path, e.to_string()))?;
            let parsed = parse_secrets(&read).map_err(|reason| invalid("RUNBOX_EGRESS_SECRETS_FILE", path, reason))?;
            for (token, named) in parsed {
                let Some(allowed) = rules.get(&token) else {
                    let reason = format!("token {token:?} has secrets but no rule in RUNBOX_EGRESS");
                    return Err(invalid("RUNBOX_EGRESS_SECRETS_FILE", path, reason));
                };
                let mut grants = Vec::new();
                for (name, secret) in named {
                    if !allowed.iter().any(|rule| rule.covers(&secret.host)) {
                        let reason = format!(
                            "{token}'s secret {name} is bound to {}, which its rules do not allow",
                            secret.host
                        );
                        return Err(invalid("RUNBOX_EGRESS_SECRETS_FILE", path, reason));
                    }
                    grants.push((name, secret.host));
                }
                secrets.insert(token, grants);
            }
        }
        Ok(EgressConfig { rules, secrets })
    }

    /// What a job of `token` may reach, or None: nothing.
    pub fn of(&self, token: &str) -> Option<Egress> {
        let rules = self.rules.get(token)?;
        Some(Egress { token: token.to_owned(), rules: rules.clone() })
    }

    /// What `token` may reach and the placeholders of its secrets, as the
    /// token itself may see them; None: nothing.
    pub fn grant(&self, token: &str) -> Option<EgressGrant> {
        let rules = self.rules.get(token)?;
        let secrets = self.secrets.get(token).map(Vec::as_slice).unwrap_or_default();
        Some(EgressGrant {
            rules: rules.iter().map(ToString::to_string).collect(),
            secrets: secrets
                .iter()
                .map(|(name, host)| SecretGrant {
                    name: name.clone(),
                    host: host.to_string(),
                    placeholder: Secret::placeholder(name),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::parse("agent:aaaaaaaaaaaaaaaaaaaa,eval:bbbbbbbbbbbbbbbbbbbb").expect("tokens")
    }

    fn secrets_file(json: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), json).expect("write");
        file
    }

    #[test]
    fn a_token_gets_its_own_rules_and_secrets() {
        let file = secrets_file(r#"{"agent": {"KEY": {"host": "api.example.com", "value": "value-0123456789"}}}"#);
        let path = file.path().to_str().expect("utf-8");
        let config = EgressConfig::parse("agent=*.example.com", Some(path), &tokens()).expect("parses");
        let egress = config.of("agent").expect("agent has rules");
        assert!(egress.allows("api.example.com", 443) && !egress.allows("example.org", 443));
        assert_eq!(config.of("eval"), None);
        let grant = config.grant("agent").expect("grant");
        assert_eq!(grant.rules, ["*.example.com"]);
        assert_eq!(grant.secrets[0].placeholder, "{{secret:KEY}}");
        assert!(!format!("{grant:?}{config:?}").contains("value-0123456789"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        let named = |result: Result<EgressConfig, ConfigError>| match result {
            Err(ConfigError::Invalid { name, .. }) => name,
            other => panic!("accepted: {other:?}"),
        };
        assert_eq!(named(EgressConfig::parse("nobody=a.com", None, &tokens())), "RUNBOX_EGRESS");
        assert_eq!(named(EgressConfig::parse("agent=a..com", None, &tokens())), "RUNBOX_EGRESS");
        let other_host = secrets_file(r#"{"agent": {"KEY": {"host": "b.com", "value": "value-0123456789"}}}"#);
        let path = other_host.path().to_str().expect("utf-8");
        assert_eq!(named(EgressConfig::parse("agent=a.com", Some(path), &tokens())), "RUNBOX_EGRESS_SECRETS_FILE");
        assert_eq!(named(EgressConfig::parse("eval=b.com", Some(path), &tokens())), "RUNBOX_EGRESS_SECRETS_FILE");
        assert_eq!(named(EgressConfig::parse("", Some("/no/such/file"), &tokens())), "RUNBOX_EGRESS_SECRETS_FILE");
    }
}
