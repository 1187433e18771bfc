//! Fuzz targets for every reader of what a child writes: the reports on its
//! results FIFO ([`read_report`]), its captured streams ([`capture`]), the
//! shared lane's end markers ([`capture_until`], [`capture_after`]) and the
//! returned-files section ([`capture_with_files`], [`returned_files`]).
//!
//! Each target feeds arbitrary bytes, and near-valid ones built to sit on
//! the edges (lengths one off, announced byte counts of 10^15, markers cut
//! anywhere, lines one byte either side of their cap), and the content a
//! job makes (names with lone surrogates as the harness encodes them,
//! invalid UTF-8, control characters, over-long names, reasons cut through
//! a character), through the reader
//! in reads of random sizes that sometimes stall or fail, and checks what
//! comes out against a plain reference model: never a panic, never more
//! kept than the cap, and the same answer whatever the reads.
//!
//! Each target runs for `RUNBOX_FUZZ_SECONDS` (2 s when unset) with the
//! seed `RUNBOX_FUZZ_SEED` (random when unset; printed, with executions per
//! second, so that a failure can be replayed). proptest shrinks a failing
//! input before it is reported.
//!
//! `ClaimWatch` (child.rs), the stderr reader that spots the out-of-memory
//! claim, has no target here: it is private to child.rs. (A target for it,
//! run once against a copy where it was `pub(super)`, found nothing.)

use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestCaseError, TestRunner};
use runbox_common::{Compare, InputFile, MAX_RETURN_FILES, OutputFile};
use tokio::io::{AsyncRead, BufReader, ReadBuf};

use super::channel::{ChannelError, MAX_REASON_BYTES, MAX_REPORT_LINE, Report, parse_line, read_report};
use super::child::FILES_MARKER;
use super::output::{Captured, capture, capture_after, capture_with_files};
use super::returned::{FILES_SECTION_LIMIT, returned_files};
use super::shared::END_MARKER;

/// `TAIL_BYTES` of output.rs (private there): how much of a stream's end
/// [`Captured::tail`] keeps.
const TAIL: usize = 16 * 1024;

/// The buffer `capture_after` reads into: the most one read adds.
const READ_CHUNK: usize = 64 * 1024;

/// Bytes that print as an escaped string, cut in the middle when long: a
/// failing input is printed, and some are megabytes.
#[derive(Clone, PartialEq)]
struct Bytes(Vec<u8>);

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        show(f, &self.0)
    }
}

fn show(f: &mut std::fmt::Formatter<'_>, bytes: &[u8]) -> std::fmt::Result {
    const SHOWN: usize = 256;
    if bytes.len() <= 2 * SHOWN {
        return write!(f, "b\"{}\"", bytes.escape_ascii());
    }
    let (start, end) = (&bytes[..SHOWN], &bytes[bytes.len() - SHOWN..]);
    write!(f, "b\"{}\" ... ({} bytes in all) ... b\"{}\"", start.escape_ascii(), bytes.len(), end.escape_ascii())
}

/// Fails unless `got` is `want`, saying where they part.
fn same(what: &str, got: &[u8], want: &[u8]) -> Result<(), TestCaseError> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    struct Around<'a>(&'a [u8], usize);
    impl std::fmt::Debug for Around<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            show(f, &self.0[self.1.saturating_sub(32).min(self.0.len())..self.0.len().min(self.1 + 32)])
        }
    }
    Err(TestCaseError::fail(format!(
        "{what}: {} bytes, expected {}; they part at {at}: {:?}, expected {:?}",
        got.len(),
        want.len(),
        Around(got, at),
        Around(want, at)
    )))
}

