//! A job: what a client asks to run ([`JobSpec`]), how its stdout is
//! judged ([`Compare`], [`Verdict`]) and what comes back ([`Status`],
//! [`Outcome`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Egress, Language, SessionTask, StepResult};

/// One program to run, as the worker receives it.
///
/// Unknown fields are ignored when reading, so older workers keep working
/// while the spec grows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub language: Language,
    pub code: String,
    /// Bytes fed to the program's stdin, then EOF.
    #[serde(default)]
    pub stdin: String,
    /// Wall-clock limit in milliseconds; the worker's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// A memory cap below the worker's for this job, in MiB; the worker's
    /// cap applies when absent or higher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u32>,
    /// Command-line arguments: `Deno.args`, or `sys.argv[1:]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// What stdout should be; when given, the result gets a [`Verdict`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_stdout: Option<String>,
    /// How stdout is compared with `expected_stdout`.
    #[serde(default, skip_serializing_if = "Compare::is_exact")]
    pub compare: Compare,
    /// Files put in the program's working directory before it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// Files the program wrote that the result should carry back.
    #[serde(default, skip_serializing_if = "ReturnFiles::is_none")]
    pub return_files: ReturnFiles,
    /// Set by the api, never by a client: the owner (token name) whose
    /// long-lived children may run this job, one job after another, each in
    /// a fresh interpreter. Only jobs with the same value ever share a
    /// child, so a value belongs to one owner. None: a fresh child of its
    /// own (`shared_runtime: false`, and JavaScript unless it asks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_lane: Option<String>,
    /// Set by the api, never by a client: this job is a step of a session
    /// (start, exec, checkpoint, destroy), not a program of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTask>,
    /// Set by the api, never by a client: the hosts this job may reach
    /// through the worker's egress proxy, its token's rules. None: nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
}

/// A file given to the program, by a path relative to its working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub content: String,
    #[serde(default)]
    pub encoding: FileEncoding,
}

/// How an [`InputFile`]'s `content` is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileEncoding {
    /// The text itself.
    #[default]
    Utf8,
    /// Standard base64 of the bytes.
    Base64,
}

/// Which files a job's result carries back: none, every file the program
/// created or changed in its working directory (`true`), or the files at
/// the given paths (a list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReturnFiles {
    #[default]
    None,
    All,
    Paths(Vec<String>),
}

/// Most files a result carries back, and their total bytes before base64.
pub const MAX_RETURN_FILES: usize = 64;
pub const MAX_RETURN_FILES_BYTES: usize = 1024 * 1024;

impl ReturnFiles {
    pub fn is_none(&self) -> bool {
        *self == ReturnFiles::None
    }
}

impl Serialize for ReturnFiles {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ReturnFiles::None => serializer.serialize_bool(false),
            ReturnFiles::All => serializer.serialize_bool(true),
            ReturnFiles::Paths(paths) => paths.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ReturnFiles {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            All(bool),
            Paths(Vec<String>),
        }
        Ok(match Wire::deserialize(deserializer)? {
            Wire::All(false) => ReturnFiles::None,
            Wire::All(true) => ReturnFiles::All,
            Wire::Paths(paths) => ReturnFiles::Paths(paths),
        })
    }
}

/// A file the program wrote, as the result carries it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputFile {
    pub path: String,
    /// Standard base64 of the bytes kept.
    pub content: String,
    /// The file's whole size in bytes.
    pub size: u64,
    /// Fewer bytes were kept than the file has ([`MAX_RETURN_FILES_BYTES`]
    /// is shared by a job's files, in path order).
    pub truncated: bool,
}

impl InputFile {
    /// The file's bytes, or why its content is not valid for its encoding.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine;
        match self.encoding {
            FileEncoding::Utf8 => Ok(self.content.clone().into_bytes()),
            FileEncoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(&self.content)
                .map_err(|e| format!("{}: content is not valid base64: {e}", self.path)),
        }
    }

    /// Checks that `path` names a file inside the working directory: relative,
    /// made of plain names (no `.`, `..` or empty parts), printable, short.
    pub fn check_path(path: &str) -> Result<(), String> {
        let ok = !path.is_empty()
            && path.len() <= 255
            && !path.starts_with('/')
            && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..")
            && !path.chars().any(|c| c.is_control() || c == '\\');
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{path:?} is not a valid file path: use a relative path of plain names separated by /, \
                 with no . or .. parts, at most 255 bytes"
            ))
        }
    }
}

