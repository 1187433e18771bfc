//! Tenancy: with two tokens on one stack (alice and bob, as
//! `RUNBOX_API_TOKENS` holds them in every test), nothing alice makes can
//! be read, changed, cancelled, replayed or listed by bob, on any surface:
//! jobs, batches, sessions, checkpoints, idempotency keys, callbacks,
//! `/judge0`, `/piston` and `/mcp`.
//!
//! Every refusal is checked twice over: bob gets the exact status and code
//! docs/api.md documents, and that answer is the same, byte for byte, as the
//! answer for an id that does not exist, so another token's resource is as
//! good as absent. Every refusal also has a positive control: alice does
//! the same operation on the same resource and it works, so a test cannot
//! pass because the operation fails for everyone. After bob's attempts,
//! alice's resource is checked to be unchanged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::util::*;

/// An id no job, batch, session or checkpoint has: what "absent" looks like.
const NOBODY: &str = "7f6c1a52-0c2e-4a53-9d47-3f1e2b8c9a10";

/// A JavaScript program that runs about `ms` milliseconds, then prints `text`.
fn sleeper(ms: u64, text: &str) -> Value {
    json!({ "language": "js", "code": format!("await new Promise((r) => setTimeout(r, {ms})); console.log({text:?})") })
}

fn printer(text: &str) -> Value {
    json!({ "language": "js", "code": format!("console.log({text:?})") })
}

/// One token's view of the api.
struct As<'a> {
    api: &'a Api,
    token: &'a str,
}

impl As<'_> {
    async fn send(&self, method: Method, path: &str, body: Option<&Value>, key: Option<&str>) -> (u16, Value) {
        let mut request = self.api.http.request(method, self.api.url(path)).bearer_auth(self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(Method::GET, path, None, None).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(Method::POST, path, Some(body), None).await
    }

    async fn post_keyed(&self, path: &str, key: &str, body: &Value) -> (u16, Value) {
        self.send(Method::POST, path, Some(body), Some(key)).await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(Method::DELETE, path, None, None).await
    }
}

/// Asserts that `got` is the native error `status`/`code`, with a message.
fn assert_error(got: &(u16, Value), status: u16, code: &str, what: &str) {
    assert_eq!((got.0, got.1["error"]["code"].as_str()), (status, Some(code)), "{what}: {}", got.1);
    assert!(got.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {}", got.1);
}

/// Asserts that bob's answer is `status`/`code` and the very answer an
/// absent resource gets.
fn assert_absent(got: &(u16, Value), absent: &(u16, Value), status: u16, code: &str, what: &str) {
    assert_error(got, status, code, what);
    assert_eq!(got, absent, "{what}: bob's answer differs from the answer for an absent id");
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().unwrap_or_else(|| panic!("no id in {value}")).to_owned()
}

async fn stack(api_env: &[(&str, &str)], worker_env: &[(&str, &str)]) -> (Api, Redis, Process) {
    let redis = Redis::start().await;
    let api = Api::start(&redis, api_env).await;
    let worker = start_worker(&redis, worker_env).await;
    (api, redis, worker)
}

#[tokio::test]
async fn tenancy_jobs_cannot_be_read_cancelled_or_replayed_by_another_token() {
    let (api, _redis, _worker) = stack(&[], &[]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });

    // A finished job, made with an idempotency key.
    let (status, queued) = alice.post_keyed("/v1/jobs", "shared-key", &printer("alice-secret")).await;
    assert_eq!(status, 202, "{queued}");
    let id = id_of(&queued);
    let path = format!("/v1/jobs/{id}");
    let (status, done) = alice.get(&format!("{path}?wait=60")).await;
    assert_eq!((status, done["stdout"].as_str()), (200, Some("alice-secret\n")), "{done}");

    // Read, plain and long-polled.
    let absent = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.get(&path).await, &absent, 404, "not_found", "bob GET");
    assert_absent(&bob.get(&format!("{path}?wait=1")).await, &absent, 404, "not_found", "bob GET ?wait");
    // Cancel a finished job: for alice it changes nothing (200); for bob it is absent.
    let absent_delete = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.delete(&path).await, &absent_delete, 404, "not_found", "bob DELETE of a finished job");
    let (status, unchanged) = alice.delete(&path).await;
    assert_eq!((status, unchanged["status"].as_str()), (200, Some("completed")), "{unchanged}");

    // Replay: alice's retry answers with her job, finished (the control)...
    let (status, again) = alice.post_keyed("/v1/jobs", "shared-key", &printer("ignored")).await;
    assert_eq!((status, id_of(&again), again["stdout"].as_str()), (200, id.clone(), Some("alice-secret\n")), "{again}");
    // ...while bob's request with the same key is a new job of bob's, queued
    // now, which shows nothing of alice's.
    let (status, bobs) = bob.post_keyed("/v1/jobs", "shared-key", &printer("bob-output")).await;
    assert_eq!((status, bobs["status"].as_str()), (202, Some("queued")), "{bobs}");
    let bob_id = id_of(&bobs);
    assert_ne!(bob_id, id, "bob's key gave him alice's job");
    assert!(!bobs.to_string().contains("alice-secret"), "{bobs}");
    let (status, bob_done) = bob.get(&format!("/v1/jobs/{bob_id}?wait=60")).await;
    assert_eq!((status, bob_done["stdout"].as_str()), (200, Some("bob-output\n")), "{bob_done}");
    // The key is now bob's own too, and alice's still hers; each sees only their own job.
    let (status, bob_again) = bob.post_keyed("/v1/jobs", "shared-key", &printer("ignored")).await;
    assert_eq!((status, id_of(&bob_again)), (200, bob_id.clone()), "{bob_again}");
    let (status, alice_again) = alice.post_keyed("/v1/jobs", "shared-key", &printer("ignored")).await;
    assert_eq!((status, id_of(&alice_again)), (200, id.clone()), "{alice_again}");
    let alice_absent = alice.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&alice.get(&format!("/v1/jobs/{bob_id}")).await, &alice_absent, 404, "not_found", "alice GET bob's");

    // Cancel a running job: bob's DELETE is refused and the job runs on;
    // alice's own DELETE then cancels it.
    let (status, running) = alice.post("/v1/jobs", &sleeper(5000, "never")).await;
    assert_eq!(status, 202, "{running}");
    let running = id_of(&running);
    api.until_status(&running, "running", Duration::from_secs(30)).await;
    let path = format!("/v1/jobs/{running}");
    assert_absent(&bob.delete(&path).await, &absent_delete, 404, "not_found", "bob DELETE of a running job");
    let (_, still) = alice.get(&path).await;
    assert_eq!(still["status"], "running", "bob's DELETE touched alice's job: {still}");
    let (status, cancelled) = alice.delete(&path).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");

    // Nothing shared names alice's jobs.
    let response = api.http.get(api.url("/metrics")).bearer_auth(BOB).send().await.expect("metrics");
    let metrics = response.text().await.expect("text");
    assert!(!metrics.contains(&id) && !metrics.contains(&running), "/metrics names a job");
}

