//! Live output: `GET /v1/jobs/{id}/events` streams a job's output while it
//! runs, then its result, to subscribers early, late and after the end.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::*;

/// One Server-Sent Event: its name, its data as JSON, and when it came.
#[derive(Debug)]
struct Sse {
    event: String,
    data: Value,
    at: Instant,
}

/// Reads job `id`'s event stream as `token` to its end (the `result`
/// event), within `limit`.
async fn events(api: &Api, id: &str, token: &str, limit: Duration) -> (u16, Vec<Sse>) {
    let response =
        api.http.get(api.url(&format!("/v1/jobs/{id}/events"))).bearer_auth(token).send().await.expect("events");
    read_events(response, limit).await
}

/// Reads an event stream to its end (the `result` event), within `limit`.
async fn read_events(response: reqwest::Response, limit: Duration) -> (u16, Vec<Sse>) {
    let status = response.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let mut response = response;
    let (mut buffer, mut got) = (String::new(), Vec::new());
    let deadline = tokio::time::Instant::now() + limit;
    while let Ok(Ok(Some(bytes))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        buffer.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut event, mut data) = (String::new(), String::new());
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = name.trim().to_owned();
                } else if let Some(text) = line.strip_prefix("data:") {
                    data.push_str(text.strip_prefix(' ').unwrap_or(text));
                }
            }
            // Keep-alive comments have no event.
            if event.is_empty() {
                continue;
            }
            let done = event == "result";
            got.push(Sse { event, data: serde_json::from_str(&data).expect("JSON data"), at: Instant::now() });
            if done {
                return (status, got);
            }
        }
    }
    panic!("the stream did not end with a result within {limit:?}: {got:?}");
}

/// The chunks of `stream` put together, checking that each starts where
/// the last ended.
fn joined(events: &[Sse], stream: &str) -> String {
    let mut text = String::new();
    for e in events.iter().filter(|e| e.event == stream) {
        assert_eq!(e.data["offset"].as_u64(), Some(text.len() as u64), "{events:?}");
        text.push_str(e.data["data"].as_str().expect("data"));
    }
    text
}

fn result(events: &[Sse]) -> &Value {
    let last = events.last().expect("events");
    assert_eq!(last.event, "result", "{events:?}");
    &last.data
}

