//! A JavaScript session's home: a directory on the host, its `files`
//! directory, which its child may read and write (Deno's permissions name
//! it alone) and which goes with the child. Python keeps its files in
//! Pyodide's memory instead, where its harness serves them.
//!
//! The files API's operations are done here, by the worker, between the
//! session's execs. The session's code made what is there, so nothing is
//! followed: every name on a path is checked not to be a link (the code
//! cannot make one, since Deno asks full read and write access for that,
//! but the check does not rely on it), and files are opened with
//! `O_NOFOLLOW`. What is neither a file nor a directory is not shown.
//!
//! The home is capped as a Python session's files are
//! ([`MAX_SESSION_FILES_BYTES`], [`MAX_SESSION_FILES`]): an upload past
//! the cap is refused, and code that writes past it has its exec stopped
//! and the session's process ended (see `SessionChild::exec`), as one past
//! its memory cap. Each file is also capped by `RLIMIT_FSIZE`.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use runbox_common::{
    FileAction, FileEntry, FileRefusal, FileResult, FileType, MAX_LISTING_ENTRIES, MAX_SESSION_FILE_BYTES,
    MAX_SESSION_FILES, MAX_SESSION_FILES_BYTES, rfc3339_at_unix_ms,
};

/// A session's home on the host.
pub struct Home {
    pub root: PathBuf,
    /// The uid the child runs as, which must own what is written for it.
    pub uid: Option<u32>,
}

/// One file of a home, as a checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedFile {
    pub path: String,
    /// Base64.
    pub content: String,
}

/// What is on a path: nothing, a file, a directory, or something else
/// (a link, a socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Nothing,
    File(u64),
    Dir,
    Other,
}

