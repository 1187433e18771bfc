//! Sessions against the fleet's capacity: a session holds a place of its
//! own on its worker, never a job slot, so one token's sessions cannot
//! starve another token's jobs; a token holds at most its fair share of
//! the fleet's session places; a session asked for when every place is
//! taken is refused at once; and a compatible API's session ends with its
//! request, however the request ends.

use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

/// Calls `check` until it returns Some, every 100 ms, for at most `limit`:
/// a deadline for what must happen, never a measure of how fast.
async fn until<T, F: Future<Output = Option<T>>>(what: &str, limit: Duration, mut check: impl FnMut() -> F) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `method path` as `token`: the status, the `Retry-After` header, the body.
async fn call(api: &Api, token: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
    let mut request = api.http.request(method, api.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    Reply { status, retry_after, body: response.json().await.unwrap_or(Value::Null) }
}

struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Reply {
    fn code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }
}

async fn create(api: &Api, token: &str, language: &str) -> Reply {
    call(api, token, reqwest::Method::POST, "/v1/sessions", Some(json!({ "language": language }))).await
}

/// What `/v1/runtimes` says of the one worker.
async fn the_worker(api: &Api) -> Value {
    let runtimes = call(api, ALICE, reqwest::Method::GET, "/v1/runtimes", None).await.body;
    runtimes["workers"][0].clone()
}

/// Opens sessions as `token` until one is refused; returns the ids opened
/// and the refusal.
async fn open_all(api: &Api, token: &str) -> (Vec<String>, Reply) {
    let mut opened = Vec::new();
    loop {
        let reply = create(api, token, "javascript").await;
        if reply.status != 201 {
            return (opened, reply);
        }
        assert_eq!(reply.body["status"], "idle", "{}", reply.body);
        opened.push(reply.body["id"].as_str().expect("id").to_owned());
        assert!(opened.len() <= 16, "no cap stopped {token}'s sessions");
    }
}

/// The issue this answers: one token opened two JavaScript sessions on a
/// worker with two slots, and another token's one-line job stayed queued,
/// since each session held a job slot for its whole life. Now sessions
/// have places of their own, and a token may hold at most half the
/// fleet's: here 4 places, so 2 each.
#[tokio::test]
async fn one_tokens_sessions_leave_another_tokens_jobs_their_slots() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let worker = [("RUNBOX_WORKER_CONCURRENCY", "2"), ("RUNBOX_WORKER_SESSIONS", "4")];
    let _worker = start_worker(&redis, &worker).await;

    let (opened, refused) = open_all(&api, ALICE).await;
    assert_eq!(opened.len(), 2, "alice's fair share of 4 places");
    assert_eq!((refused.status, refused.code()), (429, Some("too_many_sessions")), "{}", refused.body);
    assert!(refused.retry_after.is_some(), "a 429 says when to retry");

    // Both job slots are free for bob, whatever alice's sessions hold.
    let job = run_as(&api, BOB, &json!({ "language": "javascript", "code": "console.log('bob')" })).await;
    assert_eq!(job["stdout"], "bob\n", "{job}");
    let bodies: Vec<Value> =
        (0..2).map(|i| json!({ "language": "javascript", "code": format!("console.log({i})") })).collect();
    for job in futures_util::future::join_all(bodies.iter().map(|body| run_as(&api, BOB, body))).await {
        assert_eq!(job["status"], "completed", "{job}");
    }

    // Alice's sessions still answer, and bob has a share of his own.
    for id in &opened {
        let exec = call(
            &api,
            ALICE,
            reqwest::Method::POST,
            &format!("/v1/sessions/{id}/exec"),
            Some(json!({ "code": "console.log(1)" })),
        )
        .await;
        assert_eq!((exec.status, exec.body["stdout"].as_str()), (200, Some("1\n")), "{}", exec.body);
    }
    let bobs = create(&api, BOB, "javascript").await;
    assert_eq!(bobs.status, 201, "{}", bobs.body);
    until("the worker's heartbeat counting 3 sessions", Duration::from_secs(30), || async {
        (the_worker(&api).await["sessions"] == 3).then_some(())
    })
    .await;
}

/// Past the fleet's session capacity a session is refused at once with a
/// 503 and `Retry-After`, rather than queued behind jobs or other
/// sessions; a place comes free when a session ends.
#[tokio::test]
async fn a_session_past_the_fleets_capacity_is_refused_at_once() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let _worker = start_worker(&redis, &[("RUNBOX_WORKER_CONCURRENCY", "1"), ("RUNBOX_WORKER_SESSIONS", "1")]).await;

    let alices = create(&api, ALICE, "python").await;
    assert_eq!(alices.status, 201, "{}", alices.body);
    let id = alices.body["id"].as_str().expect("id").to_owned();
    let refused = create(&api, BOB, "javascript").await;
    assert_eq!((refused.status, refused.code()), (503, Some("sessions_full")), "{}", refused.body);
    assert!(refused.retry_after.is_some(), "a 503 says when to retry");
    let listed = call(&api, BOB, reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(listed.body["sessions"], json!([]), "a refused session leaves nothing behind");

    // The job slot is the worker's own, full or not.
    let job = run_as(&api, BOB, &json!({ "language": "python", "code": "print('bob')" })).await;
    assert_eq!(job["stdout"], "bob\n", "{job}");

    let closed = call(&api, ALICE, reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None).await;
    assert_eq!(closed.status, 200, "{}", closed.body);
    let bobs = create(&api, BOB, "javascript").await;
    assert_eq!(bobs.status, 201, "the place alice's session left: {}", bobs.body);
}

/// A client posted `run_jupyter` and closed the connection after 2.5 s; the
/// session stayed alive for its idle timeout, holding a place and one of
/// the token's sessions. axum drops the handler of a client that has gone,
/// and the handler's guard then destroys the session: it ends `closed`,
/// not `expired` by its idle timeout, which is the backstop.
#[tokio::test]
async fn a_run_jupyter_whose_client_leaves_destroys_its_session() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    let request = {
        let (http, url) = (api.http.clone(), api.url("/sandbox-fusion/run_jupyter"));
        let body = json!({ "cells": ["x = 1", "import time\ntime.sleep(8)", "x"] });
        tokio::spawn(async move { http.post(url).bearer_auth(ALICE).json(&body).send().await })
    };
    // The notebook's session, once its slow cell runs.
    let id = until("the notebook's session running a cell", Duration::from_secs(60), || async {
        let listed = call(api, ALICE, reqwest::Method::GET, "/v1/sessions", None).await.body;
        let session = &listed["sessions"][0];
        (session["status"] == "busy" && session["execs"] == 1).then(|| session["id"].as_str().expect("id").to_owned())
    })
    .await;
    request.abort();
    assert!(request.await.expect_err("aborted").is_cancelled());

    let session = until("the session's end", Duration::from_secs(120), || async {
        let session = call(api, ALICE, reqwest::Method::GET, &format!("/v1/sessions/{id}"), None).await.body;
        (session["status"] != "busy" && session["status"] != "idle").then_some(session)
    })
    .await;
    assert_eq!(
        (session["status"].as_str(), session["ended_reason"].as_str()),
        (Some("closed"), Some("destroyed by its owner")),
        "{session}"
    );
    until("its worker's place free", Duration::from_secs(30), || async {
        (the_worker(api).await["sessions"] == 0).then_some(())
    })
    .await;
    let listed = call(api, ALICE, reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!((listed.status, &listed.body["sessions"]), (200, &json!([])), "{}", listed.body);
}
