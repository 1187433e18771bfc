//! The one place errors become HTTP responses. Every body has the shape
//! `{"error": {"code": "...", "message": "..."}}`; a 5xx says nothing
//! internal, and its cause goes to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::fmt;

/// `Retry-After`, in seconds, when every session place is taken.
const SESSIONS_FULL_RETRY_AFTER: &str = "5";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid bearer token")]
    Unauthorized,
    #[error("{0}")]
    InvalidJson(String),
    /// A field of the request that is wrong, unknown or too large: which,
    /// and what to fix.
    #[error("{0}")]
    Field(FieldError),
    /// The most `?wait=` may ask for.
    #[error("wait must be a whole number of seconds from 0 to {0}")]
    InvalidWait(u64),
    #[error("send the job as JSON with Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("{message}")]
    TooLarge { code: &'static str, message: String },
    #[error("no such job or batch (or not yours)")]
    NotFound,
    /// A request no route answers: its method and path.
    #[error("no route {0}: docs/api.md lists every route")]
    NoRoute(String),
    /// A route that exists, asked with another method.
    #[error("{0} is not allowed here: docs/api.md lists each route's methods")]
    MethodNotAllowed(String),
    #[error("the queue is full; retry after the Retry-After delay")]
    QueueFull,
    #[error("{message}")]
    QuotaExceeded { message: String, quota: runbox_common::Quota },
    #[error("the queue is unavailable; retry shortly")]
    Unavailable(#[source] runbox_common::QueueError),
    #[error("{} of {total} jobs are invalid; nothing was queued", errors.len())]
    InvalidBatch { total: usize, errors: Vec<BatchItemError> },
    #[error("no such session (or not yours)")]
    NoSession,
    /// A session that has ended: its status and why.
    #[error("the session has ended ({status}): {reason}")]
    SessionEnded { status: runbox_common::SessionStatus, reason: String },
    #[error("{0}")]
    SessionBusy(String),
    /// The caller holds this many live sessions already, its fair share.
    #[error(
        "this token already holds {0} live sessions, the most one token may (half the fleet's session places, at \
         most RUNBOX_SESSIONS_PER_TOKEN); destroy one first"
    )]
    TooManySessions(u64),
    /// Every session place of the fleet is taken; the message says how many.
    #[error("{0}")]
    SessionsFull(String),
    #[error("no such checkpoint (or not yours, or expired)")]
    NoCheckpoint,
    #[error("{0}")]
    CheckpointFailed(String),
    /// No worker could open the session; the message says why.
    #[error("{0}")]
    SessionUnavailable(String),
    #[error("{0}")]
    InvalidPath(String),
    #[error("no file or directory at {0:?} under the session's home")]
    NoFile(String),
    #[error("{0}")]
    FileTooLarge(String),
    #[error("{0}")]
    SessionFilesFull(String),
    #[error("{0}")]
    TooManyFiles(String),
    #[error("{0:?} is a directory, not a file")]
    NotAFile(String),
    #[error("{0:?} is not a directory (or goes through a file)")]
    NotADirectory(String),
    #[error("{0}")]
    FileFailed(String),
    #[error("a directory is already at {0:?}")]
    FileExists(String),
}

/// What is wrong with one job of a batch.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct BatchItemError {
    /// The job's position in `jobs` (or `cases`), from 0.
    pub index: usize,
    #[schema(value_type = String)]
    pub code: &'static str,
    /// The field of that job, as a path into it.
    pub field: String,
    pub message: String,
}

impl BatchItemError {
    pub fn new(index: usize, error: FieldError) -> BatchItemError {
        BatchItemError { index, code: error.code, field: error.field, message: error.message }
    }
}

impl ApiError {
    /// A field whose value is wrong: which, and what to fix.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Field(FieldError::invalid(field, message))
    }
}

