//! Warm children: a token's Python and TypeScript jobs run in its own
//! long-lived children by default, whatever surface sent them, unless a job
//! asks for a fresh child (`shared_runtime: false`); JavaScript only when
//! it asks (`true`). Which child a job ran in is observed twice over: the
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

fn typescript(extra: Value) -> Value {
    let mut job = json!({ "language": "typescript", "code": "const pid: number = Deno.pid;\nconsole.log(pid);" });
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
async fn python_and_typescript_jobs_are_warm_from_the_second_on_unless_they_opt_out() {
    // One slot, and idle children kept long enough for a slow machine.
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1"), ("RUNBOX_WARM_IDLE_MS", "60000")]).await;
    let api = &stack.api;

    // No flag: the first job gets a fresh child, the second the same one.
    let child = assert_fresh(&run_as(api, ALICE, &python(json!({}))).await, &[], "the first job");
    let second = run_as(api, ALICE, &python(json!({}))).await;
    assert_warm_in(&second, child, "the second job");
    assert_eq!(second["timings"]["boot_ms"], 0, "a warm child needs no boot: {second}");

    // Opted out: a fresh child, which takes nothing from the warm one.
    let opted_out = run_as(api, ALICE, &python(json!({ "shared_runtime": false }))).await;
    assert_fresh(&opted_out, &[child], "shared_runtime: false");
    assert_warm_in(&run_as(api, ALICE, &python(json!({}))).await, child, "after the opted-out job");
    assert_warm_in(&run_as(api, ALICE, &python(json!({ "shared_runtime": true }))).await, child, "asked");

    // A batch without the flag is the same; with false, every job is fresh.
    for job in batch(api, &json!({ "jobs": [python(json!({})), python(json!({}))] })).await {
        assert_warm_in(&job, child, "a batch's job");
    }
    let jobs = batch(api, &json!({ "jobs": [python(json!({})), python(json!({}))], "shared_runtime": false })).await;
    let first = assert_fresh(&jobs[0], &[child], "an opted-out batch's first job");
    assert_fresh(&jobs[1], &[child, first], "an opted-out batch's second job");

    // JavaScript: a fresh child each unless asked; asked, warm the second
    // time, except with stdin, which a JS program reads from its process.
    let first = assert_fresh(&run_as(api, ALICE, &javascript(json!({}))).await, &[], "a JS job");
    assert_fresh(&run_as(api, ALICE, &javascript(json!({}))).await, &[first], "the next JS job");
    let js = assert_fresh(&run_as(api, ALICE, &javascript(json!({ "shared_runtime": true }))).await, &[], "asked");
    assert_warm_in(&run_as(api, ALICE, &javascript(json!({ "shared_runtime": true }))).await, js, "asked again");
    let with_stdin = javascript(json!({ "shared_runtime": true, "stdin": "x" }));
    assert_fresh(&run_as(api, ALICE, &with_stdin).await, &[js], "a JS job with stdin");

    // TypeScript: warm from the second job without the flag (in the JS
    // harness's children, which the JS jobs above left warm), fresh when
    // it opts out or has stdin.
    assert_warm_in(&run_as(api, ALICE, &typescript(json!({}))).await, js, "a TS job");
    assert_warm_in(&run_as(api, ALICE, &typescript(json!({}))).await, js, "the next TS job");
    assert_fresh(&run_as(api, ALICE, &typescript(json!({ "shared_runtime": false }))).await, &[js], "opted out");
    assert_fresh(&run_as(api, ALICE, &typescript(json!({ "stdin": "x" }))).await, &[js], "a TS job with stdin");

    // Bad values, and the flag on a batch's job, which the batch sets.
    for bad in [json!("yes"), json!(1), json!([])] {
        let (status, error) = post(api, "/v1/jobs", &python(json!({ "shared_runtime": bad }))).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
        assert_eq!(error["error"]["message"], "shared_runtime must be true or false", "{error}");
        let body = json!({ "jobs": [python(json!({}))], "shared_runtime": bad });
        let (status, error) = post(api, "/v1/batches", &body).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
    }
    let (status, error) =
        post(api, "/v1/batches", &json!({ "jobs": [python(json!({ "shared_runtime": true }))] })).await;
    let message = error["error"]["jobs"][0]["message"].as_str();
    assert_eq!((status, message), (400, Some("shared_runtime belongs on the batch, not on its jobs")), "{error}");
}

#[tokio::test]
async fn idle_warm_children_are_retired() {
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1"), ("RUNBOX_WARM_IDLE_MS", "300")]).await;
    let api = &stack.api;
    let child = assert_fresh(&run_as(api, ALICE, &python(json!({}))).await, &[], "the first job");
    match child.0 {
        Some(pid) => {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while is_running(pid) {
                assert!(tokio::time::Instant::now() < deadline, "idle child {pid} outlived its idle timeout by 10 s");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        None => tokio::time::sleep(Duration::from_secs(3)).await,
    }
    assert_fresh(&run_as(api, ALICE, &python(json!({}))).await, &[child], "the job after the idle timeout");
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
    let bobs = assert_fresh(&run_as(api, BOB, &python(json!({}))).await, &[], "bob's first job");
    // Two of alice's at once take two children, both idle for her after.
    let slow = json!({ "language": "python", "code": format!("import time\ntime.sleep(1.5)\n{PYTHON_PID}") });
    let (one, two) = tokio::join!(run_as(api, ALICE, &slow), run_as(api, ALICE, &slow));
    let one = assert_fresh(&one, &[bobs], "alice's first job");
    let two = assert_fresh(&two, &[bobs, one], "alice's second job");

    assert_warm_in(&run_as(api, BOB, &python(json!({}))).await, bobs, "bob's warm child was dropped");
    let kept = run_as(api, ALICE, &python(json!({}))).await;
    let (warm, pid) = child_of(&kept);
    assert!(warm && (pid.same(one) || pid.same(two)), "alice kept neither child: {kept}");
    // The child she did not keep is gone.
    let dropped = if pid == one { two } else { one };
    if let (Some(dropped), Some(_)) = (dropped.0, pid.0) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while is_running(dropped) {
            assert!(tokio::time::Instant::now() < deadline, "alice's other child {dropped} was kept past the cap");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