#[tokio::test]
async fn tenancy_batches_cannot_be_read_streamed_cancelled_or_replayed_by_another_token() {
    let (api, _redis, _worker) = stack(&[], &[]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let body = json!({ "jobs": [printer("alice-1"), printer("alice-2")] });
    let (status, submitted) = alice.post_keyed("/v1/batches", "batch-key", &body).await;
    assert_eq!(status, 202, "{submitted}");
    let id = id_of(&submitted);
    let job_ids: Vec<String> =
        submitted["job_ids"].as_array().expect("job_ids").iter().filter_map(Value::as_str).map(str::to_owned).collect();
    assert_eq!(job_ids.len(), 2);
    let path = format!("/v1/batches/{id}");
    let (status, batch) = alice.get(&format!("{path}?wait=60")).await;
    assert_eq!((status, batch["status"].as_str()), (200, Some("finished")), "{batch}");

    let absent = bob.get(&format!("/v1/batches/{NOBODY}")).await;
    assert_absent(&bob.get(&path).await, &absent, 404, "not_found", "bob GET batch");
    assert_absent(&bob.get(&format!("{path}?wait=1&limit=10")).await, &absent, 404, "not_found", "bob GET ?wait");
    // The result stream: alice gets both jobs; bob gets the JSON 404 and no stream.
    let response = api.http.get(api.url(&format!("{path}/results"))).bearer_auth(ALICE).send().await.expect("get");
    assert_eq!(response.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(30), response.text()).await.expect("ends").expect("body");
    assert_eq!(text.lines().count(), 2, "{text}");
    let absent_results = bob.get(&format!("/v1/batches/{NOBODY}/results")).await;
    assert_absent(&bob.get(&format!("{path}/results")).await, &absent_results, 404, "not_found", "bob results");
    // Each of its jobs, read and cancelled one by one.
    let absent_job = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    let absent_job_delete = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
    for job in &job_ids {
        assert_eq!(alice.get(&format!("/v1/jobs/{job}")).await.0, 200);
        assert_absent(&bob.get(&format!("/v1/jobs/{job}")).await, &absent_job, 404, "not_found", "bob GET batch job");
        assert_absent(
            &bob.delete(&format!("/v1/jobs/{job}")).await,
            &absent_job_delete,
            404,
            "not_found",
            "bob DELETE batch job",
        );
    }

    // Replay: alice's retry is her batch; bob's, with the same key, is a
    // batch of his own with jobs of his own.
    let (status, again) = alice.post_keyed("/v1/batches", "batch-key", &json!({ "jobs": [printer("x")] })).await;
    assert_eq!((status, &again["id"], &again["job_ids"]), (202, &submitted["id"], &submitted["job_ids"]), "{again}");
    let (status, bobs) = bob.post_keyed("/v1/batches", "batch-key", &json!({ "jobs": [printer("bob-1")] })).await;
    assert_eq!(status, 202, "{bobs}");
    let bob_batch = id_of(&bobs);
    assert_ne!(bob_batch, id, "bob's key gave him alice's batch");
    let bob_jobs = bobs["job_ids"].as_array().expect("job_ids");
    assert_eq!(bob_jobs.len(), 1, "{bobs}");
    assert!(bob_jobs.iter().all(|j| !job_ids.iter().any(|a| j == a)), "{bobs}");
    let (status, bob_view) = bob.get(&format!("/v1/batches/{bob_batch}?wait=60")).await;
    assert_eq!((status, bob_view["jobs"][0]["stdout"].as_str()), (200, Some("bob-1\n")), "{bob_view}");
    let alice_absent = alice.get(&format!("/v1/batches/{NOBODY}")).await;
    let alice_get = alice.get(&format!("/v1/batches/{bob_batch}")).await;
    assert_absent(&alice_get, &alice_absent, 404, "not_found", "alice GET bob's batch");

    // Cancel a running batch: bob's DELETE leaves it running; alice's cancels it.
    let (_, slow) = alice.post("/v1/batches", &json!({ "jobs": [sleeper(5000, "a"), sleeper(5000, "b")] })).await;
    let slow = id_of(&slow);
    let path = format!("/v1/batches/{slow}");
    let absent_delete = bob.delete(&format!("/v1/batches/{NOBODY}")).await;
    assert_absent(&bob.delete(&path).await, &absent_delete, 404, "not_found", "bob DELETE batch");
    let (_, still) = alice.get(&path).await;
    assert_eq!((still["status"].as_str(), still["counts"].get("cancelled")), (Some("running"), None), "{still}");
    let (status, cancelled) = alice.delete(&path).await;
    assert_eq!((status, &cancelled["counts"]), (200, &json!({ "cancelled": 2 })), "{cancelled}");
}

/// A client of the session routes.
impl As<'_> {
    async fn open_session(&self, body: &Value) -> String {
        let (status, session) = self.post("/v1/sessions", body).await;
        assert_eq!((status, session["status"].as_str()), (201, Some("idle")), "{session}");
        id_of(&session)
    }

    async fn exec(&self, id: &str, code: &str) -> (u16, Value) {
        self.post(&format!("/v1/sessions/{id}/exec"), &json!({ "code": code })).await
    }

    async fn session_ids(&self) -> Vec<String> {
        let (status, listed) = self.get("/v1/sessions").await;
        assert_eq!(status, 200, "{listed}");
        listed["sessions"].as_array().expect("sessions").iter().map(id_of).collect()
    }
}

