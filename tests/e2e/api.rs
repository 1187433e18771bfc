//! The HTTP contract: auth, ownership, and an error for every bad input.

use serde_json::{Value, json};

use crate::util::*;

async fn error_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("errors are JSON");
    let code = body["error"]["code"].as_str().expect("error.code").to_owned();
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    (status, code)
}

#[tokio::test]
async fn auth_is_required_and_checked() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let body = json!({ "language": "js", "code": "1" });
    let none = api.http.post(api.url("/v1/jobs")).json(&body).send().await.expect("send");
    assert_eq!(none.headers().get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    assert_eq!(error_of(none).await, (401, "unauthorized".into()));
    let wrong = api
        .http
        .post(api.url("/v1/jobs"))
        .bearer_auth("alice-token-0123456789abcdeX")
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(error_of(wrong).await, (401, "unauthorized".into()));
    let basic =
        api.http.post(api.url("/v1/jobs")).basic_auth("alice", Some(ALICE)).json(&body).send().await.expect("send");
    assert_eq!(error_of(basic).await, (401, "unauthorized".into()));
    for path in ["/v1/runtimes", "/metrics", "/v1/jobs/00000000-0000-4000-8000-000000000000"] {
        let response = api.http.get(api.url(path)).send().await.expect("send");
        assert_eq!(response.status(), 401, "{path}");
    }
    assert_eq!(api.http.get(api.url("/healthz")).send().await.expect("send").status(), 200);
    assert_eq!(api.http.get(api.url("/readyz")).send().await.expect("send").status(), 200);
}

#[tokio::test]
async fn a_job_is_visible_only_to_its_token() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let (status, job) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    assert_eq!(status, 202);
    let id = job["id"].as_str().expect("id");
    assert_eq!(api.get(id, ALICE, None).await.0, 200);
    let (status, body) = api.get(id, BOB, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")));
    let delete = api.http.delete(api.url(&format!("/v1/jobs/{id}"))).bearer_auth(BOB).send().await.expect("send");
    assert_eq!(delete.status(), 404);
    assert_eq!(api.get(id, ALICE, None).await.1["status"], "queued", "bob's DELETE must not touch it");
    for missing in ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "..%2F..%2Fetc"] {
        assert_eq!(api.get(missing, ALICE, None).await.0, 404, "{missing}");
    }
}