impl JobSpec {
    /// A spec with only the program: no stdin, arguments or expectations.
    pub fn new(language: Language, code: impl Into<String>) -> JobSpec {
        JobSpec {
            language,
            code: code.into(),
            stdin: String::new(),
            timeout_ms: None,
            memory_mb: None,
            args: Vec::new(),
            expected_stdout: None,
            compare: Compare::Exact,
            files: Vec::new(),
            return_files: ReturnFiles::None,
            shared_lane: None,
            session: None,
            egress: None,
        }
    }

    /// The verdict on `outcome`, when this spec says what to expect,
    /// judging `outcome.stdout` as the whole of stdout. A worker keeps only
    /// a capped prefix there, so it judges with [`JobSpec::verdict_with`].
    pub fn verdict(&self, outcome: &Outcome) -> Option<Verdict> {
        self.verdict_with(outcome, |compare, expected| compare.matches(&outcome.stdout, expected))
    }

    /// The verdict on `outcome`, when this spec says what to expect, with
    /// `stdout_matches(compare, expected)` saying whether everything the
    /// program wrote on stdout matches (an [`crate::OutputDigest`] can say so
    /// past the cap). It is asked only for a clean exit.
    pub fn verdict_with(
        &self,
        outcome: &Outcome,
        stdout_matches: impl FnOnce(Compare, &str) -> bool,
    ) -> Option<Verdict> {
        let expected = self.expected_stdout.as_deref()?;
        Some(match outcome.status {
            Status::Timeout => Verdict::Timeout,
            Status::MemoryExceeded => Verdict::MemoryExceeded,
            Status::Completed if outcome.exit_code != Some(0) => Verdict::RuntimeError,
            Status::Completed if stdout_matches(self.compare, expected) => Verdict::Accepted,
            Status::Completed => Verdict::WrongAnswer,
            // Nothing to judge: the program did not run to an end of its own.
            _ => return None,
        })
    }
}

/// How stdout is compared with the expected output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// Byte for byte.
    #[default]
    Exact,
    /// Ignoring whitespace at the end of each line and blank lines at the end.
    Trim,
}

impl Compare {
    fn is_exact(&self) -> bool {
        *self == Compare::Exact
    }

    /// Whether `actual` matches `expected` under this comparison.
    pub fn matches(self, actual: &str, expected: &str) -> bool {
        match self {
            Compare::Exact => actual == expected,
            Compare::Trim => trimmed_lines(actual).eq(trimmed_lines(expected)),
        }
    }

    /// [`Compare::matches`] on the raw bytes a program wrote: bytes that are
    /// not UTF-8 match no expected output (which is text), even where their
    /// lossy decoding, U+FFFD, would.
    pub fn matches_bytes(self, actual: &[u8], expected: &str) -> bool {
        std::str::from_utf8(actual).is_ok_and(|actual| self.matches(actual, expected))
    }
}

/// Lines without trailing whitespace, trailing blank lines dropped.
fn trimmed_lines(text: &str) -> impl Iterator<Item = &str> {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let keep = lines.iter().rposition(|line| !line.is_empty()).map_or(0, |last| last + 1);
    lines.into_iter().take(keep)
}

/// How a program with an expected output did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Accepted,
    WrongAnswer,
    Timeout,
    MemoryExceeded,
    /// It exited with a non-zero code, or died of a signal.
    RuntimeError,
}

impl Verdict {
    pub const ALL: [Verdict; 5] =
        [Verdict::Accepted, Verdict::WrongAnswer, Verdict::Timeout, Verdict::MemoryExceeded, Verdict::RuntimeError];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::WrongAnswer => "wrong_answer",
            Verdict::Timeout => "timeout",
            Verdict::MemoryExceeded => "memory_exceeded",
            Verdict::RuntimeError => "runtime_error",
        }
    }
}