#[tokio::test]
async fn tenancy_sessions_and_checkpoints_cannot_be_used_by_another_token() {
    // Alice's session, her fork, her restore and bob's own session at once.
    let (api, _redis, _worker) = stack(&[], &[("RUNBOX_WORKER_CONCURRENCY", "4")]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let language = json!({ "language": "javascript" });
    let id = alice.open_session(&language).await;
    let (status, set) = alice.exec(&id, "let secret = 'alice'; console.log('set')").await;
    assert_eq!((status, set["stdout"].as_str()), (200, Some("set\n")), "{set}");
    let exec_job = id_of(&set);
    let (status, checkpoint) = alice.post(&format!("/v1/sessions/{id}/checkpoints"), &json!({})).await;
    assert_eq!(status, 201, "{checkpoint}");
    let checkpoint = id_of(&checkpoint);
    let bobs_own = bob.open_session(&language).await;

    // Every operation on the session: alice's works, bob's finds nothing.
    let session = format!("/v1/sessions/{id}");
    let absent_session = format!("/v1/sessions/{NOBODY}");
    let (status, view) = alice.get(&session).await;
    assert_eq!((status, view["execs"].as_u64()), (200, Some(1)), "{view}");
    assert_absent(&bob.get(&session).await, &bob.get(&absent_session).await, 404, "no_session", "bob GET session");
    let overwrite = "secret = 'bob'; console.log(secret)";
    assert_absent(&bob.exec(&id, overwrite).await, &bob.exec(NOBODY, overwrite).await, 404, "no_session", "bob exec");
    let bob_checkpoint = bob.post(&format!("{session}/checkpoints"), &json!({})).await;
    let absent_checkpoint = bob.post(&format!("{absent_session}/checkpoints"), &json!({})).await;
    assert_absent(&bob_checkpoint, &absent_checkpoint, 404, "no_session", "bob checkpoint");
    let bob_fork = bob.post(&format!("{session}/fork"), &json!({})).await;
    let absent_fork = bob.post(&format!("{absent_session}/fork"), &json!({})).await;
    assert_absent(&bob_fork, &absent_fork, 404, "no_session", "bob fork");
    let absent_delete = bob.delete(&absent_session).await;
    assert_absent(&bob.delete(&session).await, &absent_delete, 404, "no_session", "bob DELETE session");
    // The exec is a job of alice's.
    assert_eq!(alice.get(&format!("/v1/jobs/{exec_job}")).await.0, 200);
    let absent_job = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.get(&format!("/v1/jobs/{exec_job}")).await, &absent_job, 404, "not_found", "bob GET exec");

    // Alice's checkpoint: bob cannot start from it, even naming another
    // language (whose 400 would tell him what the checkpoint holds).
    let absent = bob.post("/v1/sessions", &json!({ "from_checkpoint": NOBODY })).await;
    for body in [
        json!({ "from_checkpoint": checkpoint }),
        json!({ "from_checkpoint": checkpoint, "language": "javascript" }),
        json!({ "from_checkpoint": checkpoint, "language": "python" }),
    ] {
        assert_absent(&bob.post("/v1/sessions", &body).await, &absent, 404, "no_checkpoint", &format!("bob {body}"));
    }

    // Listings: each token lists only its own.
    assert_eq!(bob.session_ids().await, std::slice::from_ref(&bobs_own));
    assert_eq!(alice.session_ids().await, std::slice::from_ref(&id));
    let response = api.http.get(api.url("/v1/runtimes")).bearer_auth(BOB).send().await.expect("runtimes");
    let runtimes = response.text().await.expect("text");
    assert!(!runtimes.contains(&id) && !runtimes.contains(&checkpoint), "/v1/runtimes names alice's: {runtimes}");

    // The controls: alice forks and restores, and her state is untouched.
    let (status, fork) = alice.post(&format!("{session}/fork"), &json!({})).await;
    assert_eq!(status, 201, "{fork}");
    let fork = id_of(&fork);
    let restored = alice.open_session(&json!({ "from_checkpoint": checkpoint })).await;
    for copy in [&fork, &restored] {
        let (status, read) = alice.exec(copy, "console.log(secret)").await;
        assert_eq!((status, read["stdout"].as_str()), (200, Some("alice\n")), "{read}");
        assert_eq!(alice.delete(&format!("/v1/sessions/{copy}")).await.0, 200);
    }
    let (status, read) = alice.exec(&id, "console.log(secret)").await;
    assert_eq!((status, read["stdout"].as_str()), (200, Some("alice\n")), "bob's exec ran: {read}");
    let (_, view) = alice.get(&session).await;
    // Her two execs and her two checkpoints (one taken by the fork); none of bob's.
    assert_eq!(view["execs"], 2, "{view}");
    assert_eq!(view["checkpoints"].as_array().map(Vec::len), Some(2), "{view}");
    assert_eq!(view["status"], "idle", "{view}");

    // Ended, it is still absent to bob: not 410, which would say it existed.
    let (status, closed) = alice.delete(&session).await;
    assert_eq!((status, closed["status"].as_str()), (200, Some("closed")), "{closed}");
    assert_error(&alice.exec(&id, "1").await, 410, "session_closed", "alice exec after close");
    assert_absent(&bob.exec(&id, "1").await, &bob.exec(NOBODY, "1").await, 404, "no_session", "bob exec after close");
    assert_absent(&bob.get(&session).await, &bob.get(&absent_session).await, 404, "no_session", "bob GET after close");
    assert_absent(&bob.delete(&session).await, &absent_delete, 404, "no_session", "bob DELETE after close");
    // Her checkpoint outlives the session, and is still hers alone.
    let again = bob.post("/v1/sessions", &json!({ "from_checkpoint": checkpoint })).await;
    assert_absent(&again, &absent, 404, "no_checkpoint", "bob restore after close");
    let restored = alice.open_session(&json!({ "from_checkpoint": checkpoint })).await;
    assert_eq!(alice.delete(&format!("/v1/sessions/{restored}")).await.0, 200);
    assert_eq!(bob.session_ids().await, [bobs_own]);
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
struct Received {
    method: String,
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

    /// Whether `Runbox-Signature` is HMAC-SHA256 under `secret`, as docs/api.md says.
    fn signed_by(&self, secret: &str) -> bool {
        let signature = self.header("Runbox-Signature");
        let Some((t, v1)) = signature.split_once(",v1=") else { return false };
        let Some(t) = t.strip_prefix("t=") else { return false };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(&self.body);
        hex::encode(mac.finalize().into_bytes()) == v1
    }
}

/// A loopback HTTP receiver that answers 200 to everything and keeps what
/// it got.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().expect("addr").port());
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let record = got.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else { return };
                    record.lock().expect("lock").push(request);
                    let reply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        Receiver { url, got }
    }

    /// Waits until `n` requests have arrived, then a little longer for any
    /// that should not come, and returns them all.
    async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.got.lock().expect("lock").len() < n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.got.lock().expect("lock").clone()
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
    let method = head.split_whitespace().next().unwrap_or("").to_owned();
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
    Some(Received { method, headers, body: buf[head_end..head_end + length].to_vec() })
}

