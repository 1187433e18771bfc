use runbox_common::{Compare, OutputDigest, OutputStream};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::live::Live;
use super::returned::FILES_SECTION_LIMIT;

/// Bytes kept of the end of each stream, past the cap: where the harness's
/// out-of-memory marker and V8's fatal error message are.
const TAIL_BYTES: usize = 16 * 1024;

/// What a child wrote on one stream, kept up to a byte cap.
#[derive(Debug, Default)]
pub struct Captured {
    pub bytes: Vec<u8>,
    /// More was written than was kept.
    pub truncated: bool,
    /// The last bytes written (up to [`TAIL_BYTES`]), whatever the cap.
    pub tail: Vec<u8>,
    /// Bytes written in all.
    pub total: usize,
    /// A digest of every byte written, from when more was written than
    /// kept: a verdict is on the whole output, not on the bytes kept.
    digest: Option<Box<OutputDigest>>,
    /// Where the kept bytes also go as they arrive.
    live: Option<LiveSide>,
}

/// A capture's way to a [`Live`].
#[derive(Debug)]
struct LiveSide {
    live: Live,
    stream: OutputStream,
    /// Bytes kept back at the end until the stream is over: room for a
    /// marker the runner takes off, which no subscriber should see.
    hold: usize,
    /// How many kept bytes were handed on.
    sent: usize,
}

impl Captured {
    /// An empty capture whose kept bytes are also handed to `live` as they
    /// arrive, all but the last `hold`, which wait for [`Captured::end_live`].
    pub fn live(live: &Live, stream: OutputStream, hold: usize) -> Captured {
        Captured { live: Some(LiveSide { live: live.clone(), stream, hold, sent: 0 }), ..Captured::default() }
    }

    /// Hands on the bytes held back, once a marker is off or known absent.
    pub fn end_live(&mut self) {
        self.send_live(0);
    }

    fn send_live(&mut self, hold: usize) {
        let Some(side) = &mut self.live else { return };
        let upto = self.bytes.len().saturating_sub(hold);
        if upto > side.sent {
            side.live.push(side.stream, &self.bytes[side.sent..upto]);
            side.sent = upto;
        }
    }

    /// The text the user sees: UTF-8, with invalid bytes replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Whether everything written matches `expected` under `compare`, past
    /// the cap too. On raw bytes: output that is not UTF-8 matches nothing.
    /// (A marker taken off with [`Captured::strip_trailing`] still counts
    /// once the stream is past the cap; stdout is never stripped.)
    pub fn matches(&self, compare: Compare, expected: &str) -> bool {
        match &self.digest {
            Some(digest) => digest.matches(compare, expected),
            None => compare.matches_bytes(&self.bytes, expected),
        }
    }

    /// If the stream ended with `marker`, removes it from what the user sees
    /// and returns true.
    pub fn strip_trailing(&mut self, marker: &[u8]) -> bool {
        if !self.tail.ends_with(marker) {
            return false;
        }
        let end = self.total - marker.len();
        self.bytes.truncate(end);
        self.truncated = end > self.bytes.len();
        true
    }

    /// Counts `bytes` as written next, keeping what the cap allows.
    fn push(&mut self, bytes: &[u8], cap: usize) {
        let keep = bytes.len().min(cap.saturating_sub(self.bytes.len()));
        if keep < bytes.len() && self.digest.is_none() {
            // Up to here every byte was kept: the digest starts from them.
            self.digest = Some(Box::new(OutputDigest::of(&self.bytes)));
        }
        if let Some(digest) = &mut self.digest {
            digest.feed(bytes);
        }
        self.bytes.extend_from_slice(&bytes[..keep]);
        if let Some(hold) = self.live.as_ref().map(|side| side.hold) {
            self.send_live(hold);
        }
        self.truncated |= keep < bytes.len();
        self.total += bytes.len();
        self.tail.extend_from_slice(&bytes[bytes.len().saturating_sub(TAIL_BYTES)..]);
        let excess = self.tail.len().saturating_sub(TAIL_BYTES);
        self.tail.drain(..excess);
    }

    /// Whether the end of the stream contains `needle`, ignoring ASCII case.
    pub fn tail_mentions(&self, needle: &str) -> bool {
        String::from_utf8_lossy(&self.tail).to_ascii_lowercase().contains(&needle.to_ascii_lowercase())
    }
}

/// Reads `stream` to EOF, keeping at most `cap` bytes. Bytes past the cap are
/// read and dropped, never buffered, so the child never blocks on a full pipe
/// and our memory stays bounded whatever it prints; a child that prints
/// without end is ended by its timeout.
pub async fn capture(stream: impl AsyncRead + Unpin, cap: usize) -> Captured {
    capture_into(stream, Captured::default(), cap).await
}

/// [`capture`], continuing `captured`.
pub async fn capture_into(mut stream: impl AsyncRead + Unpin, mut captured: Captured, cap: usize) -> Captured {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        captured.push(&chunk[..n], cap);
    }
    captured
}

/// Reads `stream` up to `marker`, capturing (as [`capture`] does) what came
/// before it, for a stream that several jobs share in turn. Returns the
/// bytes read after the marker, or None if the stream ended without one.
/// Bytes that could be the start of the marker are held back until the
/// next read settles it, so a marker split across reads is still found.
#[cfg(test)]
pub async fn capture_until(
    stream: &mut (impl AsyncRead + Unpin),
    cap: usize,
    marker: &[u8],
) -> (Captured, Option<Vec<u8>>) {
    capture_after(stream, Vec::new(), Captured::default(), cap, marker).await
}

