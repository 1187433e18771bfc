//! SIGTERM stops the api and the worker whatever their stderr is doing,
//! and `scripts/run` stops everything it started on SIGTERM and SIGHUP.
//!
//! A service's stderr is usually a pipe (a terminal's tee, a supervisor, a
//! log shipper), and its reader can go away or stop reading. The shutdown
//! log line then failed with EPIPE, tracing-subscriber's `eprintln!` of
//! that failure panicked the task that was to stop the service, and the
//! api served on; on a full pipe the line blocked the thread for good.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::util::*;

/// How long a service may take to exit after SIGTERM. It has nothing in
/// flight here: it takes well under a second with a healthy stderr.
const EXIT_LIMIT: Duration = Duration::from_secs(5);

/// What becomes of the service's stderr before it gets SIGTERM.
#[derive(Clone, Copy, Debug)]
enum Stderr {
    /// The only reader closes its end: writes fail with EPIPE.
    ReaderGone,
    /// The pipe is filled up and never read: writes block.
    Full,
}

/// `name` with its stderr into a pipe that this test holds the only
/// reader of, once it has logged `ready`; returns the child, the reader
/// and a writer to the same pipe.
async fn start_piped(name: &str, redis: &Redis, ready: &str) -> (Child, std::fs::File, OwnedFd) {
    // Close-on-exec: no child may hold a copy of either end but the one
    // given as the service's stderr.
    let (reader, writer) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let ours = writer.try_clone().expect("dup");
    let mut child = Command::new(bin(name))
        .envs([
            ("REDIS_URL", redis.url().as_str()),
            ("RUNBOX_SIGNING_KEY", SIGNING_KEY),
            ("RUNBOX_API_TOKENS", &format!("alice:{ALICE}")),
            ("RUST_LOG", "info"),
            // The kernel picks the api's port: no other process can take it first.
            ("PORT", "0"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let ready = ready.to_owned();
    let read = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(std::fs::File::from(reader));
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if lines.read_line(&mut line).unwrap_or(0) == 0 {
                return Err(seen);
            }
            seen.push_str(&line);
            if line.contains(&ready) {
                return Ok(lines.into_inner());
            }
        }
    });
    match tokio::time::timeout(Duration::from_secs(60), read).await {
        Ok(Ok(Ok(reader))) => (child, reader, ours),
        Ok(Ok(Err(seen))) => panic!("{name} ended its stderr before it was ready: {:?}\n{seen}", child.try_wait()),
        Ok(Err(e)) => panic!("reading {name}'s stderr: {e}"),
        Err(_) => {
            let _ = child.kill().await;
            panic!("{name} was not ready within 60 s");
        }
    }
}

