//! Helpers the end-to-end tests share. The stack itself (Redis, api and
//! worker processes) is `runbox_tests`'s, re-exported here.

use std::path::Path;
use std::process::Stdio;

pub use runbox_tests::*;
use serde_json::Value;

/// Lets one test process hold a thousand sockets.
pub fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Unix milliseconds of an RFC 3339 timestamp, as the api returns them.
pub fn unix_ms(text: &str) -> i64 {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).expect("RFC 3339");
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).expect("in range")
}

/// Pids of the processes whose parent is `parent`.
pub fn children_of(parent: nix::unistd::Pid) -> Vec<i32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the command name, which is in parentheses: state, ppid, ...
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1).and_then(|p| p.parse::<i32>().ok()) == Some(parent.as_raw()) {
            children.push(pid);
        }
    }
    children
}

/// A Python program that prints the id of the process it runs in: two jobs
/// that print the same id ran in one child. A realm without Deno's API (a
/// Python job's bare realm, in a harness that gives it one) cannot tell,
/// and prints 0.
pub const PYTHON_PID: &str = "import js\ntry:\n    print(js.Deno.pid)\nexcept AttributeError:\n    print(0)";
/// The same in JavaScript.
pub const JS_PID: &str = "console.log(Deno.pid)";

/// POST /v1/jobs?wait=60 as `token`; the job, which must have completed
/// with exit code 0.
pub async fn run_as(api: &Api, token: &str, body: &Value) -> Value {
    let response =
        api.http.post(api.url("/v1/jobs?wait=60")).bearer_auth(token).json(body).send().await.expect("submit");
    let status = response.status().as_u16();
    let job: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!((status, job["status"].as_str(), job["exit_code"].as_i64()), (200, Some("completed"), Some(0)), "{job}");
    job
}

/// The process a job of [`PYTHON_PID`] or [`JS_PID`] ran in, as the job saw
/// it; None when it could not see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pid(pub Option<u32>);

impl Pid {
    /// Whether `self` may be `other`: false only when both are known and differ.
    pub fn same(self, other: Pid) -> bool {
        !matches!((self.0, other.0), (Some(a), Some(b)) if a != b)
    }

    /// Whether `self` may be another process: false only when both are known and equal.
    pub fn other_than(self, other: Pid) -> bool {
        !matches!((self.0, other.0), (Some(a), Some(b)) if a == b)
    }
}

/// What a job that ran [`PYTHON_PID`] or [`JS_PID`] says: whether its child
/// was warm (the worker sets it when the child had already run a job of
/// the token), and the child's pid.
pub fn child_of(job: &Value) -> (bool, Pid) {
    let warm = job["warm"].as_bool().unwrap_or_else(|| panic!("warm is not a bool: {job}"));
    let pid: u32 =
        job["stdout"].as_str().and_then(|s| s.trim().parse().ok()).unwrap_or_else(|| panic!("no pid: {job}"));
    (warm, Pid((pid != 0).then_some(pid)))
}

/// Asserts that `job` ran in `child`, warm.
#[track_caller]
pub fn assert_warm_in(job: &Value, child: Pid, what: &str) {
    let (warm, pid) = child_of(job);
    assert!(warm && pid.same(child), "{what}: ran in {pid:?} (warm {warm}), not warm in {child:?}: {job}");
}

/// Asserts that `job` ran in a fresh child, none of `others`; returns it.
#[track_caller]
pub fn assert_fresh(job: &Value, others: &[Pid], what: &str) -> Pid {
    let (warm, pid) = child_of(job);
    assert!(
        !warm && others.iter().all(|o| pid.other_than(*o)),
        "{what}: ran in {pid:?} (warm {warm}), not a fresh child other than {others:?}: {job}"
    );
    pid
}

/// Whether process `pid` exists and has not exited (a zombie waiting to
/// be reaped has).
pub fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|state| state != "Z")
}

/// Makes a CA (`ca.pem`, `ca.key`) and a certificate for `localhost` and
/// `127.0.0.1` signed by it (`server.pem`, `server.key`), in `dir`.
pub fn test_certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let done = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl (scripts/setup installs it)");
        assert!(done.success(), "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=runbox test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
        "-out",
        "server.pem",
    ]);
}
