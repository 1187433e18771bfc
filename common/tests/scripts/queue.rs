//! The queue's scripts (enqueue, enqueue_batch, claim, depth, start,
//! finish, cancel, and their preludes), through the public `Queue` API.

use std::time::Duration;

use runbox_common::{BatchJob, CallbackDue, Cancelled, Enqueued, Idempotency, OverQuota, Quota, Status};

use crate::util::{CAP, NO_QUOTA, Redis, ScriptRedis, TTL, claim, finish, job, keys, outcome};

#[tokio::test]
async fn a_job_goes_from_enqueue_to_claim_start_and_finish() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    assert_eq!(queue.enqueue(&job("j1", "alice"), CAP, None, NO_QUOTA).await.expect("redis"), Enqueued::Accepted);
    assert_eq!(queue.get("j1").await.expect("redis").expect("it exists").status, Status::Queued);
    assert_eq!(queue.depth().await.expect("redis"), 1);

    let [claimed] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    assert_eq!(
        (claimed.id.as_str(), claimed.stream_entry().map(|(stream, _)| stream)),
        ("j1", Some(keys().jobs_stream("alice").as_str()))
    );
    assert!(queue.start(&claimed, "w1", "2026-01-01T00:00:00Z").await.expect("redis").is_some());
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.worker.as_deref()), (Status::Running, Some("w1")));

    finish(&queue, &claimed, &outcome(Status::Completed, "first")).await;
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.outcome.expect("an outcome").stdout, "first");
    assert_eq!(queue.depth().await.expect("redis"), 0, "finish deletes the stream entry");
    let ttl: i64 = redis.cmd(redis::cmd("TTL").arg(keys().job("j1"))).await;
    assert!(ttl > 0 && ttl <= 60, "finish sets the TTL: {ttl}");

    // A second delivery's write changes nothing, and a finished job never starts again.
    finish(&queue, &claimed, &outcome(Status::InternalError, "second")).await;
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.outcome.expect("an outcome").stdout.as_str()), (Status::Completed, "first"));
    assert_eq!(queue.start(&claimed, "w2", "2026-01-01T00:00:02Z").await.expect("redis"), None);
}

#[tokio::test]
async fn a_late_finish_after_a_takeover_keeps_the_new_owners_result() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    queue.enqueue(&job("j1", "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    let [first] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    assert!(queue.start(&first, "w1", "2026-01-01T00:00:00Z").await.expect("redis").is_some());

    // w1 hangs; w2 takes the entry over, runs it and finishes it.
    let taken = queue.reclaim("w2", Duration::ZERO, 10).await.expect("redis");
    assert_eq!(taken.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["j1"]);
    assert_eq!(taken[0].deliveries, 2);
    assert!(queue.start(&taken[0], "w2", "2026-01-01T00:00:01Z").await.expect("redis").is_some());
    assert_eq!(queue.get("j1").await.expect("redis").expect("it exists").worker.as_deref(), Some("w2"));
    finish(&queue, &taken[0], &outcome(Status::Completed, "from w2")).await;

    // w1 wakes up and writes what it had.
    finish(&queue, &first, &outcome(Status::Timeout, "from w1")).await;
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.outcome.expect("an outcome").stdout, "from w2");
    assert_eq!(queue.depth().await.expect("redis"), 0);
}

#[tokio::test]
async fn a_job_cancelled_while_queued_never_starts() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let quota = Quota { max_active: 1, per_second: 0 };
    queue.enqueue(&job("j1", "alice"), CAP, None, quota).await.expect("redis");
    let [claimed] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");

    // The cancel lands between the claim and the start.
    assert_eq!(queue.cancel("j1", "2026-01-01T00:00:01Z", TTL).await.expect("redis"), Cancelled::WhileQueued);
    assert_eq!(queue.start(&claimed, "w1", "2026-01-01T00:00:02Z").await.expect("redis"), None);
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!(record.status, Status::Cancelled);
    assert_eq!(record.outcome.expect("an outcome").status, Status::Cancelled);
    assert_eq!(queue.depth().await.expect("redis"), 0, "the cancel acks and deletes the entry");

    // The worker's finish for it changes nothing; the quota slot is free again.
    finish(&queue, &claimed, &outcome(Status::Completed, "ran anyway")).await;
    assert_eq!(queue.get("j1").await.expect("redis").expect("it exists").status, Status::Cancelled);
    assert_eq!(queue.cancel("j1", "2026-01-01T00:00:03Z", TTL).await.expect("redis"), Cancelled::AlreadyFinal);
    assert_eq!(queue.enqueue(&job("j2", "alice"), CAP, None, quota).await.expect("redis"), Enqueued::Accepted);
    assert_eq!(queue.cancel("nope", "2026-01-01T00:00:03Z", TTL).await.expect("redis"), Cancelled::NotFound);
}

