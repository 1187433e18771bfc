//! Batches through the real stack: many jobs with expected outputs,
//! submitted whole or refused whole, read with counts, streamed as they
//! finish, cancelled, and private to the token that submitted them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

async fn post_batch(api: &Api, token: &str, body: &Value) -> (u16, Value) {
    let response = api.http.post(api.url("/v1/batches")).bearer_auth(token).json(body).send().await.expect("post");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn get_json(api: &Api, token: &str, path: &str) -> (u16, Value) {
    let response = api.http.get(api.url(path)).bearer_auth(token).send().await.expect("get");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Five jobs, one of each verdict a quick program can earn, plus one
/// without an expectation.
fn judged_jobs() -> Value {
    json!({ "jobs": [
        { "language": "py", "code": "print(sum(map(int, input().split())))", "stdin": "2 3", "expected_stdout": "5\n" },
        { "language": "js", "code": "console.log(Deno.args.join('+'))", "args": ["1", "2"], "expected_stdout": "1+2" , "compare": "trim" },
        { "language": "py", "code": "print(6)", "expected_stdout": "5\n" },
        { "language": "ts", "code": "throw new Error('boom')", "expected_stdout": "5\n" },
        { "language": "js", "code": "for (;;) {}", "timeout_ms": 500, "expected_stdout": "5\n" },
        { "language": "js", "code": "console.log('no expectation')" },
    ]})
}

#[tokio::test]
async fn a_batch_runs_every_job_and_counts_verdicts() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    let (status, submitted) = post_batch(api, ALICE, &judged_jobs()).await;
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_str().expect("id");
    let job_ids: Vec<&str> = submitted["job_ids"].as_array().expect("ids").iter().filter_map(Value::as_str).collect();
    assert_eq!(job_ids.len(), 6);

    let (status, batch) = get_json(api, ALICE, &format!("/v1/batches/{id}?wait=60")).await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(
        (batch["status"].as_str(), batch["size"].as_u64(), batch["done"].as_u64()),
        (Some("finished"), Some(6), Some(6)),
        "{batch}"
    );
    assert_eq!(batch["counts"], json!({ "completed": 5, "timeout": 1 }), "{batch}");
    assert_eq!(
        batch["verdicts"],
        json!({ "accepted": 2, "wrong_answer": 1, "runtime_error": 1, "timeout": 1 }),
        "{batch}"
    );
    // Jobs come back in submission order, each a full job object.
    let jobs = batch["jobs"].as_array().expect("jobs");
    let order: Vec<&str> = jobs.iter().filter_map(|j| j["id"].as_str()).collect();
    assert_eq!(order, job_ids);
    assert_eq!(jobs[1]["stdout"], "1+2\n");
    assert_eq!(jobs[5]["verdict"], Value::Null);
    assert!(jobs[5].get("verdict").is_none(), "no expectation, no verdict field: {}", jobs[5]);

    // Pages.
    let (_, page) = get_json(api, ALICE, &format!("/v1/batches/{id}?offset=4&limit=1")).await;
    assert_eq!((page["jobs"][0]["id"].as_str(), page["next_offset"].as_u64()), (Some(job_ids[4]), Some(5)), "{page}");
    let (_, last) = get_json(api, ALICE, &format!("/v1/batches/{id}?offset=5&limit=10")).await;
    assert_eq!((last["jobs"].as_array().map(Vec::len), &last["next_offset"]), (Some(1), &Value::Null), "{last}");
    let (status, bad) = get_json(api, ALICE, &format!("/v1/batches/{id}?limit=0")).await;
    assert_eq!((status, bad["error"]["code"].as_str()), (400, Some("invalid_field")), "{bad}");

    // Each job is an ordinary job too.
    let (status, job) = api.get(job_ids[2], ALICE, None).await;
    assert_eq!((status, job["verdict"].as_str()), (200, Some("wrong_answer")), "{job}");

    // Another token sees neither the batch nor its jobs.
    assert_eq!(get_json(api, BOB, &format!("/v1/batches/{id}")).await.0, 404);
    assert_eq!(api.get(job_ids[0], BOB, None).await.0, 404);
    assert_eq!(get_json(api, ALICE, "/v1/batches/not-a-batch").await.0, 404);
}

#[tokio::test]
async fn results_stream_each_job_as_it_finishes_and_end_with_the_batch() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    let body = json!({ "jobs": [
        { "language": "js", "code": "await new Promise((r) => setTimeout(r, 1500)); console.log('slow')" },
        { "language": "js", "code": "console.log('fast')" },
    ]});
    let (_, submitted) = post_batch(api, ALICE, &body).await;
    let id = submitted["id"].as_str().expect("id");
    let response =
        api.http.get(api.url(&format!("/v1/batches/{id}/results"))).bearer_auth(ALICE).send().await.expect("stream");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text =
        tokio::time::timeout(Duration::from_secs(60), response.text()).await.expect("stream ends").expect("body");
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let outputs: Vec<&str> = lines.iter().filter_map(|l| l["stdout"].as_str()).collect();
    assert_eq!(outputs, ["fast\n", "slow\n"], "in the order they finished: {text}");
}

