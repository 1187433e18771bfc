//! What E2B calls envd: the sandbox's files, over `/files` (upload and
//! download) and the `filesystem.Filesystem` Connect RPCs (list, stat,
//! make a directory, move, remove), all done by the files API's session
//! steps on the sandbox's home; `/health`; and `process.Process`, which
//! runbox refuses at once, with the reason, since it has no shell.

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use runbox_common::{FileAction, FileEntry, FileResult, FileType, MAX_LISTING_ENTRIES};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{DataRefusal, Sandbox, api_error, data_caller, e2b_path, home_path, plain_error};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::files::{file_step, unexpected};
use crate::state::AppState;

/// Deepest `ListDir` walk.
const MAX_DEPTH: u32 = 8;

/// Most directories one `ListDir` lists: each is a session step.
const MAX_LISTED_DIRS: usize = 64;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/files", get(download).post(upload))
        .route("/filesystem.Filesystem/{method}", post(filesystem))
        .route("/process.Process/{method}", post(process))
}

/// `GET /health`: 204 while the sandbox runs, 502 once it does not.
async fn health(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match data_caller(&state, &headers).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(refused) => refused.into_plain(),
    }
}

/// The caller, the sandbox, and its home context's session.
async fn home(state: &AppState, headers: &HeaderMap) -> Result<(Caller, Sandbox, String), DataRefusal> {
    let (caller, sandbox) = data_caller(state, headers).await?;
    let session = sandbox.home_context().and_then(|c| c.session.clone());
    match session {
        Some(session) => Ok((caller, sandbox, session)),
        None => Err(DataRefusal::Gone("the sandbox has no running home: connect to it again".into())),
    }
}

#[derive(Deserialize)]
struct FileQuery {
    path: Option<String>,
}

/// `GET /files?path=`: the file's bytes.
async fn download(State(state): State<AppState>, headers: HeaderMap, Query(query): Query<FileQuery>) -> Response {
    let (caller, _, session) = match home(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    let path = match home_path(query.path.as_deref().unwrap_or("")) {
        Ok(path) if !path.is_empty() => path,
        Ok(_) => return plain_error(StatusCode::BAD_REQUEST, "the path names the home, a directory: name a file"),
        Err(e) => return files_error(e),
    };
    match file_step(&state, &caller, &session, FileAction::Get { path }).await {
        Ok(FileResult::Content { content, .. }) => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD.decode(content).unwrap_or_default();
            let mut response = bytes.into_response();
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
            response
        }
        Ok(other) => files_error(unexpected(other)),
        Err(e) => files_error(e),
    }
}

/// `POST /files?path=`: multipart parts named `file`, each at the path
/// its filename gives (or `path`), or one raw body at `path`. Answers what
/// was written, as E2B's `WriteInfo`s.
async fn upload(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<FileQuery>,
    body: Bytes,
) -> Response {
    let (caller, _, session) = match home(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refused.into_plain(),
    };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if headers.get(header::CONTENT_ENCODING).is_some_and(|v| v != "identity") {
        return plain_error(StatusCode::BAD_REQUEST, "send uploads uncompressed: Content-Encoding is not supported");
    }
    let files: Vec<(String, &[u8])> = if content_type.starts_with("multipart/form-data") {
        let Some(boundary) = boundary(content_type) else {
            return plain_error(StatusCode::BAD_REQUEST, "a multipart upload without a boundary");
        };
        // The first file is at `path` when it is given (a one-file upload
        // names it there as well); the others are at their filenames.
        match parts(&body, &boundary) {
            Some(parts) => parts
                .into_iter()
                .filter(|part| part.name == "file")
                .enumerate()
                .map(|(i, part)| {
                    let named = if i == 0 {
                        query.path.clone().or(part.filename)
                    } else {
                        part.filename.or(query.path.clone())
                    };
                    (named.unwrap_or_default(), part.content)
                })
                .collect(),
            None => return plain_error(StatusCode::BAD_REQUEST, "the multipart body does not parse"),
        }
    } else {
        vec![(query.path.clone().unwrap_or_default(), &body[..])]
    };
    if files.is_empty() {
        return plain_error(StatusCode::BAD_REQUEST, "no file in the upload: send a part named \"file\"");
    }
    let mut written = Vec::with_capacity(files.len());
    for (given, content) in files {
        let path = match home_path(&given) {
            Ok(path) if !path.is_empty() => path,
            Ok(_) => return plain_error(StatusCode::BAD_REQUEST, "the path names the home, a directory: name a file"),
            Err(e) => return files_error(e),
        };
        if content.len() > runbox_common::MAX_SESSION_FILE_BYTES {
            return files_error(ApiError::FileTooLarge(format!(
                "a file may hold at most {} bytes",
                runbox_common::MAX_SESSION_FILE_BYTES
            )));
        }
        use base64::Engine;
        let action =
            FileAction::Put { path: path.clone(), content: base64::engine::general_purpose::STANDARD.encode(content) };
        match file_step(&state, &caller, &session, action).await {
            Ok(FileResult::Written { .. }) => {}
            Ok(other) => return files_error(unexpected(other)),
            Err(e) => return files_error(e),
        }
        let name = path.rsplit('/').next().unwrap_or("").to_owned();
        written.push(json!({ "name": name, "type": "file", "path": e2b_path(&path) }));
    }
    Json(written).into_response()
}

