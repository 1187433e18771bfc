//! The client's one error type.

use reqwest::StatusCode;
use serde::Deserialize;

/// Why a call did not give its answer. A program that fails is not an
/// error: it is a [`crate::Job`] with its status and exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// runbox refused the request: an error status with the API's body
    /// `{"error": {"code", "message"}}`. `code` is the stable snake_case
    /// one to match on (`unauthorized`, `not_found`, `invalid_field`,
    /// `queue_full`, `session_busy`, ...; the README lists them all). A
    /// 429 or 503 is this error only once its retries are spent. A body
    /// that is not the API's (a proxy's error page) has code `unknown`
    /// and its first bytes as the message.
    #[error("runbox answered {status}: {code}: {message}")]
    Api {
        status: StatusCode,
        code: String,
        message: String,
        /// With `invalid_batch`: each invalid job of the batch.
        jobs: Vec<InvalidJob>,
    },
    /// The request could not be sent or its answer not read: no
    /// connection, a timeout, a connection cut mid-way.
    #[error("{what}")]
    Transport {
        /// The request, as `METHOD url`.
        what: String,
        #[source]
        source: reqwest::Error,
    },
    /// A body that is not JSON of the shape the API documents (or, never
    /// in practice, a request body that could not be encoded).
    #[error("{what}")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// A live-output stream that ended before its result. `code` is the
    /// server's, from its `error` event (`unavailable`: it lost Redis, or
    /// a session exec did not end in time), or the client's: `ended` (the
    /// connection closed before the result) or `idle` (nothing came, not
    /// even a keep-alive, for [`crate::STREAM_IDLE`]). The job itself may
    /// be fine: read it with [`crate::Client::wait`].
    #[error("{what}: the stream broke off ({code}): {message}")]
    Stream { what: String, code: String, message: String },
    /// The URL given to [`crate::Client::new`] is not an http(s) URL.
    #[error("{0:?} is not an http(s) URL")]
    Url(String),
}

impl Error {
    /// The HTTP status runbox answered with, for [`Error::Api`].
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error code: the API's for [`Error::Api`], the stream's for
    /// [`Error::Stream`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } | Error::Stream { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// One job of a batch that runbox refused as `invalid_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct InvalidJob {
    /// Its position in the batch's jobs (or cases), from 0.
    pub index: usize,
    pub code: String,
    pub message: String,
}

/// How much of a body that is not the API's an [`Error::Api`] keeps.
const UNKNOWN_BODY_CHARS: usize = 200;

/// The [`Error::Api`] for an error status and its body.
pub(crate) fn api_error(status: StatusCode, body: &[u8]) -> Error {
    #[derive(Deserialize)]
    struct Body {
        error: Detail,
    }
    #[derive(Deserialize)]
    struct Detail {
        code: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        jobs: Vec<InvalidJob>,
    }
    match serde_json::from_slice::<Body>(body) {
        Ok(Body { error }) => Error::Api { status, code: error.code, message: error.message, jobs: error.jobs },
        Err(_) => Error::Api {
            status,
            code: "unknown".to_owned(),
            message: String::from_utf8_lossy(body).chars().take(UNKNOWN_BODY_CHARS).collect(),
            jobs: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_error_body_becomes_its_fields() {
        let body = br#"{"error": {"code": "invalid_batch", "message": "1 of 2 jobs are invalid",
            "jobs": [{"index": 1, "code": "invalid_field", "message": "code is required"}]}}"#;
        let error = api_error(StatusCode::BAD_REQUEST, body);
        assert_eq!(error.status(), Some(StatusCode::BAD_REQUEST));
        assert_eq!(error.code(), Some("invalid_batch"));
        let Error::Api { jobs, .. } = &error else { panic!("not an api error: {error:?}") };
        assert_eq!(jobs, &[InvalidJob { index: 1, code: "invalid_field".into(), message: "code is required".into() }]);
        assert_eq!(error.to_string(), "runbox answered 400 Bad Request: invalid_batch: 1 of 2 jobs are invalid");
    }

    #[test]
    fn a_body_that_is_not_the_apis_is_kept_as_the_message() {
        let error = api_error(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert_eq!(error.code(), Some("unknown"));
        let Error::Api { message, .. } = &error else { panic!("not an api error: {error:?}") };
        assert_eq!(message, "<html>bad gateway</html>");
    }
}