/// Where a job is in its life, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    /// The program ran to its end; read `exit_code`.
    Completed,
    /// The wall-clock limit passed and the child was killed.
    Timeout,
    /// The program hit the memory cap.
    MemoryExceeded,
    /// The job's signature did not verify, so it was never run.
    Rejected,
    Cancelled,
    /// Delivered too many times without a result: the workers running it died.
    WorkerLost,
    /// runbox itself failed; the program may not have run.
    InternalError,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Timeout => "timeout",
            Status::MemoryExceeded => "memory_exceeded",
            Status::Rejected => "rejected",
            Status::Cancelled => "cancelled",
            Status::WorkerLost => "worker_lost",
            Status::InternalError => "internal_error",
        }
    }

    /// True once the job will not change again.
    pub fn is_final(self) -> bool {
        !matches!(self, Status::Queued | Status::Running)
    }

    const ALL: [Status; 9] = [
        Status::Queued,
        Status::Running,
        Status::Completed,
        Status::Timeout,
        Status::MemoryExceeded,
        Status::Rejected,
        Status::Cancelled,
        Status::WorkerLost,
        Status::InternalError,
    ];
}

impl FromStr for Status {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| format!("unknown status {s:?}"))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What running one program produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    /// None when the child did not exit by itself (killed on timeout, memory,
    /// cancellation) or never started.
    pub exit_code: Option<i32>,
    /// The signal that ended the child when it was not runbox's doing: the
    /// program signalled itself, or the host killed it (e.g. its OOM killer).
    #[serde(default)]
    pub signal: Option<i32>,
    /// UTF-8; invalid bytes are replaced with U+FFFD.
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Wall-clock time from handing the program to the child until it ended.
    pub duration_ms: u64,
    /// Set when the job had an `expected_stdout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// The files the job asked back with `return_files`, in path order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<OutputFile>,
    /// Some file was cut short, or left out past [`MAX_RETURN_FILES`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files_truncated: bool,
    /// The job ran in a long-lived child that had already run another job
    /// of its owner; false in a child that had run none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warm: bool,
    /// CPU time (user + system) the job used, in milliseconds, as the
    /// kernel counted it for the job's child; never reported by the
    /// program. None where nothing ran (rejected, cancelled in the queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    /// The job's peak memory in bytes, measured by runbox (what each lane
    /// counts is in docs/api.md); None where nothing ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// What a session's start, checkpoint or destroy came to; None for a
    /// program's run (a job, or a session's exec), which its status and
    /// exit code say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepResult>,
    /// What the job sent and received through the egress proxy, per host,
    /// in the order each was first asked for; empty for a job that used none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<HostTraffic>,
}

/// One host's share of a job's traffic through the egress proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HostTraffic {
    /// `host:port`, as the job asked for it.
    pub host: String,
    /// Requests the proxy took for this host, refused ones included.
    pub requests: u32,
    /// Request bytes sent upstream (headers and body).
    pub bytes_out: u64,
    /// Response bytes received (headers and body).
    pub bytes_in: u64,
}

impl Outcome {
    /// Whether this counts as a failure for a batch that stops on the first
    /// one: a verdict other than accepted, or, without a verdict, any end
    /// but a clean exit. A cancelled job is not a failure.
    pub fn failed(&self) -> bool {
        match self.verdict {
            Some(verdict) => verdict != Verdict::Accepted,
            None => match self.status {
                Status::Completed => self.exit_code != Some(0),
                Status::Cancelled => false,
                _ => true,
            },
        }
    }

