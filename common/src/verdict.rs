//! Judging a program's whole stdout in constant memory.
//!
//! A worker keeps at most `RUNBOX_MAX_OUTPUT_BYTES` of a program's stdout,
//! but its verdict must be on every byte written: output that matches up to
//! the cap and then goes wrong is a wrong answer. The expected output is not
//! at hand where the stream is read, so past the cap the worker keeps an
//! [`OutputDigest`] of the whole stream instead of its bytes: the SHA-256 of
//! the bytes (for `compare: exact`, with their count) and the SHA-256 of an
//! encoding of their trimmed form (for `compare: trim`), both built as the
//! bytes arrive, in whatever chunks. [`OutputDigest::matches`] compares them
//! with the same digests of the expected output. Two outputs that differ
//! are judged alike only if SHA-256 collides.
//!
//! The trimmed form is the one [`Compare::matches`] compares: each line
//! without its trailing whitespace, trailing blank lines dropped, the lines
//! joined by `\n`. Whitespace is held back until what follows settles it: a
//! `\n` drops the whitespace before it (the end of a line) and `\n`s are
//! counted; the next non-whitespace character commits the count and the
//! whitespace since the last `\n`; the end of the stream drops what is still
//! held (trailing blank lines and whitespace). Held whitespace is kept as
//! bytes up to `SHORT_WHITESPACE`, and past that as its own SHA-256 and
//! length, so a line of a million spaces costs no memory. What is committed
//! is valid UTF-8, so the byte 0xFF, which UTF-8 never uses, introduces the
//! tokens for a long run of whitespace or of `\n`s; the encoding stays
//! one-to-one.
//!
//! Comparison is on raw bytes: stdout that is not valid UTF-8 matches no
//! expected output, which is always text (the user sees such bytes as
//! U+FFFD; an expected U+FFFD does not match them).

use sha2::{Digest, Sha256};

use crate::Compare;

/// Most bytes of held-back whitespace kept as they are; a longer run is
/// kept as its SHA-256.
const SHORT_WHITESPACE: usize = 64;

/// Most `\n`s committed as themselves; a longer run is committed as its count.
const SHORT_NEWLINES: usize = 16;

/// Introduces a token in the trimmed form's encoding: never a byte of UTF-8.
const ESCAPE: u8 = 0xFF;

/// Bytes of the trimmed form gathered before they are hashed: most are
/// committed a few at a time, and SHA-256 is much faster fed in bulk.
const STAGED: usize = 4096;

/// A digest of a program's stdout, fed chunk by chunk, that can say whether
/// the whole of it matches an expected output under either [`Compare`].
/// Its size is fixed, however much it is fed.
#[derive(Clone, Default)]
pub struct OutputDigest {
    /// Bytes fed in all.
    len: u64,
    /// Every byte, for [`Compare::Exact`].
    exact: Sha256,
    /// The trimmed form, for [`Compare::Trim`].
    trim: TrimDigest,
}

impl std::fmt::Debug for OutputDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputDigest").field("len", &self.len).field("invalid", &self.trim.invalid).finish()
    }
}

impl OutputDigest {
    pub fn new() -> OutputDigest {
        OutputDigest::default()
    }

    /// The digest of `bytes`, fed whole.
    pub fn of(bytes: &[u8]) -> OutputDigest {
        let mut digest = OutputDigest::new();
        digest.feed(bytes);
        digest
    }

    /// Counts `bytes` as written next.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        // Not UTF-8: nothing that follows can make it match.
        if !self.trim.invalid {
            self.exact.update(bytes);
            self.trim.feed(bytes);
        }
    }

    /// Whether everything fed, taken as the program's stdout, matches
    /// `expected` under `compare`.
    pub fn matches(&self, compare: Compare, expected: &str) -> bool {
        if !self.trim.is_utf8() {
            return false;
        }
        match compare {
            Compare::Exact => {
                self.len == expected.len() as u64 && self.exact.clone().finalize() == Sha256::digest(expected)
            }
            Compare::Trim => {
                let mut theirs = TrimDigest::default();
                theirs.feed(expected.as_bytes());
                self.trim.trim.digest() == theirs.trim.digest()
            }
        }
    }
}

/// The trimmed form of a stream, committed as far as it is settled.
#[derive(Clone, Default)]
struct TrimDigest {
    /// The encoding of the trimmed form committed so far.
    trim: Staged,
    /// A byte that is not UTF-8 came.
    invalid: bool,
    /// The first bytes of a character split between feeds.
    partial: [u8; 4],
    partial_len: usize,
    /// `\n`s since the last non-whitespace character.
    newlines: u64,
    /// Whitespace since the last `\n` or non-whitespace character.
    whitespace: Held,
}

