//! Sessions over HTTP: state that lasts across execs, checkpoints and
//! forks, teardown nobody has to remember, recovery from a dead worker,
//! and the errors a client gets for each misuse.

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::util::*;

/// A client of the session routes, as `token`.
struct Sessions<'a> {
    api: &'a Api,
    token: &'a str,
}

impl Sessions<'_> {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.api.http.request(method, self.api.url(path)).bearer_auth(self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn create(&self, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, "/v1/sessions", Some(body)).await
    }

    /// Creates a session and returns its id; panics unless it is idle.
    async fn open(&self, body: Value) -> String {
        let (status, session) = self.create(body).await;
        assert_eq!(status, 201, "{session}");
        assert_eq!(session["status"], "idle", "{session}");
        session["id"].as_str().expect("id").to_owned()
    }

    async fn exec(&self, id: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, &format!("/v1/sessions/{id}/exec"), Some(body)).await
    }

    /// Runs `code` and returns its stdout; panics unless it exited 0.
    async fn run(&self, id: &str, code: &str) -> String {
        let (status, result) = self.exec(id, json!({ "code": code })).await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["status"], "completed", "{result}");
        assert_eq!(result["exit_code"], 0, "{result}");
        result["stdout"].as_str().expect("stdout").to_owned()
    }

    async fn checkpoint(&self, id: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, &format!("/v1/sessions/{id}/checkpoints"), None).await
    }

    async fn fork(&self, id: &str) -> String {
        let (status, fork) = self.call(reqwest::Method::POST, &format!("/v1/sessions/{id}/fork"), None).await;
        assert_eq!(status, 201, "{fork}");
        fork["id"].as_str().expect("id").to_owned()
    }

    async fn get(&self, id: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None).await
    }

    async fn delete(&self, id: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None).await
    }
}

fn alice(api: &Api) -> Sessions<'_> {
    Sessions { api, token: ALICE }
}

#[tokio::test]
async fn a_python_session_explores_data_then_checkpoints_and_forks() {
    // Each session holds a slot: the parent, two forks and one restore.
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "4")]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "python" })).await;
    let load = "import random\nrows = {i: {'id': i, 'group': i % 7, 'value': i * 3} for i in range(100_000)}\nprint(len(rows))";
    assert_eq!(s.run(&id, load).await, "100000\n");
    for group in 0..10 {
        let query = format!("print(sum(r['value'] for r in rows.values() if r['group'] == {}))", group % 7);
        let expected: u64 = (0..100_000u64).filter(|i| i % 7 == group % 7).map(|i| i * 3).sum();
        assert_eq!(s.run(&id, &query).await, format!("{expected}\n"));
    }
    // Files written in one exec are there in the next, and in checkpoints.
    s.run(&id, "open('notes.txt', 'w').write('kept')").await;

    let (status, checkpoint) = s.checkpoint(&id).await;
    assert_eq!(status, 201, "{checkpoint}");
    assert!(checkpoint["size_bytes"].as_u64().expect("size") > 1_000_000, "{checkpoint}");
    let (_, session) = s.get(&id).await;
    assert_eq!(session["checkpoints"][0]["id"], checkpoint["id"], "{session}");
    assert_eq!(session["execs"], 12, "{session}");

    let left = s.fork(&id).await;
    let right = s.fork(&id).await;
    s.run(&left, "rows[0]['value'] = 'left'\nseen = 'left'").await;
    s.run(&right, "del rows[1]\nseen = 'right'").await;
    s.run(&id, "rows[2]['value'] = 'parent'").await;
    let probe = "print(rows[0]['value'], 1 in rows, rows[2]['value'], globals().get('seen'), open('notes.txt').read())";
    assert_eq!(s.run(&left, probe).await, "left True 6 left kept\n");
    assert_eq!(s.run(&right, probe).await, "0 False 6 right kept\n");
    assert_eq!(s.run(&id, probe).await, "0 True parent None kept\n");

    // A session restored from a checkpoint is a new session of its own.
    let (status, restored) = s.create(json!({ "from_checkpoint": checkpoint["id"] })).await;
    assert_eq!(status, 201, "{restored}");
    assert_eq!(restored["language"], "python");
    assert_eq!(s.run(restored["id"].as_str().expect("id"), "print(rows[2]['value'])").await, "6\n");
}