impl ApiError {
    pub(crate) fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
            ApiError::Field(error) if error.code.ends_with("_too_large") => (StatusCode::PAYLOAD_TOO_LARGE, error.code),
            ApiError::Field(error) => (StatusCode::BAD_REQUEST, error.code),
            ApiError::InvalidWait(_) => (StatusCode::BAD_REQUEST, "invalid_wait"),
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::TooLarge { code, .. } => (StatusCode::PAYLOAD_TOO_LARGE, code),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::NoRoute(_) => (StatusCode::NOT_FOUND, "no_route"),
            ApiError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::QueueFull => (StatusCode::SERVICE_UNAVAILABLE, "queue_full"),
            ApiError::QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::InvalidBatch { .. } => (StatusCode::BAD_REQUEST, "invalid_batch"),
            ApiError::NoSession => (StatusCode::NOT_FOUND, "no_session"),
            ApiError::SessionEnded { status, .. } => (
                StatusCode::GONE,
                match status {
                    runbox_common::SessionStatus::Lost => "session_lost",
                    runbox_common::SessionStatus::Expired => "session_expired",
                    _ => "session_closed",
                },
            ),
            ApiError::SessionBusy(_) => (StatusCode::CONFLICT, "session_busy"),
            ApiError::TooManySessions(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_sessions"),
            ApiError::SessionsFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "sessions_full"),
            ApiError::NoCheckpoint => (StatusCode::NOT_FOUND, "no_checkpoint"),
            ApiError::CheckpointFailed(_) => (StatusCode::UNPROCESSABLE_ENTITY, "checkpoint_failed"),
            ApiError::SessionUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "session_unavailable"),
            ApiError::InvalidPath(_) => (StatusCode::BAD_REQUEST, "invalid_path"),
            ApiError::NoFile(_) => (StatusCode::NOT_FOUND, "no_file"),
            ApiError::FileTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "file_too_large"),
            ApiError::SessionFilesFull(_) => (StatusCode::PAYLOAD_TOO_LARGE, "session_files_full"),
            ApiError::TooManyFiles(_) => (StatusCode::UNPROCESSABLE_ENTITY, "too_many_files"),
            ApiError::NotAFile(_) => (StatusCode::UNPROCESSABLE_ENTITY, "not_a_file"),
            ApiError::NotADirectory(_) => (StatusCode::UNPROCESSABLE_ENTITY, "not_a_directory"),
            ApiError::FileFailed(_) => (StatusCode::UNPROCESSABLE_ENTITY, "file_failed"),
            ApiError::FileExists(_) => (StatusCode::CONFLICT, "file_exists"),
        }
    }
}

impl ApiError {
    /// The HTTP status it is answered with.
    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    /// The snake_case code a client can match on, as in the JSON body.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    /// Whether this is runbox's fault rather than the request's (a 5xx):
    /// such a cause is logged, and the caller is told only to retry.
    pub fn is_server_side(&self) -> bool {
        self.status_and_code().0.is_server_error()
    }

    /// The 429 for a submission that would pass `quota`.
    pub fn over_quota(which: runbox_common::OverQuota, quota: runbox_common::Quota) -> ApiError {
        let message = match which {
            runbox_common::OverQuota::Active => format!(
                "this token may have {} jobs queued or running at once; retry once some have finished",
                quota.max_active
            ),
            runbox_common::OverQuota::Rate => {
                format!(
                    "this token may submit {} times per second; retry after the Retry-After delay",
                    quota.per_second
                )
            }
        };
        ApiError::QuotaExceeded { message, quota }
    }
}

impl From<runbox_common::QueueError> for ApiError {
    fn from(e: runbox_common::QueueError) -> Self {
        ApiError::Unavailable(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Unavailable(cause) = &self {
            tracing::error!(error = %cause, "redis unavailable");
        }
        let mut body = json!({ "error": { "code": code, "message": self.to_string() } });
        if let ApiError::InvalidBatch { errors, .. } = &self {
            body["error"]["jobs"] = json!(errors);
        }
        if let ApiError::Field(error) = &self {
            body["error"]["field"] = json!(error.field);
        }
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            // A session place comes free only when a session ends: sooner
            // retries would find the fleet as full.
            let after = if matches!(self, ApiError::SessionsFull(_)) { SESSIONS_FULL_RETRY_AFTER } else { "1" };
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(after));
        }
        if let ApiError::QuotaExceeded { quota, .. } = &self {
            let headers = response.headers_mut();
            headers.insert("runbox-quota-active", HeaderValue::from(quota.max_active));
            headers.insert("runbox-quota-per-second", HeaderValue::from(quota.per_second));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What is wrong with one field of a request: which field, a code a client
/// can match on, and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// The field, as a path into the body: `timeout_ms`, `files[2].path`.
    pub field: String,
    /// `invalid_field`, `unknown_field`, or `…_too_large` (413).
    #[schema(value_type = String)]
    pub code: &'static str,
    pub message: String,
}

impl FieldError {
    /// A field whose value is wrong.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), code: "invalid_field", message: message.into() }
    }

    /// A field the body does not have.
    pub fn unknown(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), code: "unknown_field", message: message.into() }
    }

    /// A field larger than its limit: `code` names which (`code_too_large`).
    pub fn too_large(field: impl Into<String>, code: &'static str, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), code, message: message.into() }
    }

    /// The same error, for the field as part of `outer` (`jobs[3]`).
    pub fn within(self, outer: &str) -> FieldError {
        let field = if self.field.is_empty() { outer.to_owned() } else { format!("{outer}.{}", self.field) };
        FieldError { field, ..self }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<FieldError> for ApiError {
    fn from(error: FieldError) -> ApiError {
        ApiError::Field(error)
    }
}
