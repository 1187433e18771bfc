//! Opt-in egress: the hosts a token's jobs may reach, and the secrets
//! runbox adds to their requests on the way out.
//!
//! The api reads the rules (`RUNBOX_EGRESS`) and puts a token's into each
//! job it signs ([`Egress`]), so a worker trusts them as it trusts the
//! job. The secrets' values never travel with a job: both processes read
//! the operator's file (`RUNBOX_EGRESS_SECRETS_FILE`), the api for their
//! names and hosts, the worker's proxy for their values. A job only ever
//! sees a secret's [`placeholder`](Secret::placeholder).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a job may reach, set by the api from its token's rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// The token's name, which picks its secrets in the worker's file.
    pub token: String,
    /// Never empty: a token with no rule gets no `Egress` at all.
    pub rules: Vec<Rule>,
}

impl Egress {
    /// Whether a request to `host` (a URL's host, an IPv6 address without
    /// brackets) on `port` is allowed by one of the rules.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.rules.iter().any(|rule| rule.allows(host, port))
    }
}

/// One allowed destination: `host[:port]`, `*.suffix[:port]`, or an IP
/// literal (IPv6 in brackets when a port follows). Without a port, the
/// web's two: 80 and 443.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub host: HostPattern,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// One name, lowercase, without a trailing dot.
    Name(String),
    /// Every name under `suffix` (`*.example.com`: `a.example.com`,
    /// `a.b.example.com`, not `example.com` itself).
    Suffix(String),
    /// An address written in the rule: the only way to reach a private one.
    Ip(IpAddr),
}

impl Rule {
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(allowed) => allowed == port,
            None => port == 80 || port == 443,
        };
        port_ok
            && match (&self.host, host.parse::<IpAddr>()) {
                (HostPattern::Ip(allowed), Ok(ip)) => *allowed == ip,
                (HostPattern::Ip(_), Err(_)) | (_, Ok(_)) => false,
                (HostPattern::Name(name), Err(_)) => *name == normal_name(host),
                (HostPattern::Suffix(suffix), Err(_)) => {
                    let host = normal_name(host);
                    host.len() > suffix.len() + 1
                        && host.ends_with(suffix.as_str())
                        && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
                }
            }
    }

    /// Whether every destination `other` allows, this rule allows too.
    pub fn covers(&self, other: &Rule) -> bool {
        let port_ok = match (self.port, other.port) {
            (None, None) => true,
            (None, Some(port)) => port == 80 || port == 443,
            (Some(_), None) => false,
            (Some(a), Some(b)) => a == b,
        };
        port_ok
            && match (&self.host, &other.host) {
                (HostPattern::Suffix(suffix), HostPattern::Suffix(inner)) => {
                    inner == suffix || inner.ends_with(&format!(".{suffix}"))
                }
                (_, HostPattern::Suffix(_)) => false,
                (_, HostPattern::Name(name)) => self.allows(name, other.port.unwrap_or(443)),
                (_, HostPattern::Ip(ip)) => self.allows(&ip.to_string(), other.port.unwrap_or(443)),
            }
    }
}

fn normal_name(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        let (host, port) = split_port(text)?;
        if let Some(inner) = host.strip_prefix('[') {
            return match inner.strip_suffix(']').map(str::parse::<IpAddr>) {
                Some(Ok(ip @ IpAddr::V6(_))) => Ok(Rule { host: HostPattern::Ip(ip), port }),
                _ => Err(format!("{text:?}: only an IPv6 address goes in brackets")),
            };
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Rule { host: HostPattern::Ip(ip), port });
        }
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let name = normal_name(name);
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(format!("{text:?} is not a host name, `*.suffix` or IP address"));
        }
        if wildcard && !name.contains('.') {
            return Err(format!("{text:?}: a wildcard needs a suffix of two labels or more, as in *.example.com"));
        }
        Ok(Rule { host: if wildcard { HostPattern::Suffix(name) } else { HostPattern::Name(name) }, port })
    }
}