/// A checkpoint holds the session's whole memory image, and the harness
/// held it four times over while taking one (the instance's memory, its
/// snapshot, the checkpoint built from that, and the copy the session's
/// Worker posted to the harness's realm): a session holding 60 MB under a
/// 256 MB cap went past the 736 MB at which its process is killed, and
/// its checkpoint failed. The Worker hands the checkpoint over without a
/// copy, and sends its head and its image as two parts, never joined, so
/// the image is held twice: a session holding 90 MB checkpoints too
/// (joined, one holding 60 MB went past the limit every time). Its fork
/// opens: the harness moves the checkpoint to the new session's Worker,
/// which reads the image where it lies (copied twice, the fork did not
/// open). (At 110 MB the peak came within about 60 MB of the limit, and
/// the process was killed in one run of three: the test holds 90.)
#[tokio::test]
async fn a_session_holding_90_megabytes_checkpoints() {
    let stack = Stack::start(&[("RUNBOX_MEMORY_MB", "256")]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "python" })).await;
    let load = "data = bytes(range(256)) * (90 * 1024 * 1024 // 256)\nprint(len(data) >> 20)";
    assert_eq!(s.run(&id, load).await, "90\n");
    for _ in 0..2 {
        let (status, checkpoint) = s.checkpoint(&id).await;
        assert_eq!(status, 201, "{checkpoint}");
    }
    assert_eq!(s.run(&id, "print(data[257], len(data) >> 20)").await, "1 90\n");
    let fork = s.fork(&id).await;
    assert_eq!(s.run(&fork, "print(data[257], len(data) >> 20)").await, "1 90\n");
}

/// A session's code can make what its realm's checkpoint reply holds. The
/// harness takes exactly two plain byte arrays, and a reason only as a
/// string of at most 8,192 characters: otherwise the checkpoint fails, and
/// the session's process lives on with its state. (With a missing image
/// let through, the harness wrote an undefined part, failed, and the
/// process died; a 2 MB reason made a report line past the runner's cap.)
#[tokio::test]
async fn a_checkpoint_reply_made_by_the_session_fails_without_ending_it() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "python" })).await;
    s.run(&id, "import js, pyodide_js\nkept = 7").await;
    // What the session's realm hands the harness for its memory image: none;
    // one over a SharedArrayBuffer, which the session could go on changing;
    // and a reason two megabytes long.
    for snapshot in [
        "() => undefined",
        "() => new Uint8Array(new SharedArrayBuffer(8))",
        "() => { throw new Error('x'.repeat(2000000)) }",
    ] {
        s.run(&id, &format!("pyodide_js.makeMemorySnapshot = js.eval(\"{snapshot}\")")).await;
        let (status, refused) = s.checkpoint(&id).await;
        let code = refused["error"]["code"].as_str();
        assert_eq!((status, code), (422, Some("checkpoint_failed")), "{snapshot}: {:.300}", refused.to_string());
    }
    // The session's own reply to the checkpoint in hand, whose reason is
    // no string.
    let answer = "js.eval(\"const own = self.onmessage; self.onmessage = (event) => event.data.op === 'checkpoint' \
        ? self.postMessage({ seq: event.data.seq, message: { toString: 0, valueOf: 0 } }) : own(event)\")";
    s.run(&id, answer).await;
    let (status, refused) = s.checkpoint(&id).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (422, Some("checkpoint_failed")), "{refused}");
    assert_eq!(s.run(&id, "print(kept)").await, "7\n");
}

