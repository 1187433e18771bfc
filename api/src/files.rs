//! The `/v1/sessions/{id}/files` handlers: files in a session's home,
//! which is also its code's working directory.
//!
//! Each operation is a session step like a checkpoint (see
//! `runbox_common::FileAction`): signed, sent to the worker holding the
//! session, done by the session's harness, and answered with a
//! [`FileResult`]. The path is taken from the raw URI and decoded here, so
//! that a name that is not UTF-8 gets a 400 that says so, as `..`, an
//! absolute path, NUL or a name past 255 bytes do; the session's harness
//! then refuses a path through a link its code made.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use runbox_common::{
    FileAction, FileEntry, FileRefusal, FileResult, InputFile, MAX_SESSION_FILE_BYTES, MAX_SESSION_FILES,
    MAX_SESSION_FILES_BYTES, Outcome, StepResult,
};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::sessions::{ready, send, step, wait_on_worker};
use crate::state::AppState;

/// How long a file operation may take before the api gives up waiting.
const FILE_WAIT: Duration = Duration::from_secs(60);

/// A file written.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FileWritten {
    pub path: String,
    pub size: u64,
}

/// A directory of the session's home.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FileListing {
    /// The directory, relative to the home (empty for the home).
    pub path: String,
    /// Its entries, by name.
    pub files: Vec<FileEntry>,
    /// More than 4096 entries: the first ones only.
    pub truncated: bool,
}

/// A file's bytes, raw: an upload's body, a download's.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct FileBytes(Vec<u8>);

/// A file's path under the session's home, as the route's tail.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(crate) struct FileRoute {
    /// The session's id.
    id: String,
    /// Relative to the session's home: plain names separated by `/`
    /// (percent-encoded as any path), neither `.` nor `..`, with no control
    /// character or backslash; at most 255 bytes, which the pattern and
    /// length (in characters) cannot state.
    #[param(
        pattern = r"^(?!\.\.?(/|$))(?!.*/\.\.?(/|$))[^/\\\u0000-\u001f\u007f-\u009f]+(/[^/\\\u0000-\u001f\u007f-\u009f]+)*$",
        max_length = 255
    )]
    path: String,
}

/// The directory to list.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct ListQuery {
    /// Relative to the session's home (a `/` at its end is dropped); the
    /// home when absent or empty.
    #[param(
        pattern = r"^((?!\.\.?(/|$))(?!.*/\.\.?(/|$))[^/\\\u0000-\u001f\u007f-\u009f]+(/[^/\\\u0000-\u001f\u007f-\u009f]+)*/?)?$",
        max_length = 255
    )]
    path: Option<String>,
}

/// Uploads a file: the request's body, raw, is its content.
#[utoipa::path(
    put,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    params(FileRoute),
    request_body(content = FileBytes, content_type = "application/octet-stream"),
    responses(
        (status = 200, description = "Written; its directories are made as needed.", body = FileWritten),
        (status = 400, description = "`invalid_path`, or a path through a link (links are not followed).", body = crate::views::ErrorBody),
        (status = 413, description = "`file_too_large`: past the 16 MiB a file may hold; `session_files_full`: the files under the home would pass 32 MiB.", body = crate::views::ErrorBody),
        (status = 422, description = "`too_many_files` (past 1000 under the home), `not_a_file` (a directory is there), `not_a_directory` (a path through a file), `file_failed`.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_session`: no such session, or another token's.", body = crate::views::ErrorBody),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable` or `session_unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (id, path) = file_path(&uri)?;
    let body = body.map_err(|_| too_large_upload())?;
    Ok(Json(put_file(&state, &caller, &id, path, body).await?).into_response())
}

/// Writes `bytes` to `path` (already checked) in session `id`'s home.
/// Takes the bytes by value so that only their base64 is held while the
/// session works.
pub(crate) async fn put_file(
    state: &AppState,
    caller: &Caller,
    id: &str,
    path: String,
    bytes: impl AsRef<[u8]>,
) -> Result<FileWritten, ApiError> {
    if bytes.as_ref().len() > MAX_SESSION_FILE_BYTES {
        return Err(too_large_upload());
    }
    use base64::Engine;
    let content = base64::engine::general_purpose::STANDARD.encode(bytes.as_ref());
    let size = bytes.as_ref().len() as u64;
    drop(bytes);
    match file_step(state, caller, id, FileAction::Put { path: path.clone(), content }).await? {
        FileResult::Written { .. } => Ok(FileWritten { path, size }),
        other => Err(unexpected(other)),
    }
}

