//! The session scripts (create with prune, ready, send, idle, end, recover,
//! store_checkpoint), through the public `Queue` API.

use std::time::Duration;

use runbox_common::{Admission, CheckpointInfo, Handover, Language, Queue, Recovery, Sent, SessionStatus, Status};

use crate::util::{Redis, ScriptRedis, TTL, finish, keys, outcome};

const OWNER: &str = "alice";

async fn create(queue: &Queue, id: &str, idle: Duration, per_token: u64) -> bool {
    admit(queue, OWNER, id, idle, per_token, 100).await == Admission::Created
}

async fn admit(queue: &Queue, owner: &str, id: &str, idle: Duration, per_token: u64, capacity: u64) -> Admission {
    let expires_at_ms = runbox_common::now_unix_ms() + 3_600_000;
    queue
        .create_session(
            id,
            owner,
            Language::Python,
            idle,
            expires_at_ms,
            "2026-01-01T00:00:00Z",
            per_token,
            capacity,
            TTL,
        )
        .await
        .expect("redis")
}

async fn send(queue: &Queue, id: &str, worker: &str, job_id: &str, needs_idle: bool) -> Sent {
    queue
        .send_to_session(id, worker, job_id, OWNER, Language::Python, "{}", "sig", "2026-01-01T00:00:00Z", needs_idle)
        .await
        .expect("redis")
}

async fn status(queue: &Queue, id: &str) -> SessionStatus {
    queue.get_session(id).await.expect("redis").expect("the session").status
}

fn checkpoint(id: &str) -> CheckpointInfo {
    CheckpointInfo {
        id: id.into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        size_bytes: 4,
        took_ms: 1,
        expires_at: "2026-01-02T00:00:00Z".into(),
    }
}

#[tokio::test]
async fn a_session_goes_from_starting_to_idle_busy_idle_and_closed() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(create(&queue, "s1", Duration::from_secs(600), 4).await);
    assert_eq!(status(&queue, "s1").await, SessionStatus::Starting);
    assert_eq!(send(&queue, "s1", "", "x0", true).await, Sent::Busy, "nothing runs before it is up");

    assert!(queue.session_ready("s1", "w1", None).await.expect("redis"));
    assert!(!queue.session_ready("s1", "w2", None).await.expect("redis"), "a second worker does not take it");
    let record = queue.get_session("s1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.worker.as_deref()), (SessionStatus::Idle, Some("w1")));

    assert_eq!(send(&queue, "s1", "w2", "x1", true).await, Sent::Moved);
    assert_eq!(send(&queue, "s1", "w1", "x1", true).await, Sent::Sent);
    assert_eq!(status(&queue, "s1").await, SessionStatus::Busy);
    assert_eq!(queue.next_session_task("w1", Duration::from_millis(10)).await.expect("redis").as_deref(), Some("x1"));
    let task = queue.claim_session_task("x1").await.expect("redis").expect("the task's job hash");
    assert_eq!((task.payload.as_str(), task.signature.as_str()), ("{}", "sig"));
    assert_eq!(send(&queue, "s1", "w1", "x2", true).await, Sent::Busy);
    assert_eq!(send(&queue, "s1", "w1", "d1", false).await, Sent::Sent, "a destroy goes in while busy");

    queue.session_idle("s1", "w2", 1, None).await.expect("redis");
    assert_eq!(status(&queue, "s1").await, SessionStatus::Busy, "only its worker marks it idle");
    queue.session_idle("s1", "w1", 1, None).await.expect("redis");
    let record = queue.get_session("s1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.execs), (SessionStatus::Idle, 1));

    assert!(!queue.end_session("s1", OWNER, SessionStatus::Closed, "x", TTL, Some("w2")).await.expect("redis"));
    assert!(queue.end_session("s1", OWNER, SessionStatus::Closed, "destroyed", TTL, Some("w1")).await.expect("redis"));
    assert!(!queue.end_session("s1", OWNER, SessionStatus::Expired, "idle", TTL, None).await.expect("redis"));
    let record = queue.get_session("s1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.ended_reason.as_deref()), (SessionStatus::Closed, Some("destroyed")));
    assert_eq!(send(&queue, "s1", "w1", "x3", true).await, Sent::Gone);
    assert!(queue.owner_sessions(OWNER).await.expect("redis").is_empty());
}

#[tokio::test]
async fn two_execs_at_once_get_one_sent_and_one_busy() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(create(&queue, "s1", Duration::from_secs(600), 4).await);
    assert!(queue.session_ready("s1", "w1", None).await.expect("redis"));
    let (a, b) = tokio::join!(send(&queue, "s1", "w1", "x1", true), send(&queue, "s1", "w1", "x2", true));
    let mut replies = [a, b];
    replies.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(replies, [Sent::Busy, Sent::Sent]);
    let inbox: Vec<String> = redis.cmd(redis::cmd("LRANGE").arg(keys().inbox("w1")).arg(0).arg(-1)).await;
    assert_eq!(inbox.len(), 1, "only the sent exec is in the inbox: {inbox:?}");
}

#[tokio::test]
async fn the_per_token_cap_counts_live_sessions_and_prune_ends_idle_ones() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(create(&queue, "s1", Duration::from_secs(600), 1).await);
    assert!(!create(&queue, "s2", Duration::from_secs(600), 1).await, "over the cap");
    assert!(queue.end_session("s1", OWNER, SessionStatus::Closed, "destroyed", TTL, None).await.expect("redis"));
    assert!(create(&queue, "s2", Duration::from_millis(1), 1).await, "an ended session is not counted");

    // s2 is idle past its timeout and no worker ends it: the next create does.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(create(&queue, "s3", Duration::from_secs(600), 1).await);
    let record = queue.get_session("s2").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.ended_reason.as_deref()), (SessionStatus::Expired, Some("idle")));
}

