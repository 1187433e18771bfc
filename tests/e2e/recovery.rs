//! Failures of the parts: a worker killed mid-job, Redis killed and
//! restarted, and a worker told to stop. No job is lost or stuck.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::util::*;

/// Settings that make a silent worker's jobs reclaimable within seconds.
const FAST_RECLAIM: &[(&str, &str)] =
    &[("RUNBOX_MAX_TIMEOUT_MS", "4000"), ("RUNBOX_DEFAULT_TIMEOUT_MS", "4000"), ("RUNBOX_RECLAIM_IDLE_MS", "5000")];

const SLOW_JOB: &str = "await new Promise((r) => setTimeout(r, 1500)); console.log('finished')";

async fn submit_and_wait_running(api: &Api, code: &str) -> String {
    let (status, job) = api.submit(json!({ "language": "js", "code": code, "timeout_ms": 4000 }), None).await;
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_str().expect("id").to_owned();
    api.until_status(&id, "running", Duration::from_secs(30)).await;
    id
}

#[tokio::test]
async fn job_of_a_killed_worker_finishes_on_another() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, FAST_RECLAIM).await;
    let mut first = start_worker(&redis, FAST_RECLAIM).await;
    let id = submit_and_wait_running(&api, SLOW_JOB).await;
    first.signal(Signal::SIGKILL);
    first.wait(Duration::from_secs(5)).await;

    let second = start_worker(&redis, FAST_RECLAIM).await;
    let job = api.until_status(&id, "completed", Duration::from_secs(30)).await;
    assert_eq!(job["stdout"], "finished\n");
    second.wait_for_log("took over jobs from a worker that stopped answering", Duration::from_secs(1)).await;
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned));
        state.as_deref() != Some("Z")
    })
}

#[tokio::test]
async fn children_die_with_a_killed_worker() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let mut worker = start_worker(&redis, &[]).await;
    submit_and_wait_running(&api, "for (;;) {}").await;
    let children = children_of(worker.pid());
    assert!(!children.is_empty(), "the worker has no children");
    worker.signal(Signal::SIGKILL);
    worker.wait(Duration::from_secs(5)).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    while children.iter().any(|&pid| alive(pid)) {
        assert!(Instant::now() < deadline, "children outlived their worker: {children:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn job_that_keeps_killing_workers_ends_as_worker_lost() {
    let redis = Redis::start().await;
    let env: Vec<(&str, &str)> = FAST_RECLAIM.iter().copied().chain([("RUNBOX_MAX_DELIVERIES", "1")]).collect();
    let api = Api::start(&redis, &env).await;
    let mut first = start_worker(&redis, &env).await;
    let id = submit_and_wait_running(&api, SLOW_JOB).await;
    first.signal(Signal::SIGKILL);
    first.wait(Duration::from_secs(5)).await;

    let _second = start_worker(&redis, &env).await;
    let job = api.until_status(&id, "worker_lost", Duration::from_secs(30)).await;
    assert!(job["exit_code"].is_null(), "{job}");
}

#[tokio::test]
async fn api_and_worker_survive_a_redis_restart() {
    let mut redis = Redis::start().await;
    let port = redis.port;
    let api = Api::start(&redis, &[]).await;
    let worker = start_worker(&redis, &[]).await;
    assert_eq!(api.run("js", "console.log('before')").await["stdout"], "before\n");

    redis.kill().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ready = api.http.get(api.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 503);
    let (status, body) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("unavailable")), "{body}");
    assert_eq!(
        api.http.get(api.url("/healthz")).send().await.expect("healthz").status(),
        200,
        "the api process lives on"
    );

    let _redis = Redis::start_on(port).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.http.get(api.url("/readyz")).send().await.expect("readyz").status() != 200 {
        assert!(Instant::now() < deadline, "api never became ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, job) = api.submit(json!({ "language": "js", "code": "console.log('after')" }), Some(30)).await;
    assert_eq!((status, job["stdout"].as_str()), (200, Some("after\n")), "{job}\n{}", worker.logs());
    assert!(worker.logs().contains("could not claim jobs"), "the worker noticed the outage");
}

#[tokio::test]
async fn sigterm_lets_running_jobs_finish() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let env = [("RUNBOX_SHUTDOWN_GRACE_MS", "10000"), ("RUNBOX_WORKER_CONCURRENCY", "2")];
    let mut worker = start_worker(&redis, &env).await;
    let id =
        submit_and_wait_running(&api, "await new Promise((r) => setTimeout(r, 3000)); console.log('finished')").await;
    worker.signal(Signal::SIGTERM);
    // While it drains, the worker has a free slot, and takes nothing new once
    // the claim it had in flight at the signal (at most one second) is over.
    worker.wait_for_log("shutting down", Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (_, queued) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    let queued = queued["id"].as_str().expect("id");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(worker.child.try_wait().expect("try_wait").is_none(), "the worker was still draining");
    assert_eq!(api.get(queued, ALICE, None).await.1["status"], "queued");

    let status = worker.wait(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}\n{}", worker.logs());
    let (_, job) = api.get(&id, ALICE, None).await;
    assert_eq!((job["status"].as_str(), job["stdout"].as_str()), (Some("completed"), Some("finished\n")), "{job}");
    assert_eq!(api.get(queued, ALICE, None).await.1["status"], "queued", "nothing was taken while draining");
}

#[tokio::test]
async fn sigterm_past_the_grace_leaves_the_job_for_another_worker() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, FAST_RECLAIM).await;
    let env: Vec<(&str, &str)> = FAST_RECLAIM.iter().copied().chain([("RUNBOX_SHUTDOWN_GRACE_MS", "300")]).collect();
    let mut worker = start_worker(&redis, &env).await;
    let id =
        submit_and_wait_running(&api, "await new Promise((r) => setTimeout(r, 2500)); console.log('finished')").await;
    worker.signal(Signal::SIGTERM);
    let status = worker.wait(Duration::from_secs(5)).await;
    assert!(status.success(), "{}", worker.logs());
    assert_eq!(api.get(&id, ALICE, None).await.1["status"], "running", "killed job stays claimable");

    let _second = start_worker(&redis, FAST_RECLAIM).await;
    let job = api.until_status(&id, "completed", Duration::from_secs(30)).await;
    assert_eq!(job["stdout"], "finished\n");
}