const ALICE_SECRET: &str = "alice-callback-secret-0123456789";
const BOB_SECRET: &str = "bob-callback-secret-0123456789ab";

fn callback_env() -> String {
    format!("alice:{ALICE_SECRET},bob:{BOB_SECRET}")
}

/// Asserts that `got` is one delivery of `event` for `id`, signed with
/// `secret` and not with `other`.
fn assert_one_delivery(got: &[Received], event: &str, id: &str, secret: &str, other: &str) -> Value {
    assert_eq!(got.len(), 1, "{got:?}");
    let delivery = &got[0];
    assert_eq!(delivery.header("Runbox-Event"), event, "{delivery:?}");
    assert!(delivery.signed_by(secret), "not signed with its owner's secret: {delivery:?}");
    assert!(!delivery.signed_by(other), "signed with the other token's secret: {delivery:?}");
    let body = delivery.json();
    assert_eq!(body["id"], id, "{body}");
    body
}

#[tokio::test]
async fn tenancy_callbacks_go_only_to_their_owner_signed_with_its_secret() {
    let secrets = callback_env();
    let env = [("RUNBOX_CALLBACK_SECRETS", secrets.as_str()), ("RUNBOX_CALLBACK_ALLOW", "127.0.0.1")];
    let (api, _redis, _worker) = stack(&env, &[]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });

    // A job: alice's callback has her job, under her secret. Bob reuses her
    // idempotency key with his own callback: he gets a job of his own,
    // called back to him under his secret, and nothing of alice's reaches
    // either receiver twice.
    let (to_alice, to_bob) = (Receiver::start().await, Receiver::start().await);
    let mut job = printer("alice-secret");
    job["callback_url"] = json!(to_alice.url);
    let (status, queued) = alice.post_keyed("/v1/jobs", "hook-key", &job).await;
    assert_eq!(status, 202, "{queued}");
    let id = id_of(&queued);
    let got = to_alice.wait_for(1).await;
    let body = assert_one_delivery(&got, "job.finished", &id, ALICE_SECRET, BOB_SECRET);
    assert_eq!(body["stdout"], "alice-secret\n", "{body}");
    let mut bobs = printer("bob-output");
    bobs["callback_url"] = json!(to_bob.url);
    let (status, bob_queued) = bob.post_keyed("/v1/jobs", "hook-key", &bobs).await;
    assert_eq!(status, 202, "{bob_queued}");
    let bob_id = id_of(&bob_queued);
    assert_ne!(bob_id, id);
    let got = to_bob.wait_for(1).await;
    let body = assert_one_delivery(&got, "job.finished", &bob_id, BOB_SECRET, ALICE_SECRET);
    assert_eq!(body["stdout"], "bob-output\n", "{body}");
    assert_eq!(to_alice.got.lock().expect("lock").len(), 1, "alice's receiver got more than her one callback");

    // A batch, the same way.
    let (to_alice, to_bob) = (Receiver::start().await, Receiver::start().await);
    let batch = json!({ "jobs": [printer("a")], "callback_url": to_alice.url });
    let (status, submitted) = alice.post_keyed("/v1/batches", "hook-key", &batch).await;
    assert_eq!(status, 202, "{submitted}");
    let got = to_alice.wait_for(1).await;
    assert_one_delivery(&got, "batch.finished", &id_of(&submitted), ALICE_SECRET, BOB_SECRET);
    let batch = json!({ "jobs": [printer("b")], "callback_url": to_bob.url });
    let (status, bob_submitted) = bob.post_keyed("/v1/batches", "hook-key", &batch).await;
    assert_eq!(status, 202, "{bob_submitted}");
    assert_ne!(bob_submitted["id"], submitted["id"]);
    let got = to_bob.wait_for(1).await;
    assert_one_delivery(&got, "batch.finished", &id_of(&bob_submitted), BOB_SECRET, ALICE_SECRET);
    assert_eq!(to_alice.got.lock().expect("lock").len(), 1, "alice's receiver got more than her one callback");

    // A Judge0 submission: PUT to its owner's URL under its owner's secret,
    // and its token is not bob's to read.
    let (to_alice, to_bob) = (Receiver::start().await, Receiver::start().await);
    let submission = |url: &str, text: &str| json!({ "source_code": format!("console.log({text:?})"), "language_id": 63, "callback_url": url });
    let response = api
        .http
        .post(api.url("/judge0/submissions"))
        .header("X-Auth-Token", ALICE)
        .json(&submission(&to_alice.url, "alice-judge0"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 201);
    let token = response.json::<Value>().await.expect("json")["token"].as_str().expect("token").to_owned();
    let got = to_alice.wait_for(1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].method, "PUT", "{got:?}");
    assert!(got[0].signed_by(ALICE_SECRET) && !got[0].signed_by(BOB_SECRET), "{got:?}");
    assert_eq!(got[0].json()["token"], token.as_str());
    let response = api
        .http
        .post(api.url("/judge0/submissions"))
        .header("X-Auth-Token", BOB)
        .json(&submission(&to_bob.url, "bob-judge0"))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 201);
    let bob_token = response.json::<Value>().await.expect("json")["token"].as_str().expect("token").to_owned();
    let got = to_bob.wait_for(1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].signed_by(BOB_SECRET) && !got[0].signed_by(ALICE_SECRET), "{got:?}");
    assert_eq!(got[0].json()["token"], bob_token.as_str());
    let absent = judge0_get(&api, BOB, &format!("/judge0/submissions/{NOBODY}")).await;
    assert_eq!(absent.0, 404, "{absent:?}");
    assert_eq!(judge0_get(&api, BOB, &format!("/judge0/submissions/{token}")).await, absent);
    assert_eq!(to_alice.got.lock().expect("lock").len(), 1, "alice's receiver got more than her one callback");
}