impl TrimDigest {
    fn is_utf8(&self) -> bool {
        !self.invalid && self.partial_len == 0
    }

    fn feed(&mut self, mut bytes: &[u8]) {
        if self.partial_len > 0 {
            let width = utf8_width(self.partial[0]);
            let take = (width - self.partial_len).min(bytes.len());
            self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&bytes[..take]);
            self.partial_len += take;
            bytes = &bytes[take..];
            if self.partial_len < width {
                return;
            }
            self.partial_len = 0;
            let partial = self.partial;
            self.character(&partial[..width]);
        }
        let mut i = 0;
        while i < bytes.len() && !self.invalid {
            let byte = bytes[i];
            if byte == b'\n' {
                // A run of `\n`s and other ASCII whitespace: only the
                // count of `\n`s, and what follows the last, matter.
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii() && is_space(bytes[i]) {
                    i += 1;
                }
                let run = &bytes[start..i];
                let last = run.iter().rposition(|&b| b == b'\n').unwrap_or(0);
                self.newlines += run.iter().filter(|&&b| b == b'\n').count() as u64;
                self.whitespace.clear();
                self.whitespace.push(&run[last + 1..]);
            } else if byte.is_ascii() {
                // Most output is ASCII: a run of whitespace, or of anything
                // else, is taken at once.
                let blank = is_space(byte);
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii() && bytes[i] != b'\n' && is_space(bytes[i]) == blank {
                    i += 1;
                }
                if blank {
                    self.whitespace.push(&bytes[start..i]);
                } else {
                    self.commit();
                    self.trim.write(&bytes[start..i]);
                }
            } else {
                let width = utf8_width(byte);
                if width == 0 {
                    self.invalid = true;
                } else if i + width > bytes.len() {
                    let rest = &bytes[i..];
                    self.partial[..rest.len()].copy_from_slice(rest);
                    self.partial_len = rest.len();
                    return;
                } else {
                    self.character(&bytes[i..i + width]);
                }
                i += width;
            }
        }
    }

    /// One character of two to four bytes, if they are UTF-8.
    fn character(&mut self, bytes: &[u8]) {
        match std::str::from_utf8(bytes).ok().and_then(|text| text.chars().next()) {
            None => self.invalid = true,
            Some(c) if c.is_whitespace() => self.whitespace.push(bytes),
            Some(_) => {
                self.commit();
                self.trim.write(bytes);
            }
        }
    }

    /// A character that is not whitespace comes next: what was held back
    /// is part of the trimmed form.
    fn commit(&mut self) {
        if self.newlines == 0 && self.whitespace.len == 0 {
            return;
        }
        match usize::try_from(self.newlines) {
            Ok(0) => {}
            Ok(n) if n <= SHORT_NEWLINES => self.trim.write(&[b'\n'; SHORT_NEWLINES][..n]),
            _ => {
                self.trim.write(&[ESCAPE, b'n']);
                self.trim.write(&self.newlines.to_le_bytes());
            }
        }
        self.newlines = 0;
        self.whitespace.commit(&mut self.trim);
    }
}

/// Whitespace held back: its bytes while it is short, its SHA-256 after.
#[derive(Clone)]
struct Held {
    len: u64,
    short: [u8; SHORT_WHITESPACE],
    long: Option<Sha256>,
}

impl Default for Held {
    fn default() -> Held {
        Held { len: 0, short: [0; SHORT_WHITESPACE], long: None }
    }
}

impl Held {
    fn push(&mut self, bytes: &[u8]) {
        let held = usize::try_from(self.len).unwrap_or(usize::MAX);
        match &mut self.long {
            Some(long) => long.update(bytes),
            None if held.saturating_add(bytes.len()) <= SHORT_WHITESPACE => {
                self.short[held..held + bytes.len()].copy_from_slice(bytes);
            }
            None => {
                let mut long = Sha256::new();
                long.update(&self.short[..held]);
                long.update(bytes);
                self.long = Some(long);
            }
        }
        self.len += bytes.len() as u64;
    }

    fn commit(&mut self, into: &mut Staged) {
        match usize::try_from(self.len) {
            Ok(short) if short <= SHORT_WHITESPACE => into.write(&self.short[..short]),
            _ => {
                into.write(&[ESCAPE, b'w']);
                into.write(&self.len.to_le_bytes());
                into.write(&self.long.take().map(Sha256::finalize).unwrap_or_default());
            }
        }
        self.len = 0;
    }

    fn clear(&mut self) {
        if self.long.is_some() {
            self.long = None;
        }
        self.len = 0;
    }
}