/// Runs `test` on inputs from `strategy` for the time budget, and reports
/// how many it ran. A failure is shrunk and fails the test with its seed.
fn fuzz<S>(name: &str, strategy: S, test: impl Fn(&tokio::runtime::Runtime, S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: std::fmt::Debug,
{
    let budget = match std::env::var("RUNBOX_FUZZ_SECONDS") {
        Ok(s) => Duration::from_secs_f64(s.parse().expect("RUNBOX_FUZZ_SECONDS: a number of seconds")),
        Err(_) => Duration::from_secs(2),
    };
    let seed = match std::env::var("RUNBOX_FUZZ_SEED") {
        Ok(s) => s.parse().expect("RUNBOX_FUZZ_SEED: a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let execs = Cell::new(0u64);
    let start = Instant::now();
    // A runner runs its cases once: each batch has its own, seeded in turn,
    // so that the seed a failure names replays it first.
    for batch_seed in (0u64..).map(|n| seed.wrapping_add(n)) {
        if start.elapsed() >= budget {
            break;
        }
        let config = Config {
            cases: 16,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(batch_seed),
            // ChaCha, unoptimised as tests build it, took much of the time.
            rng_algorithm: RngAlgorithm::XorShift,
            max_shrink_time: 60_000,
            ..Config::default()
        };
        let result = TestRunner::new(config).run(&strategy, |value| {
            execs.set(execs.get() + 1);
            test(&runtime, value)
        });
        if let Err(e) = result {
            panic!("fuzz {name}: {e}\nreplay with RUNBOX_FUZZ_SEED={batch_seed}");
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "fuzz {name}: {} executions in {secs:.1} s, {:.0}/s (RUNBOX_FUZZ_SEED={seed})",
        execs.get(),
        execs.get() as f64 / secs
    );
}

/// How a reader hands out its bytes: the sizes of successive reads
/// (cycled), which reads return Pending first (cycled), and where an
/// error takes the place of the rest of the stream.
#[derive(Debug, Clone)]
struct Reads {
    sizes: Vec<usize>,
    stalls: Vec<bool>,
    fail_at: Option<Index>,
}

fn reads() -> impl Strategy<Value = Reads> {
    let size = prop_oneof![4 => 1..=16usize, 3 => 1..=4096usize, 1 => 1..=200_000usize];
    let fail_at = prop_oneof![9 => Just(None), 1 => any::<Index>().prop_map(Some)];
    (vec(size, 1..8), vec(any::<bool>(), 1..4), fail_at).prop_map(|(sizes, stalls, fail_at)| Reads {
        sizes,
        stalls,
        fail_at,
    })
}

impl Reads {
    /// Where the stream of `len` bytes fails, if it does: every byte before
    /// it is delivered, then every read fails.
    fn fail_point(&self, len: usize) -> Option<usize> {
        self.fail_at.map(|at| at.index(len + 1))
    }

    fn over<'a>(&'a self, data: &'a [u8]) -> Chunked<'a> {
        let fail = self.fail_point(data.len());
        Chunked {
            data,
            pos: 0,
            end: fail.unwrap_or(data.len()),
            fails: fail.is_some(),
            reads: self,
            n: 0,
            stalled: false,
        }
    }
}

/// A stream that delivers `data` as [`Reads`] says.
struct Chunked<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
    fails: bool,
    reads: &'a Reads,
    n: usize,
    stalled: bool,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.stalled && this.reads.stalls[this.n % this.reads.stalls.len()] {
            this.stalled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.stalled = false;
        if this.pos == this.end && this.fails {
            return Poll::Ready(Err(std::io::Error::other("injected read error")));
        }
        // At most a few thousand reads of a long stream: tiny reads matter
        // where markers and lines are split, not in bulk.
        let size = this.reads.sizes[this.n % this.reads.sizes.len()].max(this.data.len() / 4096);
        this.n += 1;
        let n = size.min(buf.remaining()).min(this.end - this.pos);
        buf.put_slice(&this.data[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// `bytes` with some bytes replaced, then cut short, as a harness that
/// went wrong might write them.
#[derive(Debug, Clone)]
struct Mutation {
    flips: Vec<(Index, u8)>,
    cut: Option<Index>,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let flips = prop_oneof![4 => Just(Vec::new()), 1 => vec((any::<Index>(), any::<u8>()), 1..4)];
    let cut = prop_oneof![4 => Just(None), 1 => any::<Index>().prop_map(Some)];
    (flips, cut).prop_map(|(flips, cut)| Mutation { flips, cut })
}

impl Mutation {
    fn apply(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        if !bytes.is_empty() {
            for (at, byte) in &self.flips {
                let at = at.index(bytes.len());
                bytes[at] = *byte;
            }
        }
        if let Some(cut) = self.cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        bytes
    }

    fn is_none(&self) -> bool {
        self.flips.is_empty() && self.cut.is_none()
    }
}

/// Pieces joined into a stream, each repeated: runs of one token are how
/// inputs get long (past the 64 KiB reads, the 16 KiB tail, a cap).
fn joined(piece: impl Strategy<Value = Vec<u8>>, pieces: usize) -> impl Strategy<Value = Bytes> {
    let repeat = prop_oneof![60 => 1..=3usize, 1 => 1..=30_000usize];
    vec((piece, repeat), 0..pieces).prop_map(|pieces| {
        let mut out = Vec::new();
        for (piece, n) in pieces {
            let n = if piece.len() > 16 { n.min(4) } else { n };
            for _ in 0..n {
                out.extend_from_slice(&piece);
            }
        }
        Bytes(out)
    })
}

/// A cap for a stream of `len` bytes: anywhere in it, or none.
fn cap_for(cap: &Cap, len: usize) -> usize {
    match cap {
        Cap::In(at) => at.index(len + 2),
        Cap::Zero => 0,
        Cap::Unbounded => usize::MAX,
    }
}

#[derive(Debug, Clone)]
enum Cap {
    In(Index),
    Zero,
    Unbounded,
}

fn cap() -> impl Strategy<Value = Cap> {
    prop_oneof![6 => any::<Index>().prop_map(Cap::In), 1 => Just(Cap::Zero), 1 => Just(Cap::Unbounded)]
}

/// A marker of the harness's own shape, with its nonce, or a short one over
/// a small alphabet, which a stream of the same alphabet contains in part
/// and overlapping with itself everywhere.
fn marker(prefix: &'static str) -> impl Strategy<Value = Bytes> {
    let nonce = vec(select(&b"0123456789abcdef"[..]), 32);
    let real = nonce.prop_map(move |nonce| {
        let mut marker = prefix.as_bytes().to_vec();
        marker.extend_from_slice(&nonce);
        marker.push(b'\n');
        marker
    });
    prop_oneof![1 => real, 2 => vec(select(&b"ab\n"[..]), 1..6)].prop_map(Bytes)
}

/// Pieces of a stream around `marker`: parts of it (its starts and ends,
/// to split and interleave), the whole of it, bytes of its alphabet, and
/// anything else.
fn around_marker(marker: Bytes) -> impl Strategy<Value = Vec<u8>> {
    let (start, end, whole) = (marker.clone(), marker.clone(), marker.0);
    prop_oneof![
        3 => any::<Index>().prop_map(move |at| start[..at.index(start.len())].to_vec()),
        2 => any::<Index>().prop_map(move |at| end[at.index(end.len())..].to_vec()),
        1 => Just(whole),
        3 => vec(select(&b"ab\n\x06r"[..]), 1..8),
        2 => vec(any::<u8>(), 0..32),
    ]
}

/// Checks that `got` is what [`capture`] keeps of `whole` for a cap of
/// `cap`, and that it is judged against each of `expected` as all of
/// `whole` would be.
fn check_captured(got: &Captured, whole: &[u8], cap: usize, expected: &[String]) -> Result<(), TestCaseError> {
    let kept = whole.len().min(cap);
    prop_assert!(got.bytes.len() <= cap, "kept {} bytes past a cap of {cap}", got.bytes.len());
    same("kept", &got.bytes, &whole[..kept])?;
    prop_assert_eq!(got.truncated, whole.len() > cap);
    prop_assert_eq!(got.total, whole.len());
    same("tail", &got.tail, &whole[whole.len() - whole.len().min(TAIL)..])?;
    for expected in expected {
        for compare in [Compare::Exact, Compare::Trim] {
            prop_assert_eq!(
                got.matches(compare, expected),
                compare.matches_bytes(whole, expected),
                "{:?} against {:?}",
                compare,
                expected
            );
        }
    }
    Ok(())
}

/// Expected outputs that `whole` matches or nearly matches: its text, its
/// trimmed form with and without trailing blank lines, and one character
/// changed.
fn expectations(whole: &[u8], change: Index) -> Vec<String> {
    let text = String::from_utf8_lossy(whole).into_owned();
    let trimmed = text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n");
    let mut changed: Vec<char> = trimmed.chars().collect();
    if !changed.is_empty() {
        let at = change.index(changed.len());
        changed[at] = if changed[at] == 'x' { 'y' } else { 'x' };
    }
    vec![text, trimmed.clone() + "\n \n\t", trimmed, changed.into_iter().collect()]
}

/// Text that sits on the edges of [`Compare::Trim`]: every kind of line end
/// and whitespace, characters of several bytes, bytes that are not UTF-8.
fn text_piece() -> impl Strategy<Value = Vec<u8>> {
    const TOKENS: &[&[u8]] = &[
        b"a",
        b"ok",
        b" ",
        b"\t",
        b"\n",
        b"\r\n",
        b"\r",
        b"\x0b",
        b"\x0c",
        "\u{85}".as_bytes(),
        "\u{a0}".as_bytes(),
        "\u{2028}".as_bytes(),
        "\u{3000}".as_bytes(),
        "é".as_bytes(),
        "😀".as_bytes(),
        b"\xff",
        b"\xe3\x80",
    ];
    prop_oneof![4 => select(TOKENS).prop_map(<[u8]>::to_vec), 1 => vec(any::<u8>(), 0..16)]
}

#[derive(Debug, Clone)]
struct CaptureCase {
    input: Bytes,
    cap: Cap,
    reads: Reads,
    /// Which character of an expected output is changed.
    change: Index,
    strip: Strip,
}

/// What is taken off the end of a captured stream.
#[derive(Debug, Clone)]
enum Strip {
    /// These bytes, which the stream may or may not end with.
    Marker(Bytes),
    /// The stream's last bytes, up to one more than the tail keeps.
    Suffix(Index),
}

fn capture_case() -> impl Strategy<Value = CaptureCase> {
    let strip = prop_oneof![
        vec(any::<u8>(), 0..4).prop_map(|b| Strip::Marker(Bytes(b))),
        any::<Index>().prop_map(Strip::Suffix)
    ];
    (joined(text_piece(), 24), cap(), reads(), any::<Index>(), strip)
        .prop_map(|(input, cap, reads, change, strip)| CaptureCase { input, cap, reads, change, strip })
}

#[test]
fn capture_keeps_the_capped_prefix_and_judges_all_of_it() {
    fuzz("capture", capture_case(), |runtime, case| {
        let CaptureCase { input, cap, reads, change, strip } = case;
        let cap = cap_for(&cap, input.len());
        let mut got = runtime.block_on(capture(reads.over(&input), cap));
        let whole = &input[..reads.fail_point(input.len()).unwrap_or(input.len())];
        check_captured(&got, whole, cap, &expectations(whole, change))?;

        // Taking off a trailing marker: one the stream ends with, or not.
        let marker = match &strip {
            Strip::Marker(marker) => &marker[..],
            Strip::Suffix(len) => &whole[whole.len() - len.index(whole.len().min(TAIL + 1) + 1)..],
        };
        let found = whole.ends_with(marker) && marker.len() <= TAIL;
        prop_assert_eq!(got.strip_trailing(marker), found);
        if found {
            let shown = &whole[..whole.len() - marker.len()];
            same("kept once stripped", &got.bytes, &shown[..shown.len().min(cap)])?;
            prop_assert_eq!(got.truncated, shown.len() > cap);
        }
        Ok(())
    });
}

#[derive(Debug, Clone)]
struct SharedCase {
    marker: Bytes,
    stream: Bytes,
    /// How much of the stream was read before the first job's capture.
    pending: Index,
    cap: Cap,
    reads: Reads,
    /// Which character of an expected output is changed.
    change: Index,
}

fn shared_case() -> impl Strategy<Value = SharedCase> {
    marker(END_MARKER).prop_flat_map(|marker| {
        (joined(around_marker(marker.clone()), 24), any::<Index>(), cap(), reads(), any::<Index>()).prop_map(
            move |(stream, pending, cap, reads, change)| SharedCase {
                marker: marker.clone(),
                stream,
                pending,
                cap,
                reads,
                change,
            },
        )
    })
}

#[test]
fn capture_until_splits_a_shared_stream_at_each_marker() {
    fuzz("capture_until", shared_case(), |runtime, case| {
        let SharedCase { marker, stream, pending, cap, reads, change } = case;
        let cap = cap_for(&cap, stream.len());
        let pending_len = pending.index(stream.len() + 1);
        let (read_before, rest) = stream.split_at(pending_len);
        let mut reader = reads.over(rest);
        // What the stream holds: what was read before, then what can be read.
        let whole = &stream[..pending_len + reads.fail_point(rest.len()).unwrap_or(rest.len())];
        let mut pending = read_before.to_vec();
        let mut at = 0;
        // Job after job, as the shared lane reads them (the first few
        // dozen: a marker of one letter can be in a stream thousands of
        // times). Verdicts are checked on the first (the capture target
        // checks them at length).
        for job in 0..64 {
            let pending_in = pending.len();
            let (got, after) = runtime.block_on(capture_after(&mut reader, pending, Captured::default(), cap, &marker));
            let found = whole[at..].windows(marker.len()).position(|w| w == &marker[..]);
            let output = &whole[at..at + found.unwrap_or(whole.len() - at)];
            let expected = if job == 0 { expectations(output, change) } else { Vec::new() };
            check_captured(&got, output, cap, &expected)?;
            match (after, found) {
                (Some(after), Some(found)) => {
                    at += found + marker.len();
                    // What was read past the marker, and nothing else.
                    prop_assert_eq!(pending_len + reader.pos, at + after.len());
                    same("read past the marker", &after, &whole[at..at + after.len()])?;
                    prop_assert!(after.len() <= pending_in.max(marker.len() - 1 + READ_CHUNK));
                    pending = after;
                }
                (None, None) => {
                    prop_assert_eq!(reader.pos, reader.end);
                    return Ok(());
                }
                (after, found) => {
                    let after = after.map(Bytes);
                    return Err(TestCaseError::fail(format!("rest {after:?}, but the marker is at {found:?}")));
                }
            }
        }
        Ok(())
    });
}

/// A path that [`InputFile::check_path`] accepts, or one it refuses.
fn path() -> impl Strategy<Value = String> {
    let name = vec(select(&b"abcxyz09._-"[..]), 1..8).prop_map(|b| String::from_utf8_lossy(&b).into_owned());
    let good = vec(name, 1..4).prop_map(|parts| parts.join("/"));
    let bad = select(&["", "/etc/passwd", "a/../b", "..", ".", "a//b", "a/", "a\\b", "a\u{7}b", "a\nb"][..])
        .prop_map(str::to_owned);
    prop_oneof![8 => good, 1 => bad, 1 => Just("a".repeat(256))]
}

/// A returned file's name as a job can make it, in the bytes the harness
/// sends: a plain path, or a name with a lone surrogate (which the
/// harness's UTF-8 encoder turns into U+FFFD), bytes that are not UTF-8,
/// control characters, or one past the longest name.
fn job_name() -> impl Strategy<Value = Vec<u8>> {
    const ODD: &[&[u8]] = &[b"\xef\xbf\xbd", b"\xed\xa0\x80", b"\xff\xfe", b"a\x01b", b"\x1b[31m", b"\t", b"a/\xc3"];
    prop_oneof![
        6 => path().prop_map(String::into_bytes),
        2 => select(ODD).prop_map(<[u8]>::to_vec),
        1 => vec(any::<u8>(), 1..12),
        1 => Just(vec![b'a'; 256]),
    ]
}

/// One returned file as the harness sends it: its name and the bytes kept.
fn job_file() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (job_name(), vec(any::<u8>(), 0..64))
}

/// What [`returned_files`] makes of `files`, written whole by the harness:
/// each file whose name reads as a path runbox returns, and the flag, set
/// as well when one was left out.
fn expected_files(files: &[(Vec<u8>, Vec<u8>)], truncated: bool) -> (Vec<OutputFile>, bool) {
    use base64::Engine;
    let mut kept = Vec::new();
    let mut left_out = false;
    for (name, content) in files {
        let path = String::from_utf8_lossy(name).into_owned();
        if InputFile::check_path(&path).is_ok() {
            let size = content.len() as u64;
            let content = base64::engine::general_purpose::STANDARD.encode(content);
            kept.push(OutputFile { path, content, size, truncated: false });
        } else {
            left_out = true;
        }
    }
    (kept, truncated || left_out)
}

/// `files` with each name once, as a file system has them.
fn unique(files: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut seen = std::collections::HashSet::new();
    files.into_iter().filter(|(name, _)| seen.insert(name.clone())).collect()
}

fn encode_section(files: &[(Vec<u8>, Vec<u8>)], truncated: bool) -> Vec<u8> {
    let pairs: Vec<(&[u8], &[u8])> = files.iter().map(|(n, c)| (n.as_slice(), c.as_slice())).collect();
    super::returned::encode(&pairs, truncated)
}

/// A returned-files section, and what [`returned_files`] should make of it
/// when it arrives whole.
fn section() -> impl Strategy<Value = (Vec<u8>, Option<(Vec<OutputFile>, bool)>)> {
    let files = prop_oneof![8 => vec(job_file(), 0..6), 1 => vec(job_file(), MAX_RETURN_FILES + 1)].prop_map(unique);
    let written = (files, any::<bool>()).prop_map(|(files, truncated)| {
        let bytes = encode_section(&files, truncated);
        let expected =
            if files.len() <= MAX_RETURN_FILES { expected_files(&files, truncated) } else { (Vec::new(), true) };
        (bytes, Some(expected))
    });
    // One byte either side of the most a section may be: one file's content fills it.
    let edge = (-1i64..=1).prop_map(|d| {
        let target = (FILES_SECTION_LIMIT as i64 + d) as usize;
        // The head names the content's length: sized once, then by what is left over.
        let mut fill = target - encode_section(&[(b"a".to_vec(), Vec::new())], false).len();
        fill -= encode_section(&[(b"a".to_vec(), vec![b'x'; fill])], false).len() - target;
        let files = [(b"a".to_vec(), vec![b'x'; fill])];
        let bytes = encode_section(&files, false);
        assert_eq!(bytes.len(), target);
        let expected = if bytes.len() <= FILES_SECTION_LIMIT { Some(expected_files(&files, false)) } else { None };
        (bytes, expected)
    });
    prop_oneof![
        12 => written,
        3 => (vec(job_file(), 0..4), mutation()).prop_map(|(files, mutation)| {
            (mutation.apply(encode_section(&unique(files), false)), None)
        }),
        3 => vec(any::<u8>(), 0..64).prop_map(|b| (b, None)),
        1 => edge,
    ]
}

#[derive(Debug, Clone)]
struct FilesCase {
    marker: Bytes,
    /// Whether the runner asked for files (and so looks for the marker).
    asked: bool,
    output: Bytes,
    /// Whether the marker and a section follow the output.
    written: bool,
    section: Bytes,
    expected: Option<(Vec<OutputFile>, bool)>,
    cap: Cap,
    reads: Reads,
}

fn files_case() -> impl Strategy<Value = FilesCase> {
    marker(FILES_MARKER).prop_flat_map(|marker| {
        (any::<bool>(), joined(around_marker(marker.clone()), 16), any::<bool>(), section(), cap(), reads()).prop_map(
            move |(asked, output, written, (section, expected), cap, reads)| FilesCase {
                marker: marker.clone(),
                asked,
                output,
                written,
                section: Bytes(section),
                expected,
                cap,
                reads,
            },
        )
    })
}

#[test]
fn capture_with_files_finds_the_section_after_the_marker() {
    fuzz("capture_with_files", files_case(), |runtime, case| {
        let mut stream = case.output.to_vec();
        if case.written {
            stream.extend_from_slice(&case.marker);
            stream.extend_from_slice(&case.section);
        }
        let cap = cap_for(&case.cap, case.output.len());
        let marker = case.asked.then(|| case.marker.to_vec());
        let (got, section) =
            runtime.block_on(capture_with_files(case.reads.over(&stream), Captured::default(), cap, marker));
        let whole = &stream[..case.reads.fail_point(stream.len()).unwrap_or(stream.len())];
        let found =
            if case.asked { whole.windows(case.marker.len()).position(|w| w == &case.marker[..]) } else { None };
        let Some(at) = found else {
            check_captured(&got, whole, cap, &[])?;
            prop_assert!(section.is_none(), "a section without a marker: {:?}", section.map(Bytes));
            return Ok(());
        };
        check_captured(&got, &whole[..at], cap, &[])?;
        let after = &whole[at + case.marker.len()..];
        let section = section.ok_or_else(|| TestCaseError::fail("no section after the marker"))?;
        prop_assert!(section.len() <= FILES_SECTION_LIMIT);
        same("section", &section, if after.len() <= FILES_SECTION_LIMIT { after } else { &[][..] })?;

        let (files, truncated) = returned_files(&section);
        prop_assert!(
            (files.is_empty() && truncated)
                || files.len() <= MAX_RETURN_FILES && files.iter().all(|f| InputFile::check_path(&f.path).is_ok()),
            "{files:?}"
        );
        // The section as the harness wrote it, whole: read as it was meant.
        if let Some(expected) = &case.expected
            && whole.len() == stream.len()
            && at == case.output.len()
            && after.len() <= FILES_SECTION_LIMIT
        {
            prop_assert_eq!(&(files, truncated), expected);
        }
        Ok(())
    });
}

/// What [`read_report`] returned, or how it failed.
#[derive(Debug, PartialEq)]
enum Read {
    Report(Report, Bytes),
    Closed,
    TooLong,
    TooManyBytes(u64),
    Malformed,
    Io,
}

impl From<ChannelError> for Read {
    fn from(e: ChannelError) -> Read {
        match e {
            ChannelError::Closed => Read::Closed,
            ChannelError::TooLong => Read::TooLong,
            ChannelError::TooManyBytes(n, _) => Read::TooManyBytes(n),
            ChannelError::Malformed(_) => Read::Malformed,
            ChannelError::Io(_) => Read::Io,
        }
    }
}

/// The reports in `input`, read one after another up to the first failure:
/// a line of at most [`MAX_REPORT_LINE`] bytes, then the raw bytes it
/// announces, if its kind's cap allows them (`max_bytes` for a
/// checkpoint). `fails`: an error, not EOF, follows the input.
fn reference_reports(input: &[u8], fails: bool, max_bytes: usize) -> Vec<Read> {
    let short = if fails { Read::Io } else { Read::Closed };
    let mut reads = Vec::new();
    let mut at = 0;
    loop {
        let window = &input[at..input.len().min(at + MAX_REPORT_LINE + 1)];
        let Some(newline) = window.iter().position(|&b| b == b'\n') else {
            reads.push(if window.len() > MAX_REPORT_LINE { Read::TooLong } else { short });
            return reads;
        };
        let line = &window[..=newline];
        at += line.len();
        let Ok((report, announced)) = parse_line(line) else {
            reads.push(Read::Malformed);
            return reads;
        };
        if announced > report.max_bytes(max_bytes) as u64 {
            reads.push(Read::TooManyBytes(announced));
            return reads;
        }
        if announced > (input.len() - at) as u64 {
            reads.push(short);
            return reads;
        }
        let bytes = input[at..at + announced as usize].to_vec();
        at += bytes.len();
        let (report, bytes) = report.with_bytes(bytes);
        reads.push(Read::Report(report, Bytes(bytes)));
    }
}

/// One report as a harness writes it, or one a harness gone wrong might:
/// checkpoints whose bytes are one off what they announce or announce far
/// too many, fields of the wrong type, lines at their cap.
fn report_piece() -> impl Strategy<Value = Vec<u8>> {
    // A failure's reason is the job's: any bytes, cut anywhere (through a
    // character, say), up to one past the cap.
    let reason = prop_oneof![
        4 => vec(any::<u8>(), 0..24),
        2 => vec(any::<char>(), 0..12).prop_map(|c| String::from_iter(c).into_bytes()),
        1 => (MAX_REASON_BYTES - 1..=MAX_REASON_BYTES + 1).prop_map(|n| {
            let mut reason = vec![b'a'; n.saturating_sub(2)];
            reason.extend_from_slice("\u{1f600}".as_bytes());
            reason.truncate(n);
            reason
        }),
    ];
    let end = (0u32..300, any::<[Option<bool>; 3]>(), prop::option::of(reason), -1i64..=1).prop_map(
        |(status, flags, reason, off)| {
            let mut end = serde_json::json!({ "kind": "end", "status": status });
            for (name, flag) in ["clean", "interrupted", "memory"].into_iter().zip(flags) {
                if let Some(flag) = flag {
                    end[name] = flag.into();
                }
            }
            let reason = reason.unwrap_or_default();
            if !reason.is_empty() || off != 0 {
                end["failed"] = true.into();
                end["bytes"] = (reason.len() as i64 + off).max(0).into();
            }
            let mut line = serde_json::to_vec(&end).expect("json");
            line.push(b'\n');
            line.extend_from_slice(&reason);
            line
        },
    );
    let announced = prop_oneof![
        8 => 0u64..64,
        1 => Just(1_000_000_000_000_000),
        1 => Just(u64::MAX),
        1 => Just(1 << 30),
        1 => Just(1 << 53),
    ];
    let checkpoint = (announced, -2i64..=2).prop_map(|(announced, off)| {
        let mut bytes = format!("{{\"kind\":\"checkpoint\",\"bytes\":{announced}}}\n").into_bytes();
        let payload = if announced < 64 { (announced as i64 + off).max(0) as usize } else { 8 };
        bytes.extend((0..payload).map(|i| if i % 7 == 3 { b'\n' } else { b'c' }));
        bytes
    });
    let files = (section(), -1i64..=1).prop_map(|((section, _), off)| {
        let announced = (section.len() as i64 + off).max(0);
        let mut bytes = format!("{{\"kind\":\"files\",\"bytes\":{announced}}}\n").into_bytes();
        bytes.extend_from_slice(&section);
        bytes
    });
    const ODD: &[&str] = &[
        "{\"kind\":\"nope\"}\n",
        "{}\n",
        "\n",
        " {\"kind\":\"ready\"} \r\n",
        "{\"kind\":\"ready\",\"kind\":\"ready\"}\n",
        "{\"kind\":\"checkpoint\"}\n",
        "{\"kind\":\"checkpoint\",\"bytes\":-1}\n",
        "{\"kind\":\"checkpoint\",\"bytes\":1.5}\n",
        "{\"kind\":\"checkpoint\",\"bytes\":1e3}\n",
        "{\"kind\":\"checkpoint\",\"bytes\":\"3\"}\n",
        "{\"kind\":\"checkpoint\",\"bytes\":18446744073709551616}\n",
        "{\"kind\":\"end\",\"status\":256}\n",
        "{\"kind\":\"end\",\"status\":-1}\n",
        "{\"kind\":\"end\",\"status\":0,\"memory\":1}\n",
        "{\"kind\":\"end\",\"status\":0,\"error\":\"\\ud800\"}\n",
        "{\"kind\":\"end\",\"status\":1,\"bytes\":1}\nx",
        "{\"kind\":\"files\",\"bytes\":0}\n",
        "{\"kind\":\"ready\",\"bytes\":2}\nab",
        "{\"kind\":\"ready\"}{\"kind\":\"ready\"}\n",
        "{\"kind\":\"ready\"",
    ];
    // A ready report padded so that its newline lands one byte either side
    // of the cap on a line.
    let long = (-1i64..=1).prop_map(|d| {
        let json = br#"{"kind":"ready"}"#;
        let mut line = vec![b' '; (MAX_REPORT_LINE as i64 + d) as usize - json.len()];
        line.extend_from_slice(json);
        line.push(b'\n');
        line
    });
    prop_oneof![
        20 => Just(b"{\"kind\":\"ready\"}\n".to_vec()),
        30 => end,
        40 => checkpoint,
        20 => files,
        15 => select(ODD).prop_map(|s| s.as_bytes().to_vec()),
        20 => vec(any::<u8>(), 0..64),
        1 => long,
    ]
}

#[derive(Debug, Clone)]
struct ReportCase {
    input: Bytes,
    max_bytes: usize,
    /// The capacity of the buffer in front of the FIFO.
    buffer: usize,
    reads: Reads,
}

fn report_case() -> impl Strategy<Value = ReportCase> {
    let input = (vec(report_piece(), 0..10), mutation()).prop_map(|(pieces, mutation)| {
        let input = pieces.concat();
        Bytes(if mutation.is_none() { input } else { mutation.apply(input) })
    });
    let max_bytes = prop_oneof![1 => Just(0), 4 => 0..128usize, 1 => Just(1 << 30), 1 => Just(usize::MAX)];
    let buffer = prop_oneof![1..=16usize, 1..=70_000usize];
    (input, max_bytes, buffer, reads()).prop_map(|(input, max_bytes, buffer, reads)| ReportCase {
        input,
        max_bytes,
        buffer,
        reads,
    })
}

#[test]
fn read_report_reads_reports_as_the_reference_does() {
    fuzz("read_report", report_case(), |runtime, case| {
        let fail = case.reads.fail_point(case.input.len());
        let mut reader = BufReader::with_capacity(case.buffer, case.reads.over(&case.input));
        let mut got = Vec::new();
        loop {
            match runtime.block_on(read_report(&mut reader, case.max_bytes)) {
                Ok((report, bytes)) => {
                    prop_assert!(bytes.len() <= case.max_bytes);
                    // Memory grew only as bytes came, whatever was announced.
                    prop_assert!(bytes.capacity() <= 2 * bytes.len() + 64, "{} for {}", bytes.capacity(), bytes.len());
                    got.push(Read::Report(report, Bytes(bytes)));
                }
                Err(e) => {
                    got.push(e.into());
                    break;
                }
            }
        }
        let input = &case.input[..fail.unwrap_or(case.input.len())];
        prop_assert_eq!(got, reference_reports(input, fail.is_some(), case.max_bytes));
        Ok(())
    });
}

/// Two reads, the first of `first` bytes.
fn split_at(first: usize) -> Reads {
    Reads { sizes: vec![first.max(1), usize::MAX], stalls: vec![false], fail_at: None }
}

#[test]
fn a_marker_split_anywhere_or_after_a_part_of_itself_is_found() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let marker = format!("{END_MARKER}0123456789abcdef0123456789abcdef\n").into_bytes();
    for part in 0..marker.len() {
        // A part of the marker, then the marker: the part is the job's output.
        let stream = [b"out", &marker[..part], &marker, b"next"].concat();
        for first in 0..=stream.len() {
            let reads = split_at(first);
            let (got, rest) = runtime.block_on(capture_after(
                &mut reads.over(&stream),
                Vec::new(),
                Captured::default(),
                100,
                &marker,
            ));
            assert_eq!(got.bytes, [b"out", &marker[..part]].concat(), "part {part}, split at {first}");
            let rest = rest.expect("the marker");
            assert!(b"next".starts_with(&rest), "part {part}, split at {first}: {rest:?}");

            let files = [b"out", &marker[..part], &marker, b"{\"files\":[],\"truncated\":false}\n"].concat();
            let (got, section) = runtime.block_on(capture_with_files(
                reads.over(&files),
                Captured::default(),
                100,
                Some(marker.clone()),
            ));
            assert_eq!(got.bytes, [b"out", &marker[..part]].concat(), "part {part}, split at {first}");
            assert_eq!(returned_files(&section.expect("a section")), (Vec::new(), false));
        }
    }
}

#[test]
fn a_report_split_anywhere_reads_alike() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let stream = b"{\"kind\":\"checkpoint\",\"bytes\":3}\na\nc{\"kind\":\"ready\"}\n";
    for first in 0..=stream.len() {
        for buffer in [1, 7, 64 * 1024] {
            let reads = split_at(first);
            let mut reader = BufReader::with_capacity(buffer, reads.over(stream));
            let (report, bytes) = runtime.block_on(read_report(&mut reader, 3)).expect("a checkpoint");
            assert_eq!((report, bytes), (Report::Checkpoint, b"a\nc".to_vec()), "split at {first}");
            let (report, _) = runtime.block_on(read_report(&mut reader, 3)).expect("ready");
            assert_eq!(report, Report::Ready);
            assert!(matches!(runtime.block_on(read_report(&mut reader, 3)), Err(ChannelError::Closed)));
        }
    }
}
