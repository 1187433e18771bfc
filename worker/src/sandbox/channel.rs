//! The control channel of a child that runs many jobs (the shared lane, a
//! session): two FIFOs in the child's private directory, which its harness
//! opens while it boots and which nothing in the child can open once it
//! has dropped its permissions (see `runtime/harness/protocol.mjs`).
//!
//! - `frames`, runner → harness: `<length>\n<JSON>` and then any raw bytes
//!   the frame announces (a checkpoint to restore).
//! - `results`, harness → runner: [`Report`]s, one line of JSON each,
//!   followed by `bytes` raw bytes when the report says so.
//!
//! The line holds only what the harness makes: its kind, numbers and
//! flags. Whatever a job makes (a returned file's name and bytes, the
//! reason a session's code gave for a failure, a checkpoint) crosses as
//! the raw bytes after it, which can carry any value: JSON text cannot (a
//! lone surrogate, say), and a reader that refused a job's value would
//! turn the job's doing into runbox's failure.
//!
//! A child is untrusted, its harness included: [`read_report`] checks
//! every length against its cap before it allocates anything, and a report
//! it cannot parse ends the child, never the worker.

use std::path::{Path, PathBuf};

use runbox_common::OutputFile;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

use super::returned::{FILES_SECTION_LIMIT, returned_files};

/// The longest report line accepted: a kind, numbers and flags.
pub const MAX_REPORT_LINE: usize = 4096;

/// The most of a failure's reason a harness sends, in bytes
/// (`MAX_REASON_BYTES` in protocol.mjs), cut on bytes.
pub const MAX_REASON_BYTES: usize = 8192;

/// Where a child's FIFOs are, inside its private directory.
#[derive(Debug, Clone)]
pub struct ChannelPaths {
    pub frames: PathBuf,
    pub results: PathBuf,
}

impl ChannelPaths {
    pub fn in_dir(dir: &Path) -> ChannelPaths {
        ChannelPaths { frames: dir.join("frames"), results: dir.join("results") }
    }

    /// Makes both FIFOs, readable and writable by the owner only.
    pub fn make(&self) -> std::io::Result<()> {
        for path in [&self.frames, &self.results] {
            nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR)
                .map_err(std::io::Error::from)?;
        }
        Ok(())
    }
}

/// The runner's ends of a child's channel.
pub struct Channel {
    frames: pipe::Sender,
    results: BufReader<pipe::Receiver>,
}

impl Channel {
    /// Opens the runner's ends, before the child starts: neither open waits.
    /// The frames end is opened for reading too (Linux allows it on a
    /// FIFO), so that it needs no reader yet; the results end sees EOF
    /// once the child, its only writer, is gone.
    pub fn open(paths: &ChannelPaths) -> std::io::Result<Channel> {
        let frames = pipe::OpenOptions::new().read_write(true).open_sender(&paths.frames)?;
        let results = pipe::OpenOptions::new().open_receiver(&paths.results)?;
        Ok(Channel { frames, results: BufReader::with_capacity(64 * 1024, results) })
    }

    /// Sends `frame` (JSON) with its length header, then `bytes` raw.
    pub async fn send(&mut self, frame: &[u8], bytes: &[u8]) -> std::io::Result<()> {
        self.frames.write_all(format!("{}\n", frame.len()).as_bytes()).await?;
        self.frames.write_all(frame).await?;
        self.frames.write_all(bytes).await?;
        self.frames.flush().await
    }

    /// The next report, with its raw bytes if it announces any (at most `max_bytes`).
    pub async fn report(&mut self, max_bytes: usize) -> Result<(Report, Vec<u8>), ChannelError> {
        read_report(&mut self.results, max_bytes).await
    }
}

