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

/// `method path` as `token`: the status and the body.
async fn call(api: &Api, token: &str, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
    let mut request = api.http.request(method, api.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    Reply { status, body: response.json().await.unwrap_or(Value::Null) }
}

struct Reply {
    status: u16,
    body: Value,
}

/// What `/v1/runtimes` says of the one worker.
async fn the_worker(api: &Api) -> Value {
    let runtimes = call(api, ALICE, reqwest::Method::GET, "/v1/runtimes", None).await.body;
    runtimes["workers"][0].clone()
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
