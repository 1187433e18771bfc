//! The returned-files section: how a harness hands back the files a job
//! asked for with `return_files` (`filesSection` in
//! `runtime/harness/protocol.mjs` writes it).
//!
//! A file's name and bytes are the job's to make, anything at all: a name
//! that is not valid Unicode, control characters, a megabyte of bytes. So
//! they never cross as JSON text, which cannot carry every value. The
//! section is one line of JSON that holds only numbers and flags the
//! harness made, then each file's name (UTF-8) and content, raw, in order:
//!
//! ```text
//! {"truncated":false,"files":[{"path":5,"content":3,"size":3,"truncated":false}]}\n
//! out.txtabc
//! ```
//!
//! Nothing a job writes makes this reader fail: a name the runner does not
//! return (not a plain relative path, say) leaves that file out, flagged,
//! and a section that is not what the harness writes yields no files,
//! flagged. The job's status stays the program's.

use base64::Engine;
use runbox_common::{InputFile, MAX_RETURN_FILES, MAX_RETURN_FILES_BYTES, OutputFile};
use serde::Deserialize;

/// The longest name a returned file may have, in bytes (as
/// [`InputFile::check_path`] allows).
const MAX_PATH_BYTES: usize = 255;

/// The longest head line: each file's four numbers and flags, generously.
const MAX_HEAD: usize = MAX_RETURN_FILES * 128 + 64;

/// Largest section a harness can honestly write: its head, each file's
/// name, and the bytes kept.
pub const FILES_SECTION_LIMIT: usize = MAX_HEAD + MAX_RETURN_FILES * MAX_PATH_BYTES + MAX_RETURN_FILES_BYTES;

#[derive(Deserialize)]
struct Head {
    files: Vec<Entry>,
    truncated: bool,
}

#[derive(Deserialize)]
struct Entry {
    /// Bytes of the file's name that follow.
    path: usize,
    /// Bytes of its content that follow.
    content: usize,
    size: u64,
    truncated: bool,
}

/// The files `section` holds, and whether any were cut or left out.
pub fn returned_files(section: &[u8]) -> (Vec<OutputFile>, bool) {
    decode(section).unwrap_or_else(|| (Vec::new(), true))
}

fn decode(section: &[u8]) -> Option<(Vec<OutputFile>, bool)> {
    let newline = section.iter().take(MAX_HEAD + 1).position(|&b| b == b'\n')?;
    let head: Head = serde_json::from_slice(&section[..newline]).ok()?;
    let mut rest = &section[newline + 1..];
    let announced = head.files.iter().try_fold(0usize, |sum, f| sum.checked_add(f.path)?.checked_add(f.content))?;
    if head.files.len() > MAX_RETURN_FILES || announced != rest.len() || announced > FILES_SECTION_LIMIT {
        return None;
    }
    let mut truncated = head.truncated;
    let mut files = Vec::with_capacity(head.files.len());
    for entry in head.files {
        let (path, after) = rest.split_at(entry.path);
        let (content, after) = after.split_at(entry.content);
        rest = after;
        let path = String::from_utf8_lossy(path).into_owned();
        if InputFile::check_path(&path).is_err() {
            truncated = true;
            continue;
        }
        let content = base64::engine::general_purpose::STANDARD.encode(content);
        files.push(OutputFile { path, content, size: entry.size, truncated: entry.truncated });
    }
    Some((files, truncated))
}

/// Writes the section `files` make, as the harness does: for tests.
#[cfg(test)]
pub fn encode(files: &[(&[u8], &[u8])], truncated: bool) -> Vec<u8> {
    let entries: Vec<_> = files
        .iter()
        .map(|(path, content)| {
            serde_json::json!({"path": path.len(), "content": content.len(), "size": content.len(), "truncated": false})
        })
        .collect();
    let mut out = serde_json::json!({"files": entries, "truncated": truncated}).to_string().into_bytes();
    out.push(b'\n');
    for (path, content) in files {
        out.extend_from_slice(path);
        out.extend_from_slice(content);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_bytes_of_any_kind_cross() {
        let section = encode(&[(b"a/out.txt", b"\x00\xff\n{"), ("caf\u{e9}.csv".as_bytes(), b"")], false);
        let (files, truncated) = returned_files(&section);
        assert!(!truncated);
        let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a/out.txt", "caf\u{e9}.csv"]);
        assert_eq!(files[0].content, "AP8Kew==");
    }

    #[test]
    fn a_name_the_runner_does_not_return_leaves_that_file_out() {
        // What a lone surrogate becomes in the harness's UTF-8, and invalid UTF-8.
        let section =
            encode(&[(b"\xef\xbf\xbd", b"1"), (b"\xed\xa0\x80", b"2"), (b"tab\there", b"3"), (b"ok", b"4")], false);
        let (files, truncated) = returned_files(&section);
        let paths: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["\u{fffd}", "\u{fffd}\u{fffd}\u{fffd}", "ok"]);
        assert!(truncated, "the file left out is flagged");
    }

    #[test]
    fn a_section_that_is_not_the_harnesses_yields_nothing_flagged() {
        let mut short = encode(&[(b"a", b"abc")], false);
        short.pop();
        for bad in [&b""[..], b"not json\n", b"{\"files\":[{\"path\":1}],\"truncated\":false}\na", &short] {
            assert_eq!(returned_files(bad), (Vec::new(), true), "{bad:?}");
        }
        let huge = b"{\"files\":[{\"path\":18446744073709551615,\"content\":2,\"size\":0,\"truncated\":false}],\"truncated\":false}\n";
        assert_eq!(returned_files(huge), (Vec::new(), true));
    }
}