/// A SHA-256 fed through a buffer of [`STAGED`] bytes.
#[derive(Clone)]
struct Staged {
    hash: Sha256,
    staged: [u8; STAGED],
    len: usize,
}

impl Default for Staged {
    fn default() -> Staged {
        Staged { hash: Sha256::new(), staged: [0; STAGED], len: 0 }
    }
}

impl Staged {
    fn write(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > STAGED {
            self.hash.update(&self.staged[..self.len]);
            self.len = 0;
        }
        if bytes.len() > STAGED {
            self.hash.update(bytes);
        } else {
            self.staged[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    /// The SHA-256 of everything written.
    fn digest(&self) -> [u8; 32] {
        let mut hash = self.hash.clone();
        hash.update(&self.staged[..self.len]);
        hash.finalize().into()
    }
}

/// Whether an ASCII byte is whitespace as [`str::trim_end`] sees it
/// (which, unlike [`u8::is_ascii_whitespace`], counts U+000B).
fn is_space(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}

/// How many bytes a UTF-8 character starting with `lead` has; 0 if no
/// character starts with it.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: a fixed seed makes every run check the same cases.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }
    }

    /// Whitespace as `trim_end` sees it (U+000B, NEL, NBSP, U+2028,
    /// ideographic space) and characters that only look like it (U+001C,
    /// zero-width space), besides text of one to four bytes.
    const WHITESPACE: &[&str] = &[" ", "\t", "\r", "\u{b}", "\u{c}", "\u{85}", "\u{a0}", "\u{2028}", "\u{3000}"];
    const TEXT: &[&str] = &["a", "b", "7", "\u{1c}", "\u{200b}", "\u{e9}", "\u{65e5}", "\u{1f600}", "\0"];

    fn random_text(rng: &mut Rng) -> String {
        let mut text = String::new();
        for _ in 0..rng.below(40) {
            match rng.below(10) {
                0..=3 => text.push_str(rng.pick(TEXT)),
                4..=6 => text.push_str(rng.pick(WHITESPACE)),
                7 | 8 => text.push('\n'),
                // Runs longer than SHORT_WHITESPACE, and of more `\n`s than SHORT_NEWLINES.
                _ => {
                    let piece = rng.pick(&[" ", "\t ", "\n", "\r\n", "\u{3000}"]);
                    text.push_str(&piece.repeat(1 + rng.below(3 * SHORT_WHITESPACE)));
                }
            }
        }
        text
    }

    /// `text` changed as `trim` ignores (whitespace at line ends, blank
    /// lines at the end, the final newline), or in one place it may not
    /// (a character replaced, removed, or whitespace or a newline added).
    fn variant(rng: &mut Rng, text: &str) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        let at = rng.below(chars.len() + 1);
        match rng.below(8) {
            0 => text.to_owned(),
            1 => {
                let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
                for line in &mut lines {
                    for _ in 0..rng.below(3) {
                        line.push_str(rng.pick(WHITESPACE));
                    }
                }
                let mut changed = lines.join("\n");
                for _ in 0..rng.below(4) {
                    changed.push('\n');
                    changed.push_str(&rng.pick(WHITESPACE).repeat(rng.below(2 * SHORT_WHITESPACE)));
                }
                changed
            }
            2 => text.trim_end_matches('\n').to_owned(),
            3 if at < chars.len() => {
                chars[at] = rng.pick(TEXT).chars().next().unwrap_or('x');
                chars.into_iter().collect()
            }
            4 if at < chars.len() => {
                chars.remove(at);
                chars.into_iter().collect()
            }
            5 => {
                chars.insert(at, rng.pick(WHITESPACE).chars().next().unwrap_or(' '));
                chars.into_iter().collect()
            }
            6 => {
                chars.insert(at, '\n');
                chars.into_iter().collect()
            }
            _ => random_text(rng),
        }
    }

