//! DELETE ends a job: a queued one never runs, a running one is killed
//! within a second.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::*;

async fn delete(api: &Api, id: &str) -> (u16, Value) {
    let response = api.http.delete(api.url(&format!("/v1/jobs/{id}"))).bearer_auth(ALICE).send().await.expect("send");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

#[tokio::test]
async fn running_job_is_killed_within_a_second() {
    let stack = Stack::start(&[]).await;
    let (_, job) = stack
        .api
        .submit(json!({ "language": "js", "code": "console.log('started'); for (;;) {}", "timeout_ms": 10000 }), None)
        .await;
    let id = job["id"].as_str().expect("id");
    stack.api.until_status(id, "running", Duration::from_secs(30)).await;
    let started = Instant::now();
    let (status, job) = delete(&stack.api, id).await;
    assert_eq!(status, 200);
    assert_eq!(job["status"], "cancelled", "{job}");
    assert!(started.elapsed() < Duration::from_secs(1), "cancel took {:?}", started.elapsed());
    assert!(job["exit_code"].is_null());
    // Cancelling again is harmless.
    assert_eq!(delete(&stack.api, id).await.1["status"], "cancelled");
}

#[tokio::test]
async fn queued_job_never_runs() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let (_, job) = api.submit(json!({ "language": "py", "code": "print('should not run')" }), None).await;
    let id = job["id"].as_str().expect("id").to_owned();
    let (status, job) = delete(&api, &id).await;
    assert_eq!((status, job["status"].as_str()), (200, Some("cancelled")), "{job}");
    let depth = redis.depth().await;
    assert_eq!(depth, 0, "the entry left the queue");

    let worker = start_worker(&redis, &[]).await;
    let (_, after) = api.submit(json!({ "language": "js", "code": "console.log('next')" }), Some(30)).await;
    assert_eq!(after["stdout"], "next\n");
    let (_, job) = api.get(&id, ALICE, None).await;
    assert_eq!(job["status"], "cancelled");
    assert!(job["started_at"].is_null(), "{job}");
    assert!(!worker.logs().contains(&id), "the worker touched the cancelled job");
}

#[tokio::test]
async fn a_cancel_whose_message_was_lost_still_kills_the_job() {
    // The flag DELETE sets, without the message it publishes: as when the
    // message went out while the worker's subscription was down.
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let _worker = start_worker(&redis, &[]).await;
    let (_, job) = api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 9000 }), None).await;
    let id = job["id"].as_str().unwrap_or_else(|| panic!("{job}"));
    api.until_status(id, "running", Duration::from_secs(30)).await;
    let started = Instant::now();
    let _: i64 = redis.cmd(redis::cmd("HSET").arg(keys().job(id)).arg("cancel").arg("1")).await;
    let job = api.until_status(id, "cancelled", Duration::from_secs(10)).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(job["exit_code"].is_null(), "{job}");
}
