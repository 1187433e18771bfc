//! A private `redis-server` per test. `runbox-tests` has the same helper,
//! but it depends on this crate, so common's tests cannot use it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use runbox_common::{Claimed, Language, NewJob, Outcome, Queue, Quota, RedisTarget, Status};

/// A redis-server on a free port, killed on drop.
pub struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    pub async fn start() -> Redis {
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH (scripts/setup installs it)");
            let mut redis = Redis { child, port };
            for _ in 0..100 {
                if redis.conn().await.is_some() {
                    return redis;
                }
                // Lost the port to someone else: try another.
                if redis.child.try_wait().ok().flatten().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn conn(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
        Some(conn)
    }

    /// Runs one raw command, for what the public API does not show.
    pub async fn cmd<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut conn = self.conn().await.expect("redis reachable");
        cmd.query_async(&mut conn).await.expect("redis command")
    }

    /// A blocking subscription to `channel`, made before this returns.
    pub fn subscribe(&self, channel: &str) -> Subscription {
        let client = redis::Client::open(self.url()).expect("url");
        let mut conn = client.get_connection().expect("redis reachable");
        conn.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        redis::cmd("SUBSCRIBE").arg(channel).exec(&mut conn).expect("subscribe");
        Subscription { conn }
    }

    /// A queue named `test` on this server.
    pub fn queue(&self) -> Queue {
        Queue::connect(&RedisTarget { urls: vec![self.url()], cluster: false }, QUEUE).expect("queue")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
