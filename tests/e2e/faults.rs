//! The fault suite: real processes and real faults, under load, with a
//! figure for each. Every test keeps the same ledger of the jobs the api
//! accepted, and asserts that each reached exactly one final status, that
//! none stayed queued or running, that no job ran twice to the end, and
//! that every output is the one its program always prints.
//!
//! `RUNBOX_FAULT_JOBS` sets the load per test: 200 by default, as
//! `scripts/test` runs it; `scripts/chaos` runs 2,000 and prints the
//! figures.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::util::*;

/// Every job keeps a core busy this long, then prints a number of its own.
const BUSY_MS: u64 = 50;

fn jobs_per_test() -> usize {
    std::env::var("RUNBOX_FAULT_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(200)
}

fn program(i: usize) -> String {
    format!("const t = Date.now(); while (Date.now() - t < {BUSY_MS}) {{}} console.log({i} * 7)")
}

/// Room for the whole load in the queue.
const API_ENV: &[(&str, &str)] = &[("RUNBOX_MAX_QUEUE", "100000")];

/// Workers that log JSON lines, so the ledger can count their runs.
const WORKER_ENV: &[(&str, &str)] = &[("RUST_LOG_FORMAT", "json"), ("RUNBOX_WORKER_CONCURRENCY", "2")];

/// Submits the load as batches of up to 1,000 jobs; returns their ids, job
/// `i` at index `i`.
async fn submit_load(api: &Api, n: usize) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for first in (0..n).step_by(1000) {
        let jobs: Vec<Value> = (first..n.min(first + 1000))
            .map(|i| json!({ "language": "js", "code": program(i), "timeout_ms": 10000 }))
            .collect();
        let response = api.http.post(api.url("/v1/batches")).bearer_auth(ALICE).json(&json!({ "jobs": jobs })).send();
        let response = response.await.expect("submit batch");
        assert_eq!(response.status(), 202);
        let body: Value = response.json().await.expect("json");
        ids.extend(body["job_ids"].as_array().expect("job_ids").iter().map(|id| id.as_str().expect("id").to_owned()));
    }
    ids
}