/// Fills the pipe `writer` writes to until a write would block. It opens
/// the pipe afresh to do so: O_NONBLOCK on `writer` itself would be shared
/// with the service's stderr, whose writes must block.
fn fill(writer: &OwnedFd) -> usize {
    let mut pipe = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", writer.as_raw_fd()))
        .expect("open the pipe again");
    let chunk = [b'.'; 4096];
    let mut filled = 0;
    loop {
        match pipe.write(&chunk) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return filled,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
}

/// Starts `name`, does `stderr` to its stderr, sends SIGTERM, and asserts
/// that it exits cleanly (a drained shutdown, not a panic) in time.
async fn exits_on_sigterm(name: &str, ready: &str, stderr: Stderr) {
    let redis = Redis::start().await;
    let (mut child, reader, writer) = start_piped(name, &redis, ready).await;
    // Kept open until the end in the Full case, so the pipe stays full.
    let _reader = match stderr {
        Stderr::ReaderGone => {
            drop(reader);
            None
        }
        Stderr::Full => {
            assert!(fill(&writer) > 0, "the pipe was full already");
            Some(reader)
        }
    };
    drop(writer);
    let pid = Pid::from_raw(i32::try_from(child.id().expect("running")).expect("pid"));
    nix::sys::signal::kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = match tokio::time::timeout(EXIT_LIMIT, child.wait()).await {
        Ok(status) => status.expect("wait"),
        Err(_) => panic!("{name} still running {EXIT_LIMIT:?} after SIGTERM with its stderr {stderr:?}"),
    };
    assert!(status.success(), "{name} with its stderr {stderr:?} ended with {status} after SIGTERM");
}

#[tokio::test]
async fn api_exits_on_sigterm_when_its_stderr_reader_is_gone() {
    exits_on_sigterm("runbox-api", "api listening", Stderr::ReaderGone).await;
}

#[tokio::test]
async fn api_exits_on_sigterm_when_its_stderr_is_full() {
    exits_on_sigterm("runbox-api", "api listening", Stderr::Full).await;
}

#[tokio::test]
async fn worker_exits_on_sigterm_when_its_stderr_reader_is_gone() {
    exits_on_sigterm("runbox-worker", "worker started", Stderr::ReaderGone).await;
}

#[tokio::test]
async fn worker_exits_on_sigterm_when_its_stderr_is_full() {
    exits_on_sigterm("runbox-worker", "worker started", Stderr::Full).await;
}

/// A process, told apart from a later one that reuses its pid by its start
/// time (field 22 of /proc/PID/stat).
#[derive(Debug, PartialEq)]
struct Proc {
    pid: i32,
    command: String,
    started: String,
}

impl Proc {
    fn read(pid: i32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let command = head.split_once('(')?.1.to_owned();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3 (state); a zombie has exited.
        if fields.first() == Some(&"Z") {
            return None;
        }
        Some(Proc { pid, command, started: fields.get(19)?.to_string() })
    }

    fn alive(&self) -> bool {
        Proc::read(self.pid).is_some_and(|now| now == *self)
    }
}

/// `root`'s descendants, recursively.
fn descendants(root: Pid) -> Vec<Proc> {
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for pid in children_of(parent) {
            if let Some(proc) = Proc::read(pid) {
                parents.push(Pid::from_raw(pid));
                found.push(proc);
            }
        }
    }
    found
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Where a signal is sent.
#[derive(Clone, Copy, Debug)]
enum To {
    /// The script alone, as `kill PID` does.
    Script,
    /// The script's process group, as `timeout` does and as a closing
    /// terminal does to its foreground job.
    Group,
}

/// Starts `scripts/run` (the debug binaries, without scripts/setup), waits until it serves, sends
/// `signal`, and asserts that the script exits, that everything it started
/// (Redis, the api, the worker, their tees and Deno children) is gone, and
/// that the api and the worker shut down gracefully rather than being
/// killed outright.
async fn run_script_stops_everything(signal: Signal, to: To) {
    let dir = tempfile::tempdir().expect("dir");
    let output_path = dir.path().join("output");
    let output = std::fs::File::create(&output_path).expect("output file");
    let port = free_port();
    // scripts/setup would build the whole workspace from inside this test;
    // the binaries the script runs are the ones the other tests use.
    for name in ["runbox-api", "runbox-worker"] {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug")).join(name);
        assert!(path.exists(), "{} is missing: run `cargo build --workspace`", path.display());
    }
    // Through `env --default-signal=HUP`, which execs the script in its
    // place: a shell cannot trap a signal it inherited as ignored, and a
    // test run started under `nohup` (or any parent ignoring SIGHUP) would
    // otherwise test the parent, not the script.
    let mut script = Command::new("env")
        .arg("--default-signal=HUP")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/run"))
        .env("RUNBOX_PROFILE", "dev")
        .env("RUNBOX_SKIP_SETUP", "1")
        .env("PORT", port.to_string())
        .env("RUST_LOG", "info")
        .env_remove("REDIS_URL")
        .env_remove("RUNBOX_API_TOKENS")
        .env_remove("RUNBOX_SHUTDOWN_GRACE_MS")
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("dup"))
        .stderr(output)
        // Its own process group, as a terminal gives a job.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("scripts/run");
    let script_pid = Pid::from_raw(i32::try_from(script.id().expect("running")).expect("pid"));
    let log = || std::fs::read_to_string(&output_path).unwrap_or_default();

    let http = reqwest::Client::new();
    let ready = format!("http://127.0.0.1:{port}/readyz");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if http.get(&ready).send().await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(script.try_wait().expect("try_wait").is_none(), "scripts/run ended:\n{}", log());
        assert!(tokio::time::Instant::now() < deadline, "scripts/run never served:\n{}", log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The worker too: then its shutdown has something to say.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !log().contains("worker started") {
        assert!(tokio::time::Instant::now() < deadline, "the worker never started:\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = descendants(script_pid);
    for command in ["redis-server", "runbox-api", "runbox-worker", "tee"] {
        assert!(started.iter().any(|p| p.command == command), "no {command} under scripts/run: {started:?}");
    }
    let redis_port = log()
        .split("(Redis: redis://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse::<u16>().ok())
        .expect("scripts/run names its Redis");

    match to {
        To::Script => nix::sys::signal::kill(script_pid, signal),
        To::Group => nix::sys::signal::killpg(script_pid, signal),
    }
    .expect("signal");
    let status = match tokio::time::timeout(Duration::from_secs(30), script.wait()).await {
        Ok(status) => status.expect("wait"),
        Err(_) => {
            let left: Vec<_> = started.iter().filter(|p| p.alive()).collect();
            for p in &left {
                let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
            panic!("scripts/run still running 30 s after {signal} to the {to:?}; left: {left:?}\n{}", log());
        }
    };
    let code = 128 + signal as i32;
    assert!(
        status.code() == Some(code) || status.signal() == Some(signal as i32),
        "scripts/run ended with {status} after {signal}:\n{}",
        log()
    );
    // A tee ends just after its service: allow it a moment.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<&Proc> = started.iter().filter(|p| p.alive()).collect();
        if left.is_empty() || tokio::time::Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for p in &left {
        let _ = nix::sys::signal::kill(Pid::from_raw(p.pid), Signal::SIGKILL);
    }
    assert!(left.is_empty(), "{signal} to the {to:?} left {left:?} running:\n{}", log());
    assert!(!answers(port), "the api still answers");
    assert!(!answers(redis_port), "Redis still answers");
    // Stopped by the script in order, each draining, and its tee still there
    // to pass the last lines on.
    let log = log();
    assert!(log.contains("shutting down: answering long-polls"), "the api did not shut down gracefully:\n{log}");
    assert!(log.contains("worker stopped"), "the worker did not shut down gracefully:\n{log}");
}

#[tokio::test]
async fn run_script_stops_everything_on_sigterm_to_its_group() {
    run_script_stops_everything(Signal::SIGTERM, To::Group).await;
}

#[tokio::test]
async fn run_script_stops_everything_on_sighup_to_its_group() {
    run_script_stops_everything(Signal::SIGHUP, To::Group).await;
}

#[tokio::test]
async fn run_script_stops_everything_on_sigterm() {
    run_script_stops_everything(Signal::SIGTERM, To::Script).await;
}

#[tokio::test]
async fn run_script_stops_everything_on_sighup() {
    run_script_stops_everything(Signal::SIGHUP, To::Script).await;
}