#[tokio::test]
async fn tenancy_another_tokens_cancel_does_not_end_a_queued_job_or_batch_or_call_it_back() {
    // No worker at first: everything stays queued while bob tries.
    let secrets = callback_env();
    let env = [("RUNBOX_CALLBACK_SECRETS", secrets.as_str()), ("RUNBOX_CALLBACK_ALLOW", "127.0.0.1")];
    let redis = Redis::start().await;
    let api = Api::start(&redis, &env).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let hooked = |mut job: Value, url: &str| {
        job["callback_url"] = json!(url);
        job
    };

    // The control: alice's own cancel of a queued job ends it and calls back.
    let control = Receiver::start().await;
    let (_, queued) = alice.post("/v1/jobs", &hooked(printer("x"), &control.url)).await;
    let (status, cancelled) = alice.delete(&format!("/v1/jobs/{}", id_of(&queued))).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    let got = control.wait_for(1).await;
    assert_eq!(
        assert_one_delivery(&got, "job.finished", &id_of(&queued), ALICE_SECRET, BOB_SECRET)["status"],
        "cancelled"
    );
    let control = Receiver::start().await;
    let (_, batch) = alice.post("/v1/batches", &json!({ "jobs": [printer("x")], "callback_url": control.url })).await;
    let (status, cancelled) = alice.delete(&format!("/v1/batches/{}", id_of(&batch))).await;
    assert_eq!((status, &cancelled["counts"]), (200, &json!({ "cancelled": 1 })), "{cancelled}");
    let got = control.wait_for(1).await;
    let body = assert_one_delivery(&got, "batch.finished", &id_of(&batch), ALICE_SECRET, BOB_SECRET);
    assert_eq!(body["counts"], json!({ "cancelled": 1 }), "{body}");

    // Bob's cancels of the same kind of job and batch change nothing.
    let (job_hook, batch_hook) = (Receiver::start().await, Receiver::start().await);
    let (_, job) = alice.post("/v1/jobs", &hooked(printer("alice-ran"), &job_hook.url)).await;
    let job = id_of(&job);
    let (_, batch) =
        alice.post("/v1/batches", &json!({ "jobs": [printer("y")], "callback_url": batch_hook.url })).await;
    let batch = id_of(&batch);
    let absent = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.delete(&format!("/v1/jobs/{job}")).await, &absent, 404, "not_found", "bob DELETE job");
    let absent = bob.delete(&format!("/v1/batches/{NOBODY}")).await;
    assert_absent(&bob.delete(&format!("/v1/batches/{batch}")).await, &absent, 404, "not_found", "bob DELETE batch");
    assert_eq!(alice.get(&format!("/v1/jobs/{job}")).await.1["status"], "queued");
    assert!(job_hook.got.lock().expect("lock").is_empty() && batch_hook.got.lock().expect("lock").is_empty());

    let _worker = start_worker(&redis, &[]).await;
    let got = job_hook.wait_for(1).await;
    let body = assert_one_delivery(&got, "job.finished", &job, ALICE_SECRET, BOB_SECRET);
    assert_eq!((body["status"].as_str(), body["stdout"].as_str()), (Some("completed"), Some("alice-ran\n")), "{body}");
    let got = batch_hook.wait_for(1).await;
    let body = assert_one_delivery(&got, "batch.finished", &batch, ALICE_SECRET, BOB_SECRET);
    assert_eq!(body["counts"], json!({ "completed": 1 }), "{body}");
}