/// Every job of `ids` as the api returns it, 16 requests at a time.
async fn read_all(api: &Api, ids: &[String]) -> Vec<Value> {
    futures_util::stream::iter(ids.iter().map(|id| async move {
        for _ in 0..50 {
            if let Ok(response) = api.http.get(api.url(&format!("/v1/jobs/{id}"))).bearer_auth(ALICE).send().await
                && let Ok(job) = response.json::<Value>().await
            {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("job {id} could not be read");
    }))
    .buffered(16)
    .collect()
    .await
}

fn is_final(job: &Value) -> bool {
    !matches!(job["status"].as_str(), Some("queued" | "running") | None)
}

/// Waits up to `limit` for every job to be final; returns them all.
async fn settle(api: &Api, ids: &[String], limit: Duration) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    loop {
        let jobs = read_all(api, ids).await;
        if jobs.iter().all(is_final) || Instant::now() > deadline {
            return jobs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How many times each job ran to the end, from the workers' JSON logs: a
/// "job finished" line per run, except the ones whose job had already
/// ended (status `cancelled`: its worker found it final and did not run it).
fn runs(logs: &[String]) -> HashMap<String, usize> {
    let mut runs = HashMap::new();
    for line in logs.iter().flat_map(|log| log.lines()) {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        if event["fields"]["message"] != "job finished" || event["span"]["status"] == "cancelled" {
            continue;
        }
        if let Some(id) = event["span"]["id"].as_str() {
            *runs.entry(id.to_owned()).or_insert(0) += 1;
        }
    }
    runs
}

/// Checks the ledger; panics with the first few faults found.
fn check_ledger(ids: &[String], jobs: &[Value], logs: &[String]) {
    let stuck: Vec<&Value> = jobs.iter().filter(|job| !is_final(job)).collect();
    assert!(stuck.is_empty(), "{} jobs never reached a final status, e.g. {}", stuck.len(), stuck[0]);
    for (i, job) in jobs.iter().enumerate() {
        assert_eq!(job["status"], "completed", "job {i}: {job}");
        assert_eq!(job["stdout"], format!("{}\n", i * 7), "job {i}'s output differs from its program's: {job}");
    }
    let runs = runs(logs);
    let twice: Vec<(&String, &usize)> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run to the end more than once: {twice:?}");
    let unaccounted = ids.iter().filter(|id| !runs.contains_key(*id)).count();
    // A job whose worker died after storing its result has no log line.
    assert!(unaccounted <= 3 * ids.len() / 100 + 3, "{unaccounted} completed jobs have no run in any log");
}

fn logs_of(workers: &[Process]) -> Vec<String> {
    workers.iter().map(Process::logs).collect()
}

/// Unix ms of the latest `finished_at` among `jobs`.
fn finish_times(jobs: &[Value]) -> Vec<i64> {
    let mut times: Vec<i64> = jobs.iter().filter_map(|job| job["finished_at"].as_str()).map(unix_ms).collect();
    times.sort_unstable();
    times
}

fn now_ms() -> i64 {
    runbox_common::now_unix_ms().try_into().expect("in range")
}

/// The first job to finish at or after `since_ms`, as ms after it.
fn recovery_ms(jobs: &[Value], since_ms: i64) -> i64 {
    finish_times(jobs).into_iter().find(|t| *t >= since_ms).map_or(-1, |t| t - since_ms)
}

#[tokio::test]
async fn kill_9_of_random_workers_loses_and_repeats_nothing() {
    let redis = Redis::start().await;
    // Takeover after 3 s of silence; and, since the same job may be hit by
    // several kills here, more deliveries than the default 3 before a job
    // counts as one that kills its workers.
    let fast = [("RUNBOX_RECLAIM_IDLE_MS", "3000"), ("RUNBOX_MAX_DELIVERIES", "10")];
    let api = Api::start(&redis, API_ENV).await;
    let mut started = 0;
    let mut start = || {
        started += 1;
        let name = format!("worker-{started}");
        let redis = &redis;
        async move {
            let env: Vec<(&str, &str)> =
                WORKER_ENV.iter().chain(&fast).copied().chain([("RUNBOX_WORKER_NAME", name.as_str())]).collect();
            (name.clone(), start_worker(redis, &env).await)
        }
    };
    let mut live = Vec::new();
    for _ in 0..3 {
        live.push(start().await);
    }
    let n = jobs_per_test();
    let ids = submit_load(&api, n).await;
    let mut dead: Vec<Process> = Vec::new();
    // Which jobs each kill interrupted, and when.
    let mut interrupted: Vec<(String, i64)> = Vec::new();
    let mut seed = u64::try_from(now_ms()).expect("positive");
    println!("kill -9 seed {seed}");
    let mut random = move |below: u64| {
        // xorshift: enough to pick a victim and a moment.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        tokio::time::sleep(Duration::from_millis(300 + random(800))).await;
        let jobs = read_all(&api, &ids).await;
        if jobs.iter().filter(|job| !is_final(job)).count() < n / 10 || Instant::now() > deadline {
            break;
        }
        let (name, victim) = live.remove(usize::try_from(random(live.len() as u64)).expect("index"));
        victim.signal(Signal::SIGKILL);
        let killed_at = now_ms();
        // Its jobs still name it as their worker until they are taken over.
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET").arg(keys().job(id)).arg("status").arg("worker");
        }
        let mut conn = redis.conn().await.expect("redis reachable");
        let holders: Vec<(Option<String>, Option<String>)> = pipe.query_async(&mut conn).await.expect("HMGET");
        for (id, (status, worker)) in ids.iter().zip(holders) {
            if status.as_deref() == Some("running") && worker.as_deref() == Some(name.as_str()) {
                interrupted.push((id.clone(), killed_at));
            }
        }
        dead.push(victim);
        live.push(start().await);
    }
    let jobs = settle(&api, &ids, Duration::from_secs(300)).await;
    let all: Vec<Process> = dead.into_iter().chain(live.into_iter().map(|(_, worker)| worker)).collect();
    check_ledger(&ids, &jobs, &logs_of(&all));
    let by_id: HashMap<&str, &Value> = jobs.iter().map(|job| (job["id"].as_str().unwrap_or(""), job)).collect();
    let slowest = interrupted
        .iter()
        .map(|(id, killed_at)| unix_ms(by_id[id.as_str()]["started_at"].as_str().expect("started_at")) - killed_at)
        .max()
        .unwrap_or(0);
    println!(
        "figure kill -9: {n} jobs, {} workers killed, {} jobs interrupted, 0 lost, 0 run twice, \
         slowest takeover {slowest} ms (RUNBOX_RECLAIM_IDLE_MS 3000)",
        all.len() - 3,
        interrupted.len()
    );
    assert!(all.len() - 3 >= 2 && !interrupted.is_empty(), "too few kills hit a job: the test proved nothing");
    assert!(slowest < 15_000, "a killed worker's job waited {slowest} ms to run again");
}

#[tokio::test]
async fn rolling_sigterm_restart_loses_nothing() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, API_ENV).await;
    let mut live = Vec::new();
    for _ in 0..3 {
        live.push(start_worker(&redis, WORKER_ENV).await);
    }
    // Three times the load: starting a replacement and draining the old
    // worker takes seconds each, and the load must outlast all three.
    let n = 3 * jobs_per_test();
    let ids = submit_load(&api, n).await;
    let mut stopped = Vec::new();
    let started = now_ms();
    // Each worker in turn: a replacement starts, then the old one is told
    // to stop and drains.
    let mut last_stop = 0;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        live.push(start_worker(&redis, WORKER_ENV).await);
        let mut old = live.remove(0);
        old.signal(Signal::SIGTERM);
        last_stop = now_ms();
        assert!(old.wait(Duration::from_secs(60)).await.success(), "a worker exits cleanly on SIGTERM");
        stopped.push(old);
    }
    let jobs = settle(&api, &ids, Duration::from_secs(300)).await;
    let all: Vec<Process> = stopped.into_iter().chain(live).collect();
    check_ledger(&ids, &jobs, &logs_of(&all));
    let times = finish_times(&jobs);
    let longest_gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0).max(times[0] - started);
    println!(
        "figure rolling SIGTERM: {n} jobs, 3 workers replaced, 0 lost, longest gap between results {longest_gap} ms"
    );
    assert!(times[times.len() - 1] > last_stop, "the load was done before the last restart: the test proved nothing");
}