#[tokio::test]
async fn a_running_job_cancelled_is_flagged_and_its_finish_lands() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let mut cancels = redis.subscribe(runbox_common::keys::CANCEL_CHANNEL);
    queue.enqueue(&job("j1", "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    let [claimed] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    queue.start(&claimed, "w1", "2026-01-01T00:00:00Z").await.expect("redis").expect("it exists");

    assert_eq!(queue.cancel("j1", "2026-01-01T00:00:01Z", TTL).await.expect("redis"), Cancelled::Requested);
    assert_eq!(queue.cancel_requested(&["j1".into()]).await.expect("redis"), [true]);
    assert_eq!(cancels.next(), "j1", "its worker is told");
    // A takeover of a job flagged for cancel does not run it again.
    assert_eq!(queue.start(&claimed, "w2", "2026-01-01T00:00:02Z").await.expect("redis"), None);

    finish(&queue, &claimed, &outcome(Status::Cancelled, "killed")).await;
    let record = queue.get("j1").await.expect("redis").expect("it exists");
    assert_eq!((record.status, record.outcome.expect("an outcome").stdout.as_str()), (Status::Cancelled, "killed"));
    assert_eq!(queue.cancel_requested(&["j1".into()]).await.expect("redis"), [false], "finish clears the flag");
}

#[tokio::test]
async fn enqueue_refuses_past_the_cap_the_quota_and_a_used_idempotency_key() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let key = Some(Idempotency { key: "k1", ttl: TTL });
    assert_eq!(queue.enqueue(&job("j1", "alice"), 2, key, NO_QUOTA).await.expect("redis"), Enqueued::Accepted);
    assert_eq!(
        queue.enqueue(&job("j2", "alice"), 2, key, NO_QUOTA).await.expect("redis"),
        Enqueued::Duplicate("j1".into())
    );
    assert_eq!(queue.get("j2").await.expect("redis").map(|r| r.status), None, "a duplicate queues nothing");
    assert_eq!(queue.enqueue(&job("j3", "bob"), 2, None, NO_QUOTA).await.expect("redis"), Enqueued::Accepted);
    assert_eq!(queue.enqueue(&job("j4", "carol"), 2, None, NO_QUOTA).await.expect("redis"), Enqueued::Full);
    assert_eq!(queue.depth().await.expect("redis"), 2);

    let active = Quota { max_active: 1, per_second: 0 };
    assert_eq!(
        queue.enqueue(&job("j5", "alice"), CAP, None, active).await.expect("redis"),
        Enqueued::OverQuota(OverQuota::Active)
    );
    // Three submissions in well under two seconds: one second holds two of them.
    let rate = Quota { max_active: 0, per_second: 1 };
    let mut refused = 0;
    for id in ["r1", "r2", "r3"] {
        match queue.enqueue(&job(id, "dave"), CAP, None, rate).await.expect("redis") {
            Enqueued::OverQuota(OverQuota::Rate) => refused += 1,
            other => assert_eq!(other, Enqueued::Accepted),
        }
    }
    assert!(refused >= 1, "the per-second quota refused none");
}