#[tokio::test]
async fn a_session_whose_worker_died_restores_from_its_latest_checkpoint_or_is_lost() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(create(&queue, "s1", Duration::from_secs(600), 4).await);
    assert!(queue.session_ready("s1", "w1", None).await.expect("redis"));
    assert!(queue.store_checkpoint("s1", &checkpoint("c1"), b"one", TTL).await.expect("redis"));
    assert!(queue.store_checkpoint("s1", &checkpoint("c2"), b"two", TTL).await.expect("redis"));
    assert!(!queue.store_checkpoint("gone", &checkpoint("c3"), b"three", TTL).await.expect("redis"));
    let stored = queue.load_checkpoint("c2").await.expect("redis").expect("it exists");
    assert_eq!((stored.data.as_slice(), stored.session.as_str(), stored.owner.as_str()), (&b"two"[..], "s1", OWNER));
    let listed: Vec<String> = queue
        .get_session("s1")
        .await
        .expect("redis")
        .expect("it exists")
        .checkpoints
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed, ["c1", "c2"]);

    // The latest checkpoint expired: the one before it is used.
    let _: i64 = redis.cmd(redis::cmd("DEL").arg(keys().checkpoint("c2"))).await;
    assert_eq!(
        queue.recover_session("s1", OWNER, "w2", TTL).await.expect("redis"),
        Recovery::Changed,
        "not its worker"
    );
    assert_eq!(queue.recover_session("s1", OWNER, "w1", TTL).await.expect("redis"), Recovery::Restore("c1".into()));
    let record = queue.get_session("s1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.worker), (SessionStatus::Restoring, None));
    // Two api processes notice at once: the second finds it changed.
    assert_eq!(queue.recover_session("s1", OWNER, "w1", TTL).await.expect("redis"), Recovery::Changed);
    assert!(queue.session_ready("s1", "w3", Some("c1")).await.expect("redis"));
    let record = queue.get_session("s1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.restored_from.as_deref()), (SessionStatus::Idle, Some("c1")));

    let _: i64 = redis.cmd(redis::cmd("DEL").arg(keys().checkpoint("c1"))).await;
    assert_eq!(queue.recover_session("s1", OWNER, "w3", TTL).await.expect("redis"), Recovery::Lost);
    assert_eq!(status(&queue, "s1").await, SessionStatus::Lost);
    assert!(queue.owner_sessions(OWNER).await.expect("redis").is_empty());
}

#[tokio::test]
async fn a_sessions_times_and_task_reach_redis_exactly() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    // Past 2^53, where a JSON number decoded as a double is no longer exact.
    let expires_at_ms: u64 = (1 << 53) + 1;
    let idle_ms: u64 = (1 << 53) + 3;
    let created = queue
        .create_session(
            "s/1",
            "alice/bob",
            Language::Javascript,
            Duration::from_millis(idle_ms),
            expires_at_ms,
            "2026-01-01T00:00:00.5Z",
            0,
            1,
            TTL,
        )
        .await
        .expect("redis");
    assert_eq!(created, Admission::Created);
    let record = queue.get_session("s/1").await.expect("redis").expect("it exists");
    assert_eq!((record.expires_at_ms, record.idle_timeout_s), (expires_at_ms, idle_ms / 1000));
    assert_eq!(
        (record.owner.as_str(), record.language, record.created_at.as_str()),
        ("alice/bob", Language::Javascript, "2026-01-01T00:00:00.5Z")
    );
    let idle: String = redis.cmd(redis::cmd("HGET").arg(keys().session("s/1")).arg("idle_timeout_ms")).await;
    assert_eq!(idle, idle_ms.to_string());
    let lives: i64 = redis.cmd(redis::cmd("TTL").arg(keys().session("s/1"))).await;
    let lifetime_s = (expires_at_ms - runbox_common::now_unix_ms()) / 1000 + TTL.as_secs();
    assert!(u64::try_from(lives).is_ok_and(|s| s.abs_diff(lifetime_s) <= 2), "{lives} vs {lifetime_s}");

    assert!(queue.session_ready("s/1", "w/1", None).await.expect("redis"));
    let payload = "{\"code\": \"print(\\\"a/b\\\")\\n\"} é ✓ \u{1}";
    let sent = queue
        .send_to_session(
            "s/1",
            "w/1",
            "x/1",
            "alice/bob",
            Language::Javascript,
            payload,
            "sig/\"1\"",
            "2026-01-01T00:00:01Z",
            true,
        )
        .await
        .expect("redis");
    assert_eq!(sent, Sent::Sent);
    assert_eq!(queue.next_session_task("w/1", Duration::from_millis(10)).await.expect("redis").as_deref(), Some("x/1"));
    let task = queue.claim_session_task("x/1").await.expect("redis").expect("the task's job hash");
    assert_eq!((task.payload.as_str(), task.signature.as_str()), (payload, "sig/\"1\""));
    let job = queue.get("x/1").await.expect("redis").expect("it exists");
    assert_eq!(
        (job.owner.as_str(), job.language, job.created_at.as_deref()),
        ("alice/bob", Some(Language::Javascript), Some("2026-01-01T00:00:01Z"))
    );
    let session_of: String = redis.cmd(redis::cmd("HGET").arg(keys().job("x/1")).arg("session")).await;
    assert_eq!(session_of, "s/1");

    // Recovery ends it as lost with the TTL it is given.
    let ttl = Duration::from_secs(123_456_789_012_345);
    assert_eq!(queue.recover_session("s/1", "alice/bob", "w/1", ttl).await.expect("redis"), Recovery::Lost);
    let kept: i64 = redis.cmd(redis::cmd("TTL").arg(keys().session("s/1"))).await;
    assert!(u64::try_from(kept).is_ok_and(|s| s.abs_diff(ttl.as_secs()) <= 1), "{kept}");
}