/// What a harness reports on the results FIFO, with the bytes that
/// followed its line read into it.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Report {
    /// Booted; the first report.
    Ready,
    /// A job's Worker is up and takes it: its time, and the count of its
    /// memory, run from here.
    Started,
    /// The program has ended: the job's CPU time runs to here. Until its
    /// `end` the harness runs no code of the job's.
    Ran,
    /// The files a job asked back, before its `end`: a returned-files
    /// section follows (see `returned.rs`).
    Files {
        #[serde(skip)]
        files: Vec<OutputFile>,
        #[serde(skip)]
        truncated: bool,
    },
    /// A session's checkpoint: its bytes follow, and are returned beside
    /// the report.
    Checkpoint,
    /// A session's file operation's answer: a file's bytes (a get) or a
    /// listing section (a list, see `listing.rs`) follow, and are
    /// returned beside the report.
    File,
    /// A job, an open or a checkpoint has ended; its output on stdout and
    /// stderr has ended before this, at the end markers.
    End {
        /// The program's exit status (0–255).
        status: u8,
        /// The harness's realm is as it was before the job.
        #[serde(default)]
        clean: bool,
        /// A session exec that the harness interrupted at its deadline.
        #[serde(default)]
        interrupted: bool,
        /// The program ended on an allocation failure: a claim that the
        /// runner checks against the process's memory.
        #[serde(default)]
        memory: bool,
        /// An open or a checkpoint failed: its reason follows, as bytes.
        #[serde(default)]
        failed: bool,
        /// Why an open or a checkpoint failed: the bytes that followed,
        /// as text (what is not UTF-8 is replaced).
        #[serde(skip)]
        error: Option<String>,
        /// What the harness measured of the job's own memory, where it can
        /// (see `runtime/harness/python.mjs`); the runner takes the larger
        /// of this and the kernel's count.
        #[serde(default)]
        memory_bytes: Option<u64>,
    },
    /// After a Python job's `end` in a shared child: whether V8 freed the
    /// job's realm with nothing of the job's run since its end (see
    /// `collected` in `runtime/harness/python.mjs`). The child takes no
    /// job before it.
    Retired { clean: bool },
}

impl Report {
    /// The most bytes this kind of report may announce; `checkpoint` is
    /// the cap on a checkpoint's.
    pub(super) fn max_bytes(&self, checkpoint: usize) -> usize {
        match self {
            Report::Files { .. } => FILES_SECTION_LIMIT,
            Report::Checkpoint | Report::File => checkpoint,
            Report::End { failed: true, .. } => MAX_REASON_BYTES,
            _ => 0,
        }
    }

    /// Takes in the bytes that followed the line: whatever of them this
    /// report carries in itself; the rest (a checkpoint) goes back.
    pub(super) fn with_bytes(mut self, bytes: Vec<u8>) -> (Report, Vec<u8>) {
        match &mut self {
            Report::Files { files, truncated } => {
                (*files, *truncated) = returned_files(&bytes);
                (self, Vec::new())
            }
            Report::End { failed: true, error, .. } => {
                *error = Some(String::from_utf8_lossy(&bytes).into_owned());
                (self, Vec::new())
            }
            _ => (self, bytes),
        }
    }
}

/// A report's line: the report, and how many raw bytes follow it.
#[derive(Deserialize)]
struct Line {
    #[serde(flatten)]
    report: Report,
    #[serde(default)]
    bytes: u64,
}

/// Parses a report's line: the report, and how many raw bytes it announces.
pub(super) fn parse_line(line: &[u8]) -> Result<(Report, u64), ChannelError> {
    let Line { report, bytes } = serde_json::from_slice(line).map_err(|e| ChannelError::Malformed(e.to_string()))?;
    Ok((report, bytes))
}

/// Why a report could not be read: each one ends the child.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the child closed its channel")]
    Closed,
    #[error("a report longer than {MAX_REPORT_LINE} bytes")]
    TooLong,
    #[error("a report announcing {0} bytes, past the cap of {1}")]
    TooManyBytes(u64, usize),
    #[error("a malformed report: {0}")]
    Malformed(String),
    #[error("reading the channel: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one report from `reader`: a line of at most [`MAX_REPORT_LINE`]
