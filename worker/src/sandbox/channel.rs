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
//! A child is untrusted, its harness included: [`read_report`] checks
//! every length against its cap before it allocates anything, and a report
//! it cannot parse ends the child, never the worker.

use std::path::{Path, PathBuf};

use runbox_common::OutputFile;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

use super::output::FILES_SECTION_LIMIT;

/// The longest report line accepted: the largest honest one is a files section.
pub const MAX_REPORT_LINE: usize = FILES_SECTION_LIMIT + 4096;

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

/// What a harness reports on the results FIFO.
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
    /// The files a job asked back, before its `end`.
    Files { files: Vec<OutputFile>, truncated: bool },
    /// A session's checkpoint: `bytes` raw bytes follow.
    Checkpoint { bytes: u64 },
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
        /// Why an open or a checkpoint failed.
        #[serde(default)]
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
/// bytes, parsed, and then the raw bytes it announces, which must be at
/// most `max_bytes`; memory grows only as bytes arrive.
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
    let report: Report = serde_json::from_slice(&line).map_err(|e| ChannelError::Malformed(e.to_string()))?;
    let announced = match &report {
        Report::Checkpoint { bytes } => *bytes,
        _ => 0,
    };
    if announced > u64::try_from(max_bytes).unwrap_or(u64::MAX) {
        return Err(ChannelError::TooManyBytes(announced, max_bytes));
    }
    let mut bytes = Vec::new();
    if announced > 0 {
        (&mut *reader).take(announced).read_to_end(&mut bytes).await?;
        if (bytes.len() as u64) < announced {
            return Err(ChannelError::Closed);
        }
    }
    Ok((report, bytes))
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
        let (report, bytes) = read(b"{\"kind\":\"checkpoint\",\"bytes\":3}\nabcrest", 10).await.expect("checkpoint");
        assert_eq!((report, bytes.as_slice()), (Report::Checkpoint { bytes: 3 }, &b"abc"[..]));
        let (report, _) = read(b"{\"kind\":\"end\",\"status\":3,\"memory\":true}\n", 0).await.expect("end");
        assert_eq!(
            report,
            Report::End { status: 3, clean: false, interrupted: false, memory: true, error: None, memory_bytes: None }
        );
    }

    #[tokio::test]
    async fn a_length_past_its_cap_is_refused_before_anything_is_allocated() {
        // The session checkpoint header that once aborted the worker.
        let header = b"{\"kind\":\"checkpoint\",\"bytes\":1000000000000000}\n";
        assert!(matches!(read(header, 1 << 30).await, Err(ChannelError::TooManyBytes(1_000_000_000_000_000, _))));
        let header = b"{\"kind\":\"checkpoint\",\"bytes\":5}\nab";
        assert!(matches!(read(header, 10).await, Err(ChannelError::Closed)));
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
