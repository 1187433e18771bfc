//! Long-poll: a waiter wakes when its job finishes, and a thousand waiters
//! cost a fixed handful of Redis connections.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

#[tokio::test]
async fn get_with_wait_returns_when_the_job_finishes() {
    let stack = Stack::start(&[]).await;
    let (_, job) = stack
        .api
        .submit(
            json!({ "language": "js", "code": "await new Promise((r) => setTimeout(r, 1500)); console.log('done')" }),
            None,
        )
        .await;
    let id = job["id"].as_str().expect("id");
    let started = Instant::now();
    let (status, job) = stack.api.get(id, ALICE, Some(30)).await;
    let waited = started.elapsed();
    assert_eq!(
        (status, job["status"].as_str(), job["stdout"].as_str()),
        (200, Some("completed"), Some("done\n")),
        "{job}"
    );
    assert!(waited >= Duration::from_millis(1000) && waited < Duration::from_secs(10), "waited {waited:?}");
}

#[tokio::test]
async fn wait_expires_with_the_current_state() {
    let stack = Stack::start(&[]).await;
    let (_, job) =
        stack.api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 10000 }), None).await;
    let id = job["id"].as_str().expect("id");
    stack.api.until_status(id, "running", Duration::from_secs(30)).await;
    let started = Instant::now();
    let (status, job) = stack.api.get(id, ALICE, Some(1)).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("running")), "{job}");
    assert!(started.elapsed() >= Duration::from_millis(900), "returned after {:?}", started.elapsed());
    // Submit-with-wait that runs out of time answers 202 with the id and
    // the state the job is in.
    let (status, job) =
        stack.api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 3000 }), Some(1)).await;
    assert_eq!(status, 202, "{job}");
    assert!(job["id"].is_string(), "{job}");
    assert!(["queued", "running"].contains(&job["status"].as_str().unwrap_or("")), "{job}");
}

/// Counts the clients connected to `redis`, less the one asking.
async fn redis_clients(redis: &Redis) -> usize {
    let list: String = redis.cmd(redis::cmd("CLIENT").arg("LIST")).await;
    list.lines().count() - 1
}

#[tokio::test]
async fn a_thousand_waiters_share_a_few_redis_connections() {
    raise_open_file_limit();
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    // No worker: the job stays queued and every waiter waits.
    let (_, job) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    let id = job["id"].as_str().expect("id").to_owned();
    let before = redis_clients(&redis).await;

    let waiters: Vec<_> = (0..1000)
        .map(|_| {
            let http = reqwest::Client::new();
            let url = api.url(&format!("/v1/jobs/{id}?wait=8"));
            tokio::spawn(async move { http.get(url).bearer_auth(ALICE).send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    // Wait until the api holds them all.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        let text = api
            .http
            .get(api.url("/metrics"))
            .bearer_auth(ALICE)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        if text.contains("runbox_api_waiters 1000") {
            break;
        }
        assert!(Instant::now() < deadline, "the api never held 1000 waiters:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = redis_clients(&redis).await;
    println!("redis clients: {before} before, {during} with 1000 waiters");
    assert!(during <= 3, "{during} redis connections for 1000 waiters");
    assert_eq!(during, before, "waiters opened redis connections");

    for waiter in waiters {
        assert_eq!(waiter.await.expect("task").expect("response"), 200);
    }
}
