//! A running job's output on its way out as it is written: the capture
//! readers hand every byte they keep to a [`Live`], and whoever runs the
//! job takes it from there in chunks ([`Live::take`]; the worker sends them
//! to Redis). The capture never waits for whoever takes the chunks: a slow
//! taker only makes the chunks bigger.

use std::sync::{Arc, Mutex};

use runbox_common::{OutputChunk, OutputStream};
use tokio::sync::Notify;

/// Where one job's kept output goes besides its capture; `Live::default()`
/// goes nowhere.
#[derive(Clone, Default)]
pub struct Live(Option<Arc<Shared>>);

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    wake: Notify,
}

#[derive(Default)]
struct Pending {
    stdout: Side,
    stderr: Side,
    closed: bool,
    /// The last chunks, taken after the close, are gone.
    taken_last: bool,
}

/// One stream's bytes not yet taken, and where they start.
#[derive(Default)]
struct Side {
    bytes: Vec<u8>,
    offset: u64,
}

impl Side {
    /// The pending bytes as a chunk, cut at the last whole UTF-8 character
    /// unless the stream is over, so that each chunk reads as text the way
    /// the whole stream does.
    fn take(&mut self, stream: OutputStream, closed: bool) -> Option<OutputChunk> {
        let end = if closed { self.bytes.len() } else { whole_characters(&self.bytes) };
        if end == 0 {
            return None;
        }
        let rest = self.bytes.split_off(end);
        let data = std::mem::replace(&mut self.bytes, rest);
        let chunk = OutputChunk { stream, offset: self.offset, data };
        self.offset += end as u64;
        Some(chunk)
    }
}

/// How many leading bytes of `bytes` end on a character boundary: all but a
/// UTF-8 sequence the next bytes may complete (invalid bytes count as whole).
fn whole_characters(bytes: &[u8]) -> usize {
    let start = bytes.len().saturating_sub(3);
    for at in (start..bytes.len()).rev() {
        let byte = bytes[at];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let needs = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if bytes.len() - at < needs { at } else { bytes.len() };
    }
    bytes.len()
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Live" } else { "Live(none)" })
    }
}

impl Live {
    /// A sink for one job's output, to be taken with [`Live::take`].
    pub fn new() -> Live {
        Live(Some(Arc::default()))
    }

    /// Counts `bytes` as written next on `stream`.
    pub(super) fn push(&self, stream: OutputStream, bytes: &[u8]) {
        let Some(shared) = &self.0 else { return };
        if bytes.is_empty() {
            return;
        }
        let mut pending = shared.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match stream {
            OutputStream::Stdout => pending.stdout.bytes.extend_from_slice(bytes),
            OutputStream::Stderr => pending.stderr.bytes.extend_from_slice(bytes),
        }
        drop(pending);
        shared.wake.notify_one();
    }

    /// No more output will come: [`Live::take`] hands out the rest, then None.
    pub fn close(&self) {
        if let Some(shared) = &self.0 {
            shared.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).closed = true;
            shared.wake.notify_one();
        }
    }

    /// Waits until [`Live::close`] has been called; at once for a `Live`
    /// that goes nowhere.
    pub async fn closed(&self) {
        let Some(shared) = &self.0 else { return };
        loop {
            let woken = shared.wake.notified();
            if shared.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).closed {
                return;
            }
            woken.await;
        }
    }

    /// Waits for output and takes all of it, as at most one chunk per
    /// stream; None once closed and empty. `last` says whether these are
    /// the final chunks.
    pub async fn take(&self) -> Option<(Vec<OutputChunk>, bool)> {
        let shared = self.0.as_ref()?;
        loop {
            let woken = shared.wake.notified();
            {
                let mut pending = shared.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if pending.taken_last {
                    return None;
                }
                let closed = pending.closed;
                let chunks: Vec<OutputChunk> = [
                    pending.stdout.take(OutputStream::Stdout, closed),
                    pending.stderr.take(OutputStream::Stderr, closed),
                ]
                .into_iter()
                .flatten()
                .collect();
                pending.taken_last = closed;
                if closed || !chunks.is_empty() {
                    return Some((chunks, closed));
                }
            }
            woken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_never_ends_inside_a_character() {
        assert_eq!(whole_characters(b"abc"), 3);
        assert_eq!(whole_characters("é".as_bytes()), 2);
        assert_eq!(whole_characters(&"é".as_bytes()[..1]), 0);
        assert_eq!(whole_characters(&"ab€".as_bytes()[..4]), 2);
        assert_eq!(whole_characters(&"a😀".as_bytes()[..4]), 1);
        assert_eq!(whole_characters("a😀".as_bytes()), 5);
        // Bytes that can never start a character are passed on as they are.
        assert_eq!(whole_characters(&[b'a', 0xFF]), 2);
        assert_eq!(whole_characters(&[0x80, 0x80, 0x80, 0x80]), 4);
    }

    #[tokio::test]
    async fn chunks_carry_offsets_and_the_rest_comes_at_close() {
        let live = Live::new();
        live.push(OutputStream::Stdout, b"hello ");
        live.push(OutputStream::Stderr, b"oops");
        let (chunks, last) = live.take().await.expect("chunks");
        assert!(!last);
        assert_eq!(chunks[0], OutputChunk { stream: OutputStream::Stdout, offset: 0, data: b"hello ".to_vec() });
        assert_eq!(chunks[1], OutputChunk { stream: OutputStream::Stderr, offset: 0, data: b"oops".to_vec() });
        let euro = "€".as_bytes();
        live.push(OutputStream::Stdout, &euro[..2]);
        live.close();
        let (chunks, last) = live.take().await.expect("the rest");
        assert!(last);
        assert_eq!(chunks, vec![OutputChunk { stream: OutputStream::Stdout, offset: 6, data: euro[..2].to_vec() }]);
        assert!(live.take().await.is_none());
    }

    #[tokio::test]
    async fn closed_waits_for_the_close_not_for_output() {
        let live = Live::new();
        let waiting = tokio::spawn({
            let live = live.clone();
            async move { live.closed().await }
        });
        live.push(OutputStream::Stdout, b"x");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "closed() returned on output");
        live.close();
        tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("closed() at the close")
            .expect("the waiting task");
        // Once closed, at once; the rest is still there to take.
        live.closed().await;
        assert_eq!(live.take().await.expect("the rest").0.len(), 1);
    }

    #[tokio::test]
    async fn a_closed_job_without_output_ends_with_one_empty_last_take() {
        let live = Live::new();
        live.close();
        assert_eq!(live.take().await, Some((Vec::new(), true)));
        assert!(live.take().await.is_none());
        assert!(Live::default().take().await.is_none());
    }
}