/// `host` and the port after its last colon, if any (IPv6 only in brackets).
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let port_at = if text.starts_with('[') {
        text.find("]:").map(|at| at + 1)
    } else if text.matches(':').count() == 1 {
        text.find(':')
    } else {
        None
    };
    match port_at {
        None => Ok((text, None)),
        Some(at) => {
            let port = &text[at + 1..];
            match port.parse::<u16>() {
                Ok(port) if port > 0 => Ok((&text[..at], Some(port))),
                _ => Err(format!("{text:?}: {port:?} is not a port (1-65535)")),
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (HostPattern::Name(name), _) => f.write_str(name)?,
            (HostPattern::Suffix(suffix), _) => write!(f, "*.{suffix}")?,
            (HostPattern::Ip(IpAddr::V6(ip)), Some(_)) => write!(f, "[{ip}]")?,
            (HostPattern::Ip(ip), _) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rule, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Every token's rules: `RUNBOX_EGRESS="name=rule,rule;name2=rule"`.
pub fn parse_rules(text: &str) -> Result<BTreeMap<String, Vec<Rule>>, String> {
    let mut tokens = BTreeMap::new();
    for entry in text.split(';').map(str::trim).filter(|entry| !entry.is_empty()) {
        let (name, rules) = entry.split_once('=').ok_or_else(|| format!("{entry:?} is not name=rule,rule"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("{entry:?} names no token"));
        }
        let rules = rules
            .split(',')
            .map(str::trim)
            .filter(|rule| !rule.is_empty())
            .map(Rule::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        if rules.is_empty() {
            return Err(format!("token {name:?} has no rule"));
        }
        if tokens.insert(name.to_owned(), rules).is_some() {
            return Err(format!("token {name:?} is named twice"));
        }
    }
    Ok(tokens)
}

/// A secret the proxy adds to a token's requests to one host.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Secret {
    /// The requests it is added to: those to a destination this rule allows.
    pub host: Rule,
    /// The real value, which only the proxy holds.
    pub value: String,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secret").field("host", &self.host).field("value", &"(hidden)").finish()
    }
}

impl Secret {
    /// What a job writes where the value should go: `{{secret:NAME}}`.
    pub fn placeholder(name: &str) -> String {
        format!("{{{{secret:{name}}}}}")
    }
}

/// What a token may reach, as `/v1/runtimes` shows it to that token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EgressGrant {
    /// The token's rules, as the operator wrote them (normalised).
    pub rules: Vec<String>,
    /// The secrets the proxy adds to this token's requests.
    pub secrets: Vec<SecretGrant>,
}

/// One secret as its token sees it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretGrant {
    pub name: String,
    /// The only destinations whose request headers get the value.
    pub host: String,
    /// What the job writes in a header where the value should go.
    pub placeholder: String,
}

/// The shortest secret value accepted.
pub const MIN_SECRET_BYTES: usize = 12;

/// Every token's secrets, by token name and then by secret name.
pub type Secrets = BTreeMap<String, BTreeMap<String, Secret>>;

