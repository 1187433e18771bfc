//! Issue 43's stranger's review (round 4) of the new framing, the egress
//! link and the session reply channels, through the whole stack. Each test
//! here demonstrates a defect the review found.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::util::*;

/// The HTTP upstream of tests/e2e/upstream.py on loopback (its HTTPS one is
/// unused here), logging every request it gets.
struct Upstream {
    http: u16,
    dir: tempfile::TempDir,
    _process: tokio::process::Child,
}

impl Upstream {
    async fn start() -> Upstream {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_owned();
        test_certificates(dir.path());
        std::fs::create_dir(path("files")).expect("files dir");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/upstream.py");
        let mut process = tokio::process::Command::new("python3")
            .arg(script)
            .args(["--cert", &path("server.pem"), "--key", &path("server.key")])
            .args(["--log", &path("received.jsonl"), "--files", &path("files")])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("upstream.py");
        let mut lines = BufReader::new(process.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
        let http = match &ready {
            Ok(Ok(Some(line))) => line.strip_prefix("listening ").and_then(|ports| ports.split(' ').next()),
            _ => None,
        }
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("upstream did not start: {ready:?}"));
        Upstream { http, dir, _process: process }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }

    /// The paths of every request the upstream got, in order.
    fn received_paths(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("received.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|request| request["path"].as_str().map(str::to_owned))
            .collect()
    }
}

async fn post(api: &Api, token: &str, path: &str, body: &Value) -> Value {
    let response = api.http.post(api.url(path)).bearer_auth(token).json(body).send().await.expect("post");
    assert!(response.status().is_success(), "{path}: {}", response.status());
    response.json().await.expect("json")
}

async fn get(api: &Api, token: &str, path: &str) -> Value {
    let response = api.http.get(api.url(path)).bearer_auth(token).send().await.expect("get");
    response.json().await.expect("json")
}

/// Finding: a shared-lane JavaScript job's requests that its harness had
/// queued but not yet written to the egress socket when the job ended are
/// written while the NEXT job of the same warm child runs, and the proxy
/// judges, sends and counts them as that next job's.
///
/// Why: `Egress.clear()` (worker/runtime/harness/egress.mjs) rejects the
/// ended job's promises but leaves its writes queued on `#writing`; the
/// harness then blocks in `channel.readFrame()` (a synchronous read) until
/// the next frame, so nothing more is written until the runner has called
/// `Link::begin` for the next job (worker/src/sandbox/shared.rs); the link
/// (worker/src/egress/link.rs, `serve`) takes the job of a request from
/// `current` when it reads the request's line, with nothing in the request
/// saying which job made it. The ended job's requests then reach the
/// upstream after the job ended, use the next job's caps (its six
/// connections here, so that job's own fetch is refused), and appear in
/// its `network`.
#[tokio::test]
async fn an_ended_jobs_queued_requests_are_sent_as_the_next_jobs() {
    let up = Upstream::start().await;
    let redis = Redis::start().await;
    let rules = format!("alice=127.0.0.1:{}", up.http);
    let api = Api::start(&redis, &[("RUNBOX_EGRESS", &rules)]).await;
    let _worker = start_worker(&redis, &[("RUNBOX_WORKER_CONCURRENCY", "1")]).await;

    // Job A: 1,000 slow requests, none awaited; once they have reached its
    // harness, it ends with Deno.exit (a fetch in flight otherwise keeps a
    // shared-lane job going). The harness writes the requests to the
    // proxy's socket one at a time, and has not written them all by then.
    let a = format!(
        "for (let i = 0; i < 1000; i++) fetch('{slow}&from=A-late-' + i).catch(() => {{}});\n\
         await new Promise((resolve) => setTimeout(resolve, 0));\n\
         console.log(200);\n\
         Deno.exit(0);",
        slow = up.url("/slow?ms=1500"),
    );
    // Job B, next in the same child: one request of its own.
    let b = format!(
        "try {{ console.log((await fetch('{}')).status); }} catch (e) {{ console.log(String(e)); }}\n{JS_PID}",
        up.url("/echo?from=B")
    );
    let mut failures = Vec::new();
    for round in 0..5 {
        let batch = json!({ "jobs": [{ "language": "javascript", "code": a }, { "language": "javascript", "code": b }], "shared_runtime": true });
        let submitted = post(&api, ALICE, "/v1/batches", &batch).await;
        let ids: Vec<&str> = submitted["job_ids"].as_array().expect("job_ids").iter().filter_map(Value::as_str).collect();
        let first = get(&api, ALICE, &format!("/v1/jobs/{}?wait=60", ids[0])).await;
        let second = get(&api, ALICE, &format!("/v1/jobs/{}?wait=60", ids[1])).await;
        assert_eq!((first["status"].as_str(), first["stdout"].as_str()), (Some("completed"), Some("200\n")), "{first}");
        assert_eq!(second["status"], "completed", "{second}");
        let requests: u64 = second["network"].as_array().into_iter().flatten().filter_map(|h| h["requests"].as_u64()).sum();
        let own = second["stdout"].as_str().unwrap_or_default().lines().next().unwrap_or_default().to_owned();
        if own != "200" || requests != 1 {
            failures.push(format!(
                "round {round} (B warm: {}): B's own fetch gave {own:?}, and B's network counts {requests} requests: {}",
                second["warm"], second["network"]
            ));
        }
    }
    // Where job A's requests went so far (more may still be on their way).
    let late = up.received_paths().into_iter().filter(|p| p.contains("A-late")).count();
    assert!(failures.is_empty(), "{failures:#?}\n(the upstream got {late} of job A's late requests)");
}