/// Downloads a file, raw.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    params(FileRoute),
    responses(
        (status = 200, description = "The file's bytes.", body = FileBytes, content_type = "application/octet-stream"),
        (status = 400, description = "`invalid_path`, or a path through a link.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_file`: nothing at the path; `no_session`.", body = crate::views::ErrorBody),
        (status = 413, description = "`file_too_large`: the session's code made a file past the 16 MiB the files API moves.", body = crate::views::ErrorBody),
        (status = 422, description = "`not_a_file` (a directory), `not_a_directory`, `file_failed`.", body = crate::views::ErrorBody),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable` or `session_unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn get(State(state): State<AppState>, caller: Caller, uri: Uri) -> Result<Response, ApiError> {
    let (id, path) = file_path(&uri)?;
    let mut response = get_file(&state, &caller, &id, path).await?.into_response();
    let octets = HeaderValue::from_static("application/octet-stream");
    response.headers_mut().insert(header::CONTENT_TYPE, octets);
    Ok(response)
}

/// The bytes of the file at `path` (already checked) in session `id`'s home.
pub(crate) async fn get_file(state: &AppState, caller: &Caller, id: &str, path: String) -> Result<Vec<u8>, ApiError> {
    match file_step(state, caller, id, FileAction::Get { path: path.clone() }).await? {
        FileResult::Content { content, .. } => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|e| ApiError::FileFailed(format!("the worker's copy of {path:?} was damaged: {e}")))
        }
        other => Err(unexpected(other)),
    }
}

/// Deletes a file, or a directory with everything under it.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}/files/{path}",
    tag = "sessions",
    params(FileRoute),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "`invalid_path`, or a path through a link.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_file`: nothing at the path; `no_session`.", body = crate::views::ErrorBody),
        (status = 422, description = "`not_a_directory`, `file_failed`.", body = crate::views::ErrorBody),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable` or `session_unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn delete(State(state): State<AppState>, caller: Caller, uri: Uri) -> Result<Response, ApiError> {
    let (id, path) = file_path(&uri)?;
    match file_step(&state, &caller, &id, FileAction::Delete { path }).await? {
        FileResult::Deleted => Ok(StatusCode::NO_CONTENT.into_response()),
        other => Err(unexpected(other)),
    }
}

/// Lists a directory of the session's home: name, type, size and modified time of each entry.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/files",
    tag = "sessions",
    params(crate::sessions::SessionId, ListQuery),
    responses(
        (status = 200, description = "The directory's entries.", body = FileListing),
        (status = 400, description = "`invalid_path`, or a path through a link.", body = crate::views::ErrorBody),
        (status = 404, description = "`no_file`: no such directory; `no_session`.", body = crate::views::ErrorBody),
        (status = 422, description = "`not_a_directory`, `file_failed`.", body = crate::views::ErrorBody),
        (status = 409, description = "`session_busy`.", body = crate::views::ErrorBody),
        (status = 410, description = "`session_closed`, `session_expired` or `session_lost`.", body = crate::views::ErrorBody),
        (status = 401, description = "`unauthorized`.", body = crate::views::ErrorBody),
        (status = 503, description = "`unavailable` or `session_unavailable`.", body = crate::views::ErrorBody),
    ),
)]
pub async fn list(State(state): State<AppState>, caller: Caller, uri: Uri) -> Result<Response, ApiError> {
    let id = session_of(uri.path()).to_owned();
    let mut path = String::new();
    for pair in uri.query().unwrap_or("").split('&') {
        if let Some(value) = pair.strip_prefix("path=") {
            path = decoded(&value.replace('+', " "))?;
        }
    }
    let path = list_path(path)?;
    Ok(Json(list_dir(&state, &caller, &id, path).await?).into_response())
}

/// A directory to list, as given (empty for the home), checked: `dir/` is
/// `dir`; `/` is absolute, and refused.
pub(crate) fn list_path(mut path: String) -> Result<String, ApiError> {
    if path.len() > 1 && !path.starts_with('/') && path.ends_with('/') {
        path.pop();
    }
    if !path.is_empty() {
        checked(&path)?;
    }
    Ok(path)
}

/// The entries of directory `path` (from [`list_path`]) of session `id`'s home.
pub(crate) async fn list_dir(
    state: &AppState,
    caller: &Caller,
    id: &str,
    path: String,
) -> Result<FileListing, ApiError> {
    match file_step(state, caller, id, FileAction::List { path: path.clone() }).await? {
        FileResult::Listing { entries, truncated } => Ok(FileListing { path, files: entries, truncated }),
        other => Err(unexpected(other)),
    }
}