#[tokio::test]
async fn a_task_from_the_inbox_starts_and_finishes_without_a_stream_entry() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert!(create(&queue, "s1", Duration::from_secs(600), 4).await);
    assert!(queue.session_ready("s1", "w1", None).await.expect("redis"));
    assert_eq!(send(&queue, "s1", "w1", "x1", true).await, Sent::Sent);
    let task = queue.claim_session_task("x1").await.expect("redis").expect("the task's job hash");
    assert_eq!(task.handover, Handover::Inbox);
    assert_eq!(task.stream_entry(), None);

    // Its time in the queue counts from when it was sent, not from a made-up entry id.
    let sent_ms: u64 = redis.cmd(redis::cmd("HGET").arg(keys().job("x1")).arg("sent_ms")).await;
    redis.cmd::<i64>(redis::cmd("HSET").arg(keys().job("x1")).arg("sent_ms").arg(sent_ms - 5_000)).await;
    let queued = queue.start(&task, "w1", "2026-01-01T00:00:00Z").await.expect("redis").expect("it may run");
    assert!(queued >= Duration::from_secs(5) && queued < Duration::from_secs(60), "{queued:?}");

    finish(&queue, &task, &outcome(Status::Completed, "done")).await;
    let record = queue.get("x1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.outcome.expect("an outcome").stdout.as_str()), (Status::Completed, "done"));
    let streams: Vec<String> = redis.cmd(redis::cmd("KEYS").arg("*stream*")).await;
    let tasks: Vec<String> = redis.cmd(redis::cmd("KEYS").arg("*session-tasks*")).await;
    assert!(tasks.is_empty() && streams.iter().all(|k| !k.contains("session")), "{streams:?} {tasks:?}");
}