/// [`capture_until`], continuing `captured`, for a stream of which `pending`
/// has been read already.
pub async fn capture_after(
    stream: &mut (impl AsyncRead + Unpin),
    mut pending: Vec<u8>,
    mut captured: Captured,
    cap: usize,
    marker: &[u8],
) -> (Captured, Option<Vec<u8>>) {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some(at) = pending.windows(marker.len()).position(|w| w == marker) {
            captured.push(&pending[..at], cap);
            return (captured, Some(pending.split_off(at + marker.len())));
        }
        let settled = pending.len() - marker_start_at_end(&pending, marker);
        captured.push(&pending[..settled], cap);
        pending.drain(..settled);
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                captured.push(&pending, cap);
                return (captured, None);
            }
            Ok(n) => pending.extend_from_slice(&chunk[..n]),
        }
    }
}

/// How many bytes at the end of `pending` could be the start of `marker`:
/// the most that must wait for the next read to tell.
fn marker_start_at_end(pending: &[u8], marker: &[u8]) -> usize {
    let longest = pending.len().min(marker.len().saturating_sub(1));
    (1..=longest).rev().find(|&n| pending.ends_with(&marker[..n])).unwrap_or(0)
}

/// Reads a single-use child's stdout: the program's output, capped, and,
/// when `marker` is given, the returned-files section after it (see
/// `runtime/harness/protocol.mjs`), read to the end.
pub async fn capture_with_files(
    mut stream: impl AsyncRead + Unpin,
    captured: Captured,
    cap: usize,
    marker: Option<Vec<u8>>,
) -> (Captured, Option<Vec<u8>>) {
    let Some(marker) = marker else { return (capture_into(stream, captured, cap).await, None) };
    let (captured, rest) = capture_after(&mut stream, Vec::new(), captured, cap, &marker).await;
    let Some(rest) = rest else { return (captured, None) };
    let mut section = capture(stream, FILES_SECTION_LIMIT).await;
    let mut bytes = rest;
    bytes.append(&mut section.bytes);
    let whole = !section.truncated && bytes.len() <= FILES_SECTION_LIMIT;
    (captured, Some(if whole { bytes } else { Vec::new() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_up_to_the_cap_and_flags_the_rest() {
        let data = vec![b'x'; 200_000];
        let got = capture(&data[..], 1000).await;
        assert_eq!(got.bytes.len(), 1000);
        assert!(got.truncated);

        let got = capture(&b"hello"[..], 5).await;
        assert_eq!(got.bytes, b"hello");
        assert!(!got.truncated);
    }

    #[tokio::test]
    async fn a_trailing_marker_is_found_and_stripped_past_the_cap() {
        let mut data = vec![b'x'; 100_000];
        data.extend_from_slice(b"MARK");
        let mut got = capture(&data[..], 1000).await;
        assert!(got.strip_trailing(b"MARK"));
        assert_eq!((got.bytes.len(), got.truncated), (1000, true));

        let mut got = capture(&b"helloMARK"[..], 7).await;
        assert!(got.strip_trailing(b"MARK"));
        assert_eq!((got.bytes.as_slice(), got.truncated), (&b"hello"[..], false));

        let mut got = capture(&b"MARK then more"[..], 100).await;
        assert!(!got.strip_trailing(b"MARK"));
        assert_eq!(got.bytes, b"MARK then more");
    }

    #[tokio::test]
    async fn live_output_waits_only_for_what_could_be_a_marker() {
        use tokio::io::AsyncWriteExt;
        let (mut writer, mut reader) = tokio::io::duplex(1024);
        let live = Live::new();
        let into = Captured::live(&live, OutputStream::Stdout, 0);
        let capture = tokio::spawn(async move { capture_after(&mut reader, Vec::new(), into, 100, b"\x06END").await });
        writer.write_all(b"early\n\x06E").await.expect("write");
        let (chunks, _) = live.take().await.expect("a chunk");
        assert_eq!(chunks[0].data, b"early\n", "sent before the job went on");
        writer.write_all(b"x\x06END").await.expect("write");
        let (got, rest) = capture.await.expect("capture");
        assert_eq!((got.text().as_str(), rest), ("early\n\x06Ex", Some(Vec::new())));
        live.close();
        let (chunks, _) = live.take().await.expect("the rest");
        assert_eq!(chunks[0].data, b"\x06Ex");
    }

    #[tokio::test]
    async fn capture_until_stops_at_a_marker_split_across_reads() {
        let (mut writer, mut reader) = tokio::io::duplex(64);
        let sender = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for part in [&b"out"[..], b"put<MA", b"RK>rest", b"ignored"] {
                writer.write_all(part).await.expect("write");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let (got, rest) = capture_until(&mut reader, 100, b"<MARK>").await;
        assert_eq!(got.bytes, b"output");
        assert_eq!(rest.as_deref(), Some(&b"rest"[..]));
        sender.await.expect("sender");

        let (got, rest) = capture_until(&mut &b"no marker <MAR"[..], 4, b"<MARK>").await;
        assert_eq!((got.bytes.as_slice(), got.truncated, got.total, rest), (&b"no m"[..], true, 14, None));
    }

    #[test]
    fn bytes_that_are_not_utf8_match_nothing_though_shown_as_u_fffd() {
        let captured = Captured { bytes: vec![b'a', 0xff], total: 2, ..Captured::default() };
        assert_eq!(captured.text(), "a\u{fffd}");
        assert!(!captured.matches(Compare::Exact, "a\u{fffd}"));
        assert!(!captured.matches(Compare::Trim, "a\u{fffd}"));
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let captured = Captured { bytes: vec![b'a', 0xff, b'b', 0], ..Captured::default() };
        assert_eq!(captured.text(), "a\u{fffd}b\0");
    }
}