#[tokio::test]
async fn claims_take_turns_between_owners() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    for id in ["a1", "a2", "a3"] {
        queue.enqueue(&job(id, "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    }
    queue.enqueue(&job("b1", "bob"), CAP, None, NO_QUOTA).await.expect("redis");
    let mut ids: Vec<String> = claim(&queue, "w1", 2).await.into_iter().map(|c| c.id).collect();
    ids.sort();
    assert_eq!(ids, ["a1", "b1"]);
    let rest: Vec<String> = claim(&queue, "w1", 2).await.into_iter().map(|c| c.id).collect();
    assert_eq!(rest, ["a2", "a3"], "bob left the ring once his stream was empty");
    assert_eq!(queue.depth().await.expect("redis"), 4, "claimed entries count until finished");
}

#[tokio::test]
async fn a_batch_that_stops_on_failure_cancels_its_queued_jobs_and_calls_back_once() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    queue.ensure_callback_group().await.expect("redis");
    let jobs: Vec<BatchJob> = ["b1-0", "b1-1", "b1-2"]
        .into_iter()
        .map(|id| BatchJob { id: id.into(), language: "python".into(), payload: "{}".into(), signature: "s".into() })
        .collect();
    let quota = Quota { max_active: 3, per_second: 0 };
    let enqueued = queue
        .enqueue_batch("b1", "alice", "2026-01-01T00:00:00Z", &jobs, true, CAP, None, Some("http://cb"), quota)
        .await
        .expect("redis");
    assert_eq!(enqueued, Enqueued::Accepted);
    assert_eq!(queue.get("b1-1").await.expect("redis").expect("it exists").status, Status::Queued);
    assert_eq!(
        queue.enqueue(&job("j1", "alice"), CAP, None, quota).await.expect("redis"),
        Enqueued::OverQuota(OverQuota::Active),
        "a batch counts all its jobs in the quota"
    );

    let [first] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    assert_eq!(first.id, "b1-0");
    queue.start(&first, "w1", "2026-01-01T00:00:00Z").await.expect("redis").expect("it exists");
    let mut failed = outcome(Status::Completed, "");
    failed.exit_code = Some(1);
    finish(&queue, &first, &failed).await;

    let batch = queue.get_batch("b1").await.expect("redis").expect("it exists");
    assert_eq!((batch.done, batch.job_ids.len(), batch.stop_on_failure), (3, 3, true));
    for id in ["b1-1", "b1-2"] {
        assert_eq!(queue.get(id).await.expect("redis").expect("it exists").status, Status::Cancelled, "{id}");
    }
    assert_eq!(queue.depth().await.expect("redis"), 0);
    assert_eq!(queue.enqueue(&job("j1", "alice"), CAP, None, quota).await.expect("redis"), Enqueued::Accepted);
    let due = queue.due_callbacks("d1", 10, Duration::from_millis(10), Duration::from_secs(60)).await.expect("redis");
    let due: Vec<(&str, &str)> = due.iter().map(|d| (d.kind.as_str(), d.id.as_str())).collect();
    assert_eq!(due, [(CallbackDue::BATCH, "b1")]);
    let ttl: i64 = redis.cmd(redis::cmd("TTL").arg(keys().batch("b1"))).await;
    assert!(ttl > 0, "a finished batch expires: {ttl}");

    // An idempotent second submission of the batch gets its id back.
    let key = Some(Idempotency { key: "k", ttl: TTL });
    let again = |id: &'static str| {
        let queue = queue.clone();
        let jobs = jobs.clone();
        async move { queue.enqueue_batch(id, "bob", "2026-01-01T00:00:00Z", &jobs, false, CAP, key, None, NO_QUOTA).await }
    };
    assert_eq!(again("b2").await.expect("redis"), Enqueued::Accepted);
    assert_eq!(again("b3").await.expect("redis"), Enqueued::Duplicate("b2".into()));
}

#[tokio::test]
async fn a_finished_job_with_a_callback_is_queued_for_delivery() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    queue.ensure_callback_group().await.expect("redis");
    let with_callback = runbox_common::NewJob { callback: Some("http://cb"), ..job("j1", "alice") };
    queue.enqueue(&with_callback, CAP, None, NO_QUOTA).await.expect("redis");
    queue.enqueue(&job("j2", "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    for claimed in claim(&queue, "w1", 2).await {
        finish(&queue, &claimed, &outcome(Status::Completed, "")).await;
    }
    let due = queue.due_callbacks("d1", 10, Duration::from_millis(10), Duration::from_secs(60)).await.expect("redis");
    let due: Vec<(&str, &str)> = due.iter().map(|d| (d.kind.as_str(), d.id.as_str())).collect();
    assert_eq!(due, [(CallbackDue::JOB, "j1")]);
}