#[tokio::test]
async fn the_fleets_capacity_counts_every_owners_live_sessions_and_frees_with_each_end() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let live = || async { redis.cmd::<u64>(redis::cmd("SCARD").arg(keys().live_sessions())).await };
    let long = Duration::from_secs(600);
    assert_eq!(admit(&queue, "alice", "a1", long, 1, 2).await, Admission::Created);
    assert_eq!(admit(&queue, "alice", "a2", long, 1, 2).await, Admission::OverShare, "alice's share is 1");
    assert_eq!(admit(&queue, "bob", "b1", long, 1, 2).await, Admission::Created);
    assert_eq!(admit(&queue, "carol", "c1", long, 1, 2).await, Admission::Full, "two places, both taken");
    assert_eq!(live().await, 2);

    // Each way a session ends frees its place: ended by its owner or worker ...
    assert!(queue.end_session("a1", "alice", SessionStatus::Closed, "destroyed", TTL, None).await.expect("redis"));
    assert_eq!(admit(&queue, "carol", "c1", Duration::from_millis(1), 1, 2).await, Admission::Created);
    // ... idle past its timeout with no worker to notice, found by another owner's create ...
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(admit(&queue, "dave", "d1", long, 1, 2).await, Admission::Created);
    assert_eq!(status(&queue, "c1").await, SessionStatus::Expired);
    // ... or lost with its worker.
    assert!(queue.session_ready("b1", "w1", None).await.expect("redis"));
    assert_eq!(queue.recover_session("b1", "bob", "w1", TTL).await.expect("redis"), Recovery::Lost);
    assert_eq!(live().await, 1);
    assert_eq!(admit(&queue, "erin", "e1", long, 1, 2).await, Admission::Created);
    assert_eq!(admit(&queue, "frank", "f1", long, 1, 2).await, Admission::Full);
    // A session whose hash is gone holds no place.
    let _: i64 = redis.cmd(redis::cmd("DEL").arg(keys().session("d1"))).await;
    assert_eq!(admit(&queue, "frank", "f1", long, 1, 2).await, Admission::Created);
}

#[tokio::test]
async fn a_session_start_is_claimed_from_its_own_stream_and_taken_over_from_a_dead_worker() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let quota = runbox_common::Quota::default();
    assert!(queue.claim_session_starts("w1", 1, Duration::from_millis(10)).await.expect("redis").is_empty());
    let job = runbox_common::NewJob {
        id: "start1",
        owner: OWNER,
        language: "python",
        payload: "{}",
        signature: "sig",
        created_at: "2026-01-01T00:00:00Z",
        callback: None,
        compat: None,
    };
    assert_eq!(queue.enqueue_session_start(&job, quota).await.expect("redis"), runbox_common::Enqueued::Accepted);
    assert_eq!(queue.depth().await.expect("redis"), 0, "a start is no job in the queue's depth");
    let claimed = queue.claim_session_starts("w1", 2, Duration::from_millis(10)).await.expect("redis");
    assert_eq!(claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["start1"]);
    assert_eq!(claimed[0].stream_entry().map(|(stream, _)| stream.to_owned()), Some(keys().session_starts()));
    assert!(queue.claim_session_starts("w2", 1, Duration::from_millis(10)).await.expect("redis").is_empty());
    assert!(queue.claim("w2", 1, Duration::from_millis(10)).await.expect("redis").is_empty(), "no job slot sees it");

    // w1 dies while opening it: once idle long enough, w2 takes it over.
    assert!(queue.reclaim_session_starts("w2", Duration::from_secs(60), 1).await.expect("redis").is_empty());
    tokio::time::sleep(Duration::from_millis(30)).await;
    let taken = queue.reclaim_session_starts("w2", Duration::from_millis(20), 1).await.expect("redis");
    assert_eq!((taken.len(), taken[0].id.as_str(), taken[0].deliveries), (1, "start1", 2));
    finish(&queue, &taken[0], &outcome(Status::Completed, "")).await;
    let left: u64 = redis.cmd(redis::cmd("XLEN").arg(keys().session_starts())).await;
    assert_eq!(left, 0, "its entry is acknowledged and deleted with its result");
}