#[tokio::test]
async fn api_and_worker_started_before_redis_wait_for_it() {
    let port = free_port();
    let absent = Redis::absent(port);
    let api = Api::start(&absent, &[]).await;
    let ready = api.http.get(api.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status(), 503, "ready without redis");
    let worker = start_worker(&absent, &[]).await;
    worker.wait_for_log("could not claim jobs", Duration::from_secs(10)).await;

    let _redis = Redis::start_on(port).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.http.get(api.url("/readyz")).send().await.expect("readyz").status() != 200 {
        assert!(Instant::now() < deadline, "api never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, job) = api.submit(json!({ "language": "js", "code": "console.log('late')" }), Some(30)).await;
    assert_eq!((status, job["stdout"].as_str()), (200, Some("late\n")), "{job}\n{}", worker.logs());
    worker.wait_for_log("redis reachable again", Duration::from_secs(5)).await;
}

#[tokio::test]
async fn api_sigterm_answers_long_polls_and_exits() {
    // No worker: the job stays queued, and a long-poll on it would hold
    // the api open for its whole minute.
    let redis = Redis::start().await;
    let mut api = Api::start(&redis, &[]).await;
    let (_, job) = api.submit(json!({ "language": "js", "code": "1" }), None).await;
    let url = api.url(&format!("/v1/jobs/{}?wait=60", job["id"].as_str().expect("id")));
    let http = api.http.clone();
    let poll = tokio::spawn(async move {
        let response = http.get(url).bearer_auth(ALICE).send().await.expect("long-poll");
        let status = response.status().as_u16();
        (status, response.json::<serde_json::Value>().await.unwrap_or_default(), Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signalled = Instant::now();
    api.process.signal(Signal::SIGTERM);
    let (status, body, answered) = poll.await.expect("poll task");
    assert_eq!((status, body["status"].as_str()), (200, Some("queued")), "{body}");
    assert!(answered - signalled < Duration::from_secs(3), "answered {:?} after SIGTERM", answered - signalled);
    let exit = api.process.wait(Duration::from_secs(5)).await;
    assert!(exit.success(), "{exit:?}\n{}", api.process.logs());
}

async fn job_worker(redis: &Redis, id: &str) -> Option<String> {
    redis.cmd(redis::cmd("HGET").arg(keys().job(id)).arg("worker")).await
}

#[tokio::test]
async fn a_killed_workers_job_runs_elsewhere_within_15_seconds() {
    // Default takeover settings, two live workers; the one running the job dies.
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let mut a = start_worker(&redis, &[("RUNBOX_WORKER_NAME", "worker-a")]).await;
    let mut b = start_worker(&redis, &[("RUNBOX_WORKER_NAME", "worker-b")]).await;
    let code = "await new Promise((r) => setTimeout(r, 6000)); console.log('finished')";
    let (_, job) = api.submit(json!({ "language": "js", "code": code, "timeout_ms": 9000 }), None).await;
    let id = job["id"].as_str().expect("id").to_owned();
    api.until_status(&id, "running", Duration::from_secs(30)).await;
    let first = job_worker(&redis, &id).await.expect("a worker runs it");
    let (victim, survivor) = if first == "worker-a" { (&mut a, &b) } else { (&mut b, &a) };
    victim.signal(Signal::SIGKILL);
    victim.wait(Duration::from_secs(5)).await;
    let died = Instant::now();
    while job_worker(&redis, &id).await.as_deref() == Some(first.as_str()) {
        assert!(died.elapsed() < Duration::from_secs(15), "not taken over 15 s after its worker died");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job = api.until_status(&id, "completed", Duration::from_secs(20)).await;
    assert_eq!(job["stdout"], "finished\n");
    survivor.wait_for_log("took over jobs from a worker that stopped answering", Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_live_workers_long_job_is_never_taken_over() {
    // The job runs longer than the takeover idle time; its worker's
    // heartbeats keep it claimed, so the other worker leaves it alone.
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let env = [("RUNBOX_RECLAIM_IDLE_MS", "5000")];
    let a = start_worker(&redis, &env).await;
    let b = start_worker(&redis, &env).await;
    let code = "await new Promise((r) => setTimeout(r, 8000)); console.log('once')";
    let (_, job) = api.submit(json!({ "language": "js", "code": code, "timeout_ms": 9500 }), None).await;
    let id = job["id"].as_str().expect("id").to_owned();
    let job = api.until_status(&id, "completed", Duration::from_secs(30)).await;
    assert_eq!(job["stdout"], "once\n");
    for worker in [&a, &b] {
        assert!(!worker.logs().contains("took over jobs"), "a live worker's job was taken over:\n{}", worker.logs());
    }
}

#[tokio::test]
async fn a_dead_worker_is_forgotten_once_its_jobs_are_taken_over() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let idle = ("RUNBOX_RECLAIM_IDLE_MS", "2000");
    let mut dead = start_worker(&redis, &[("RUNBOX_WORKER_NAME", "worker-dead"), idle]).await;
    let code = "await new Promise((r) => setTimeout(r, 3000)); console.log('done')";
    let (_, job) = api.submit(json!({ "language": "js", "code": code, "timeout_ms": 9000 }), None).await;
    let id = job["id"].as_str().expect("id").to_owned();
    api.until_status(&id, "running", Duration::from_secs(30)).await;
    let consumers = || async {
        let reply: redis::Value =
            redis.cmd(redis::cmd("XINFO").arg("CONSUMERS").arg(keys().jobs_stream("alice")).arg("workers")).await;
        consumer_names(reply)
    };
    assert!(consumers().await.iter().any(|name| name == "worker-dead"), "it holds the job");
    dead.signal(Signal::SIGKILL);
    dead.wait(Duration::from_secs(5)).await;

    let alive_worker = start_worker(&redis, &[("RUNBOX_WORKER_NAME", "worker-alive"), idle]).await;
    api.until_status(&id, "completed", Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let known: bool = redis.cmd(redis::cmd("HEXISTS").arg("runbox:workers").arg("worker-dead")).await;
        let listed = consumers().await.iter().any(|name| name == "worker-dead");
        if !known && !listed {
            break;
        }
        assert!(Instant::now() < deadline, "still known: hash {known}, group {listed}\n{}", alive_worker.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let alive: bool = redis.cmd(redis::cmd("HEXISTS").arg("runbox:workers").arg("worker-alive")).await;
    assert!(alive, "the live worker stays");
}

/// The names in an `XINFO CONSUMERS` reply.
fn consumer_names(reply: redis::Value) -> Vec<String> {
    let redis::Value::Array(consumers) = reply else { return Vec::new() };
    consumers
        .into_iter()
        .filter_map(|consumer| {
            let redis::Value::Array(fields) = consumer else { return None };
            let at = fields.iter().position(|f| matches!(f, redis::Value::BulkString(b) if b == b"name"))?;
            match fields.get(at + 1)? {
                redis::Value::BulkString(name) => Some(String::from_utf8_lossy(name).into_owned()),
                _ => None,
            }
        })
        .collect()
}