// The session-protocol probes: what a session's own code can do to the
// harness's requests and their replies. Each runs for both languages, as
// JavaScript in the session's realm: a JavaScript session's exec itself, a
// Python session's through `js.eval` (its interpreter's Worker).

/// The languages whose sessions share one reply channel.
const SESSION_LANGUAGES: [&str; 2] = ["python", "javascript"];

/// An exec of `language` that runs `js` in the session's realm, then prints
/// `text` (if any).
fn in_realm(language: &str, js: &str, text: &str) -> String {
    let literal = serde_json::to_string(js).expect("a string");
    let text = serde_json::to_string(text).expect("a string");
    match language {
        "python" => format!("import js\njs.eval({literal})\nif {text}: print({text})"),
        _ => format!("{js};\nif ({text}) console.log({text})"),
    }
}

/// An exec of `language` that waits for the promise `js` evaluates to in the
/// session's realm, then prints `text`.
fn awaiting_in_realm(language: &str, js: &str, text: &str) -> String {
    let literal = serde_json::to_string(js).expect("a string");
    let text = serde_json::to_string(text).expect("a string");
    match language {
        "python" => format!("import js\nawait js.eval({literal})\nprint({text})"),
        _ => format!("Promise.resolve({js}).then(() => console.log({text}))"),
    }
}

/// An exec of `language` that fails on its own, and the exit code it gets.
fn failing(language: &str) -> (&'static str, i64) {
    match language {
        "python" => ("raise SystemExit(3)", 3),
        _ => ("throw new Error('its own')", 1),
    }
}

/// Checks that the session answers each exec with its own result, in step.
async fn answers_in_step(s: &Sessions<'_>, id: &str, language: &str) {
    let (code, exit) = failing(language);
    let (status, failed) = s.exec(id, json!({ "code": code })).await;
    assert_eq!(
        (status, &failed["exit_code"], &failed["stdout"]),
        (200, &json!(exit), &json!("")),
        "{language}: {failed}"
    );
    assert_eq!(s.run(id, &in_realm(language, "0", "in step")).await, "in step\n", "{language}");
}

/// Shapes a session's code can post as if they were the harness's replies.
const FORGED: &str = "[{ status: 3 }, { status: 7, allocation: true, memoryError: true }, { status: 3, exit: true }, \
    { ok: true }, { ready: true }, { parts: [] }, { message: 'forged' }, { seq: 1, status: 3 }, null, 3, '3']";

#[tokio::test]
async fn what_a_session_posts_itself_is_never_taken_for_a_reply() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    for language in SESSION_LANGUAGES {
        let id = s.open(json!({ "language": language })).await;
        // A timer left by one exec posts `{status: 3}`, as code written for
        // a browser's Worker posts its results; the next exec waits for it.
        let timer = "globalThis.posted = new Promise((resolve) => { \
            const timer = setInterval(() => { clearInterval(timer); postMessage({ status: 3 }); resolve(); }, 1); })";
        assert_eq!(s.run(&id, &in_realm(language, timer, "")).await, "", "{language}");
        assert_eq!(s.run(&id, &awaiting_in_realm(language, "posted", "waited")).await, "waited\n", "{language}");
        // Then every shape of a reply, through `postMessage` and `self.postMessage`.
        let shapes = format!("for (const data of {FORGED}) {{ postMessage(data); self.postMessage(data); }}");
        assert_eq!(s.run(&id, &in_realm(language, &shapes, "posted")).await, "posted\n", "{language}");
        answers_in_step(&s, &id, language).await;
    }
}