/// An api and two workers on `redis`, a second into running the load:
/// the moment the Redis faults strike.
async fn under_load(redis: &Redis) -> (Api, Vec<Process>, Vec<String>) {
    let api = Api::start(redis, API_ENV).await;
    let mut workers = Vec::new();
    for _ in 0..2 {
        workers.push(start_worker(redis, WORKER_ENV).await);
    }
    let ids = submit_load(&api, jobs_per_test()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    (api, workers, ids)
}

#[tokio::test]
async fn redis_restart_with_aof_loses_nothing() {
    let dir = tempfile::tempdir().expect("redis dir");
    let dir_arg = dir.path().to_str().expect("utf-8 path").to_owned();
    // Every write is on disk before Redis answers it, so whatever the api
    // accepted survives a crash.
    let aof = ["--appendonly", "yes", "--appendfsync", "always", "--dir", dir_arg.as_str()];
    let port = free_port();
    let mut redis = Redis::start_with(port, &aof).await;
    let (api, workers, ids) = under_load(&redis).await;
    let n = ids.len();
    redis.kill().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let restarted_at = now_ms();
    let _redis = Redis::start_with(port, &aof).await;
    let jobs = settle(&api, &ids, Duration::from_secs(300)).await;
    check_ledger(&ids, &jobs, &logs_of(&workers));
    let recovered = recovery_ms(&jobs, restarted_at);
    println!(
        "figure Redis restart (AOF, fsync always): {n} jobs, 0 lost, first result {recovered} ms after the restart"
    );
    assert!(recovered >= 0, "no job finished after the restart: the fault came too late to test anything");
}

#[tokio::test]
async fn redis_unreachable_for_10_seconds_loses_nothing() {
    let redis = Redis::start().await;
    let (api, workers, ids) = under_load(&redis).await;
    let n = ids.len();
    // Stopped, not killed: connections stay open and nothing answers them.
    redis.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(10)).await;
    redis.signal(Signal::SIGCONT);
    let back_at = now_ms();
    let jobs = settle(&api, &ids, Duration::from_secs(300)).await;
    check_ledger(&ids, &jobs, &logs_of(&workers));
    let recovered = recovery_ms(&jobs, back_at);
    println!("figure Redis unreachable 10 s: {n} jobs, 0 lost, first result {recovered} ms after it answered again");
    assert!(recovered >= 0, "no job finished after the outage: the fault came too late to test anything");
}