/// An error on `/files`: E2B's `{code, message}`, with a status the SDKs
/// map to their exceptions (400 invalid argument, 404 not found, 507 full).
fn files_error(e: ApiError) -> Response {
    let status = match &e {
        ApiError::InvalidPath(_) | ApiError::NotAFile(_) | ApiError::NotADirectory(_) => StatusCode::BAD_REQUEST,
        ApiError::SessionFilesFull(_) | ApiError::TooManyFiles(_) => StatusCode::INSUFFICIENT_STORAGE,
        _ => return api_error(e),
    };
    plain_error(status, &e.to_string())
}

/// The boundary of a `multipart/form-data` content type.
fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').map(str::trim).find_map(|param| {
        let value = param.strip_prefix("boundary=")?;
        Some(value.trim_matches('"').to_owned()).filter(|b| !b.is_empty())
    })
}

/// One part of a multipart body.
struct Part<'a> {
    name: String,
    filename: Option<String>,
    content: &'a [u8],
}

/// The parts of a multipart body, or None if it is not one.
fn parts<'a>(body: &'a [u8], boundary: &str) -> Option<Vec<Part<'a>>> {
    let delimiter = format!("--{boundary}");
    let find = |haystack: &[u8], needle: &[u8]| haystack.windows(needle.len()).position(|w| w == needle);
    let mut rest = &body[find(body, delimiter.as_bytes())? + delimiter.len()..];
    let next = format!("\r\n--{boundary}");
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let head_end = find(rest, b"\r\n\r\n")?;
        let head = std::str::from_utf8(&rest[..head_end]).ok()?;
        let after_head = &rest[head_end + 4..];
        let content_end = find(after_head, next.as_bytes())?;
        let (mut name, mut filename) = (String::new(), None);
        for line in head.split("\r\n") {
            let Some((key, value)) = line.split_once(':') else { continue };
            if !key.trim().eq_ignore_ascii_case("content-disposition") {
                continue;
            }
            for param in value.split(';').map(str::trim) {
                if let Some(v) = param.strip_prefix("name=") {
                    name = v.trim_matches('"').to_owned();
                } else if let Some(v) = param.strip_prefix("filename=") {
                    filename = Some(v.trim_matches('"').to_owned());
                }
            }
        }
        parts.push(Part { name, filename, content: &after_head[..content_end] });
        rest = &after_head[content_end + next.len()..];
    }
}

/// A Connect error: `{code, message}` with the code's name and its status.
fn rpc_error(code: &str, message: &str) -> Response {
    let status = match code {
        "invalid_argument" => StatusCode::BAD_REQUEST,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "not_found" => StatusCode::NOT_FOUND,
        "already_exists" => StatusCode::CONFLICT,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "unimplemented" => StatusCode::NOT_IMPLEMENTED,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, Json(json!({ "code": code, "message": message }))).into_response()
}