#[tokio::test]
async fn a_request_a_session_makes_up_is_not_answered_in_its_place() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    for language in SESSION_LANGUAGES {
        let id = s.open(json!({ "language": language })).await;
        // The Worker's own handler, called with each number a counter could
        // give the requests to come: each is answered before they are made.
        let made_up = "for (let seq = 0; seq < 64; seq++) for (const data of [{ op: 'none', code: '', seq }, \
            { op: 'run', code: '', seq: String(seq) }]) { self.onmessage({ data }); \
            self.dispatchEvent(new MessageEvent('message', { data })); }";
        assert_eq!(s.run(&id, &in_realm(language, made_up, "made up")).await, "made up\n", "{language}");
        answers_in_step(&s, &id, language).await;
    }
}

#[tokio::test]
async fn a_late_reply_is_not_taken_for_a_later_request() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    for language in SESSION_LANGUAGES {
        let id = s.open(json!({ "language": language })).await;
        // The session sees each request its Worker gets, and answers each
        // again once it has been answered, with whatever it carried.
        let record = "globalThis.requests = []; addEventListener('message', ({ data }) => requests.push(data))";
        s.run(&id, &in_realm(language, record, "")).await;
        assert_eq!(s.run(&id, &in_realm(language, "0", "recorded")).await, "recorded\n", "{language}");
        let late = "for (const request of requests.slice(0, -1)) self.postMessage({ ...request, status: 3, \
            allocation: true, memoryError: true, exit: true, ok: true })";
        assert_eq!(s.run(&id, &in_realm(language, late, "late")).await, "late\n", "{language}");
        answers_in_step(&s, &id, language).await;
    }
}

#[tokio::test]
async fn a_session_whose_interpreter_ends_itself_is_lost_and_the_worker_serves_on() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    for language in SESSION_LANGUAGES {
        // The session's Worker closes: no reply comes, and the runner ends
        // the session's process at the exec's limit, as an exec that cannot
        // be interrupted.
        let id = s.open(json!({ "language": language })).await;
        let (status, closed) =
            s.exec(&id, json!({ "code": in_realm(language, "self.close()", ""), "timeout_ms": 2000 })).await;
        assert_eq!(
            (status, closed["status"].as_str(), closed["session"]["status"].as_str()),
            (200, Some("timeout"), Some("lost")),
            "{language}: {closed}"
        );
        let (status, gone) = s.exec(&id, json!({ "code": "1" })).await;
        assert_eq!((status, gone["error"]["code"].as_str()), (410, Some("session_lost")), "{language}: {gone}");

        // An error nobody catches, thrown after an exec was answered by
        // what that exec left (here when the next request comes, by a
        // timer, and again by an error listener): the session's process
        // ends then, and the error is not taken for the reply to the exec
        // in hand, which waits for ever.
        let id = s.open(json!({ "language": language })).await;
        let throws = "addEventListener('error', () => { throw new Error('gone') }); \
            addEventListener('message', () => setTimeout(() => { throw new Error('gone') }), { once: true })";
        assert_eq!(s.run(&id, &in_realm(language, throws, "")).await, "", "{language}");
        let forever = awaiting_in_realm(language, "new Promise(() => {})", "ran");
        let (status, died) = s.exec(&id, json!({ "code": forever, "timeout_ms": 3000 })).await;
        assert_eq!((status, died["session"]["status"].as_str()), (200, Some("lost")), "{language}: {died}");
        assert_eq!(died["stdout"], "", "{language}: {died}");
        let stderr = died["stderr"].as_str().expect("stderr");
        assert!(stderr.contains("the session's interpreter ended: Uncaught Error: gone"), "{language}: {died}");
        assert_ne!(died["status"], "timeout", "{language}: {died}");
        let (status, gone) = s.exec(&id, json!({ "code": "1" })).await;
        assert_eq!((status, gone["error"]["code"].as_str()), (410, Some("session_lost")), "{language}: {gone}");

        let id = s.open(json!({ "language": language })).await;
        assert_eq!(s.run(&id, &in_realm(language, "0", "served")).await, "served\n", "{language}");
    }
}

