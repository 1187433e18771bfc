//! When queued plus running jobs reach the cap, submits get an immediate
//! 503, and a concurrent burst never overshoots the cap.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::json;

use crate::util::*;

#[tokio::test]
async fn burst_respects_the_exact_cap() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_MAX_QUEUE", "7")]).await;
    let submits = (0..60).map(|i| {
        let http = api.http.clone();
        let url = api.url("/v1/jobs");
        async move {
            let started = Instant::now();
            let response = http
                .post(url)
                .bearer_auth(ALICE)
                .json(&json!({ "language": "js", "code": format!("console.log({i})") }))
                .send()
                .await
                .expect("send");
            let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_owned());
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.expect("json");
            (status, retry_after, body, started.elapsed())
        }
    });
    let results = join_all(submits).await;
    let accepted = results.iter().filter(|r| r.0 == 202).count();
    let refused: Vec<_> = results.iter().filter(|r| r.0 == 503).collect();
    assert_eq!(accepted, 7, "accepted {accepted}");
    assert_eq!(refused.len(), 53);
    for (_, retry_after, body, elapsed) in refused {
        assert_eq!(retry_after.as_deref(), Some("1"));
        assert_eq!(body["error"]["code"], "queue_full");
        assert!(*elapsed < Duration::from_secs(2), "a 503 took {elapsed:?}");
    }
    let depth = redis.depth().await;
    assert_eq!(depth, 7);

    // Capacity comes back as jobs finish.
    let _worker = start_worker(&redis, &[]).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
        if status == 202 {
            break;
        }
        assert!(Instant::now() < deadline, "the queue never drained");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