impl Home {
    /// Does one operation of the files API. The paths were checked by the
    /// caller: plain names, neither `.` nor `..`.
    pub fn file(&self, action: &FileAction) -> std::io::Result<FileResult> {
        let refuse = |refusal| Ok(FileResult::Refused { refusal });
        let path = action.path();
        let (full, found) = match self.walk(path, matches!(action, FileAction::Delete { .. }))? {
            Ok(at) => at,
            Err(refusal) => return refuse(refusal),
        };
        match action {
            FileAction::Put { content, .. } => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(content)
                    .map_err(|e| std::io::Error::other(format!("the upload is not base64: {e}")))?;
                self.write(path, &full, found, &bytes)
            }
            FileAction::Get { .. } => match found {
                Found::Nothing => refuse(FileRefusal::NoFile),
                Found::Dir | Found::Other => refuse(FileRefusal::NotAFile),
                Found::File(size) if size > MAX_SESSION_FILE_BYTES as u64 => refuse(FileRefusal::TooLarge),
                Found::File(_) => {
                    let mut bytes = Vec::new();
                    let file = OpenOptions::new().read(true).custom_flags(libc_nofollow()).open(&full)?;
                    file.take(MAX_SESSION_FILE_BYTES as u64 + 1).read_to_end(&mut bytes)?;
                    if bytes.len() > MAX_SESSION_FILE_BYTES {
                        return refuse(FileRefusal::TooLarge);
                    }
                    let size = bytes.len() as u64;
                    Ok(FileResult::Content { content: base64::engine::general_purpose::STANDARD.encode(bytes), size })
                }
            },
            FileAction::List { .. } => match found {
                Found::Nothing => refuse(FileRefusal::NoFile),
                Found::Dir => {
                    let mut entries = Vec::new();
                    let mut truncated = false;
                    for item in fs::read_dir(&full)? {
                        let item = item?;
                        let Some(entry) = entry_of(&item.path(), path, &item.file_name().to_string_lossy())? else {
                            continue;
                        };
                        if entries.len() == MAX_LISTING_ENTRIES {
                            truncated = true;
                            break;
                        }
                        entries.push(entry);
                    }
                    entries.sort_by(|a, b| a.name.cmp(&b.name));
                    Ok(FileResult::Listing { entries, truncated })
                }
                _ => refuse(FileRefusal::NotADirectory),
            },
            FileAction::Stat { .. } => {
                let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                let name = path.rsplit('/').next().unwrap_or(path);
                match entry_of(&full, dir, name)? {
                    Some(entry) if found != Found::Nothing => Ok(FileResult::Entry { entry }),
                    _ => refuse(FileRefusal::NoFile),
                }
            }
            FileAction::Delete { .. } => match found {
                Found::Nothing => refuse(FileRefusal::NoFile),
                _ if path.is_empty() => refuse(FileRefusal::NotAFile),
                Found::Dir => fs::remove_dir_all(&full).map(|()| FileResult::Deleted),
                _ => fs::remove_file(&full).map(|()| FileResult::Deleted),
            },
            FileAction::Mkdir { .. } => match found {
                Found::Dir => refuse(FileRefusal::Exists),
                Found::File(_) | Found::Other => refuse(FileRefusal::NotADirectory),
                Found::Nothing => {
                    self.make_parents(&format!("{path}/"))?;
                    Ok(FileResult::Done)
                }
            },
            FileAction::Move { to, .. } => {
                if found == Found::Nothing {
                    return refuse(FileRefusal::NoFile);
                }
                let (target, there) = match self.walk(to, false)? {
                    Ok(at) => at,
                    Err(refusal) => return refuse(refusal),
                };
                if there == Found::Dir {
                    return refuse(FileRefusal::Exists);
                }
                if found == Found::Dir && format!("{to}/").starts_with(&format!("{path}/")) {
                    return refuse(FileRefusal::NotADirectory);
                }
                self.make_parents(to)?;
                fs::rename(&full, &target).map(|()| FileResult::Done)
            }
        }
    }

    /// Writes `bytes` at `path` (already checked), within the caps.
    pub fn put(&self, path: &str, bytes: &[u8]) -> std::io::Result<FileResult> {
        match self.walk(path, false)? {
            Ok((full, found)) => self.write(path, &full, found, bytes),
            Err(refusal) => Ok(FileResult::Refused { refusal }),
        }
    }

    /// Writes `bytes` at `path`, which leads to `full` where `found` is,
    /// making its directories, unless that would pass the caps.
    fn write(&self, path: &str, full: &Path, found: Found, bytes: &[u8]) -> std::io::Result<FileResult> {
        let refuse = |refusal| Ok(FileResult::Refused { refusal });
        let before = match found {
            Found::Dir | Found::Other => return refuse(FileRefusal::NotAFile),
            Found::File(size) => size,
            Found::Nothing => 0,
        };
        let (total, count) = self.usage()?;
        if total - before + bytes.len() as u64 > MAX_SESSION_FILES_BYTES {
            return refuse(FileRefusal::FilesFull);
        }
        if found == Found::Nothing && count + 1 > MAX_SESSION_FILES {
            return refuse(FileRefusal::TooManyFiles);
        }
        self.make_parents(path)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc_nofollow())
            .open(full)?;
        file.write_all(bytes)?;
        self.give(full)?;
        Ok(FileResult::Written { size: bytes.len() as u64 })
    }

    /// Where `path` leads, and what is there; or why it is refused: a name
    /// on the way is a file, or a link (the last name may be one when
    /// `last_link_ok`, which only a delete asks, removing the link itself).
    fn walk(&self, path: &str, last_link_ok: bool) -> std::io::Result<Result<(PathBuf, Found), FileRefusal>> {
        let names: Vec<&str> = if path.is_empty() { Vec::new() } else { path.split('/').collect() };
        let full = names.iter().fold(self.root.clone(), |at, name| at.join(name));
        let mut at = self.root.clone();
        let mut found = Found::Dir;
        for (i, name) in names.iter().enumerate() {
            match found {
                Found::Dir => {}
                Found::Nothing => break,
                _ => return Ok(Err(FileRefusal::NotADirectory)),
            }
            at.push(name);
            found = match fs::symlink_metadata(&at) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Nothing,
                Err(e) => return Err(e),
                Ok(meta) if meta.file_type().is_symlink() => {
                    if i + 1 == names.len() && last_link_ok {
                        Found::Other
                    } else {
                        return Ok(Err(FileRefusal::Link));
                    }
                }
                Ok(meta) if meta.is_dir() => Found::Dir,
                Ok(meta) if meta.is_file() => Found::File(meta.len()),
                Ok(_) => Found::Other,
            };
        }
        Ok(Ok((full, found)))
    }

    /// Makes the directories above `path` (all of it, for a path ending in
    /// `/`), each given to the child.
    fn make_parents(&self, path: &str) -> std::io::Result<()> {
        let mut at = self.root.clone();
        let names: Vec<&str> = path.split('/').collect();
        for name in &names[..names.len() - 1] {
            at.push(name);
            match fs::symlink_metadata(&at) {
                Ok(meta) if meta.is_dir() && !meta.file_type().is_symlink() => {}
                Ok(_) => return Err(std::io::Error::other("a name on the path is not a directory")),
                Err(_) => {
                    fs::create_dir(&at)?;
                    self.give(&at)?;
                }
            }
        }
        Ok(())
    }

    /// Hands `path` to the child's uid, if it runs as another.
    fn give(&self, path: &Path) -> std::io::Result<()> {
        if let Some(uid) = self.uid {
            std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
        }
        Ok(())
    }

    /// What the home holds: the bytes of its regular files, and its
    /// entries (files, directories and anything else), which is what its
    /// count cap counts. An error (a tree too deep to walk, say) is to be
    /// taken as past the cap.
    pub fn usage(&self) -> std::io::Result<(u64, u64)> {
        let (mut bytes, mut entries) = (0, 0);
        self.visit(&mut |_, meta| {
            entries += 1;
            if meta.is_file() {
                bytes += meta.len();
            }
            entries <= MAX_SESSION_FILES
        })?;
        Ok((bytes, entries))
    }

    /// Every regular file under the home, for a checkpoint: within the
    /// caps, each named as the files API names a path, so that a restore
    /// can put it back. A home past either is refused, with the reason.
    pub fn save(&self) -> std::io::Result<Vec<SavedFile>> {
        let mut files = Vec::new();
        let mut failed = None;
        let (mut bytes, mut entries) = (0, 0);
        self.visit(&mut |path, meta| {
            entries += 1;
            if entries > MAX_SESSION_FILES {
                failed = Some(std::io::Error::other("the session's home is past its cap of entries"));
                return false;
            }
            if !meta.is_file() {
                return true;
            }
            bytes += meta.len();
            if bytes > MAX_SESSION_FILES_BYTES {
                failed = Some(std::io::Error::other("the session's files are past their cap of bytes"));
                return false;
            }
            let relative = path.strip_prefix(&self.root).unwrap_or(path);
            let Some(name) = relative.to_str().filter(|name| runbox_common::InputFile::check_path(name).is_ok()) else {
                failed = Some(std::io::Error::other(format!(
                    "the session's home holds a file named {:?}, which a checkpoint cannot carry (names are plain \
                     UTF-8, at most 255 bytes, with no control characters); rename or delete it",
                    relative.to_string_lossy()
                )));
                return false;
            };
            let read = OpenOptions::new().read(true).custom_flags(libc_nofollow()).open(path).and_then(|mut file| {
                let mut content = Vec::new();
                file.read_to_end(&mut content).map(|_| content)
            });
            match read {
                Ok(content) => files.push(SavedFile {
                    path: name.to_owned(),
                    content: base64::engine::general_purpose::STANDARD.encode(content),
                }),
                Err(e) => failed = Some(e),
            }
            failed.is_none()
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(files),
        }
    }

    /// Empties the home, then writes `files` into it, as a checkpoint
    /// saved them.
    pub fn restore(&self, files: &[SavedFile]) -> std::io::Result<()> {
        empty_tree(&self.root)?;
        for file in files {
            runbox_common::InputFile::check_path(&file.path).map_err(std::io::Error::other)?;
            let content = base64::engine::general_purpose::STANDARD
                .decode(&file.content)
                .map_err(|e| std::io::Error::other(format!("a checkpoint's file is not base64: {e}")))?;
            self.make_parents(&file.path)?;
            let full = self.root.join(&file.path);
            let mut out = File::create(&full)?;
            out.write_all(&content)?;
            self.give(&full)?;
        }
        Ok(())
    }

    /// Calls `each` on every entry under the home, directories before what
    /// they hold, links not followed, until it answers false. Iterative: the
    /// session's code can nest directories as deep as it likes, and a walk
    /// that recursed would overflow the worker's stack. A path too long to
    /// open is an error.
    fn visit(&self, each: &mut dyn FnMut(&Path, &fs::Metadata) -> bool) -> std::io::Result<()> {
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for item in fs::read_dir(&dir)? {
                let path = item?.path();
                let meta = fs::symlink_metadata(&path)?;
                if !each(&path, &meta) {
                    return Ok(());
                }
                if meta.is_dir() {
                    dirs.push(path);
                }
            }
        }
        Ok(())
    }
}

