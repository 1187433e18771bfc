use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The current time as RFC 3339 text, the format of every timestamp runbox stores.
pub fn now_rfc3339() -> String {
    OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default()
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    u64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// `ms` after the Unix epoch as RFC 3339 text.
pub fn rfc3339_at_unix_ms(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok().and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_default()
}
