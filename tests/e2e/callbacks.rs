//! Signed callbacks through the real stack, to a receiver on loopback that
//! the operator allowlisted: what arrives, how it is signed, that errors
//! are retried under one delivery id, and which addresses are refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::*;

const SECRET: &str = "alice-callback-secret-0123456789";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map_or("", |(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// A loopback HTTP receiver answering each request with the next status
/// of `answers` (200 once they run out).
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(answers: Vec<u16>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().expect("addr").port());
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let answers = Arc::new(Mutex::new(answers.into_iter()));
        let record = got.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (record, answers) = (record.clone(), answers.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else { return };
                    record.lock().expect("lock").push(request);
                    let status = answers.lock().expect("lock").next().unwrap_or(200);
                    let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        Receiver { url, got }
    }

    /// Waits until `n` requests have arrived, and returns them.
    async fn wait_for(&self, n: usize, limit: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let got = self.got.lock().expect("lock").clone();
            if got.len() >= n || tokio::time::Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let headers: Vec<(String, String)> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Received { headers, body: buf[head_end..head_end + length].to_vec() })
}

/// Checks `Runbox-Signature` the way docs/api.md (Callbacks) tells receivers to.
fn verify(received: &Received) {
    let signature = received.header("Runbox-Signature");
    let (t, v1) = signature.split_once(",v1=").expect("t=...,v1=...");
    let t = t.strip_prefix("t=").expect("t=");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&received.body);
    assert_eq!(hex::encode(mac.finalize().into_bytes()), v1, "signature of {received:?}");
}

async fn stack() -> (Api, Redis, Process) {
    let redis = Redis::start().await;
    let env = [("RUNBOX_CALLBACK_SECRETS", &*format!("alice:{SECRET}")), ("RUNBOX_CALLBACK_ALLOW", "127.0.0.1")];
    let api = Api::start(&redis, &env).await;
    let worker = start_worker(&redis, &[]).await;
    (api, redis, worker)
}

#[tokio::test]
async fn finished_jobs_and_batches_are_posted_signed_and_retried() {
    let (api, _redis, _worker) = stack().await;
    // The first attempt gets a 500: the second, a second later, gets through.
    let receiver = Receiver::start(vec![500]).await;
    let (status, job) =
        api.submit(json!({ "language": "py", "code": "print(6 * 7)", "callback_url": receiver.url }), None).await;
    assert_eq!(status, 202, "{job}");
    let got = receiver.wait_for(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].header("Runbox-Delivery"), got[1].header("Runbox-Delivery"), "one delivery id");
    assert_eq!(got[1].header("Runbox-Event"), "job.finished");
    let body = got[1].json();
    assert_eq!(
        (&body["id"], body["stdout"].as_str(), body["status"].as_str()),
        (&job["id"], Some("42\n"), Some("completed"))
    );
    verify(&got[0]);
    verify(&got[1]);

    // A batch is posted once, when its last job finishes, without its jobs.
    let receiver = Receiver::start(vec![]).await;
    let batch = json!({
        "jobs": [{ "language": "js", "code": "console.log(1)" }, { "language": "py", "code": "print(2)" }],
        "callback_url": receiver.url,
    });
    let response = api.http.post(api.url("/v1/batches")).bearer_auth(ALICE).json(&batch).send().await.expect("post");
    let submitted: Value = response.json().await.expect("json");
    let got = receiver.wait_for(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "{got:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.got.lock().expect("lock").len(), 1, "posted once");
    assert_eq!(got[0].header("Runbox-Event"), "batch.finished");
    let body = got[0].json();
    assert_eq!((&body["id"], body["status"].as_str()), (&submitted["id"], Some("finished")), "{body}");
    assert_eq!(body["counts"], json!({ "completed": 2 }));
    verify(&got[0]);

    // A cancelled queued job is finished too, and called back.
    let receiver = Receiver::start(vec![]).await;
    let (_, blocker) = api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 3000 }), None).await;
    let (_, blocker2) = api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 3000 }), None).await;
    let (_, queued) =
        api.submit(json!({ "language": "js", "code": "console.log(1)", "callback_url": receiver.url }), None).await;
    let id = queued["id"].as_str().expect("id");
    let response = api.http.delete(api.url(&format!("/v1/jobs/{id}"))).bearer_auth(ALICE).send().await.expect("delete");
    let cancelled: Value = response.json().await.expect("json");
    let got = receiver.wait_for(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].json()["status"], cancelled["status"], "{cancelled}");
    drop((blocker, blocker2));
}

#[tokio::test]
async fn callback_urls_are_checked_at_submission() {
    let (api, _redis, _worker) = stack().await;
    let job = |url: &str| json!({ "language": "py", "code": "1", "callback_url": url });
    for (url, needle) in [
        ("http://10.0.0.1/hook", "not a public address"),
        ("http://169.254.169.254/latest", "not a public address"),
        ("http://[::1]:9/hook", "not a public address"),
        ("http://127.0.0.2:9/hook", "not a public address"),
        ("ftp://127.0.0.1/hook", "http and https"),
        ("http://user:pw@127.0.0.1/hook", "credentials"),
        ("not a url", "not a valid URL"),
    ] {
        let (status, error) = api.submit(job(url), None).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{url}: {error}");
        assert!(error["error"]["message"].as_str().unwrap_or("").contains(needle), "{url}: {error}");
    }
    // Bob has no callback secret.
    let response = api.http.post(api.url("/v1/jobs")).bearer_auth(BOB).json(&job("http://127.0.0.1:9/")).send().await;
    let error: Value = response.expect("post").json().await.expect("json");
    assert!(error["error"]["message"].as_str().unwrap_or("").contains("RUNBOX_CALLBACK_SECRETS"), "{error}");
    // A batch's jobs cannot have their own.
    let batch = json!({ "jobs": [job("http://127.0.0.1:9/")] });
    let response = api.http.post(api.url("/v1/batches")).bearer_auth(ALICE).json(&batch).send().await;
    let error: Value = response.expect("post").json().await.expect("json");
    assert_eq!(error["error"]["code"], "invalid_batch", "{error}");
}