/// Sends `action` to session `id` and waits for what it came to; a refusal is its error.
pub(crate) async fn file_step(
    state: &AppState,
    caller: &Caller,
    id: &str,
    action: FileAction,
) -> Result<FileResult, ApiError> {
    let (session, _) = ready(state, caller, id).await?;
    let path = action.path().to_owned();
    let spec = step(session.language, id, runbox_common::SessionOp::File { action });
    let worker = session.worker.clone().unwrap_or_default();
    let job = send(state, caller, &session, &worker, &spec, true).await?;
    let record = wait_on_worker(state, &job, &worker, FILE_WAIT).await?;
    match record.and_then(|r| r.outcome.filter(|_| r.status.is_final())) {
        Some(Outcome { step: Some(StepResult::File { file: FileResult::Refused { refusal } }), .. }) => {
            Err(refused(refusal, path))
        }
        Some(Outcome { step: Some(StepResult::File { file }), .. }) => Ok(file),
        Some(Outcome { step: Some(StepResult::Failed { reason }), .. }) => Err(ApiError::FileFailed(reason)),
        Some(outcome) => Err(ApiError::SessionUnavailable(format!(
            "the file operation did not finish ({}); the session's worker may have stopped",
            outcome.status.as_str()
        ))),
        None => Err(ApiError::SessionUnavailable("the file operation is taking too long; try again".into())),
    }
}

fn refused(refusal: FileRefusal, path: String) -> ApiError {
    match refusal {
        FileRefusal::NoFile => ApiError::NoFile(path),
        FileRefusal::NotAFile => ApiError::NotAFile(path),
        FileRefusal::NotADirectory => ApiError::NotADirectory(path),
        FileRefusal::Link => {
            ApiError::InvalidPath(format!("{path:?} goes through a symbolic link, which the files API does not follow"))
        }
        FileRefusal::FilesFull => ApiError::SessionFilesFull(format!(
            "the files under the session's home would pass {MAX_SESSION_FILES_BYTES} bytes \
             (they live in its memory); delete some first"
        )),
        FileRefusal::TooManyFiles => ApiError::TooManyFiles(format!(
            "the session's home would hold more than {MAX_SESSION_FILES} files; delete some first"
        )),
        FileRefusal::TooLarge => ApiError::FileTooLarge(format!(
            "{path:?} is larger than the {MAX_SESSION_FILE_BYTES} bytes the files API moves; \
             have the session's code split or compress it"
        )),
        FileRefusal::Unsupported => ApiError::FileFailed(
            "the worker holding this session predates files in JavaScript sessions; start a new session".into(),
        ),
        FileRefusal::Exists => ApiError::FileExists(path),
    }
}

pub(crate) fn unexpected(result: FileResult) -> ApiError {
    tracing::error!(?result, "a file operation came back with another operation's result");
    ApiError::FileFailed("the session answered with another operation's result".into())
}

fn too_large_upload() -> ApiError {
    ApiError::FileTooLarge(format!("a file may hold at most {MAX_SESSION_FILE_BYTES} bytes"))
}

/// The session id in `/v1/sessions/{id}/files...`.
fn session_of(path: &str) -> &str {
    path.strip_prefix("/v1/sessions/").and_then(|rest| rest.split('/').next()).unwrap_or("")
}

/// The session's id and the file's path, decoded and checked, from `/v1/sessions/{id}/files/{path}`.
fn file_path(uri: &Uri) -> Result<(String, String), ApiError> {
    let id = session_of(uri.path());
    let prefix = format!("/v1/sessions/{id}/files/");
    let raw = uri.path().strip_prefix(prefix.as_str()).unwrap_or("");
    let path = decoded(raw)?;
    checked(&path)?;
    Ok((id.to_owned(), path))
}

/// `raw`, percent-decoded; a 400 if the bytes are not UTF-8.
fn decoded(raw: &str) -> Result<String, ApiError> {
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(raw).collect();
    String::from_utf8(bytes)
        .map_err(|_| ApiError::InvalidPath("the path is not UTF-8: file names in the files API are UTF-8 text".into()))
}

pub(crate) fn checked(path: &str) -> Result<(), ApiError> {
    if path.contains('\0') {
        return Err(ApiError::InvalidPath("the path holds a NUL byte, which no file name may".into()));
    }
    InputFile::check_path(path)
        .map_err(|why| ApiError::InvalidPath(format!("{why}; it is relative to the session's home")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(path: &str) -> Result<(String, String), &'static str> {
        let uri: Uri = path.parse().expect("a uri");
        file_path(&uri).map_err(|e| e.code())
    }

    #[test]
    fn paths_are_decoded_and_checked() {
        assert_eq!(parse("/v1/sessions/s/files/a%20b/c.csv"), Ok(("s".into(), "a b/c.csv".into())));
        assert_eq!(parse("/v1/sessions/s/files/%2e%2e/x"), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files/a/..%2Fb"), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files/%2Fetc%2Fpasswd"), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files//etc/passwd"), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files/a%00b"), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files/%FF"), Err("invalid_path"));
        assert_eq!(parse(&format!("/v1/sessions/s/files/{}", "a".repeat(256))), Err("invalid_path"));
        assert_eq!(parse("/v1/sessions/s/files/ok.txt"), Ok(("s".into(), "ok.txt".into())));
    }
}