    /// The digest of `bytes` fed in random chunks, splitting characters too.
    fn fed_in_chunks(rng: &mut Rng, bytes: &[u8]) -> OutputDigest {
        let mut digest = OutputDigest::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = if rng.below(4) == 0 { 1 } else { rng.below(rest.len() + 1) };
            digest.feed(&rest[..n]);
            rest = &rest[n..];
        }
        digest
    }

    #[test]
    fn fed_in_any_chunks_it_judges_as_the_whole_string_comparison() {
        let mut rng = Rng(0x5eed_1234_abcd_0042);
        let mut outcomes = [[0usize; 2]; 2];
        for _ in 0..20_000 {
            let expected = random_text(&mut rng);
            let actual = variant(&mut rng, &expected);
            let digest = fed_in_chunks(&mut rng, actual.as_bytes());
            assert_eq!(digest.len, actual.len() as u64);
            for (i, compare) in [Compare::Exact, Compare::Trim].into_iter().enumerate() {
                let want = compare.matches(&actual, &expected);
                assert_eq!(digest.matches(compare, &expected), want, "{compare:?} {actual:?} vs {expected:?}");
                assert_eq!(compare.matches_bytes(actual.as_bytes(), &expected), want);
                outcomes[i][usize::from(want)] += 1;
            }
        }
        // Both answers came up often in both modes, so the check was not vacuous.
        for counts in outcomes {
            assert!(counts.iter().all(|&n| n > 2_000), "{outcomes:?}");
        }
    }

    #[test]
    fn ascii_whitespace_is_what_trim_end_trims() {
        for byte in 0..=0x7F_u8 {
            assert_eq!(is_space(byte), char::from(byte).is_whitespace(), "{byte:#x}");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_match_nothing() {
        let mut rng = Rng(7);
        for bad in [&b"\xff"[..], b"\xc3", b"\xe6\x97", b"\xe6a", b"\xed\xa0\x80", b"\xc0\x80", b"\x80"] {
            for expected in ["", "ok", "ok\n", "ok\u{fffd}", "\u{fffd}"] {
                for at in [0, 2] {
                    let mut actual = b"ok".to_vec();
                    actual.splice(at..at, bad.iter().copied());
                    for compare in [Compare::Exact, Compare::Trim] {
                        let digest = fed_in_chunks(&mut rng, &actual);
                        assert!(!digest.matches(compare, expected), "{actual:?} matched {expected:?}");
                        assert!(!compare.matches_bytes(&actual, expected));
                    }
                }
            }
        }
        // The same bytes, whole, do match.
        assert!(OutputDigest::of("ok\u{e9}\n".as_bytes()).matches(Compare::Exact, "ok\u{e9}\n"));
    }

    #[test]
    fn the_exploits_at_the_one_mib_cap_are_wrong_answers() {
        const CAP: usize = 1024 * 1024;
        // ok, newlines up to the cap, then more.
        let mut flood = b"ok".to_vec();
        flood.resize(CAP, b'\n');
        let kept = flood.clone();
        flood.extend_from_slice(b"WRONG EXTRA OUTPUT");
        assert!(Compare::Trim.matches_bytes(&kept, "ok\n"), "the kept prefix alone looks right");
        assert!(!OutputDigest::of(&flood).matches(Compare::Trim, "ok\n"));
        // One byte more than an expected MiB of A.
        let expected = "A".repeat(CAP);
        let mut more = expected.clone().into_bytes();
        more.push(b'B');
        assert!(Compare::Exact.matches_bytes(&more[..CAP], &expected), "the kept prefix alone looks right");
        assert!(!OutputDigest::of(&more).matches(Compare::Exact, &expected));
        // Past the cap and still matching.
        let mut padded = expected.clone().into_bytes();
        padded.extend_from_slice(&b" \t\r\n".repeat(CAP));
        let digest = OutputDigest::of(&padded);
        assert!(digest.matches(Compare::Trim, &expected));
        assert!(!digest.matches(Compare::Exact, &expected));
    }

    #[test]
    fn long_runs_of_whitespace_are_judged_exactly_in_fixed_memory() {
        // Fixed size, whatever is fed: no field grows.
        assert!(std::mem::size_of::<OutputDigest>() < 2 * STAGED);
        let line = |spaces: usize, tab_at: Option<usize>| {
            let mut line = " ".repeat(spaces).into_bytes();
            if let Some(at) = tab_at {
                line[at] = b'\t';
            }
            line.push(b'x');
            line
        };
        let million = 1_000_000;
        let expected = String::from_utf8(line(million, Some(500_000))).expect("ascii");
        let mut digest = OutputDigest::new();
        for chunk in line(million, Some(500_000)).chunks(4096) {
            digest.feed(chunk);
        }
        assert!(digest.matches(Compare::Trim, &expected));
        assert!(!OutputDigest::of(&line(million, Some(500_001))).matches(Compare::Trim, &expected));
        assert!(!OutputDigest::of(&line(million - 1, Some(500_000))).matches(Compare::Trim, &expected));
        // As many blank lines, between lines and after the last.
        let blank = |n: usize| format!("a{}b{}", "\n".repeat(n), " \n".repeat(n));
        assert!(
            OutputDigest::of(blank(million).as_bytes()).matches(Compare::Trim, &format!("a{}b", "\n".repeat(million)))
        );
        assert!(!OutputDigest::of(blank(million).as_bytes()).matches(Compare::Trim, &blank(million + 1)));
    }
}
