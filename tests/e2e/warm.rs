//! Warm children: a token's Python jobs run in its own long-lived children
//! by default, whatever surface sent them, unless a job asks for a fresh
//! child (`shared_runtime: false`); JavaScript and TypeScript only when
//! they ask (`true`). Which child a job ran in is observed twice over: the
//! result's `warm` flag, which the worker sets from whether the child had
//! already run a job, and the pid the program prints. That a child never
//! serves two tokens is in `tenancy.rs`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

fn python(extra: Value) -> Value {
    let mut job = json!({ "language": "python", "code": PYTHON_PID });
    job.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
    job
}

fn javascript(extra: Value) -> Value {
    let mut job = json!({ "language": "javascript", "code": JS_PID });
    job.as_object_mut().expect("object").extend(extra.as_object().cloned().unwrap_or_default());
    job
}

/// POST /v1/batches as alice and wait for it; its jobs in order.
async fn batch(api: &Api, body: &Value) -> Vec<Value> {
    let response = api.http.post(api.url("/v1/batches")).bearer_auth(ALICE).json(body).send().await.expect("post");
    assert_eq!(response.status(), 202);
    let submitted: Value = response.json().await.expect("json");
    let id = submitted["id"].as_str().expect("id");
    let path = format!("/v1/batches/{id}?wait=60");
    let batch: Value =
        api.http.get(api.url(&path)).bearer_auth(ALICE).send().await.expect("get").json().await.expect("json");
    assert_eq!(batch["status"], "finished", "{batch}");
    batch["jobs"].as_array().expect("jobs").clone()
}

async fn post(api: &Api, path: &str, body: &Value) -> (u16, Value) {
    let response = api.http.post(api.url(path)).bearer_auth(ALICE).json(body).send().await.expect("post");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn python_jobs_are_warm_from_the_second_on_unless_they_opt_out() {
    // One slot, and idle children kept long enough for a slow machine.
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1"), ("RUNBOX_WARM_IDLE_MS", "60000")]).await;
    let api = &stack.api;

    // No flag: the first job gets a fresh child, the second the same one.
    let (warm, child) = child_of(&run_as(api, ALICE, &python(json!({}))).await);
    assert!(!warm, "the first job found a warm child");
    let second = run_as(api, ALICE, &python(json!({}))).await;
    assert_eq!(child_of(&second), (true, child), "{second}");
    assert_eq!(second["timings"]["boot_ms"], 0, "a warm child needs no boot: {second}");

    // Opted out: a fresh child, which takes nothing from the warm one.
    let (warm, fresh) = child_of(&run_as(api, ALICE, &python(json!({ "shared_runtime": false }))).await);
    assert!(
        !warm && fresh != child,
        "shared_runtime: false ran in child {fresh} (warm {warm}), the warm one is {child}"
    );
    assert_eq!(child_of(&run_as(api, ALICE, &python(json!({}))).await), (true, child));
    assert_eq!(child_of(&run_as(api, ALICE, &python(json!({ "shared_runtime": true }))).await), (true, child));

    // A batch without the flag is the same; with false, every job is fresh.
    for job in batch(api, &json!({ "jobs": [python(json!({})), python(json!({}))] })).await {
        assert_eq!(child_of(&job), (true, child), "{job}");
    }
    let jobs = batch(api, &json!({ "jobs": [python(json!({})), python(json!({}))], "shared_runtime": false })).await;
    let fresh: Vec<(bool, u32)> = jobs.iter().map(child_of).collect();
    assert!(fresh.iter().all(|(warm, pid)| !warm && *pid != child), "{fresh:?}");
    assert_ne!(fresh[0].1, fresh[1].1, "two opted-out jobs shared a child");

    // JavaScript: a fresh child each unless asked; asked, warm the second
    // time, except with stdin, which a JS program reads from its process.
    let first = child_of(&run_as(api, ALICE, &javascript(json!({}))).await);
    let again = child_of(&run_as(api, ALICE, &javascript(json!({}))).await);
    assert!(!first.0 && !again.0 && first.1 != again.1, "{first:?} {again:?}");
    let (_, js) = child_of(&run_as(api, ALICE, &javascript(json!({ "shared_runtime": true }))).await);
    assert_eq!(child_of(&run_as(api, ALICE, &javascript(json!({ "shared_runtime": true }))).await), (true, js));
    let with_stdin = javascript(json!({ "shared_runtime": true, "stdin": "x" }));
    let (warm, pid) = child_of(&run_as(api, ALICE, &with_stdin).await);
    assert!(!warm && pid != js, "a JS job with stdin ran in the warm child");

    // Bad values, and the flag on a batch's job, which the batch sets.
    for bad in [json!("yes"), json!(1), json!([])] {
        let (status, error) = post(api, "/v1/jobs", &python(json!({ "shared_runtime": bad }))).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
        assert_eq!(error["error"]["message"], "shared_runtime must be true or false", "{error}");
        let (status, error) =
            post(api, "/v1/batches", &json!({ "jobs": [python(json!({}))], "shared_runtime": bad })).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
    }
    let (status, error) =
        post(api, "/v1/batches", &json!({ "jobs": [python(json!({ "shared_runtime": true }))] })).await;
    assert_eq!(
        (status, error["error"]["jobs"][0]["message"].as_str()),
        (400, Some("shared_runtime belongs on the batch, not on its jobs")),
        "{error}"
    );
}

#[tokio::test]
async fn idle_warm_children_are_retired() {
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1"), ("RUNBOX_WARM_IDLE_MS", "300")]).await;
    let api = &stack.api;
    let (_, child) = child_of(&run_as(api, ALICE, &python(json!({}))).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while is_running(child) {
        assert!(tokio::time::Instant::now() < deadline, "an idle child {child} outlived its idle timeout by 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (warm, next) = child_of(&run_as(api, ALICE, &python(json!({}))).await);
    assert!(!warm && next != child, "the job after the idle timeout ran in child {next} (warm {warm})");
}

/// Past the worker's cap, the token holding the most idle children gives
/// one up, so a busy token cannot push every other token's warm child out
/// (dropping the oldest instead would drop bob's here).
#[tokio::test]
async fn past_the_workers_cap_the_token_holding_most_gives_one_up() {
    let env = [
        ("RUNBOX_WORKER_CONCURRENCY", "2"),
        ("RUNBOX_WARM_MAX", "2"),
        ("RUNBOX_WARM_PER_OWNER", "2"),
        ("RUNBOX_WARM_IDLE_MS", "60000"),
    ];
    let stack = Stack::start(&env).await;
    let api = &stack.api;
    let (_, bobs) = child_of(&run_as(api, BOB, &python(json!({}))).await);
    // Two of alice's at once take two children, both idle for her after.
    let slow = json!({ "language": "python", "code": format!("import time\ntime.sleep(1.5)\n{PYTHON_PID}") });
    let (one, two) = tokio::join!(run_as(api, ALICE, &slow), run_as(api, ALICE, &slow));
    let (one, two) = (child_of(&one).1, child_of(&two).1);
    assert!(one != two && one != bobs && two != bobs, "{one} {two} {bobs}");

    assert_eq!(child_of(&run_as(api, BOB, &python(json!({}))).await), (true, bobs), "bob's warm child was dropped");
    let (warm, kept) = child_of(&run_as(api, ALICE, &python(json!({}))).await);
    assert!(warm && (kept == one || kept == two), "alice kept neither child: {kept} (warm {warm})");
    let dropped = if kept == one { two } else { one };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while is_running(dropped) {
        assert!(tokio::time::Instant::now() < deadline, "alice's other child {dropped} was kept past the cap");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