/// bytes, parsed, and then the raw bytes it announces, which must be
/// within its kind's cap (`max_bytes` for a checkpoint); memory grows only
/// as bytes arrive. Returns a checkpoint's bytes beside it.
pub async fn read_report(
    reader: &mut (impl tokio::io::AsyncBufRead + Unpin),
    max_bytes: usize,
) -> Result<(Report, Vec<u8>), ChannelError> {
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_REPORT_LINE).unwrap_or(u64::MAX) + 1;
    let n = (&mut *reader).take(limit).read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(ChannelError::Closed);
    }
    if line.last() != Some(&b'\n') {
        return Err(if line.len() > MAX_REPORT_LINE { ChannelError::TooLong } else { ChannelError::Closed });
    }
    let (report, announced) = parse_line(&line)?;
    let cap = report.max_bytes(max_bytes);
    if announced > u64::try_from(cap).unwrap_or(u64::MAX) {
        return Err(ChannelError::TooManyBytes(announced, cap));
    }
    let mut bytes = Vec::new();
    if announced > 0 {
        (&mut *reader).take(announced).read_to_end(&mut bytes).await?;
        if (bytes.len() as u64) < announced {
            return Err(ChannelError::Closed);
        }
    }
    Ok(report.with_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(input: &[u8], max: usize) -> Result<(Report, Vec<u8>), ChannelError> {
        read_report(&mut BufReader::new(input), max).await
    }

    #[tokio::test]
    async fn reads_each_kind_of_report() {
        assert_eq!(read(b"{\"kind\":\"ready\"}\n", 0).await.expect("ready").0, Report::Ready);
        let retired = read(b"{\"kind\":\"retired\",\"clean\":true}\n", 0).await.expect("retired").0;
        assert_eq!(retired, Report::Retired { clean: true });
        // A file's bytes, any at all, cross raw, within the cap given.
        let (report, bytes) = read(b"{\"kind\":\"file\",\"bytes\":4}\n\0\xff\n\"", 4).await.expect("a file");
        assert_eq!((report, bytes.as_slice()), (Report::File, &b"\0\xff\n\""[..]));
        assert!(read(b"{\"kind\":\"file\",\"bytes\":5}\nabcde", 4).await.is_err(), "a file past the cap");
        let (report, bytes) = read(b"{\"kind\":\"checkpoint\",\"bytes\":3}\nabcrest", 10).await.expect("checkpoint");
        assert_eq!((report, bytes.as_slice()), (Report::Checkpoint, &b"abc"[..]));
        let (report, _) = read(b"{\"kind\":\"end\",\"status\":3,\"memory\":true}\n", 0).await.expect("end");
        let end = |failed, error| Report::End {
            status: 3,
            clean: false,
            interrupted: false,
            memory: true,
            failed,
            error,
            memory_bytes: None,
        };
        assert_eq!(report, end(false, None));
        // A reason cut through a character, and bytes that are not UTF-8: both cross.
        let reason = b"{\"kind\":\"end\",\"status\":3,\"memory\":true,\"failed\":true,\"bytes\":5}\nab\xf0\x9f\xff";
        let (report, bytes) = read(reason, 0).await.expect("a failure's reason");
        assert_eq!((report, bytes), (end(true, Some("ab\u{fffd}\u{fffd}".to_owned())), Vec::new()));
    }

    #[tokio::test]
    async fn a_files_section_of_job_made_names_is_read_not_refused() {
        let section = super::super::returned::encode(&[(b"\xed\xa0\x80", b"x"), (b"out.txt", b"y")], false);
        let mut input = format!("{{\"kind\":\"files\",\"bytes\":{}}}\n", section.len()).into_bytes();
        input.extend_from_slice(&section);
        let (report, _) = read(&input, 0).await.expect("files");
        let Report::Files { files, truncated } = report else { panic!("{report:?}") };
        assert_eq!((files.len(), truncated), (2, false));
    }

    #[tokio::test]
    async fn a_length_past_its_cap_is_refused_before_anything_is_allocated() {
        // The session checkpoint header that once aborted the worker.
        let header = b"{\"kind\":\"checkpoint\",\"bytes\":1000000000000000}\n";
        assert!(matches!(read(header, 1 << 30).await, Err(ChannelError::TooManyBytes(1_000_000_000_000_000, _))));
        let header = b"{\"kind\":\"checkpoint\",\"bytes\":5}\nab";
        assert!(matches!(read(header, 10).await, Err(ChannelError::Closed)));
        // Only a failure carries a reason, and only so many bytes of it.
        let header = b"{\"kind\":\"end\",\"status\":0,\"bytes\":1}\nx";
        assert!(matches!(read(header, 10).await, Err(ChannelError::TooManyBytes(1, 0))));
        let header = b"{\"kind\":\"end\",\"status\":1,\"failed\":true,\"bytes\":8193}\n";
        assert!(matches!(read(header, 1 << 20).await, Err(ChannelError::TooManyBytes(8193, MAX_REASON_BYTES))));
    }

    #[tokio::test]
    async fn long_or_malformed_lines_are_errors() {
        let long = vec![b'x'; MAX_REPORT_LINE + 10];
        assert!(matches!(read(&long, 0).await, Err(ChannelError::TooLong)));
        assert!(matches!(read(b"{\"kind\":\"end\",\"status\":300}\n", 0).await, Err(ChannelError::Malformed(_))));
        assert!(matches!(read(b"not json\n", 0).await, Err(ChannelError::Malformed(_))));
        assert!(matches!(read(b"", 0).await, Err(ChannelError::Closed)));
    }
}
