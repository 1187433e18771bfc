//! Per-token quotas: past its queued-plus-running cap or its submissions
//! per second, a token gets 429 with `Retry-After` and its quota in
//! headers, nothing is queued, and other tokens are unaffected.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

async fn post(api: &Api, token: &str, path: &str, body: &Value) -> reqwest::Response {
    api.http.post(api.url(path)).bearer_auth(token).json(body).send().await.expect("post")
}

#[tokio::test]
async fn a_token_past_its_quota_gets_429_and_others_do_not() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_QUOTAS", "alice:2/0,*:0/3")]).await;
    let _worker = start_worker(&redis, &[("RUNBOX_WORKER_CONCURRENCY", "1")]).await;
    let slow = json!({ "language": "js", "code": "const t = Date.now(); while (Date.now() - t < 1500) {}" });

    // Alice: two jobs queued or running at most.
    for _ in 0..2 {
        assert_eq!(post(&api, ALICE, "/v1/jobs", &slow).await.status(), 202);
    }
    let refused = post(&api, ALICE, "/v1/jobs", &slow).await;
    assert_eq!(refused.status(), 429);
    let headers = refused.headers().clone();
    assert_eq!(headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(headers.get("runbox-quota-active").and_then(|v| v.to_str().ok()), Some("2"));
    let body: Value = refused.json().await.expect("json");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    // A batch counts each of its jobs.
    let batch = json!({ "jobs": [slow, slow] });
    assert_eq!(post(&api, ALICE, "/v1/batches", &batch).await.status(), 429);
    let depth = redis.depth().await;
    assert_eq!(depth, 2, "nothing refused was queued");

    // Once they finish, the quota is free again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let response = post(&api, ALICE, "/v1/jobs", &json!({ "language": "js", "code": "1" })).await;
        if response.status() == 202 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the quota was never released");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Bob has the default: 3 submissions per second, any number queued.
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(post(&api, BOB, "/v1/jobs", &json!({ "language": "js", "code": "1" })).await.status().as_u16());
    }
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    // Ten requests span at most two seconds' buckets.
    assert!((3..=6).contains(&accepted), "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 202 || *s == 429), "{statuses:?}");
}
