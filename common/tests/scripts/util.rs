//! A private `redis-server` per test (runbox-tests' one, which the
//! end-to-end tests use), and what these tests ask of it.

use std::time::Duration;

use runbox_common::{Claimed, Language, NewJob, Outcome, Queue, Quota, RedisTarget, Status};
pub use runbox_tests::Redis;

/// What the script tests need of a server beyond what runbox-tests gives.
pub trait ScriptRedis {
    /// A blocking subscription to `channel`, made before this returns.
    fn subscribe(&self, channel: &str) -> Subscription;
    /// A queue named `test` on this server.
    fn queue(&self) -> Queue;
}

impl ScriptRedis for Redis {
    fn subscribe(&self, channel: &str) -> Subscription {
        let client = redis::Client::open(self.url()).expect("url");
        let mut conn = client.get_connection().expect("redis reachable");
        conn.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        redis::cmd("SUBSCRIBE").arg(channel).exec(&mut conn).expect("subscribe");
        Subscription { conn }
    }

    fn queue(&self) -> Queue {
        Queue::connect(&RedisTarget { urls: vec![self.url()], cluster: false }, QUEUE).expect("queue")
    }
}

/// A channel's messages, read with a 5 s timeout.
pub struct Subscription {
    conn: redis::Connection,
}

impl Subscription {
    /// The next message's payload.
    pub fn next(&mut self) -> String {
        let mut pubsub = self.conn.as_pubsub();
        pubsub.get_message().expect("a message within 5 s").get_payload().expect("a string")
    }
}

pub const QUEUE: &str = "test";

/// The queue's key prefix, as `keys::QueueKeys` spells it.
pub fn keys() -> runbox_common::keys::QueueKeys {
    runbox_common::keys::QueueKeys::new(QUEUE)
}

pub const TTL: Duration = Duration::from_secs(60);
pub const NO_QUOTA: Quota = Quota { max_active: 0, per_second: 0 };
pub const CAP: u64 = 1000;

/// Job `id` of `owner`, with a payload and signature no one checks here.
pub fn job<'a>(id: &'a str, owner: &'a str) -> NewJob<'a> {
    NewJob {
        id,
        owner,
        language: Language::Python.as_str(),
        payload: "{}",
        signature: "sig",
        created_at: "2026-01-01T00:00:00Z",
        callback: None,
        compat: None,
    }
}

/// An outcome with `status` and exit code 0, marked with `stdout`.
pub fn outcome(status: Status, stdout: &str) -> Outcome {
    Outcome { status, exit_code: Some(0), stdout: stdout.into(), ..Outcome::internal_error("") }
}

/// Finishes `claimed` with `outcome`.
pub async fn finish(queue: &Queue, claimed: &Claimed, outcome: &Outcome) {
    queue
        .finish(claimed, outcome, "2026-01-01T00:00:01Z", TTL, Duration::ZERO, runbox_common::now_unix_ms())
        .await
        .expect("finish");
}

/// Claims exactly `n` entries for `consumer`, without blocking.
pub async fn claim(queue: &Queue, consumer: &str, n: usize) -> Vec<Claimed> {
    let claimed = queue.claim(consumer, n, Duration::from_millis(10)).await.expect("claim");
    assert_eq!(claimed.len(), n, "{claimed:?}");
    claimed
}