/// Removes everything under `root`, keeping `root`, without recursion and
/// without long paths: one directory open at a time, descended by name
/// (never through a link) and left by `..`, so a tree of any depth the
/// session's code made goes, and the worker's stack and descriptors with
/// it stay bounded. Its process is to be stopped first.
pub fn empty_tree(root: &Path) -> std::io::Result<()> {
    use nix::dir::Dir;
    use nix::fcntl::{AtFlags, OFlag, openat};
    use nix::sys::stat::Mode;
    use nix::unistd::{UnlinkatFlags, unlinkat};
    use std::os::fd::{AsFd, OwnedFd};

    let directory = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let open_at = |dir: &OwnedFd, name: &std::ffi::CStr| openat(dir.as_fd(), name, directory, Mode::empty());
    let mut current: OwnedFd = nix::fcntl::open(root, directory, Mode::empty())?;
    // The names of the directories descended into, from `root` down.
    let mut names: Vec<std::ffi::CString> = Vec::new();
    loop {
        let mut next = None;
        {
            let mut listing = Dir::from_fd(current.try_clone()?)?;
            for entry in listing.iter() {
                let entry = entry?;
                let name = entry.file_name();
                if name == c"." || name == c".." {
                    continue;
                }
                let is_dir = match entry.file_type() {
                    Some(kind) => kind == nix::dir::Type::Directory,
                    None => nix::sys::stat::fstatat(current.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
                        .is_ok_and(|stat| stat.st_mode & libc_s_ifmt() == libc_s_ifdir()),
                };
                if is_dir {
                    next = Some(name.to_owned());
                    break;
                }
                unlinkat(current.as_fd(), name, UnlinkatFlags::NoRemoveDir)?;
            }
        }
        match next {
            Some(name) => {
                let below = open_at(&current, &name)?;
                names.push(name);
                current = below;
            }
            // Empty: removed from its parent, unless it is the root.
            None => match names.pop() {
                Some(name) => {
                    let parent = open_at(&current, c"..")?;
                    unlinkat(parent.as_fd(), name.as_c_str(), UnlinkatFlags::RemoveDir)?;
                    current = parent;
                }
                None => return Ok(()),
            },
        }
    }
}

fn libc_s_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
}