#[tokio::test]
async fn every_bad_input_gets_a_json_4xx() {
    let redis = Redis::start().await;
    let limits =
        [("RUNBOX_MAX_CODE_BYTES", "1000"), ("RUNBOX_MAX_STDIN_BYTES", "1000"), ("RUNBOX_MAX_FILES_BYTES", "1000")];
    let api = Api::start(&redis, &limits).await;
    // A fresh connection per request: the server may answer an oversized body
    // with 413 before reading it, and then closes that connection.
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("client");
    let post = |body: String, content_type: &'static str, path: &'static str| {
        http.post(api.url(path)).bearer_auth(ALICE).header("content-type", content_type).body(body).send()
    };
    let json_type = "application/json";
    let cases: Vec<(String, &str, &str, u16, &str)> = vec![
        ("{".into(), json_type, "/v1/jobs", 400, "invalid_json"),
        ("[1]".into(), json_type, "/v1/jobs", 400, "invalid_json"),
        (r#"{"language":"js","code":"1"}"#.into(), "text/plain", "/v1/jobs", 415, "unsupported_media_type"),
        (r#"{"code":"1"}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"cobol","code":"1"}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js"}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":{"a":1}}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":"1","stdin":5}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":"1","timeout_ms":0}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":"1","timeout_ms":10001}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":"1","timeout_ms":"5"}"#.into(), json_type, "/v1/jobs", 400, "invalid_field"),
        (r#"{"language":"js","code":"1","memory":5}"#.into(), json_type, "/v1/jobs", 400, "unknown_field"),
        (r#"{"language":"js","code":"1"}"#.into(), json_type, "/v1/jobs?wait=61", 400, "invalid_wait"),
        (r#"{"language":"js","code":"1"}"#.into(), json_type, "/v1/jobs?wait=-1", 400, "invalid_wait"),
        (
            json!({ "language": "js", "code": "x".repeat(1001) }).to_string(),
            json_type,
            "/v1/jobs",
            413,
            "code_too_large",
        ),
        (
            json!({ "language": "js", "code": "1", "stdin": "x".repeat(1001) }).to_string(),
            json_type,
            "/v1/jobs",
            413,
            "stdin_too_large",
        ),
        (
            json!({ "language": "js", "code": "x".repeat(200_000) }).to_string(),
            json_type,
            "/v1/jobs",
            413,
            "payload_too_large",
        ),
    ];
    for (body, content_type, path, status, code) in cases {
        let response = post(body.clone(), content_type, path).await.expect("send");
        assert_eq!(error_of(response).await, (status, code.to_owned()), "{path} {}", &body[..body.len().min(80)]);
    }
    let wait = http.get(api.url("/v1/jobs/00000000-0000-4000-8000-000000000000?wait=99")).bearer_auth(ALICE);
    assert_eq!(error_of(wait.send().await.expect("send")).await, (400, "invalid_wait".into()));
    let unknown_route = http.get(api.url("/v2/nothing")).send().await.expect("send");
    assert_eq!(error_of(unknown_route).await, (404, "no_route".into()));
}

#[tokio::test]
async fn an_unknown_route_or_method_is_named_in_its_error() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let cases = [
        (reqwest::Method::GET, "/v1/nope", 404, "no_route", "GET /v1/nope"),
        (reqwest::Method::POST, "/v2/jobs", 404, "no_route", "POST /v2/jobs"),
        (reqwest::Method::PUT, "/v1/jobs", 405, "method_not_allowed", "PUT"),
        (reqwest::Method::POST, "/v1/batches/some-id", 405, "method_not_allowed", "POST"),
    ];
    for (method, path, status, code, named) in cases {
        let response = api.http.request(method.clone(), api.url(path)).bearer_auth(ALICE).send().await.expect("send");
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let body: Value = response.json().await.expect("a JSON error body");
        assert_eq!(body["error"]["code"], code, "{method} {path}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains(named)), "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn api_refuses_to_start_without_tokens_or_key() {
    let redis = Redis::start().await;
    for (unset, named) in [("RUNBOX_API_TOKENS", "RUNBOX_API_TOKENS"), ("RUNBOX_SIGNING_KEY", "RUNBOX_SIGNING_KEY")] {
        let mut process = Api::spawn_raw(&redis, &[(unset, "")]).await;
        let status = process.wait(std::time::Duration::from_secs(10)).await;
        assert!(!status.success());
        assert!(process.logs().contains(named), "error does not name {named}: {}", process.logs());
    }
    // A signing key equal to a token would let that token's holder sign jobs.
    let shared = "the-same-secret-0123456789abcdef0123456789";
    let env = [("RUNBOX_API_TOKENS", &*format!("alice:{shared}")), ("RUNBOX_SIGNING_KEY", shared)];
    let mut process = Api::spawn_raw(&redis, &env).await;
    assert!(!process.wait(std::time::Duration::from_secs(10)).await.success());
    assert!(process.logs().contains("equals one of RUNBOX_API_TOKENS"), "{}", process.logs());
}

#[tokio::test]
async fn an_idempotency_key_makes_a_retry_return_the_first_job() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let post = |path: &'static str, token: &'static str, key: &'static str, body: serde_json::Value| {
        let request = api.http.post(api.url(path)).bearer_auth(token).header("Idempotency-Key", key).json(&body);
        async move {
            let response = request.send().await.expect("post");
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap_or_default())
        }
    };
    let job = json!({ "language": "js", "code": "1" });
    let (status, first) = post("/v1/jobs", ALICE, "retry-1", job.clone()).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = post("/v1/jobs", ALICE, "retry-1", job.clone()).await;
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    // Another token's key is its own; a new key is a new job.
    let (_, bobs) = post("/v1/jobs", BOB, "retry-1", job.clone()).await;
    assert_ne!(bobs["id"], first["id"]);
    let (_, other) = post("/v1/jobs", ALICE, "retry-2", job.clone()).await;
    assert_ne!(other["id"], first["id"]);
    let depth = redis.depth().await;
    assert_eq!(depth, 3, "the retry queued nothing");

    let batch = json!({ "jobs": [job.clone(), job.clone()] });
    let (_, first) = post("/v1/batches", ALICE, "batch-1", batch.clone()).await;
    let (status, again) = post("/v1/batches", ALICE, "batch-1", batch).await;
    assert_eq!((status, &again["id"], &again["job_ids"]), (202, &first["id"], &first["job_ids"]), "{again}");

    let (status, error) = post("/v1/jobs", ALICE, "has space", job).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
}