async fn submit(api: &Api, body: Value) -> String {
    let (status, job) = api.submit(body, None).await;
    assert_eq!(status, 202, "{job}");
    job["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn output_arrives_while_the_job_runs_then_the_result() {
    let stack = Stack::start(&[]).await;
    let code = "console.log('first'); console.error('warned');\n\
                await new Promise((r) => setTimeout(r, 1500));\n\
                console.log('second é€😀');";
    let id = submit(&stack.api, json!({ "language": "js", "code": code })).await;
    let (status, got) = events(&stack.api, &id, ALICE, Duration::from_secs(60)).await;
    assert_eq!(status, 200);
    let job = result(&got);
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(joined(&got, "stdout"), job["stdout"].as_str().expect("stdout"));
    assert_eq!(joined(&got, "stderr"), "warned\n");
    assert_eq!(job["stdout"], "first\nsecond é€😀\n", "{job}");
    // "first" came on its own, well before the program ended.
    let first = got.iter().find(|e| e.event == "stdout").expect("a stdout chunk");
    assert_eq!(first.data["data"], "first\n", "{got:?}");
    let end = got.last().expect("result").at;
    assert!(end.duration_since(first.at) >= Duration::from_millis(1000), "{got:?}");
}

#[tokio::test]
async fn a_late_subscriber_gets_what_was_written_first() {
    let stack = Stack::start(&[]).await;
    let code = "import time\nprint('early', flush=True)\ntime.sleep(2)\nprint('late')";
    let id = submit(&stack.api, json!({ "language": "python", "code": code })).await;
    stack.api.until_status(&id, "running", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (_, got) = events(&stack.api, &id, ALICE, Duration::from_secs(60)).await;
    assert_eq!(got[0].event, "stdout", "{got:?}");
    assert_eq!(got[0].data, json!({ "offset": 0, "data": "early\n" }), "{got:?}");
    let job = result(&got);
    assert_eq!(joined(&got, "stdout"), "early\nlate\n", "{got:?}");
    assert_eq!(job["stdout"], "early\nlate\n", "{job}");
}

#[tokio::test]
async fn a_finished_job_streams_its_output_then_its_result() {
    let stack = Stack::start(&[]).await;
    let (status, job) = stack
        .api
        .submit(
            json!({ "language": "python", "code": "import sys\nprint('out')\nprint('err', file=sys.stderr)" }),
            Some(60),
        )
        .await;
    assert_eq!(status, 200, "{job}");
    let id = job["id"].as_str().expect("id");
    let (_, got) = events(&stack.api, id, ALICE, Duration::from_secs(10)).await;
    assert_eq!(joined(&got, "stdout"), "out\n", "{got:?}");
    assert_eq!(joined(&got, "stderr"), "err\n", "{got:?}");
    assert_eq!(result(&got)["id"], id);
    // Long after the live stream is gone, the same from the job object.
    let _: u64 = stack.redis().cmd(redis::cmd("DEL").arg(keys().output(id))).await;
    let (_, again) = events(&stack.api, id, ALICE, Duration::from_secs(10)).await;
    assert_eq!(joined(&again, "stdout"), "out\n", "{again:?}");
    assert_eq!(joined(&again, "stderr"), "err\n", "{again:?}");
}

#[tokio::test]
async fn output_past_the_cap_is_not_streamed() {
    let stack = Stack::start(&[("RUNBOX_MAX_OUTPUT_BYTES", "1000")]).await;
    let id = submit(
        &stack.api,
        json!({ "language": "js", "code": "for (let i = 0; i < 500; i++) console.log('0123456789')" }),
    )
    .await;
    let (_, got) = events(&stack.api, &id, ALICE, Duration::from_secs(60)).await;
    let job = result(&got);
    assert_eq!(job["stdout_truncated"], true, "{job}");
    let streamed = joined(&got, "stdout");
    assert_eq!(streamed.len(), 1000, "{got:?}");
    assert_eq!(streamed, job["stdout"].as_str().expect("stdout"));
}

#[tokio::test]
async fn another_tokens_job_has_no_stream() {
    let stack = Stack::start(&[]).await;
    let id = submit(&stack.api, json!({ "language": "js", "code": "console.log(1)" })).await;
    let (status, _) = events(&stack.api, &id, BOB, Duration::from_secs(10)).await;
    assert_eq!(status, 404);
    let (status, _) = events(&stack.api, "not-a-job", ALICE, Duration::from_secs(10)).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_session_exec_streams_when_asked() {
    let stack = Stack::start(&[]).await;
    let http = &stack.api.http;
    let session: Value = http
        .post(stack.api.url("/v1/sessions"))
        .bearer_auth(ALICE)
        .json(&json!({ "language": "python" }))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("session");
    let id = session["id"].as_str().expect("session id");
    let exec = |code: &str| {
        http.post(stack.api.url(&format!("/v1/sessions/{id}/exec")))
            .bearer_auth(ALICE)
            .header("accept", "text/event-stream")
            .json(&json!({ "code": code }))
            .send()
    };
    let response =
        exec("import time\nx = 41\nprint('start', flush=True)\ntime.sleep(1.5)\nprint('end')").await.expect("exec");
    let (status, got) = read_events(response, Duration::from_secs(60)).await;
    assert_eq!(status, 200);
    let end = got.last().expect("result").at;
    assert_eq!(got[0].data, json!({ "offset": 0, "data": "start\n" }), "{got:?}");
    assert!(end.duration_since(got[0].at) >= Duration::from_millis(1000), "{got:?}");
    assert_eq!(result(&got)["stdout"], "start\nend\n");
    // The session lives on, with its state, for the next exec.
    let (_, got) = read_events(exec("print(x + 1)").await.expect("exec"), Duration::from_secs(60)).await;
    assert_eq!(joined(&got, "stdout"), "42\n", "{got:?}");
}

#[tokio::test]
async fn a_job_taken_over_from_a_dead_worker_restarts_its_stream() {
    let fast = [("RUNBOX_MAX_TIMEOUT_MS", "8000"), ("RUNBOX_RECLAIM_IDLE_MS", "3000")];
    let redis = Redis::start().await;
    let api = Api::start(&redis, &fast).await;
    let mut first = start_worker(&redis, &fast).await;
    let code = "console.log('begun'); await new Promise((r) => setTimeout(r, 2000)); console.log('ended')";
    let id = submit(&api, json!({ "language": "js", "code": code, "timeout_ms": 8000 })).await;
    let watching = {
        let api_url = api.url(&format!("/v1/jobs/{id}/events"));
        let http = api.http.clone();
        tokio::spawn(async move {
            let response = http.get(api_url).bearer_auth(ALICE).send().await.expect("events");
            read_events(response, Duration::from_secs(60)).await
        })
    };
    // The first attempt has written its first line when its worker dies.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let len: u64 = redis.cmd(redis::cmd("XLEN").arg(keys().output(&id))).await;
        if len > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the first attempt wrote nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.signal(nix::sys::signal::Signal::SIGKILL);
    first.wait(Duration::from_secs(5)).await;
    let _second = start_worker(&redis, &fast).await;
    let (_, got) = watching.await.expect("watcher");
    let kinds: Vec<&str> = got.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["stdout", "restart", "stdout", "stdout", "result"], "{got:?}");
    let after_restart = &got[2..];
    assert_eq!(joined(after_restart, "stdout"), "begun\nended\n", "{got:?}");
    assert_eq!(result(&got)["stdout"], "begun\nended\n");
}

/// A job whose stdout is not UTF-8: its chunks' offsets count raw bytes,
/// the job object's `stdout` is text with U+FFFD for each invalid byte
/// (three bytes of UTF-8 for one of the job's), and what the stream
/// sends from the job object after the chunks must start where they
/// ended, not at the raw byte count read into the text. Found failing:
/// for `\xff\xff\xffabcdef\n`, after the one chunk `���abcdef\n` came a
/// second `stdout` event, `bcdef\n` at offset 10, repeating the end of
/// the output.
#[tokio::test]
async fn output_that_is_not_utf8_is_streamed_once() {
    let stack = Stack::start(&[]).await;
    let code = "import sys\nsys.stdout.buffer.write(b'\\xff\\xff\\xffabcdef\\n')";
    let (status, job) = stack.api.submit(json!({ "language": "python", "code": code }), Some(60)).await;
    assert_eq!(status, 200, "{job}");
    let id = job["id"].as_str().expect("id");
    assert_eq!(job["stdout"], "\u{fffd}\u{fffd}\u{fffd}abcdef\n", "{job}");
    let (_, got) = events(&stack.api, id, ALICE, Duration::from_secs(10)).await;
    let streamed: String =
        got.iter().filter(|e| e.event == "stdout").map(|e| e.data["data"].as_str().expect("data")).collect();
    assert_eq!(streamed, job["stdout"].as_str().expect("stdout"), "{got:?}");
}