/// Reads the secrets file: `{"token": {"NAME": {"host": "rule", "value": "..."}}}`.
pub fn parse_secrets(json: &str) -> Result<Secrets, String> {
    let secrets: Secrets = serde_json::from_str(json).map_err(|e| e.to_string())?;
    for (token, named) in &secrets {
        for (name, secret) in named {
            let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !name_ok {
                return Err(format!("{token}: secret name {name:?} is not [A-Za-z_][A-Za-z0-9_]*"));
            }
            if secret.value.chars().any(|c| c.is_control()) {
                return Err(format!("{token}: secret {name} must be a header value (no control characters)"));
            }
            // Answers are scrubbed of the value, which would tell a job
            // whether a guess it had echoed was right: fine for a key, not
            // for a PIN.
            if secret.value.len() < MIN_SECRET_BYTES {
                return Err(format!("{token}: secret {name} is shorter than {MIN_SECRET_BYTES} bytes"));
            }
        }
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn rules_read_and_write_back() {
        for text in ["api.example.com", "*.example.com:8443", "127.0.0.1:9000", "[::1]:8080", "::1", "10.1.2.3"] {
            assert_eq!(rule(text).to_string(), text);
        }
        assert_eq!(rule("API.Example.COM.").to_string(), "api.example.com");
        for bad in
            ["", "*.com", "a..b", "host:0", "host:99999", "host:x", "[::1]:x", "[::1", "ex ample.com", "-a.com", "*"]
        {
            assert!(bad.parse::<Rule>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_rule_allows_only_its_host_and_ports() {
        let exact = rule("api.example.com");
        assert!(exact.allows("api.example.com", 443) && exact.allows("API.example.com.", 80));
        assert!(!exact.allows("api.example.com", 8443));
        assert!(!exact.allows("x.api.example.com", 443) && !exact.allows("example.com", 443));
        let wild = rule("*.example.com:8443");
        assert!(wild.allows("a.example.com", 8443) && wild.allows("a.b.example.com", 8443));
        assert!(!wild.allows("example.com", 8443) && !wild.allows("badexample.com", 8443));
        assert!(!wild.allows("a.example.com", 443));
        let ip = rule("127.0.0.1:9000");
        assert!(ip.allows("127.0.0.1", 9000) && !ip.allows("127.0.0.2", 9000) && !ip.allows("localhost", 9000));
        // A name never matches by the address it may resolve to, nor an address by a name.
        assert!(!rule("localhost:9000").allows("127.0.0.1", 9000));
        assert!(rule("[::1]:80").allows("::1", 80));
    }

    #[test]
    fn coverage_is_by_host_and_port() {
        assert!(rule("*.example.com").covers(&rule("api.example.com")));
        assert!(rule("*.example.com").covers(&rule("*.a.example.com")));
        assert!(!rule("api.example.com").covers(&rule("*.example.com")));
        assert!(rule("api.example.com").covers(&rule("api.example.com:443")));
        assert!(!rule("api.example.com:8443").covers(&rule("api.example.com")));
    }

    #[test]
    fn the_variable_names_each_token_once() {
        let tokens = parse_rules("agent=api.example.com,*.cdn.net:8443; eval = 127.0.0.1:9000").expect("parses");
        assert_eq!(tokens["agent"].len(), 2);
        assert_eq!(tokens["eval"], vec![rule("127.0.0.1:9000")]);
        assert!(parse_rules("").expect("empty").is_empty());
        for bad in ["agent", "=a.com", "agent=", "agent=a.com;agent=b.com", "agent=a..com"] {
            assert!(parse_rules(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn secrets_are_named_and_hidden() {
        let secrets =
            parse_secrets(r#"{"agent": {"API_KEY": {"host": "api.example.com", "value": "s3cret-0123456789"}}}"#)
                .expect("parses");
        let secret = &secrets["agent"]["API_KEY"];
        assert_eq!(secret.host, rule("api.example.com"));
        assert!(!format!("{secret:?}").contains("s3cret"));
        assert_eq!(Secret::placeholder("API_KEY"), "{{secret:API_KEY}}");
        for bad in [
            r#"{"agent": {"1KEY": {"host": "a.com", "value": "v"}}}"#,
            r#"{"agent": {"KEY": {"host": "a.com", "value": ""}}}"#,
            r#"{"agent": {"KEY": {"host": "a.com", "value": "4821"}}}"#,
            r#"{"agent": {"KEY": {"host": "a.com", "value": "a\nb"}}}"#,
            r#"{"agent": {"KEY": {"host": "a..com", "value": "v"}}}"#,
            r#"{"agent": {"KEY": {"host": "a.com", "value": "v", "extra": 1}}}"#,
        ] {
            assert!(parse_secrets(bad).is_err(), "{bad} was accepted");
        }
    }
}
