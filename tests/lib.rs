//! A real runbox stack for tests: a private `redis-server` on a free port,
//! and `runbox-api` and `runbox-worker` processes from `target/debug` (or
//! `RUNBOX_BIN_DIR`), each killed when its handle is dropped.
//!
//! The end-to-end tests (`e2e/`) and the Rust client's tests
//! (`clients/rust/tests`) start their stacks through here, so both run
//! what the service really is. Build the binaries first (`cargo build
//! --workspace`; `scripts/test` does).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub const ALICE: &str = "alice-token-0123456789abcdef";
pub const BOB: &str = "bob-token-0123456789abcdef012";
pub const SIGNING_KEY: &str = "e2e-signing-key-0123456789abcdef0123456789";

pub fn bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("RUNBOX_BIN_DIR")
        .map_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug")), PathBuf::from);
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --workspace` (scripts/test does)", path.display());
    path
}

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// A private redis-server on a free port, killed on drop.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
}

impl Redis {
    /// A server on a free port. The port is free when picked and may be
    /// taken before the server binds it, so a server that does not come up
    /// is retried on another.
    pub async fn start() -> Redis {
        for _ in 0..5 {
            if let Some(redis) = Redis::try_start(free_port(), &[]).await {
                return redis;
            }
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    pub async fn start_on(port: u16) -> Redis {
        Redis::start_with(port, &[]).await
    }

    /// A server on `port` with `extra` configuration arguments.
    pub async fn start_with(port: u16, extra: &[&str]) -> Redis {
        Redis::try_start(port, extra).await.unwrap_or_else(|| panic!("redis-server did not start on port {port}"))
    }

    async fn try_start(port: u16, extra: &[&str]) -> Option<Redis> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server on PATH (scripts/setup installs it)");
        let mut redis = Redis { child: Some(child), port };
        for _ in 0..100 {
            if redis.conn().await.is_some() {
                return Some(redis);
            }
            // Exited: the port was taken meanwhile.
            if redis.child.as_mut().is_some_and(|child| child.try_wait().ok().flatten().is_some()) {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// A Redis that is not running (yet) on `port`, for start-up tests.
    pub fn absent(port: u16) -> Redis {
        Redis { child: None, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn conn(&self) -> Option<redis::aio::MultiplexedConnection> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
        Some(conn)
    }

    pub async fn cmd<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        let mut conn = self.conn().await.expect("redis reachable");
        cmd.query_async(&mut conn).await.expect("redis command")
    }

    /// Queued plus running jobs.
    pub async fn depth(&self) -> u64 {
        queue_depth(&mut self.conn().await.expect("redis reachable")).await
    }

    /// Sends `signal` to the server (SIGSTOP makes it unreachable without
    /// closing a connection).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().and_then(Child::id).expect("redis-server running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid")), signal).expect("signal");
    }

    /// SIGKILLs the server.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// The Redis keys of the queue every test uses.
pub fn keys() -> runbox_common::keys::QueueKeys {
    runbox_common::keys::QueueKeys::new("default")
}

/// Queued plus running jobs on `conn`: the entries of every owner's job
/// stream.
pub async fn queue_depth(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let streams: Vec<String> = redis::cmd("SMEMBERS").arg(keys().streams()).query_async(conn).await.expect("SMEMBERS");
    let mut depth = 0;
    for stream in streams {
        depth += redis::cmd("XLEN").arg(stream).query_async::<u64>(conn).await.expect("XLEN");
    }
    depth
}

/// The environment every api and worker in these tests shares.
fn base_env(redis: &Redis) -> Vec<(String, String)> {
    [
        ("REDIS_URL", redis.url()),
        ("RUNBOX_SIGNING_KEY", SIGNING_KEY.into()),
        ("RUNBOX_API_TOKENS", format!("alice:{ALICE},bob:{BOB}")),
        ("RUNBOX_MAX_TIMEOUT_MS", "10000".into()),
        ("RUNBOX_DEFAULT_TIMEOUT_MS", "5000".into()),
        ("RUST_LOG", "info".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A running runbox-api or runbox-worker process.
pub struct Process {
    pub child: Child,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Process {
    async fn spawn(name: &str, redis: &Redis, env: &[(&str, &str)]) -> Process {
        let dir = tempfile::tempdir().expect("log dir");
        let log = dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin(name))
            .envs(base_env(redis))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        Process { child, log, _dir: dir }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id().expect("alive")).expect("pid"))
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("signal");
    }

    /// Waits for the process to exit, up to `limit`.
    pub async fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait()).await.expect("exited in time").expect("wait")
    }

    /// The port the process bound for the listener its `message` log line
    /// names (the line's `addr`, as `0.0.0.0:PORT`), waiting up to `limit`.
    pub async fn bound_port(&self, message: &str, limit: Duration) -> u16 {
        self.wait_for_log(message, limit).await;
        let logs = self.logs();
        let line = logs.lines().find(|line| line.contains(message)).unwrap_or_default();
        line.split("0.0.0.0:")
            .nth(1)
            .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect::<String>())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no bound port in {line:?}"))
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_for_log(&self, needle: &str, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.logs().contains(needle) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("log never said {needle:?}:\n{}", self.logs());
    }
}

/// Starts a worker process without waiting for it to serve.
pub async fn spawn_worker(redis: &Redis, env: &[(&str, &str)]) -> Process {
    Process::spawn("runbox-worker", redis, env).await
}

pub async fn start_worker(redis: &Redis, env: &[(&str, &str)]) -> Process {
    let worker = Process::spawn("runbox-worker", redis, env).await;
    worker.wait_for_log("worker started", Duration::from_secs(30)).await;
    worker
}

/// An api process and a client for it.
pub struct Api {
    pub process: Process,
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    /// An api on a port it binds itself (PORT=0: the kernel picks a free
    /// one, so no other process can take it between pick and bind), read
    /// from its "api listening" line.
    pub async fn start(redis: &Redis, env: &[(&str, &str)]) -> Api {
        let mut all = vec![("PORT", "0")];
        all.extend_from_slice(env);
        let process = Process::spawn("runbox-api", redis, &all).await;
        let port = process.bound_port("api listening", Duration::from_secs(30)).await;
        let api = Api { process, base: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        for _ in 0..200 {
            if api.http.get(api.url("/healthz")).send().await.is_ok() {
                return api;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("api did not answer /healthz:\n{}", api.process.logs());
    }

    /// Starts an api process without waiting for it to serve.
    pub async fn spawn_raw(redis: &Redis, env: &[(&str, &str)]) -> Process {
        let mut all = vec![("PORT", "0")];
        all.extend_from_slice(env);
        Process::spawn("runbox-api", redis, &all).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST /v1/jobs with `body` as alice.
    pub async fn submit(&self, body: Value, wait: Option<u64>) -> (u16, Value) {
        let path = wait.map_or_else(|| "/v1/jobs".to_owned(), |w| format!("/v1/jobs?wait={w}"));
        let response = self.http.post(self.url(&path)).bearer_auth(ALICE).json(&body).send().await.expect("submit");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Submits and waits up to 60 s for the result; panics unless it is final.
    pub async fn run(&self, language: &str, code: &str) -> Value {
        let (status, job) = self.submit(json!({ "language": language, "code": code }), Some(60)).await;
        assert_eq!(status, 200, "{job}");
        job
    }

    /// GET /v1/jobs/{id} as `token`.
    pub async fn get(&self, id: &str, token: &str, wait: Option<u64>) -> (u16, Value) {
        let path = match wait {
            Some(w) => format!("/v1/jobs/{id}?wait={w}"),
            None => format!("/v1/jobs/{id}"),
        };
        let response = self.http.get(self.url(&path)).bearer_auth(token).send().await.expect("get");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Polls until job `id` has `status`, up to `limit`.
    pub async fn until_status(&self, id: &str, status: &str, limit: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let (_, job) = self.get(id, ALICE, None).await;
            if job["status"] == status {
                return job;
            }
            assert!(tokio::time::Instant::now() < deadline, "job never became {status}: {job}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Redis, one api and one worker: the usual stack. Dropping it stops all three.
pub struct Stack {
    pub api: Api,
    _redis: Redis,
    _worker: Process,
}

impl Stack {
    pub async fn start(worker_env: &[(&str, &str)]) -> Stack {
        let redis = Redis::start().await;
        let api = Api::start(&redis, &[]).await;
        let worker = start_worker(&redis, worker_env).await;
        Stack { api, _redis: redis, _worker: worker }
    }

    pub fn redis(&self) -> &Redis {
        &self._redis
    }
}