#[tokio::test]
async fn a_javascript_session_keeps_its_declarations_and_forks_by_replay() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "js" })).await;
    s.run(&id, "const base = [1, 2, 3]; let scale = 10; function times(x) { return x * scale }").await;
    assert_eq!(s.run(&id, "console.log(base.map(times).join(','))").await, "10,20,30\n");
    assert_eq!(s.run(&id, "Promise.resolve(7).then((v) => console.log(v * scale))").await, "70\n");
    let (status, error) = s.exec(&id, json!({ "code": "throw new Error('boom')" })).await;
    assert_eq!(status, 200);
    assert_eq!(error["exit_code"], 1, "{error}");
    assert!(error["stderr"].as_str().expect("stderr").contains("boom"), "{error}");

    let fork = s.fork(&id).await;
    s.run(&fork, "scale = 100").await;
    assert_eq!(s.run(&fork, "console.log(times(2))").await, "200\n");
    assert_eq!(s.run(&id, "console.log(times(2))").await, "20\n");

    let (status, refused) = s.exec(&id, json!({ "code": "1", "stdin": "x" })).await;
    assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid_field")), "{refused}");
}

#[tokio::test]
async fn an_exec_past_its_deadline_is_interrupted_and_the_session_keeps_its_state() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "python" })).await;
    s.run(&id, "state = 41").await;
    let (status, result) = s.exec(&id, json!({ "code": "while True:\n    state += 0", "timeout_ms": 1000 })).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "timeout", "{result}");
    assert!(result["stderr"].as_str().expect("stderr").contains("KeyboardInterrupt"), "{result}");
    assert_eq!(result["session"]["status"], "idle", "{result}");
    assert_eq!(s.run(&id, "print(state + 1)").await, "42\n");
}

#[tokio::test]
async fn an_exec_that_cannot_be_interrupted_kills_the_process_and_the_session_comes_back_from_its_checkpoint() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    let id = s.open(json!({ "language": "python" })).await;
    s.run(&id, "saved = 'before'").await;
    let (status, checkpoint) = s.checkpoint(&id).await;
    assert_eq!(status, 201, "{checkpoint}");
    s.run(&id, "unsaved = 'after'").await;
    // time.sleep does not return to the interpreter, so the interrupt waits.
    let (status, result) = s.exec(&id, json!({ "code": "import time\ntime.sleep(30)", "timeout_ms": 1000 })).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["session"]["restored_from"], checkpoint["id"], "{result}");
    assert!(result["stderr"].as_str().expect("stderr").contains("restored from checkpoint"), "{result}");
    assert_eq!(s.run(&id, "print(saved, 'unsaved' in globals())").await, "before False\n");

    // With no checkpoint, the session is lost, never silently empty.
    let bare = s.open(json!({ "language": "python" })).await;
    let (_, result) = s.exec(&bare, json!({ "code": "import time\ntime.sleep(30)", "timeout_ms": 1000 })).await;
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["session"]["status"], "lost", "{result}");
    let (status, gone) = s.exec(&bare, json!({ "code": "print(1)" })).await;
    assert_eq!((status, gone["error"]["code"].as_str()), (410, Some("session_lost")), "{gone}");
}

#[tokio::test]
async fn an_idle_session_is_torn_down_and_its_process_is_gone() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    // No warm children: the worker's only child is the session's.
    let worker = start_worker(&redis, &[("RUNBOX_POOL_MIN", "0"), ("RUNBOX_POOL_MAX", "0")]).await;
    let s = alice(&api);
    let id = s.open(json!({ "language": "python", "idle_timeout_s": 2 })).await;
    assert_eq!(s.run(&id, "print('hi')").await, "hi\n");
    assert_eq!(children_of(worker.pid()).len(), 1, "the session's process");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, session) = s.get(&id).await;
    assert_eq!(status, 200);
    assert_eq!(session["status"], "expired", "{session}");
    assert_eq!(session["ended_reason"], "idle", "{session}");
    assert!(children_of(worker.pid()).is_empty(), "the session's process outlived it");
    let (status, gone) = s.exec(&id, json!({ "code": "print(1)" })).await;
    assert_eq!((status, gone["error"]["code"].as_str()), (410, Some("session_expired")), "{gone}");
}