/// GET on a `/judge0` route with `token` as `X-Auth-Token`.
async fn judge0_get(api: &Api, token: &str, path: &str) -> (u16, Value) {
    let response = api.http.get(api.url(path)).header("X-Auth-Token", token).send().await.expect("get");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tenancy_judge0_submissions_are_only_their_tokens() {
    let (api, _redis, _worker) = stack(&[], &[]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let submit = |token: &'static str, path: &'static str, body: Value| {
        let request = api.http.post(api.url(path)).header("X-Auth-Token", token).json(&body);
        async move {
            let response = request.send().await.expect("post");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let js = |text: &str| json!({ "source_code": format!("console.log({text:?})"), "language_id": 63 });
    let (status, created) = submit(ALICE, "/judge0/submissions?wait=true", js("alice-judge0")).await;
    assert_eq!((status, created["stdout"].as_str()), (201, Some("alice-judge0\n")), "{created}");
    let token = created["token"].as_str().expect("token").to_owned();
    let (status, batch) =
        submit(ALICE, "/judge0/submissions/batch", json!({ "submissions": [js("a1"), js("a2")] })).await;
    assert_eq!(status, 201, "{batch}");
    let batch_tokens: Vec<String> =
        batch.as_array().expect("list").iter().map(|t| t["token"].as_str().expect("token").to_owned()).collect();
    let (status, bobs) = submit(BOB, "/judge0/submissions?wait=true", js("bob-judge0")).await;
    assert_eq!(status, 201, "{bobs}");
    let bob_token = bobs["token"].as_str().expect("token").to_owned();

    // By token, with every field, with X-Auth-Token or a bearer header.
    let absent = judge0_get(&api, BOB, &format!("/judge0/submissions/{NOBODY}?fields=*")).await;
    assert_eq!((absent.0, absent.1["error"].as_str().is_some()), (404, true), "{absent:?}");
    for submission in std::iter::once(&token).chain(&batch_tokens) {
        let path = format!("/judge0/submissions/{submission}?fields=*");
        let (status, mine) = judge0_get(&api, ALICE, &path).await;
        assert_eq!((status, mine["token"].as_str()), (200, Some(submission.as_str())), "{mine}");
        assert_eq!(judge0_get(&api, BOB, &path).await, absent, "bob read alice's submission {submission}");
        let bearer = api.http.get(api.url(&path)).bearer_auth(BOB).send().await.expect("get");
        assert_eq!(bearer.status(), 404);
        // The same job through the native API, read and cancelled.
        let absent_native = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
        let native = bob.get(&format!("/v1/jobs/{submission}")).await;
        assert_absent(&native, &absent_native, 404, "not_found", "bob GET judge0 job");
        let absent_native = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
        let native = bob.delete(&format!("/v1/jobs/{submission}")).await;
        assert_absent(&native, &absent_native, 404, "not_found", "bob DELETE judge0 job");
    }
    // In a batch read, another token's submission is null, as an unknown one is.
    let tokens = format!("{token},{bob_token},{NOBODY}");
    let (status, seen) = judge0_get(&api, BOB, &format!("/judge0/submissions/batch?tokens={tokens}")).await;
    assert_eq!(status, 200, "{seen}");
    let seen = seen["submissions"].as_array().expect("submissions").clone();
    assert_eq!((&seen[0], seen[1]["token"].as_str(), &seen[2]), (&Value::Null, Some(bob_token.as_str()), &Value::Null));
    let (_, seen) = judge0_get(&api, ALICE, &format!("/judge0/submissions/batch?tokens={tokens}")).await;
    let seen = seen["submissions"].as_array().expect("submissions").clone();
    assert_eq!((seen[0]["token"].as_str(), &seen[1], &seen[2]), (Some(token.as_str()), &Value::Null, &Value::Null));

    // Cancel: bob's native DELETE leaves a running submission to finish;
    // alice's own cancels one (Judge0 shows it as an Internal Error).
    let slow = json!({ "source_code": "await new Promise((r) => setTimeout(r, 3000)); console.log('ran')", "language_id": 63 });
    let (_, running) = submit(ALICE, "/judge0/submissions", slow.clone()).await;
    let running = running["token"].as_str().expect("token").to_owned();
    let (_, doomed) = submit(ALICE, "/judge0/submissions", slow).await;
    let doomed = doomed["token"].as_str().expect("token").to_owned();
    api.until_status(&running, "running", Duration::from_secs(30)).await;
    assert_eq!(bob.delete(&format!("/v1/jobs/{running}")).await.0, 404);
    let (status, cancelled) = alice.delete(&format!("/v1/jobs/{doomed}")).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    let finished = api.until_status(&running, "completed", Duration::from_secs(30)).await;
    assert_eq!(finished["stdout"], "ran\n", "{finished}");
    let (_, shown) = judge0_get(&api, ALICE, &format!("/judge0/submissions/{doomed}")).await;
    assert_eq!(shown["status"]["id"], 13, "{shown}");
}

/// Every job in Redis, with the token name it is filed under and its
/// stdout as that token reads it: a Piston answer names no job, so this is
/// how a test finds one.
async fn all_jobs(redis: &Redis, api: &Api) -> Vec<(String, String, String)> {
    let prefix = keys().job_prefix();
    let found: Vec<String> = redis.cmd(redis::cmd("KEYS").arg(format!("{prefix}*"))).await;
    let mut jobs = Vec::new();
    for key in found {
        let owner: Option<String> = redis.cmd(redis::cmd("HGET").arg(&key).arg("owner")).await;
        let owner = owner.expect("every job has an owner");
        let token = match owner.as_str() {
            "alice" => ALICE,
            "bob" => BOB,
            other => panic!("a job of {other:?}"),
        };
        let id = key.trim_start_matches(&prefix).to_owned();
        let (status, job) = api.get(&id, token, None).await;
        assert_eq!(status, 200, "{owner} cannot read its own job {id}: {job}");
        jobs.push((id, owner, job["stdout"].as_str().unwrap_or_default().to_owned()));
    }
    jobs
}

#[tokio::test]
async fn tenancy_piston_runs_are_jobs_of_the_token_that_sent_them() {
    let (api, redis, _worker) = stack(&[], &[]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let execute = |path: String, bearer: Option<&'static str>, marker: &str| {
        let body =
            json!({ "language": "js", "version": "*", "files": [{ "content": format!("console.log({marker:?})") }] });
        let mut request = api.http.post(api.url(&path)).json(&body);
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.expect("post");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // Alice's token in the path, then as a bearer; bob's in the path.
    let (status, ran) = execute(format!("/piston/{ALICE}/api/v2/execute"), None, "alice-path").await;
    assert_eq!((status, ran["run"]["stdout"].as_str()), (200, Some("alice-path\n")), "{ran}");
    let (status, ran) = execute("/piston/api/v2/execute".into(), Some(ALICE), "alice-bearer").await;
    assert_eq!((status, ran["run"]["stdout"].as_str()), (200, Some("alice-bearer\n")), "{ran}");
    let (status, ran) = execute(format!("/piston/{BOB}/api/v2/execute"), None, "bob-path").await;
    assert_eq!((status, ran["run"]["stdout"].as_str()), (200, Some("bob-path\n")), "{ran}");

    let jobs = all_jobs(&redis, &api).await;
    let filed: Vec<(&str, &str)> = jobs.iter().map(|(_, owner, stdout)| (owner.as_str(), stdout.as_str())).collect();
    assert_eq!(filed.len(), 3, "one job per run: {jobs:?}");
    for run in [("alice", "alice-path\n"), ("alice", "alice-bearer\n"), ("bob", "bob-path\n")] {
        assert!(filed.contains(&run), "{run:?} is not filed so: {jobs:?}");
    }
    let alices: Vec<&String> = jobs.iter().filter(|(_, owner, _)| owner == "alice").map(|(id, _, _)| id).collect();
    let bobs: Vec<&String> = jobs.iter().filter(|(_, owner, _)| owner == "bob").map(|(id, _, _)| id).collect();
    let absent = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    let absent_delete = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
    let absent_judge0 = judge0_get(&api, BOB, &format!("/judge0/submissions/{NOBODY}")).await;
    for id in alices {
        assert_absent(&bob.get(&format!("/v1/jobs/{id}")).await, &absent, 404, "not_found", "bob GET piston job");
        let deleted = bob.delete(&format!("/v1/jobs/{id}")).await;
        assert_absent(&deleted, &absent_delete, 404, "not_found", "bob DELETE piston job");
        assert_eq!(judge0_get(&api, BOB, &format!("/judge0/submissions/{id}")).await, absent_judge0);
    }
    let absent = alice.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&alice.get(&format!("/v1/jobs/{}", bobs[0])).await, &absent, 404, "not_found", "alice GET bob's");
}

/// Calls MCP tool `tool` as `token` (stateless: no handshake, the protocol
/// version on the request) and returns the tool result.
async fn mcp_tool(api: &Api, token: &str, tool: &str, arguments: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": tool, "arguments": arguments } });
    let response = api
        .http
        .post(api.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await
        .expect("post");
    assert_eq!(response.status(), 200, "{tool}");
    let text = response.text().await.expect("body");
    // An SSE stream whose events carry JSON-RPC messages, or plain JSON.
    let messages = text.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).chain(std::iter::once(&*text));
    let answer = messages
        .filter_map(|m| serde_json::from_str::<Value>(m).ok())
        .find(|m| m["id"] == 7)
        .unwrap_or_else(|| panic!("no answer to {tool} in {text}"));
    answer.get("result").cloned().unwrap_or_else(|| panic!("{tool} answered an error: {answer}"))
}

/// The text of a tool result.
fn tool_text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// A tool result that worked: its structured content.
fn tool_ok(result: &Value, what: &str) -> Value {
    assert_eq!(result["isError"], false, "{what}: {result}");
    result["structuredContent"].clone()
}

/// Asserts that a tool result is the tool error `code`, as for an absent id.
fn assert_tool_absent(got: &Value, absent: &Value, code: &str, what: &str) {
    assert_eq!(got["isError"], true, "{what}: {got}");
    assert!(tool_text(got).starts_with(&format!("{code}: ")), "{what}: {got}");
    assert_eq!(got, absent, "{what}: bob's answer differs from the answer for an absent id");
}

#[tokio::test]
async fn tenancy_mcp_tools_reach_only_their_tokens_jobs_and_sessions() {
    let (api, _redis, _worker) = stack(&[], &[("RUNBOX_WORKER_CONCURRENCY", "4")]).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });

    // run_code's job is alice's.
    let ran = mcp_tool(&api, ALICE, "run_code", json!({ "language": "js", "code": "console.log('alice-mcp')" })).await;
    let ran = tool_ok(&ran, "alice run_code");
    assert_eq!(ran["stdout"], "alice-mcp\n", "{ran}");
    let job = id_of(&ran);
    assert_eq!(alice.get(&format!("/v1/jobs/{job}")).await.0, 200);
    let absent = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.get(&format!("/v1/jobs/{job}")).await, &absent, 404, "not_found", "bob GET run_code job");
    let absent = bob.delete(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.delete(&format!("/v1/jobs/{job}")).await, &absent, 404, "not_found", "bob DELETE run_code job");

    // A session made through MCP, with state and a checkpoint.
    let created = mcp_tool(&api, ALICE, "create_session", json!({ "language": "javascript" })).await;
    let session = id_of(&tool_ok(&created, "alice create_session"));
    let set = json!({ "session_id": session, "code": "let secret = 'alice'; console.log('set')" });
    let set = tool_ok(&mcp_tool(&api, ALICE, "run_in_session", set).await, "alice run_in_session");
    assert_eq!(set["stdout"], "set\n", "{set}");
    let exec_job = id_of(&set);
    let checkpoint = mcp_tool(&api, ALICE, "checkpoint_session", json!({ "session_id": session })).await;
    let checkpoint = id_of(&tool_ok(&checkpoint, "alice checkpoint_session"));

    // Bob, through every session tool.
    let overwrite = |id: &str| json!({ "session_id": id, "code": "secret = 'bob'; console.log(secret)" });
    let got = mcp_tool(&api, BOB, "run_in_session", overwrite(&session)).await;
    let absent = mcp_tool(&api, BOB, "run_in_session", overwrite(NOBODY)).await;
    assert_tool_absent(&got, &absent, "no_session", "bob run_in_session");
    for tool in ["checkpoint_session", "fork_session", "destroy_session"] {
        let got = mcp_tool(&api, BOB, tool, json!({ "session_id": session })).await;
        let absent = mcp_tool(&api, BOB, tool, json!({ "session_id": NOBODY })).await;
        assert_tool_absent(&got, &absent, "no_session", &format!("bob {tool}"));
    }
    let absent = mcp_tool(&api, BOB, "create_session", json!({ "from_checkpoint": NOBODY })).await;
    for arguments in
        [json!({ "from_checkpoint": checkpoint }), json!({ "from_checkpoint": checkpoint, "language": "python" })]
    {
        let got = mcp_tool(&api, BOB, "create_session", arguments.clone()).await;
        assert_tool_absent(&got, &absent, "no_checkpoint", &format!("bob create_session {arguments}"));
    }
    // ...and through /v1, for the session and its exec.
    let absent = bob.get(&format!("/v1/sessions/{NOBODY}")).await;
    assert_absent(&bob.get(&format!("/v1/sessions/{session}")).await, &absent, 404, "no_session", "bob GET session");
    let absent = bob.get(&format!("/v1/jobs/{NOBODY}")).await;
    assert_absent(&bob.get(&format!("/v1/jobs/{exec_job}")).await, &absent, 404, "not_found", "bob GET exec");
    assert_eq!(bob.session_ids().await, Vec::<String>::new());
    assert_eq!(alice.session_ids().await, std::slice::from_ref(&session));

    // The controls: alice forks and restores through MCP and finds her state;
    // bob's attempts changed nothing.
    let fork = mcp_tool(&api, ALICE, "fork_session", json!({ "session_id": session })).await;
    let fork = id_of(&tool_ok(&fork, "alice fork_session"));
    let restored = mcp_tool(&api, ALICE, "create_session", json!({ "from_checkpoint": checkpoint })).await;
    let restored = id_of(&tool_ok(&restored, "alice create_session from_checkpoint"));
    for id in [&fork, &restored, &session] {
        let read = json!({ "session_id": id, "code": "console.log(secret)" });
        let read = tool_ok(&mcp_tool(&api, ALICE, "run_in_session", read).await, "alice reads");
        assert_eq!(read["stdout"], "alice\n", "{read}");
    }
    for id in [&fork, &restored, &session] {
        let ended = mcp_tool(&api, ALICE, "destroy_session", json!({ "session_id": id })).await;
        assert_eq!(tool_ok(&ended, "alice destroy_session")["status"], "closed");
    }
    // Ended, it is still absent to bob, where alice is told it is closed.
    let after = mcp_tool(&api, ALICE, "run_in_session", json!({ "session_id": session, "code": "1" })).await;
    assert!(tool_text(&after).starts_with("session_closed: "), "{after}");
    let got = mcp_tool(&api, BOB, "run_in_session", json!({ "session_id": session, "code": "1" })).await;
    let absent = mcp_tool(&api, BOB, "run_in_session", json!({ "session_id": NOBODY, "code": "1" })).await;
    assert_tool_absent(&got, &absent, "no_session", "bob run_in_session after close");
}

/// A token's Python jobs run in its own warm children, and a job of one
/// token never runs in a process that ran another token's, whichever
/// surface sent it. One worker with one slot and room for two idle
/// children: keyed by anything but the token, bob's first job would find
/// alice's child idle and run in it.
#[tokio::test]
async fn tenancy_warm_children_serve_only_their_token() {
    let worker_env = [
        ("RUNBOX_WORKER_CONCURRENCY", "1"),
        ("RUNBOX_WARM_PER_OWNER", "1"),
        ("RUNBOX_WARM_MAX", "2"),
        ("RUNBOX_WARM_IDLE_MS", "60000"),
    ];
    let (api, _redis, _worker) = stack(&[], &worker_env).await;
    let (alice, bob) = (As { api: &api, token: ALICE }, As { api: &api, token: BOB });
    let python = json!({ "language": "python", "code": PYTHON_PID });

    let alices = assert_fresh(&run_as(&api, ALICE, &python).await, &[], "alice's first job");
    assert_warm_in(&run_as(&api, ALICE, &python).await, alices, "alice's second job");
    // Time for the pool to have a fresh child ready: bob waits for no boot.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let first = run_as(&api, BOB, &python).await;
    let bobs = assert_fresh(&first, &[alices], "bob's first job");
    // A boot takes hundreds of milliseconds; taking a pooled child, a
    // millisecond or two when the other tests load the two cores (one CI
    // run measured 1).
    let waited = first["timings"]["boot_ms"].as_u64().expect("boot_ms");
    assert!(waited < 100, "bob's first job waited for a boot: {first}");
    assert_warm_in(&run_as(&api, BOB, &python).await, bobs, "bob's second job");
    assert_warm_in(&run_as(&api, ALICE, &python).await, alices, "alice's child was kept");

    // Every surface: MCP's run_code, Judge0, Piston and batches take the
    // same default, into the same token's child.
    let ran = mcp_tool(&api, BOB, "run_code", json!({ "language": "python", "code": PYTHON_PID })).await;
    let ran = tool_ok(&ran, "bob run_code");
    let (_, job) = bob.get(&format!("/v1/jobs/{}", id_of(&ran))).await;
    assert_warm_in(&job, bobs, "bob's run_code");
    let submission = json!({ "source_code": PYTHON_PID, "language_id": 71 });
    let request = api.http.post(api.url("/judge0/submissions?wait=true")).header("X-Auth-Token", ALICE);
    let created: Value = request.json(&submission).send().await.expect("post").json().await.expect("json");
    let (_, job) = alice.get(&format!("/v1/jobs/{}", created["token"].as_str().expect("token"))).await;
    assert_warm_in(&job, alices, "alice's Judge0 submission");
    // A Piston answer carries no job id, so only the pid says where it ran.
    let execute = json!({ "language": "python", "version": "*", "files": [{ "content": PYTHON_PID }] });
    let request = api.http.post(api.url(&format!("/piston/{BOB}/api/v2/execute")));
    let ran: Value = request.json(&execute).send().await.expect("post").json().await.expect("json");
    let pid: u32 = ran["run"]["stdout"].as_str().and_then(|s| s.trim().parse().ok()).expect("a pid");
    assert!(Pid((pid != 0).then_some(pid)).same(bobs), "bob's Piston run ran in {pid}, not in {bobs:?}: {ran}");
    let (status, submitted) = alice.post("/v1/batches", &json!({ "jobs": [python.clone(), python.clone()] })).await;
    assert_eq!(status, 202, "{submitted}");
    let (_, done) = alice.get(&format!("/v1/batches/{}?wait=60", id_of(&submitted))).await;
    for job in done["jobs"].as_array().expect("jobs") {
        assert_warm_in(job, alices, "alice's batch");
    }

    // JavaScript that asks for it, the same.
    let js = json!({ "language": "javascript", "code": JS_PID, "shared_runtime": true });
    let alices_js = assert_fresh(&run_as(&api, ALICE, &js).await, &[], "alice's first JS job");
    assert_warm_in(&run_as(&api, ALICE, &js).await, alices_js, "alice's second JS job");
    assert_fresh(&run_as(&api, BOB, &js).await, &[alices_js], "bob's JS job");
}