#[tokio::test]
async fn an_invalid_job_refuses_the_whole_batch() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_MAX_BATCH", "3")]).await;
    let body = json!({ "jobs": [
        { "language": "js", "code": "1" },
        { "language": "cobol", "code": "1" },
        { "language": "py", "code": "1", "timeout": 5 },
    ]});
    let (status, error) = post_batch(&api, ALICE, &body).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_batch")), "{error}");
    let items = error["error"]["jobs"].as_array().expect("jobs");
    let indexed: Vec<(u64, &str)> =
        items.iter().map(|e| (e["index"].as_u64().unwrap_or(99), e["code"].as_str().unwrap_or(""))).collect();
    assert_eq!(indexed, [(1, "invalid_field"), (2, "unknown_field")], "{error}");
    let depth = redis.depth().await;
    assert_eq!(depth, 0, "nothing was queued");

    for (body, needle) in [
        (json!({ "jobs": [] }), "a batch holds 1 to 3"),
        (json!({ "jobs": vec![json!({ "language": "js", "code": "1" }); 4] }), "a batch holds 1 to 3"),
        (json!({}), "jobs is required"),
        (json!({ "jobs": [1] }), "a job must be a JSON object"),
        (json!({ "jobs": [], "callback": "x" }), "unknown field"),
    ] {
        let (status, error) = post_batch(&api, ALICE, &body).await;
        assert_eq!(status, 400, "{body}: {error}");
        assert!(error.to_string().contains(needle), "{body}: {error}");
    }
}

#[tokio::test]
async fn a_batch_that_would_overfill_the_queue_is_refused_whole() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_MAX_QUEUE", "5")]).await;
    let (status, _) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    assert_eq!(status, 202);
    let jobs = |n: usize| json!({ "jobs": vec![json!({ "language": "js", "code": "1" }); n] });
    let (status, error) = post_batch(&api, ALICE, &jobs(5)).await;
    assert_eq!((status, error["error"]["code"].as_str()), (503, Some("queue_full")), "{error}");
    let depth = redis.depth().await;
    assert_eq!(depth, 1, "no half batch left behind");
    let (status, _) = post_batch(&api, ALICE, &jobs(4)).await;
    assert_eq!(status, 202, "a batch that fits exactly is accepted");
}

