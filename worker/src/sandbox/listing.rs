//! The listing section: how a session's harness hands back a directory
//! of the session's home (`listingSection` in
//! `runtime/harness/protocol.mjs` writes it).
//!
//! The names are the session's code's to make, anything at all, so, as
//! in a returned-files section (`returned.rs`), they never cross as JSON
//! text: one line of JSON holds only numbers the harness made, then each
//! name, raw, in order:
//!
//! ```text
//! {"truncated":false,"entries":[{"name":5,"type":0,"size":3,"mtime":1700000000000}]}\n
//! a.csv
//! ```
//!
//! A section that is not what the harness writes yields `None`.

use runbox_common::{FileEntry, FileType, MAX_LISTING_ENTRIES, rfc3339_at_unix_ms};
use serde::Deserialize;

/// The longest name an entry may have, in bytes.
const MAX_NAME_BYTES: usize = 255;

/// The longest head line: each entry's numbers, generously.
const MAX_HEAD: usize = MAX_LISTING_ENTRIES * 96 + 64;

/// Largest section a harness can honestly write.
pub const LISTING_LIMIT: usize = MAX_HEAD + MAX_LISTING_ENTRIES * MAX_NAME_BYTES;

#[derive(Deserialize)]
struct Head {
    entries: Vec<Entry>,
    truncated: bool,
}

#[derive(Deserialize)]
struct Entry {
    /// Bytes of the entry's name that follow.
    name: usize,
    /// 0 a file, 1 a directory, 2 a link.
    #[serde(rename = "type")]
    kind: u8,
    size: u64,
    /// Unix milliseconds.
    mtime: u64,
}

/// The entries of directory `dir` (relative to the home, empty for the
/// home) that `section` holds, by name, and whether any were left out.
pub fn listing(section: &[u8], dir: &str) -> Option<(Vec<FileEntry>, bool)> {
    let newline = section.iter().take(MAX_HEAD + 1).position(|&b| b == b'\n')?;
    let head: Head = serde_json::from_slice(&section[..newline]).ok()?;
    let mut rest = &section[newline + 1..];
    let announced = head.entries.iter().try_fold(0usize, |sum, e| sum.checked_add(e.name))?;
    if head.entries.len() > MAX_LISTING_ENTRIES || announced != rest.len() {
        return None;
    }
    let mut entries = Vec::with_capacity(head.entries.len());
    for entry in head.entries {
        if entry.name > MAX_NAME_BYTES {
            return None;
        }
        let (name, after) = rest.split_at(entry.name);
        rest = after;
        let name = String::from_utf8_lossy(name).into_owned();
        let file_type = match entry.kind {
            0 => FileType::File,
            1 => FileType::Directory,
            2 => FileType::Link,
            _ => return None,
        };
        let path = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
        entries.push(FileEntry { name, path, file_type, size: entry.size, modified: rfc3339_at_unix_ms(entry.mtime) });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Some((entries, head.truncated))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(head: &str, names: &[u8]) -> Vec<u8> {
        let mut bytes = format!("{head}\n").into_bytes();
        bytes.extend_from_slice(names);
        bytes
    }

    #[test]
    fn reads_entries_with_any_names() {
        let head = r#"{"truncated":false,"entries":[{"name":5,"type":0,"size":3,"mtime":0},{"name":3,"type":1,"size":0,"mtime":0}]}"#;
        let (entries, truncated) = listing(&section(head, b"b.csv\xff\n\""), "d").expect("a listing");
        assert!(!truncated);
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].name.as_str(), entries[0].path.as_str()), ("b.csv", "d/b.csv"));
        assert_eq!(entries[1].name, "\u{fffd}\n\"");
        assert_eq!(entries[1].file_type, FileType::Directory);
    }

    #[test]
    fn refuses_what_the_harness_does_not_write() {
        let head = r#"{"truncated":false,"entries":[{"name":5,"type":0,"size":3,"mtime":0}]}"#;
        assert!(listing(&section(head, b"abc"), "").is_none(), "fewer bytes than announced");
        assert!(listing(&section(head, b"abcdefg"), "").is_none(), "more bytes than announced");
        let odd = r#"{"truncated":false,"entries":[{"name":1,"type":7,"size":3,"mtime":0}]}"#;
        assert!(listing(&section(odd, b"a"), "").is_none(), "an unknown type");
        assert!(listing(b"no newline", "").is_none());
    }
}
