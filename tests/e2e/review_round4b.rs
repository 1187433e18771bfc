//! Review, round 4b: the egress nonce stamp (eaf3e73). A session's request
//! made between two execs (by a timer the first left) is stamped with the
//! next exec's nonce and sent, capped and counted as that exec's, though
//! the harness "takes no request between jobs"; and a single-use JS program
//! reads its frame nonce through `Egress.send`'s `JSON.stringify`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::util::*;

struct Upstreams {
    http: u16,
    dir: tempfile::TempDir,
    _process: tokio::process::Child,
}

impl Upstreams {
    async fn start() -> Upstreams {
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
        let ports = match &ready {
            Ok(Ok(Some(line))) => line.strip_prefix("listening ").and_then(|ports| ports.split_once(' ')),
            _ => None,
        };
        let http = ports
            .and_then(|(http, _)| http.parse().ok())
            .unwrap_or_else(|| panic!("upstream did not start: {ready:?}"));
        Upstreams { http, dir, _process: process }
    }

    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("received.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }
}

struct EgressStack {
    api: Api,
    _worker: Process,
    up: Upstreams,
    _redis: Redis,
}

impl EgressStack {
    async fn start() -> EgressStack {
        let up = Upstreams::start().await;
        let rules = format!("alice=127.0.0.1:{}", up.http);
        let redis = Redis::start().await;
        let api = Api::start(&redis, &[("RUNBOX_EGRESS", &rules)]).await;
        let worker = start_worker(&redis, &[]).await;
        EgressStack { api, _worker: worker, up, _redis: redis }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self.api.http.post(self.api.url(path)).bearer_auth(ALICE).json(&body).send().await;
        response.expect("post").json().await.expect("json")
    }
}

fn stdout(job: &Value) -> &str {
    job["stdout"].as_str().unwrap_or_default()
}

/// Exec 1 leaves a timer that makes one request once the exec has been
/// answered; exec 2 (which makes none) starts after it fired. The request,
/// made while no job was running, is sent as exec 2's and counted in its
/// `network`: the harness blocks on the next frame (`Channel.readFrame`)
/// between execs, so the Worker's port message waits and is stamped with
/// the next frame's nonce when it is finally read.
async fn between_execs(language: &str, leave: &str, check: &str) {
    let s = EgressStack::start().await;
    let session = s.post("/v1/sessions", json!({ "language": language })).await;
    let id = session["id"].as_str().expect("session id").to_owned();
    let exec = |code: String| {
        let path = format!("/v1/sessions/{id}/exec?wait=60");
        let s = &s;
        async move { s.post(&path, json!({ "code": code })).await }
    };
    let first = exec(leave.replace("URL", &s.up.url("/echo?from=between"))).await;
    assert_eq!(first["status"], "completed", "{first}");
    assert!(s.up.received().is_empty(), "nothing sent during exec 1");
    // The timer fires 100 ms after exec 1 was answered; exec 2 comes long after.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = exec(check.to_owned()).await;
    assert_eq!((second["status"].as_str(), stdout(&second)), (Some("completed"), "fired before\n"), "{second}");
    // Wait for the request, if it is sent, to reach the upstream.
    let third = exec(check.to_owned()).await;
    assert_eq!(third["status"], "completed", "{third}");
    let sent: Vec<Value> = s.up.received();
    assert!(
        sent.is_empty() && second.get("network").is_none(),
        "a request made between execs was sent as exec 2's: upstream got {sent:?}; exec 2 = {second}"
    );
}

#[tokio::test]
async fn review_round4b_js_session_request_made_between_execs_is_sent_as_the_next_execs() {
    between_execs(
        "javascript",
        "globalThis.fired = false;\n\
         const t = setInterval(() => { clearInterval(t); globalThis.fired = true; fetch('URL').catch(() => {}); }, 100);",
        "console.log(globalThis.fired ? 'fired before' : 'not yet');",
    )
    .await;
}

#[tokio::test]
async fn review_round4b_python_session_request_made_between_execs_is_sent_as_the_next_execs() {
    between_execs(
        "python",
        "import js\n\
         from pyodide.ffi import create_once_callable\n\
         fired = False\n\
         def go():\n    global fired\n    fired = True\n    js.fetch('URL')\n\
         js.setTimeout(create_once_callable(go), 100)\n",
        "print('fired before' if fired else 'not yet')",
    )
    .await;
}

/// A single-use JavaScript child runs the program in the harness's own
/// realm, and `Egress.send` builds each request's line with the realm's
/// `JSON.stringify` at the time of the call: a program that replaces it
/// reads `job`, its frame's nonce (the nonce of its out-of-memory marker),
/// which no job may learn.
#[tokio::test]
async fn review_round4b_single_use_js_reads_its_frame_nonce_through_egress_send() {
    let s = EgressStack::start().await;
    let code = format!(
        "const original = JSON.stringify;\n\
         JSON.stringify = function (value, ...rest) {{\n\
           if (value && typeof value === 'object' && 'job' in value) console.log('nonce=' + value.job);\n\
           return original.call(this, value, ...rest);\n\
         }};\n\
         await fetch('{}');",
        s.up.url("/echo")
    );
    let response = s.api.http.post(s.api.url("/v1/jobs?wait=60")).bearer_auth(ALICE);
    let job: Value = response
        .json(&json!({ "language": "javascript", "code": code }))
        .send()
        .await
        .expect("submit")
        .json()
        .await
        .expect("json");
    assert_eq!(job["status"], "completed", "{job}");
    let leaked = stdout(&job).lines().find_map(|line| line.strip_prefix("nonce=")).unwrap_or("");
    assert!(
        !(leaked.len() == 32 && leaked.bytes().all(|b| b.is_ascii_hexdigit())),
        "the program read its frame's nonce {leaked:?}: {job}"
    );
}
