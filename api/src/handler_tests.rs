//! The routes as a client meets them, through `app(state).oneshot`: what a
//! request that never reaches Redis is answered (no token, a body that is
//! not JSON, a field that is wrong), status, code and field alike. The
//! routes that do reach Redis are tested against a real one in `tests/e2e`.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::config::ApiLimits;
use crate::{AppState, app};

const TOKEN: &str = "alice-token-0123456789";

/// Sends `method path` with `body` as JSON (and the token, if `auth`).
async fn send(method: &str, path: &str, body: Option<Value>, auth: bool) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if auth {
        request = request.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    }
    let body = match body {
        Some(body) => {
            request = request.header(header::CONTENT_TYPE, "application/json");
            Body::from(body.to_string())
        }
        None => Body::empty(),
    };
    let response =
        app(AppState::for_tests(TOKEN)).oneshot(request.body(body).expect("a request")).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("a body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn error(body: &Value) -> (&str, &str) {
    (body["error"]["code"].as_str().unwrap_or(""), body["error"]["field"].as_str().unwrap_or(""))
}

#[tokio::test]
async fn a_request_without_the_token_is_refused_before_its_body_is_read() {
    let (status, body) = send("POST", "/v1/jobs", Some(json!({"language": "py"})), false).await;
    assert_eq!((status, error(&body).0), (StatusCode::UNAUTHORIZED, "unauthorized"), "{body}");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_415_or_400() {
    let request = Request::post("/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("print(1)"))
        .expect("a request");
    let response = app(AppState::for_tests(TOKEN)).oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let request = Request::post("/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{"))
        .expect("a request");
    let response = app(AppState::for_tests(TOKEN)).oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_wrong_field_is_named_in_the_error_body() {
    let cases = [
        (json!({"code": "1"}), StatusCode::BAD_REQUEST, "invalid_field", "language"),
        (json!({"language": "py", "code": "1", "timeout": 5}), StatusCode::BAD_REQUEST, "unknown_field", "timeout"),
        (
            json!({"language": "py", "code": "1", "files": [{"path": "../x", "content": ""}]}),
            StatusCode::BAD_REQUEST,
            "invalid_field",
            "files[0].path",
        ),
        (
            json!({"language": "py", "code": "x".repeat(ApiLimits::default().max_code_bytes + 1)}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "code_too_large",
            "code",
        ),
    ];
    for (job, status, code, field) in cases {
        let (got, body) = send("POST", "/v1/jobs", Some(job), true).await;
        assert_eq!((got, error(&body)), (status, (code, field)), "{body}");
    }
}

#[tokio::test]
async fn a_batch_names_each_bad_job_by_index_and_field() {
    let batch = json!({"jobs": [{"language": "py", "code": "1"}, {"language": "py", "code": 1}, 7]});
    let (status, body) = send("POST", "/v1/batches", Some(batch), true).await;
    assert_eq!((status, error(&body).0), (StatusCode::BAD_REQUEST, "invalid_batch"), "{body}");
    let jobs: Vec<(u64, &str)> = body["error"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| (j["index"].as_u64().unwrap_or(99), j["field"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(jobs, [(1, "code"), (2, "")], "{body}");
}

#[tokio::test]
async fn a_session_and_an_exec_are_checked_before_anything_is_created() {
    let (status, body) = send("POST", "/v1/sessions", Some(json!({"language": "py", "idle_timeout_s": 0})), true).await;
    assert_eq!((status, error(&body)), (StatusCode::BAD_REQUEST, ("invalid_field", "idle_timeout_s")), "{body}");
    let (status, body) = send("POST", "/v1/sessions", Some(json!({"language": "ts"})), true).await;
    assert_eq!((status, error(&body)), (StatusCode::BAD_REQUEST, ("invalid_field", "language")), "{body}");
}

#[tokio::test]
async fn unknown_routes_and_methods_say_so() {
    let (status, body) = send("GET", "/v2/jobs", None, true).await;
    assert_eq!((status, error(&body).0), (StatusCode::NOT_FOUND, "no_route"), "{body}");
    let (status, body) = send("PUT", "/v1/jobs", None, true).await;
    assert_eq!((status, error(&body).0), (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"), "{body}");
}

#[tokio::test]
async fn the_openapi_document_is_served_without_a_token() {
    let (status, body) = send("GET", "/openapi.json", None, false).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["components"]["schemas"]["JobRequest"]["properties"]["timeout_ms"].is_object(), "{body}");
}
