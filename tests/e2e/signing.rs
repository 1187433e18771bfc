//! Only jobs the api signed run. A forged entry, or a signed one whose
//! payload was altered, is rejected, logged and counted, and never runs.

use std::time::Duration;

use serde_json::json;

use crate::util::*;

async fn status_in_redis(redis: &Redis, id: &str) -> Option<String> {
    redis.cmd(redis::cmd("HGET").arg(keys().job(id)).arg("status")).await
}

/// Writes a job entry straight into a job stream and wakes the workers, as
/// someone with Redis access but without the signing key could.
async fn append_entry(redis: &Redis, id: &str, payload: &str, signature: &str) {
    let stream = keys().jobs_stream("alice");
    let _: redis::Value = redis.cmd(redis::cmd("SADD").arg(keys().streams()).arg(&stream)).await;
    // Fails harmlessly (BUSYGROUP) when the api already made the group.
    let mut conn = redis.conn().await.expect("redis reachable");
    let _: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("workers")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await;
    let _: String = redis
        .cmd(
            redis::cmd("XADD")
                .arg(&stream)
                .arg("*")
                .arg("id")
                .arg(id)
                .arg("payload")
                .arg(payload)
                .arg("sig")
                .arg(signature),
        )
        .await;
    // The owner joins the ready ring only once the entry is there, as an
    // enqueue does: a claim in between would find nothing and take the
    // owner out of the ring again, and the entry would wait for ever.
    let _: i64 = redis.cmd(redis::cmd("RPUSH").arg(keys().ready_owners()).arg("alice")).await;
}

async fn until_rejected(redis: &Redis, id: &str) {
    for _ in 0..200 {
        if status_in_redis(redis, id).await.as_deref() == Some("rejected") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {id} was never rejected (status {:?})", status_in_redis(redis, id).await);
}

/// A program that keeps a core busy for two seconds: if it ran, the
/// worker's finished children used that much CPU.
const BUSY_TWO_SECONDS: &str = "const end = Date.now() + 2000; while (Date.now() < end) {}";

/// CPU seconds used by the finished children of process `pid`, as the
/// kernel counts them (cutime + cstime in /proc/PID/stat).
fn children_cpu_seconds(pid: nix::unistd::Pid) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("worker stat");
    // Fields after the command name, which ends with the last ')': the first
    // is field 3 (state), so cutime (field 16) and cstime (17) are 13 and 14.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 1..].split_whitespace().collect();
    let ticks: u64 = fields[13].parse::<u64>().expect("cutime") + fields[14].parse::<u64>().expect("cstime");
    let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100);
    ticks as f64 / per_second as f64
}

#[tokio::test]
async fn forged_job_is_rejected() {
    let redis = Redis::start().await;
    let worker = start_worker(&redis, &[("RUNBOX_METRICS_PORT", "0")]).await;
    let before = children_cpu_seconds(worker.pid());
    let id = "11111111-1111-4111-8111-111111111111";
    let payload = json!({ "language": "javascript", "code": BUSY_TWO_SECONDS }).to_string();
    append_entry(&redis, id, &payload, &"00".repeat(32)).await;
    until_rejected(&redis, id).await;
    worker.wait_for_log("signature did not verify", Duration::from_secs(5)).await;
    let started: Option<String> = redis.cmd(redis::cmd("HGET").arg(keys().job(id)).arg("started_at")).await;
    assert_eq!(started, None, "a rejected job never starts");
    // Had the program run, it would have ended by now, and its child's CPU
    // time would show in the worker's account.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = children_cpu_seconds(worker.pid()) - before;
    assert!(used < 1.0, "the worker's children used {used:.2} CPU-seconds: the forged program ran");
    let depth = redis.depth().await;
    assert_eq!(depth, 0, "the rejected entry is removed from the stream");
}

#[tokio::test]
async fn tampered_job_is_rejected_and_counted() {
    let redis = Redis::start().await;
    let api = Api::start(&redis, &[]).await;
    let (_, job) = api.submit(json!({ "language": "py", "code": "print('original')" }), None).await;
    let id = job["id"].as_str().expect("id");

    // Re-queue the entry with its signature but different code.
    let stream = keys().jobs_stream("alice");
    let entries: Vec<(String, Vec<String>)> = redis.cmd(redis::cmd("XRANGE").arg(&stream).arg("-").arg("+")).await;
    let fields = &entries.first().expect("one entry").1;
    let at = fields.iter().position(|f| f == "sig").expect("sig field");
    let signature = fields[at + 1].clone();
    let _: i64 = redis.cmd(redis::cmd("DEL").arg(&stream)).await;
    let tampered = json!({ "language": "python", "code": "print('tampered')", "timeout_ms": 5000 }).to_string();
    append_entry(&redis, id, &tampered, &signature).await;

    let worker = start_worker(&redis, &[("RUNBOX_METRICS_PORT", "0")]).await;
    let metrics_port = worker.bound_port("metrics listening", Duration::from_secs(5)).await;
    let job = api.until_status(id, "rejected", Duration::from_secs(30)).await;
    assert_ne!(job["stdout"], "tampered\n");
    worker.wait_for_log("signature did not verify", Duration::from_secs(5)).await;
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("runbox_worker_rejected_signatures_total 1"), "{metrics}");
}