fn rpc_api_error(e: ApiError) -> Response {
    let code = match &e {
        ApiError::InvalidPath(_) | ApiError::NotAFile(_) | ApiError::NotADirectory(_) => "invalid_argument",
        ApiError::NoFile(_) => "not_found",
        ApiError::FileExists(_) => "already_exists",
        ApiError::SessionBusy(_) | ApiError::TooManySessions(_) | ApiError::QuotaExceeded { .. } => {
            "resource_exhausted"
        }
        ApiError::SessionFilesFull(_) | ApiError::TooManyFiles(_) => "resource_exhausted",
        _ if e.is_server_side() => "unavailable",
        _ => "internal",
    };
    rpc_error(code, &e.to_string())
}

fn refusal_as_rpc(refused: DataRefusal) -> Response {
    match refused {
        DataRefusal::Unauthorized => {
            rpc_error("unauthenticated", "the access token is missing or wrong for this sandbox")
        }
        DataRefusal::Gone(message) => rpc_error("unavailable", &message),
        DataRefusal::Failed(e) => rpc_api_error(e),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RpcPath {
    path: Option<String>,
    source: Option<String>,
    destination: Option<String>,
    depth: Option<u32>,
}

/// `POST /filesystem.Filesystem/{method}`: Connect's JSON unary calls.
async fn filesystem(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(method): Path<String>,
    body: Bytes,
) -> Response {
    let (caller, _, session) = match home(&state, &headers).await {
        Ok(found) => found,
        Err(refused) => return refusal_as_rpc(refused),
    };
    let request: RpcPath = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return rpc_error("invalid_argument", &format!("the request is not the JSON expected: {e}")),
    };
    let path = |given: Option<&String>| home_path(given.map_or("", String::as_str));
    let step = |action| file_step(&state, &caller, &session, action);
    let answer = match method.as_str() {
        "Stat" => match path(request.path.as_ref()) {
            Ok(path) if path.is_empty() => Ok(json!({ "entry": home_entry() })),
            Ok(path) => match step(FileAction::Stat { path }).await {
                Ok(FileResult::Entry { entry }) => Ok(json!({ "entry": entry_info(&entry) })),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        "ListDir" => match path(request.path.as_ref()) {
            Ok(dir) => {
                let depth = request.depth.unwrap_or(1).clamp(1, MAX_DEPTH);
                list(&state, &caller, &session, dir, depth).await.map(|entries| json!({ "entries": entries }))
            }
            Err(e) => Err(e),
        },
        "MakeDir" => match path(request.path.as_ref()) {
            Ok(path) if path.is_empty() => Err(ApiError::FileExists(super::HOME.to_owned())),
            Ok(path) => match step(FileAction::Mkdir { path: path.clone() }).await {
                Ok(_) => stat_or_bare(&state, &caller, &session, path).await,
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
        "Move" => match (path(request.source.as_ref()), path(request.destination.as_ref())) {
            (Ok(from), Ok(to)) if !from.is_empty() && !to.is_empty() => {
                match step(FileAction::Move { path: from, to: to.clone() }).await {
                    Ok(_) => stat_or_bare(&state, &caller, &session, to).await,
                    Err(e) => Err(e),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
            _ => Err(ApiError::InvalidPath("the home itself cannot be moved, nor anything moved onto it".into())),
        },
        "Remove" => match path(request.path.as_ref()) {
            Ok(path) if path.is_empty() => Err(ApiError::InvalidPath("the home itself cannot be removed".into())),
            Ok(path) => step(FileAction::Delete { path }).await.map(|_| json!({})),
            Err(e) => Err(e),
        },
        other => {
            let message = format!(
                "filesystem.Filesystem/{other} is not available in runbox: it has list, stat, make_dir, rename, \
                 remove, read and write; there are no watchers"
            );
            return rpc_error("unimplemented", &message);
        }
    };
    match answer {
        Ok(value) => Json(value).into_response(),
        Err(e) => rpc_api_error(e),
    }
}

/// The entry at `path` after a make or a move, as E2B answers it.
async fn stat_or_bare(state: &AppState, caller: &Caller, session: &str, path: String) -> Result<Value, ApiError> {
    match file_step(state, caller, session, FileAction::Stat { path }).await? {
        FileResult::Entry { entry } => Ok(json!({ "entry": entry_info(&entry) })),
        other => Err(unexpected(other)),
    }
}

/// The entries under `dir`, `depth` levels down: at most the listing cap,
/// from at most [`MAX_LISTED_DIRS`] listings, level by level.
async fn list(
    state: &AppState,
    caller: &Caller,
    session: &str,
    dir: String,
    depth: u32,
) -> Result<Vec<Value>, ApiError> {
    let mut shown = Vec::new();
    let mut level = vec![dir];
    let mut listed = 0;
    for _ in 0..depth {
        let mut below = Vec::new();
        for dir in level {
            if shown.len() >= MAX_LISTING_ENTRIES || listed == MAX_LISTED_DIRS {
                return Ok(shown);
            }
            listed += 1;
            let entries = match file_step(state, caller, session, FileAction::List { path: dir }).await? {
                FileResult::Listing { entries, .. } => entries,
                other => return Err(unexpected(other)),
            };
            for entry in entries {
                if entry.file_type == FileType::Directory {
                    below.push(entry.path.clone());
                }
                if entry.file_type != FileType::Link && shown.len() < MAX_LISTING_ENTRIES {
                    shown.push(entry_info(&entry));
                }
            }
        }
        level = below;
    }
    Ok(shown)
}

/// An entry as E2B's `EntryInfo`. Links are never followed, and are not
/// shown in listings.
fn entry_info(entry: &FileEntry) -> Value {
    let dir = entry.file_type == FileType::Directory;
    json!({
        "name": entry.name,
        "type": if dir { "FILE_TYPE_DIRECTORY" } else { "FILE_TYPE_FILE" },
        "path": e2b_path(&entry.path),
        "size": entry.size,
        "mode": if dir { 0o755 } else { 0o644 },
        "permissions": if dir { "drwxr-xr-x" } else { "-rw-r--r--" },
        "owner": "user",
        "group": "user",
        "modifiedTime": entry.modified,
    })
}

fn home_entry() -> Value {
    json!({
        "name": "user",
        "type": "FILE_TYPE_DIRECTORY",
        "path": super::HOME,
        "size": 0,
        "mode": 0o755,
        "permissions": "drwxr-xr-x",
        "owner": "user",
        "group": "user",
    })
}

/// `POST /process.Process/{method}`: runbox has no shell or processes to
/// start. The refusal is a whole Connect stream (HTTP 200, one end
/// envelope holding the error), which both SDKs read as an error at once.
async fn process(State(state): State<AppState>, headers: HeaderMap, Path(method): Path<String>) -> Response {
    if let Err(refused) = data_caller(&state, &headers).await {
        return refusal_as_rpc(refused);
    }
    let message = format!(
        "runbox has no shell: process.Process/{method} (sandbox.commands) cannot run commands. Run Python or \
         JavaScript with run_code instead; files are on sandbox.files"
    );
    let streaming = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/connect+"));
    if !streaming {
        return rpc_error("unimplemented", &message);
    }
    let end =
        serde_json::to_vec(&json!({ "error": { "code": "unimplemented", "message": message } })).unwrap_or_default();
    let mut envelope = Vec::with_capacity(5 + end.len());
    envelope.push(0x02);
    envelope.extend_from_slice(&u32::try_from(end.len()).unwrap_or(0).to_be_bytes());
    envelope.extend_from_slice(&end);
    let mut response = envelope.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/connect+json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_bodies_are_split_into_their_parts() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"data/a.csv\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\na,b\r\n1,2\r\n--XyZ\r\n\
                     Content-Disposition: form-data; name=\"file\"; filename=\"b.bin\"\r\n\r\n\x00\xff\r\n--XyZ--\r\n";
        let found = parts(body, "XyZ").expect("parts");
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].name.as_str(), found[0].filename.as_deref()), ("file", Some("data/a.csv")));
        assert_eq!(found[0].content, b"a,b\r\n1,2");
        assert_eq!(found[1].content, b"\x00\xff");
        assert_eq!(boundary("multipart/form-data; boundary=\"XyZ\"").as_deref(), Some("XyZ"));
        assert!(parts(b"--XyZ\r\nno end", "XyZ").is_none());
    }
}
