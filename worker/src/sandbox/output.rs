use tokio::io::{AsyncRead, AsyncReadExt};

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
}

impl Captured {
    /// The text the user sees: UTF-8, with invalid bytes replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
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

    /// Whether the end of the stream contains `needle`, ignoring ASCII case.
    pub fn tail_mentions(&self, needle: &str) -> bool {
        String::from_utf8_lossy(&self.tail).to_ascii_lowercase().contains(&needle.to_ascii_lowercase())
    }
}

/// Reads `stream` to EOF, keeping at most `cap` bytes. Bytes past the cap are
/// read and dropped, never buffered, so the child never blocks on a full pipe
/// and our memory stays bounded whatever it prints; a child that prints
/// without end is ended by its timeout.
pub async fn capture(mut stream: impl AsyncRead + Unpin, cap: usize) -> Captured {
    let mut captured = Captured::default();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.saturating_sub(captured.bytes.len());
        let keep = n.min(room);
        captured.bytes.extend_from_slice(&chunk[..keep]);
        captured.truncated |= keep < n;
        captured.total += n;
        captured.tail.extend_from_slice(&chunk[n.saturating_sub(TAIL_BYTES)..n]);
        let excess = captured.tail.len().saturating_sub(TAIL_BYTES);
        captured.tail.drain(..excess);
    }
    captured
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

    #[test]
    fn invalid_utf8_is_replaced() {
        let captured = Captured { bytes: vec![b'a', 0xff, b'b', 0], ..Captured::default() };
        assert_eq!(captured.text(), "a\u{fffd}b\0");
    }
}