#[tokio::test]
async fn cancelling_a_batch_ends_what_has_not_finished() {
    // No worker: every job stays queued until the batch is cancelled.
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let (_, submitted) =
        post_batch(&api, ALICE, &json!({ "jobs": vec![json!({ "language": "js", "code": "1" }); 3] })).await;
    let id = submitted["id"].as_str().expect("id");
    let response =
        api.http.delete(api.url(&format!("/v1/batches/{id}"))).bearer_auth(ALICE).send().await.expect("delete");
    assert_eq!(response.status(), 200);
    let batch: Value = response.json().await.expect("json");
    assert_eq!((batch["status"].as_str(), &batch["counts"]), (Some("finished"), &json!({ "cancelled": 3 })), "{batch}");
    let depth = redis.depth().await;
    assert_eq!(depth, 0);
    // A finished batch keeps a TTL, like a finished job.
    let ttl: i64 = redis.cmd(redis::cmd("TTL").arg(keys().batch(id))).await;
    assert!(ttl > 0, "ttl {ttl}");
    let response =
        api.http.delete(api.url(&format!("/v1/batches/{id}"))).bearer_auth(BOB).send().await.expect("delete");
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn test_cases_run_one_program_against_each_input() {
    // One slot, so cases run in order and a failure finds the rest queued.
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1")]).await;
    let api = &stack.api;
    let program = json!({ "language": "py", "code": "import sys\nn = int(input())\nprint(n * 2, *sys.argv[1:])", "compare": "trim" });
    let cases = json!([
        { "stdin": "1", "expected_stdout": "2" },
        { "stdin": "5", "args": ["x"], "expected_stdout": "10 x" },
        { "stdin": "oops", "expected_stdout": "0" },
        { "stdin": "3", "expected_stdout": "7" },
    ]);
    let (status, submitted) = post_batch(api, ALICE, &json!({ "program": program, "cases": cases })).await;
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_str().expect("id");
    let (_, batch) = get_json(api, ALICE, &format!("/v1/batches/{id}?wait=60")).await;
    let verdicts: Vec<&str> =
        batch["jobs"].as_array().expect("jobs").iter().filter_map(|j| j["verdict"].as_str()).collect();
    assert_eq!(verdicts, ["accepted", "accepted", "runtime_error", "wrong_answer"], "{batch}");
    assert_eq!(batch["verdicts"], json!({ "accepted": 2, "runtime_error": 1, "wrong_answer": 1 }), "{batch}");

    // The same, stopping at the first failure: the cases after it never run.
    let body = json!({ "program": program, "cases": cases, "stop_on_first_failure": true });
    let (_, submitted) = post_batch(api, ALICE, &body).await;
    let id = submitted["id"].as_str().expect("id");
    let (_, batch) = get_json(api, ALICE, &format!("/v1/batches/{id}?wait=60")).await;
    assert_eq!(batch["status"], "finished", "{batch}");
    assert_eq!(batch["counts"], json!({ "completed": 3, "cancelled": 1 }), "{batch}");
    assert_eq!(batch["jobs"][3]["status"], "cancelled", "{batch}");

    // A case may set only its own fields.
    let body =
        json!({ "program": program, "cases": [{ "stdin": "1", "expected_stdout": "2" }, { "code": "print(1)" }] });
    let (status, error) = post_batch(api, ALICE, &body).await;
    assert_eq!((status, error["error"]["jobs"][0]["index"].as_u64()), (400, Some(1)), "{error}");
    let (status, _) = post_batch(api, ALICE, &json!({ "program": program, "jobs": [] })).await;
    assert_eq!(status, 400);

    // A case's null field is the program's.
    let with_expected =
        json!({ "language": "py", "code": "print(int(input()) * 2)", "expected_stdout": "8", "compare": "trim" });
    let body = json!({ "program": with_expected, "cases": [{ "stdin": "4", "expected_stdout": null, "args": null }] });
    let (status, submitted) = post_batch(api, ALICE, &body).await;
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_str().expect("id");
    let (_, batch) = get_json(api, ALICE, &format!("/v1/batches/{id}?wait=60")).await;
    assert_eq!(batch["jobs"][0]["verdict"], "accepted", "{batch}");
}

#[tokio::test]
async fn a_shared_runtime_batch_runs_in_few_processes_and_survives_a_death() {
    let stack = Stack::start(&[("RUNBOX_WORKER_CONCURRENCY", "2")]).await;
    let api = &stack.api;
    // Each job prints its square; case 3 never ends. Whether a job found a
    // child that had run another (`warm`) tells how many children served.
    let program = json!({
        "language": "py",
        "code": "n = int(input())\nwhile n == 3: pass\nprint(n * n)",
        "timeout_ms": 1500,
    });
    let cases: Vec<Value> = (1..=10).map(|n| json!({ "stdin": n.to_string() })).collect();
    let (status, submitted) = post_batch(api, ALICE, &json!({ "program": program, "cases": cases })).await;
    assert_eq!(status, 202, "{submitted}");
    let id = submitted["id"].as_str().expect("id");
    let (_, batch) = get_json(api, ALICE, &format!("/v1/batches/{id}?wait=60")).await;
    assert_eq!(batch["counts"], json!({ "completed": 9, "timeout": 1 }), "{batch}");
    let jobs = batch["jobs"].as_array().expect("jobs");
    let mut fresh = 0;
    for (n, job) in (1..=10).zip(jobs) {
        if n == 3 {
            continue;
        }
        assert_eq!(job["stdout"], format!("{}\n", n * n), "{job}");
        fresh += usize::from(job["warm"] == false);
    }
    // Two slots, and one child replaced after the timeout: four fresh
    // children at most, where the default lane would use one per job.
    assert!(fresh <= 4, "nine jobs ran in {fresh} fresh children: {batch}");

    // The default lane for the same cases, when asked: a fresh child each.
    let body = json!({ "program": program, "cases": cases[..3], "shared_runtime": false });
    let (_, submitted) = post_batch(api, ALICE, &body).await;
    let (_, batch) =
        get_json(api, ALICE, &format!("/v1/batches/{}?wait=60", submitted["id"].as_str().unwrap_or(""))).await;
    let jobs = batch["jobs"].as_array().expect("jobs");
    assert!(jobs[..2].iter().all(|j| j["warm"] == false && j["status"] == "completed"), "{batch}");

    let (status, error) =
        post_batch(api, ALICE, &json!({ "program": program, "cases": cases, "shared_runtime": 1 })).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
}
