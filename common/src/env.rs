//! Helpers for reading configuration from the environment, once, at start-up.
//! Every error names the variable and says what it expected.

use std::str::FromStr;

/// A configuration variable that is missing or does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is required: {hint}")]
    Missing { name: &'static str, hint: &'static str },
    #[error("{name}={value:?} is invalid: {reason}")]
    Invalid { name: &'static str, value: String, reason: String },
}

/// Reads `name`, or `default` when it is unset or empty.
pub fn env_or<T>(name: &'static str, default: T) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => parse(name, &value),
        _ => Ok(default),
    }
}

/// Reads `name`, which must be set and non-empty.
pub fn env_required(name: &'static str, hint: &'static str) -> Result<String, ConfigError> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        _ => Err(ConfigError::Missing { name, hint }),
    }
}

fn parse<T>(name: &'static str, value: &str) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ConfigError::Invalid {
        name,
        value: value.to_owned(),
        reason: e.to_string(),
    })
}