fn libc_s_ifdir() -> u32 {
    nix::sys::stat::SFlag::S_IFDIR.bits()
}

/// The entry at `full`, named `name` in directory `dir` (relative to the
/// home); None for what is neither a file, a directory nor a link.
fn entry_of(full: &Path, dir: &str, name: &str) -> std::io::Result<Option<FileEntry>> {
    let meta = match fs::symlink_metadata(full) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let file_type = if meta.file_type().is_symlink() {
        FileType::Link
    } else if meta.is_dir() {
        FileType::Directory
    } else if meta.is_file() {
        FileType::File
    } else {
        return Ok(None);
    };
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let path = if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") };
    let size = if file_type == FileType::File { meta.len() } else { 0 };
    Ok(Some(FileEntry { name: name.to_owned(), path, file_type, size, modified: rfc3339_at_unix_ms(modified) }))
}

/// `O_NOFOLLOW`: the last name of a path is not followed if it is a link.
fn libc_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(path: &str, content: &[u8]) -> FileAction {
        FileAction::Put { path: path.into(), content: base64::engine::general_purpose::STANDARD.encode(content) }
    }

    #[test]
    fn every_operation_on_a_host_home() {
        let dir = tempfile::tempdir().expect("dir");
        let home = Home { root: dir.path().to_owned(), uid: None };
        let ok = |action: FileAction| home.file(&action).expect("io");
        assert_eq!(ok(put("a/b.txt", b"hi")), FileResult::Written { size: 2 });
        assert_eq!(ok(put("new/deeper/c.txt", b"c")), FileResult::Written { size: 1 });
        assert_eq!(ok(FileAction::Delete { path: "new".into() }), FileResult::Deleted);
        assert!(matches!(ok(FileAction::Get { path: "a/b.txt".into() }), FileResult::Content { size: 2, .. }));
        assert!(
            matches!(ok(FileAction::List { path: "a".into() }), FileResult::Listing { entries, .. } if entries.len() == 1)
        );
        assert_eq!(ok(FileAction::Mkdir { path: "a".into() }), FileResult::Refused { refusal: FileRefusal::Exists });
        assert_eq!(ok(FileAction::Move { path: "a/b.txt".into(), to: "c/d.txt".into() }), FileResult::Done);
        assert!(matches!(ok(FileAction::Stat { path: "c/d.txt".into() }), FileResult::Entry { .. }));
        assert_eq!(
            ok(FileAction::Get { path: "a/b.txt".into() }),
            FileResult::Refused { refusal: FileRefusal::NoFile }
        );
        assert_eq!(ok(put("c/d.txt/x", b"")), FileResult::Refused { refusal: FileRefusal::NotADirectory });
        std::os::unix::fs::symlink("/etc", dir.path().join("out")).expect("link");
        assert_eq!(
            ok(FileAction::Get { path: "out/passwd".into() }),
            FileResult::Refused { refusal: FileRefusal::Link }
        );
        assert_eq!(ok(put("out", b"x")), FileResult::Refused { refusal: FileRefusal::Link });
        assert_eq!(ok(FileAction::Delete { path: "out".into() }), FileResult::Deleted);
        assert!(std::path::Path::new("/etc/passwd").exists());
        let saved = home.save().expect("save");
        assert_eq!(saved, vec![SavedFile { path: "c/d.txt".into(), content: "aGk=".into() }]);
        ok(put("later.txt", b"gone after restore"));
        home.restore(&saved).expect("restore");
        // Two bytes, in two entries: `c` and `c/d.txt`.
        assert_eq!(home.usage().expect("usage"), (2, 2));
    }

    #[test]
    fn a_tree_of_any_depth_is_measured_and_emptied_without_recursion() {
        let dir = tempfile::tempdir().expect("dir");
        let home = Home { root: dir.path().to_owned(), uid: None };
        // Deeper than a path may be long: built a level at a time, by
        // descending into each directory made.
        let start = std::env::current_dir().expect("cwd");
        let mut fd = std::fs::File::open(dir.path()).expect("root");
        for _ in 0..3000 {
            nix::sys::stat::mkdirat(std::os::fd::AsFd::as_fd(&fd), c"d", nix::sys::stat::Mode::S_IRWXU).expect("mkdir");
            let below = nix::fcntl::openat(
                std::os::fd::AsFd::as_fd(&fd),
                c"d",
                nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY,
                nix::sys::stat::Mode::empty(),
            )
            .expect("open");
            fd = std::fs::File::from(below);
        }
        assert_eq!(std::env::current_dir().expect("cwd"), start);
        // Past the count of entries, or too long a path to walk: either way,
        // not within the cap.
        assert!(home.usage().map_or(true, |(_, entries)| entries > MAX_SESSION_FILES));
        empty_tree(dir.path()).expect("emptied");
        assert_eq!(fs::read_dir(dir.path()).expect("root").count(), 0);
    }

    #[test]
    fn directories_count_and_names_a_checkpoint_cannot_carry_refuse_it() {
        let dir = tempfile::tempdir().expect("dir");
        let home = Home { root: dir.path().to_owned(), uid: None };
        for i in 0..=MAX_SESSION_FILES {
            fs::create_dir(dir.path().join(format!("d{i}"))).expect("mkdir");
        }
        assert_eq!(home.usage().expect("usage").1, MAX_SESSION_FILES + 1);
        assert!(home.save().is_err());
        empty_tree(dir.path()).expect("emptied");
        fs::write(dir.path().join("a\nb"), "x").expect("write");
        let refused = home.save().expect_err("a name with a newline");
        assert!(refused.to_string().contains("rename or delete it"), "{refused}");
    }

    #[test]
    fn uploads_past_the_caps_are_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let home = Home { root: dir.path().to_owned(), uid: None };
        let big = vec![0u8; MAX_SESSION_FILE_BYTES];
        assert!(matches!(home.file(&put("1", &big)).expect("io"), FileResult::Written { .. }));
        assert!(matches!(home.file(&put("2", &big)).expect("io"), FileResult::Written { .. }));
        assert_eq!(home.file(&put("3", b"x")).expect("io"), FileResult::Refused { refusal: FileRefusal::FilesFull });
    }
}