/// What the scripts take positionally (payloads, signatures, results) and
/// what they take in their argument table, with characters JSON escapes.
const AWKWARD: &str = "{\"code\": \"print('a/b \\\\ \\\"c\\\"')\\n\"} é ✓ \u{1}\t/";

#[tokio::test]
async fn a_batchs_jobs_keep_their_own_language_payload_and_signature() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let jobs: Vec<BatchJob> = [("b1/0", "python"), ("b1/1", "javascript"), ("b1/2", "typescript")]
        .into_iter()
        .map(|(id, language)| BatchJob {
            id: id.into(),
            language: language.into(),
            payload: format!("{AWKWARD} {id}"),
            signature: format!("sig of {id}"),
        })
        .collect();
    let enqueued = queue
        .enqueue_batch("b1", "alice", "2026-01-01T00:00:00Z", &jobs, false, CAP, None, None, NO_QUOTA)
        .await
        .expect("redis");
    assert_eq!(enqueued, Enqueued::Accepted);
    let batch = queue.get_batch("b1").await.expect("redis").expect("it exists");
    assert_eq!(batch.job_ids, ["b1/0", "b1/1", "b1/2"]);
    assert_eq!(
        (batch.done, batch.stop_on_failure, batch.created_at.as_deref()),
        (0, false, Some("2026-01-01T00:00:00Z"))
    );
    let stored: String = redis.cmd(redis::cmd("HGET").arg(keys().batch("b1")).arg("jobs")).await;
    assert_eq!(stored, r#"["b1/0","b1/1","b1/2"]"#, "the ids are stored as the caller wrote them");
    let size: String = redis.cmd(redis::cmd("HGET").arg(keys().batch("b1")).arg("size")).await;
    assert_eq!(size, "3");
    let callback: Option<String> = redis.cmd(redis::cmd("HGET").arg(keys().batch("b1")).arg("callback")).await;
    assert_eq!(callback, None, "no callback asked, none stored");

    let claimed = claim(&queue, "w1", 3).await;
    assert_eq!(claimed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["b1/0", "b1/1", "b1/2"]);
    for (entry, job) in claimed.iter().zip(&jobs) {
        assert_eq!((&entry.payload, &entry.signature), (&job.payload, &job.signature), "{}", job.id);
        let record = queue.get(&job.id).await.expect("redis").expect("it exists");
        assert_eq!(record.language.map(|l| l.as_str()), Some(job.language.as_str()), "{}", job.id);
        assert_eq!((record.owner.as_str(), record.status), ("alice", Status::Queued));
        let batch_of: String = redis.cmd(redis::cmd("HGET").arg(keys().job(&job.id)).arg("batch")).await;
        assert_eq!(batch_of, "b1");
    }
}

#[tokio::test]
async fn an_empty_batch_is_stored_with_an_empty_job_list() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let enqueued = queue
        .enqueue_batch("b0", "alice", "2026-01-01T00:00:00Z", &[], true, CAP, None, None, NO_QUOTA)
        .await
        .expect("redis");
    assert_eq!(enqueued, Enqueued::Accepted);
    let batch = queue.get_batch("b0").await.expect("redis").expect("it exists");
    assert_eq!((batch.done, batch.job_ids.len(), batch.stop_on_failure), (0, 0, true));
}