#[tokio::test]
async fn a_session_of_a_killed_worker_comes_back_from_its_checkpoint_on_another() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let mut first = start_worker(&redis, &[]).await;
    let s = alice(&api);
    let id = s.open(json!({ "language": "python" })).await;
    let bare = s.open(json!({ "language": "javascript" })).await;
    s.run(&id, "total = sum(range(10))").await;
    let (_, checkpoint) = s.checkpoint(&id).await;
    s.run(&id, "total = -1").await;

    let second = start_worker(&redis, &[]).await;
    first.signal(Signal::SIGKILL);
    first.wait(Duration::from_secs(5)).await;
    // The api takes a worker for dead after 8 s without a heartbeat.
    tokio::time::sleep(Duration::from_secs(9)).await;

    let (status, result) = s.exec(&id, json!({ "code": "print(total)" })).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["stdout"], "45\n", "{result}");
    assert_eq!(result["session"]["restored_from"], checkpoint["id"], "{result}");
    let (_, session) = s.get(&id).await;
    assert_ne!(session["worker"], Value::Null);
    second.wait_for_log("session opened", Duration::from_secs(1)).await;

    let (status, lost) = s.exec(&bare, json!({ "code": "1" })).await;
    assert_eq!((status, lost["error"]["code"].as_str()), (410, Some("session_lost")), "{lost}");
}

#[tokio::test]
async fn sessions_are_invisible_to_other_tokens() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    let bob = Sessions { api: &stack.api, token: BOB };
    let id = s.open(json!({ "language": "python" })).await;
    s.run(&id, "secret = 'alice'").await;
    let (_, checkpoint) = s.checkpoint(&id).await;

    for (status, body) in [
        bob.get(&id).await,
        bob.exec(&id, json!({ "code": "print(secret)" })).await,
        bob.checkpoint(&id).await,
        bob.call(reqwest::Method::POST, &format!("/v1/sessions/{id}/fork"), None).await,
        bob.delete(&id).await,
    ] {
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("no_session")), "{body}");
    }
    let (status, body) = bob.create(json!({ "from_checkpoint": checkpoint["id"] })).await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("no_checkpoint")), "{body}");
    let (_, listed) = bob.call(reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(listed["sessions"], json!([]), "{listed}");
    let (_, listed) = s.call(reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(listed["sessions"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(s.run(&id, "print(secret)").await, "alice\n");
}

#[tokio::test]
async fn misuse_gets_an_error_that_says_what_to_fix() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_SESSIONS_PER_TOKEN", "2")]).await;
    let _worker = start_worker(&redis, &[("RUNBOX_WORKER_CONCURRENCY", "3")]).await;
    let s = alice(&api);
    for (body, code) in [
        (json!({ "language": "typescript" }), "invalid_field"),
        (json!({}), "invalid_field"),
        (json!({ "language": "python", "idle_timeout_s": 0 }), "invalid_field"),
        (json!({ "language": "python", "pets": 1 }), "unknown_field"),
    ] {
        let (status, error) = s.create(body).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some(code)), "{error}");
    }
    let (status, error) = s.create(json!({ "from_checkpoint": "7f6c1a52-0c2e-4a53-9d47-3f1e2b8c9a10" })).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("no_checkpoint")), "{error}");
    for id in ["7f6c1a52-0c2e-4a53-9d47-3f1e2b8c9a10".to_owned(), "not-an-id".to_owned()] {
        let (status, error) = s.exec(&id, json!({ "code": "1" })).await;
        assert_eq!((status, error["error"]["code"].as_str()), (404, Some("no_session")), "{error}");
    }

    let id = s.open(json!({ "language": "python" })).await;
    let _second = s.open(json!({ "language": "javascript" })).await;
    let (status, error) = s.create(json!({ "language": "python" })).await;
    assert_eq!((status, error["error"]["code"].as_str()), (429, Some("too_many_sessions")), "{error}");

    // One exec at a time: a second while the first runs is refused.
    let slow = {
        let s = Sessions { api: &api, token: ALICE };
        let id = id.clone();
        async move { s.exec(&id, json!({ "code": "import time\nt = time.time()\nwhile time.time() - t < 3: pass" })).await }
    };
    let second = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        s.exec(&id, json!({ "code": "print(1)" })).await
    };
    let ((first_status, _), (status, error)) = tokio::join!(slow, second);
    assert_eq!(first_status, 200);
    assert_eq!((status, error["error"]["code"].as_str()), (409, Some("session_busy")), "{error}");
    let (status, error) = s.exec(&id, json!({ "code": "1", "language": "js" })).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("unknown_field")), "{error}");

    // A checkpoint Pyodide cannot take says why.
    s.run(&id, "import js\nholder = js.Object.new()").await;
    let (status, error) = s.checkpoint(&id).await;
    assert_eq!((status, error["error"]["code"].as_str()), (422, Some("checkpoint_failed")), "{error}");
    assert!(error["error"]["message"].as_str().expect("message").contains("JavaScript object"), "{error}");
    s.run(&id, "del holder").await;
    let (status, checkpoint) = s.checkpoint(&id).await;
    assert_eq!(status, 201, "{checkpoint}");

    let (status, closed) = s.delete(&id).await;
    assert_eq!((status, closed["status"].as_str()), (200, Some("closed")), "{closed}");
    let (status, error) = s.exec(&id, json!({ "code": "1" })).await;
    assert_eq!((status, error["error"]["code"].as_str()), (410, Some("session_closed")), "{error}");
    // Its slot under the cap is free again.
    s.open(json!({ "language": "python" })).await;
}

