use tokio::io::{AsyncRead, AsyncReadExt};

/// What a child wrote on one stream, kept up to a byte cap.
#[derive(Debug, Default)]
pub struct Captured {
    pub bytes: Vec<u8>,
    /// More was written than was kept.
    pub truncated: bool,
}

impl Captured {
    /// The text the user sees: UTF-8, with invalid bytes replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
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

    #[test]
    fn invalid_utf8_is_replaced() {
        let captured = Captured { bytes: vec![b'a', 0xff, b'b', 0], truncated: false };
        assert_eq!(captured.text(), "a\u{fffd}b\0");
    }
}