/// Resident memory of `pid` in KiB.
fn rss_kib(pid: nix::unistd::Pid) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("number")
}

#[tokio::test]
async fn a_burst_of_ten_times_the_cap_never_overshoots_it() {
    let cap = 50;
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[("RUNBOX_MAX_QUEUE", &cap.to_string())]).await;
    let workers = vec![start_worker(&redis, WORKER_ENV).await];
    let rss_before = rss_kib(api.process.pid());

    // Watches the depth while the burst lands.
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = tokio::spawn({
        let watching = watching.clone();
        let url = redis.url();
        async move {
            let client = redis::Client::open(url).expect("client");
            let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
            let mut deepest = 0u64;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                deepest = deepest.max(queue_depth(&mut conn).await);
            }
            deepest
        }
    });
    let submits = (0..10 * cap).map(|i| {
        let (http, url) = (api.http.clone(), api.url("/v1/jobs"));
        async move {
            let body = json!({ "language": "js", "code": program(i) });
            let response = http.post(url).bearer_auth(ALICE).json(&body).send().await.expect("send");
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key("retry-after");
            let body: Value = response.json().await.expect("json");
            (i, status, retry_after, body)
        }
    });
    let answers = futures_util::future::join_all(submits).await;
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let deepest = watcher.await.expect("watcher");
    let rss_after = rss_kib(api.process.pid());

    let accepted: Vec<&(usize, u16, bool, Value)> = answers.iter().filter(|a| a.1 == 202).collect();
    let refused: Vec<&(usize, u16, bool, Value)> = answers.iter().filter(|a| a.1 == 503).collect();
    assert_eq!(accepted.len() + refused.len(), answers.len(), "every answer is 202 or 503");
    assert!(
        refused.iter().all(|a| a.2 && a.3["error"]["code"] == "queue_full"),
        "every 503 is queue_full with Retry-After"
    );
    assert!(deepest <= cap as u64, "the queue held {deepest} jobs, past its cap of {cap}");
    assert!(accepted.len() >= cap, "only {} accepted: the cap was never reached", accepted.len());

    // The accepted ones run, each with its own program's output.
    let ids: Vec<String> = accepted.iter().map(|a| a.3["id"].as_str().expect("id").to_owned()).collect();
    let jobs = settle(&api, &ids, Duration::from_secs(120)).await;
    for (answer, job) in accepted.iter().zip(&jobs) {
        assert_eq!(job["stdout"], format!("{}\n", answer.0 * 7), "{job}");
    }
    let runs = runs(&logs_of(&workers));
    assert!(runs.values().all(|n| *n == 1), "a job ran twice: {runs:?}");
    println!(
        "figure burst: {} submissions at once against a cap of {cap}: {} accepted, {} refused with Retry-After, \
         deepest queue {deepest}, api RSS {rss_before} -> {rss_after} KiB",
        answers.len(),
        accepted.len(),
        refused.len()
    );
}