    /// An outcome for a job that failed inside runbox; `message` is for the user.
    pub fn internal_error(message: impl Into<String>) -> Self {
        Outcome {
            status: Status::InternalError,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: message.into(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms: 0,
            verdict: None,
            files: Vec::new(),
            files_truncated: false,
            warm: false,
            cpu_ms: None,
            peak_memory_bytes: None,
            step: None,
            network: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_spec_ignores_unknown_fields() {
        let spec: JobSpec =
            serde_json::from_str(r#"{"language":"js","code":"1","future_field":[1,2]}"#).expect("parses");
        assert_eq!(spec.language, Language::Javascript);
        assert_eq!(spec.stdin, "");
        assert_eq!(spec.timeout_ms, None);
    }

    #[test]
    fn verdicts_follow_status_exit_code_and_comparison() {
        let mut spec = JobSpec::new(Language::Python, "print(1)");
        spec.expected_stdout = Some("1\n".into());
        let ran = |status, exit_code, stdout: &str| Outcome {
            status,
            exit_code,
            stdout: stdout.into(),
            ..Outcome::internal_error("")
        };
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1\n")), Some(Verdict::Accepted));
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1 \n\n")), Some(Verdict::WrongAnswer));
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(1), "1\n")), Some(Verdict::RuntimeError));
        assert_eq!(spec.verdict(&ran(Status::Completed, None, "1\n")), Some(Verdict::RuntimeError));
        assert_eq!(spec.verdict(&ran(Status::Timeout, None, "")), Some(Verdict::Timeout));
        assert_eq!(spec.verdict(&ran(Status::MemoryExceeded, None, "")), Some(Verdict::MemoryExceeded));
        assert_eq!(spec.verdict(&ran(Status::Cancelled, None, "")), None);
        spec.compare = Compare::Trim;
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1 \t\n\n\n")), Some(Verdict::Accepted));
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1")), Some(Verdict::Accepted));
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), " 1\n")), Some(Verdict::WrongAnswer));
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1\n\n2\n")), Some(Verdict::WrongAnswer));
        spec.expected_stdout = None;
        assert_eq!(spec.verdict(&ran(Status::Completed, Some(0), "1\n")), None);
    }

    #[test]
    fn file_paths_stay_inside_the_working_directory() {
        for good in ["a.txt", "dir/sub/b.py", "tests/test_x.py", "\u{e9}t\u{e9}.csv", ".hidden"] {
            assert!(InputFile::check_path(good).is_ok(), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/", "a\\b", "a\nb", &"x".repeat(256)] {
            assert!(InputFile::check_path(bad).is_err(), "{bad:?}");
        }
        let file = |content: &str, encoding| InputFile { path: "f".into(), content: content.into(), encoding };
        assert_eq!(file("aGk=", FileEncoding::Base64).bytes(), Ok(b"hi".to_vec()));
        assert_eq!(file("hi", FileEncoding::Utf8).bytes(), Ok(b"hi".to_vec()));
        assert!(file("not base64!", FileEncoding::Base64).bytes().is_err());
    }

    #[test]
    fn status_names_match_serde() {
        for status in [Status::Completed, Status::MemoryExceeded, Status::WorkerLost, Status::InternalError] {
            assert_eq!(serde_json::to_string(&status).expect("serializes"), format!("{:?}", status.as_str()));
        }
    }

    #[test]
    fn return_files_is_a_bool_or_a_list_on_the_wire() {
        for (wire, value) in [
            ("false", ReturnFiles::None),
            ("true", ReturnFiles::All),
            (r#"["a.txt","b/c"]"#, ReturnFiles::Paths(vec!["a.txt".into(), "b/c".into()])),
        ] {
            assert_eq!(serde_json::from_str::<ReturnFiles>(wire).expect("parses"), value);
            assert_eq!(serde_json::to_string(&value).expect("serializes"), wire);
        }
        assert!(serde_json::from_str::<ReturnFiles>("\"yes\"").is_err());
        let spec: JobSpec = serde_json::from_str(r#"{"language":"py","code":"1"}"#).expect("parses");
        assert!(spec.return_files.is_none());
        assert!(!serde_json::to_string(&spec).expect("serializes").contains("return_files"));
    }

    #[test]
    fn results_without_resource_fields_still_parse() {
        let old = r#"{"status":"completed","exit_code":0,"stdout":"","stderr":"","stdout_truncated":false,
            "stderr_truncated":false,"duration_ms":3}"#;
        let outcome: Outcome = serde_json::from_str(old).expect("an older result parses");
        assert_eq!((outcome.cpu_ms, outcome.peak_memory_bytes), (None, None));
        let measured = Outcome { cpu_ms: Some(12), peak_memory_bytes: Some(4096), ..outcome.clone() };
        let json = serde_json::to_string(&measured).expect("serializes");
        assert!(json.contains(r#""cpu_ms":12"#) && json.contains(r#""peak_memory_bytes":4096"#), "{json}");
        assert!(!serde_json::to_string(&outcome).expect("serializes").contains("cpu_ms"));
    }
}