#[tokio::test]
async fn large_integers_and_escaped_strings_reach_redis_exactly() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    // Past 2^53, where a JSON number decoded as a double is no longer exact,
    // and past 14 digits, where Lua's tostring switches to exponent notation.
    let boot_ms: u64 = (1 << 53) + 1;
    let ttl_s: u64 = 123_456_789_012_345;
    let key = Some(Idempotency { key: "k/1", ttl: Duration::from_secs(ttl_s) });
    let awkward = runbox_common::NewJob {
        payload: AWKWARD,
        signature: "sig/\"1\"",
        callback: Some("http://cb/x?a=\"b\"&c=é"),
        compat: Some(AWKWARD),
        created_at: "2026-01-01T00:00:00.123Z",
        ..job("j/1", "alice/bob")
    };
    assert_eq!(queue.enqueue(&awkward, CAP, key, NO_QUOTA).await.expect("redis"), Enqueued::Accepted);
    let idempotency = keys().idempotency("job", "alice/bob", "k/1");
    let remembered: String = redis.cmd(redis::cmd("GET").arg(&idempotency)).await;
    assert_eq!(remembered, "j/1");
    let remembered_for: i64 = redis.cmd(redis::cmd("TTL").arg(&idempotency)).await;
    assert!((ttl_s - 1..=ttl_s).contains(&u64::try_from(remembered_for).unwrap_or(0)), "{remembered_for}");
    let callback: String = redis.cmd(redis::cmd("HGET").arg(keys().job("j/1")).arg("callback")).await;
    assert_eq!(callback, "http://cb/x?a=\"b\"&c=é");
    let record = queue.get("j/1").await.expect("redis").expect("it exists");
    assert_eq!((record.owner.as_str(), record.compat.as_deref()), ("alice/bob", Some(AWKWARD)));
    assert_eq!(record.created_at.as_deref(), Some("2026-01-01T00:00:00.123Z"));

    let [claimed] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    assert_eq!((claimed.payload.as_str(), claimed.signature.as_str()), (AWKWARD, "sig/\"1\""));
    let mut judged = outcome(Status::Completed, AWKWARD);
    judged.verdict = Some(runbox_common::Verdict::WrongAnswer);
    let ended_ms = runbox_common::now_unix_ms() - 1000;
    let write = queue
        .finish(
            &claimed,
            &judged,
            "2026-01-01T00:00:01Z",
            Duration::from_secs(ttl_s),
            Duration::from_millis(boot_ms),
            ended_ms,
        )
        .await
        .expect("finish");
    assert!(write >= Duration::from_millis(1000), "write time counts from the child's end: {write:?}");
    let record = queue.get("j/1").await.expect("redis").expect("it exists");
    assert_eq!(record.timings.boot_ms, Some(boot_ms));
    assert!(record.timings.write_ms.is_some_and(|ms| ms >= 1000), "{:?}", record.timings);
    assert_eq!((record.status, record.finished_at.as_deref()), (Status::Completed, Some("2026-01-01T00:00:01Z")));
    assert_eq!(record.outcome.expect("an outcome").stdout, AWKWARD);
    let summary = queue.summaries(&["j/1".into()]).await.expect("redis");
    assert_eq!(summary[0].verdict.as_deref(), Some("wrong_answer"));
    let kept: i64 = redis.cmd(redis::cmd("TTL").arg(keys().job("j/1"))).await;
    assert!((ttl_s - 1..=ttl_s).contains(&u64::try_from(kept).unwrap_or(0)), "{kept}");

    // A finish without a verdict stores none.
    queue.enqueue(&job("j2", "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    let [claimed] = <[_; 1]>::try_from(claim(&queue, "w1", 1).await).expect("one entry");
    finish(&queue, &claimed, &outcome(Status::Completed, "")).await;
    let summary = queue.summaries(&["j2".into()]).await.expect("redis");
    assert_eq!((summary[0].status, summary[0].verdict.as_deref()), (Some(Status::Completed), None));
}

#[tokio::test]
async fn a_cancel_sets_the_ttl_it_is_given_and_the_cancelled_result() {
    let redis = Redis::start().await;
    let queue = redis.queue();
    let mut done = redis.subscribe(runbox_common::keys::DONE_CHANNEL);
    queue.enqueue(&job("j/1", "alice"), CAP, None, NO_QUOTA).await.expect("redis");
    let ttl_s: u64 = 123_456_789_012_345;
    let cancelled = queue.cancel("j/1", "2026-01-01T00:00:01.5Z", Duration::from_secs(ttl_s)).await.expect("redis");
    assert_eq!(cancelled, Cancelled::WhileQueued);
    assert_eq!(done.next(), "j/1");
    let record = queue.get("j/1").await.expect("redis").expect("it exists");
    assert_eq!(record.finished_at.as_deref(), Some("2026-01-01T00:00:01.5Z"));
    assert_eq!(record.outcome.expect("an outcome").status, Status::Cancelled);
    let kept: i64 = redis.cmd(redis::cmd("TTL").arg(keys().job("j/1"))).await;
    assert!((ttl_s - 1..=ttl_s).contains(&u64::try_from(kept).unwrap_or(0)), "{kept}");
}