#[tokio::test]
async fn runtimes_show_the_sessions_each_worker_holds() {
    let stack = Stack::start(&[]).await;
    let s = alice(&stack.api);
    s.open(json!({ "language": "javascript" })).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let response = stack.api.http.get(stack.api.url("/v1/runtimes")).bearer_auth(ALICE).send().await.expect("get");
        let runtimes: Value = response.json().await.expect("json");
        if runtimes["workers"][0]["sessions"] == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{runtimes}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_forged_session_task_is_rejected_and_never_runs() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let _worker = start_worker(&redis, &[]).await;
    let s = alice(&api);
    let id = s.open(json!({ "language": "python" })).await;
    s.run(&id, "secret = 'kept'").await;
    let (_, session) = s.get(&id).await;
    let worker = session["worker"].as_str().expect("worker").to_owned();

    // What someone with Redis access but not the signing key could write:
    // a task for the session, straight into its worker's inbox.
    let forged = "00000000-0000-4000-8000-00000000f00d";
    let payload = json!({
        "language": "python",
        "code": "secret = 'overwritten'",
        "session": { "id": id, "op": { "kind": "exec" } },
    })
    .to_string();
    let _: i64 = redis
        .cmd(
            redis::cmd("HSET")
                .arg(keys().job(forged))
                .arg("status")
                .arg("queued")
                .arg("owner")
                .arg("alice")
                .arg("payload")
                .arg(&payload)
                .arg("sig")
                .arg("0".repeat(64)),
        )
        .await;
    let _: i64 = redis.cmd(redis::cmd("LPUSH").arg(keys().inbox(&worker)).arg(forged)).await;
    let job = api.until_status(forged, "rejected", Duration::from_secs(10)).await;
    assert!(job["stderr"].as_str().expect("stderr").contains("signature"), "{job}");
    assert_eq!(s.run(&id, "print(secret)").await, "kept\n");
}
