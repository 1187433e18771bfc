//! Per-token quotas: how many jobs a token may have queued plus running,
//! and how many submissions (a job, or a whole batch) it may make per
//! second. Checked and counted in the enqueue scripts, atomically with the
//! enqueue; a job is counted out when it reaches a final status.

use runbox_common::{ConfigError, Quota};

/// Each token's quota, by token name; `*` sets the default.
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    by_token: Vec<(String, Quota)>,
    default: Quota,
}

impl Quotas {
    /// Parses `RUNBOX_QUOTAS`: `name:active/per-second` pairs, comma
    /// separated, where 0 means no limit and `*` names the default for
    /// tokens without their own, e.g. `agent:100/20,eval:5000/2,*:50/10`.
    pub fn parse(text: &str) -> Result<Quotas, ConfigError> {
        let mut quotas = Quotas::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let invalid = || ConfigError::Invalid {
                name: "RUNBOX_QUOTAS",
                value: item.to_owned(),
                reason: "each entry is name:active/per-second, e.g. agent:100/20 (0 is no limit)".into(),
            };
            let (name, limits) = item.split_once(':').ok_or_else(invalid)?;
            let (active, rate) = limits.split_once('/').ok_or_else(invalid)?;
            let quota = Quota {
                max_active: active.trim().parse().map_err(|_| invalid())?,
                per_second: rate.trim().parse().map_err(|_| invalid())?,
            };
            match name.trim() {
                "*" => quotas.default = quota,
                name => quotas.by_token.push((name.to_owned(), quota)),
            }
        }
        Ok(quotas)
    }

    /// The quota of the token named `owner`.
    pub fn of(&self, owner: &str) -> Quota {
        self.by_token.iter().find(|(name, _)| name == owner).map_or(self.default, |(_, quota)| *quota)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_per_token_quotas_and_a_default() {
        let quotas = Quotas::parse("agent:100/20, eval:5000/0,*:50/10").expect("parses");
        assert_eq!(quotas.of("agent"), Quota { max_active: 100, per_second: 20 });
        assert_eq!(quotas.of("eval"), Quota { max_active: 5000, per_second: 0 });
        assert_eq!(quotas.of("other"), Quota { max_active: 50, per_second: 10 });
        assert_eq!(Quotas::parse("").expect("empty").of("x"), Quota::default());
        for bad in ["agent:100", "agent", "agent:x/1", ":1/1x"] {
            assert!(Quotas::parse(bad).is_err(), "{bad}");
        }
    }
}
