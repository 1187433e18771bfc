//! Builds the command line and process attributes of one Deno child.
//!
//! Every permission is denied by flag (a JS child may read its job's
//! `files` directory, and nothing else; a JS session child may read and
//! write its home, that same directory; a child with an egress socket may
//! connect to it while it boots, and revokes that before any job runs),
//! and the "fetch code from outside"
//! paths that `--deny-net` does not cover (`npm:` and remote imports) are
//! closed with `--no-npm --no-remote --cached-only --deny-import`, in both
//! children: npm resolution would also switch off Deno's read check for
//! every path with a `node_modules` segment. The Python child loads Pyodide
//! by path; it is the only child given any read access, scoped to the
//! Pyodide files, and it revokes that before the program arrives.
//!
//! Below Deno, `pre_exec` closes every inherited descriptor past stdio, sets
//! resource limits, ignores the two signals whose default action a program
//! could otherwise turn into a forged ending (see `classify` in `child.rs`),
//! and applies the isolation layers this host allows.

use std::ffi::OsString;
use std::path::Path;

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{SigHandler, Signal, signal};
use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
use runbox_common::Language;
use tokio::process::Command;

use super::channel::ChannelPaths;
use super::{Isolation, Limits, NetworkIsolation, Runtime};

const DENY_ALL: &[&str] = &[
    "--no-prompt",
    "--no-config",
    "--no-npm",
    "--no-remote",
    "--cached-only",
    "--deny-import",
    "--deny-run",
    "--deny-ffi",
    "--deny-sys",
    "--deny-env",
];

/// The directory, inside a JS child's job directory, that holds the job's
/// `files`; the child's working directory and all it may read.
pub const FILES_DIR: &str = "files";

/// Open files a child may hold. Deno needs a few dozen for itself.
const MAX_OPEN_FILES: u64 = 256;

/// Largest file the child's own process may write. The only files it can
/// write are the Python child's two primed Deno caches in its throwaway
/// DENO_DIR (about 4 MiB; see `deno_dir` in `child.rs`), so with their
/// journals this bounds what a job can put on disk.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// `RLIMIT_DATA` floor. Every Deno Worker reserves code space, and below
/// about 2 GiB a process cannot hold its main isolate and one Worker; a
/// child runs its jobs in Workers, a shared one with the next job's Worker
/// booting beside the current one and the last one still going away.
const MIN_DATA_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What a child is for, which its harness is told as its last argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildMode {
    /// One job, then it exits.
    Single,
    /// The jobs of one batch, each in a fresh interpreter (see `shared.rs`).
    Shared,
    /// One session's interpreter, kept across execs (see `session.rs`).
    Session,
}

impl ChildMode {
    /// Whether the child gets a control channel (see `channel.rs`).
    pub fn has_channel(self) -> bool {
        self != ChildMode::Single
    }

    fn arg(self) -> Option<&'static str> {
        match self {
            ChildMode::Single => None,
            ChildMode::Shared => Some("shared"),
            ChildMode::Session => Some("session"),
        }
    }
}

/// The command for one child of `language`, whose private directory is
/// `dir`; `egress` is the egress proxy's socket for it, if it has one.
pub fn deno_command(
    runtime: &Runtime,
    isolation: &Isolation,
    limits: &Limits,
    language: Language,
    dir: &Path,
    mode: ChildMode,
    egress: Option<&Path>,
) -> Command {
    let mut args: Vec<OsString> = vec!["run".into()];
    args.extend(DENY_ALL.iter().map(OsString::from));
    // The socket, to connect to once while booting (Deno asks for net
    // access to `unix:<path>` and read and write access to the path);
    // every other address is denied.
    match egress {
        Some(socket) => {
            let mut net: OsString = "--allow-net=unix:".into();
            net.push(socket);
            args.push(net);
        }
        None => args.push("--deny-net".into()),
    }
    let with_socket = |mut list: OsString| {
        if let Some(socket) = egress {
            list.push(",");
            list.push(socket);
        }
        list
    };
    // A child with a channel opens its two FIFOs while it boots, and reads
    // the harness files it starts job Workers from; it revokes both before
    // any job runs. Every other write is denied.
    let channel = mode.has_channel().then(|| ChannelPaths::in_dir(dir));
    let harness_dir = runtime.js_harness.parent().map(Path::to_path_buf).unwrap_or_default();
    // A JavaScript session's home (its `files` directory, its working
    // directory) it may read and write for as long as it lives: the only
    // path it keeps.
    let home = (mode == ChildMode::Session && language != Language::Python).then(|| dir.join(FILES_DIR));
    let with_home = |mut list: OsString| {
        if let Some(home) = &home {
            list.push(",");
            list.push(home);
        }
        list
    };
    match (&channel, egress) {
        (Some(channel), _) => {
            let mut writable: OsString = "--allow-write=".into();
            writable.push(&channel.results);
            args.push(with_home(with_socket(writable)));
        }
        (None, Some(socket)) => {
            let mut writable: OsString = "--allow-write=".into();
            writable.push(socket);
            args.push(writable);
        }
        (None, None) => args.push("--deny-write".into()),
    }
    let mut channel_args: Vec<OsString> = Vec::new();
    if let Some(channel) = &channel {
        channel_args.extend(mode.arg().map(OsString::from));
        channel_args.push(channel.frames.clone().into());
        channel_args.push(channel.results.clone().into());
    }
    if let Some(socket) = egress {
        let mut arg: OsString = "egress=".into();
        arg.push(socket);
        channel_args.push(arg);
    }
    let mut v8_flags = format!("--v8-flags=--max-old-space-size={}", limits.memory_mb);
    if language == Language::Python && mode == ChildMode::Shared {
        for flag in shared_python_v8_flags() {
            v8_flags.push(',');
            v8_flags.push_str(flag);
        }
    }
    args.push(v8_flags.into());
    match language {
        Language::Javascript | Language::Typescript => {
            // The job's `files`, written there just before the program
            // arrives, and nothing else.
            let mut readable: OsString = "--allow-read=".into();
            match &channel {
                Some(channel) => {
                    readable.push(&harness_dir);
                    readable.push(",");
                    readable.push(&channel.frames);
                }
                None => readable.push(dir.join(FILES_DIR)),
            }
            args.push(with_home(with_socket(readable)));
            args.push(runtime.js_harness.clone().into());
            args.extend(channel_args);
        }
        Language::Python => {
            let mut readable: OsString = "--allow-read=".into();
            readable.push(&runtime.pyodide_dir);
            readable.push(",");
            readable.push(&harness_dir);
            if let Some(snapshot) = &runtime.snapshot {
                readable.push(",");
                readable.push(snapshot);
            }
            if let Some(channel) = &channel {
                readable.push(",");
                readable.push(&channel.frames);
            }
            args.push(with_socket(readable));
            args.push(runtime.python_harness.clone().into());
            args.push(runtime.pyodide_dir.clone().into());
            args.push(runtime.snapshot.as_ref().map_or_else(|| "-".into(), |s| s.clone().into_os_string()));
            args.push(limits.memory_mb.to_string().into());
            args.push(format!("packages={}", runtime.packages_url).into());
            args.extend(channel_args);
        }
    }

    let cwd = match language {
        Language::Javascript | Language::Typescript => dir.join(FILES_DIR),
        Language::Python => dir.to_owned(),
    };
    let mut command = Command::new(&runtime.deno);
    command
        .args(args)
        .current_dir(cwd)
        // Only what Deno itself needs, none of it secret. DENO_DIR is where
        // Deno keeps caches and web storage; one per child means nothing a
        // run stores there outlives it.
        .env_clear()
        .env("DENO_DIR", dir.join("deno"))
        .env("HOME", dir)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1")
        // No WebGPU backend: `navigator.gpu` then finds no adapter, in
        // Workers too, and no host graphics driver is ever loaded.
        .env("DENO_WEBGPU_BACKEND", "")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);

    let data_bytes = (u64::from(limits.memory_mb) * 1024 * 1024 * 4).max(MIN_DATA_BYTES);
    let network = isolation.network;
    let uid = isolation.uid;
    let parent = nix::unistd::getpid();
    #[allow(unsafe_code)]
    // SAFETY: the closure runs between fork and exec, where only
    // async-signal-safe calls are allowed. It makes plain syscalls
    // (close_range, sigaction, setrlimit, unshare, setgroups, setgid, setuid,
    // prctl, getppid) on values computed before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            close_inherited_descriptors()?;
            // A program can signal its own process (Deno.kill needs no run
            // permission for that). Ignored here, SIGTRAP still ends the
            // child when V8 traps on a fatal error, since the kernel forces
            // synchronous traps through, so a SIGTRAP death is always V8's
            // own. SIGXFSZ ignored turns a write past RLIMIT_FSIZE into an
            // error instead of a death.
            signal(Signal::SIGTRAP, SigHandler::SigIgn)?;
            signal(Signal::SIGXFSZ, SigHandler::SigIgn)?;
            setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
            setrlimit(Resource::RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES)?;
            setrlimit(Resource::RLIMIT_FSIZE, MAX_FILE_BYTES, MAX_FILE_BYTES)?;
            setrlimit(Resource::RLIMIT_DATA, data_bytes, data_bytes)?;
            if let Some(flags) = network.unshare_flags() {
                nix::sched::unshare(flags)?;
            }
            if let Some(uid) = uid {
                setgroups(&[])?;
                setgid(Gid::from_raw(uid))?;
                setuid(Uid::from_raw(uid))?;
            }
            // The child lives in its own process group, so a worker that
            // dies (even by SIGKILL) would leave it running; this ties its
            // life to ours. Set after setuid, which clears it.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                // The worker exited before the line above took effect.
                return Err(nix::errno::Errno::ESRCH.into());
            }
            Ok(())
        });
    }
    command
}

/// The V8 flags a shared Python child adds to its heap limit, each with its
/// reason, in `worker/runtime/shared-python.v8-flags` (which the bench
/// reads too).
fn shared_python_v8_flags() -> impl Iterator<Item = &'static str> {
    include_str!("../../runtime/shared-python.v8-flags")
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|flag| !flag.is_empty())
}

/// Marks every descriptor from 3 up close-on-exec, so the child gets only
/// its three pipes, whatever the worker inherited from whoever started it.
/// (Marking rather than closing keeps the pipe through which the standard
/// library reports a failed exec.) Async-signal-safe: plain syscalls.
fn close_inherited_descriptors() -> std::io::Result<()> {
    use nix::libc;
    #[allow(unsafe_code)]
    // SAFETY: a raw syscall that changes only descriptor flags of this
    // (forked) process and allocates nothing.
    let done = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) } == 0;
    if done {
        return Ok(());
    }
    // Kernels before 5.11: mark them one by one, up to the descriptor limit.
    let (_, max) = nix::sys::resource::getrlimit(Resource::RLIMIT_NOFILE)?;
    let max = i32::try_from(max.min(1 << 20)).unwrap_or(1 << 20);
    for fd in 3..max {
        #[allow(unsafe_code)]
        // SAFETY: as above; a descriptor that is not open yields EBADF, ignored.
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok(())
}

impl NetworkIsolation {
    fn unshare_flags(self) -> Option<nix::sched::CloneFlags> {
        use nix::sched::CloneFlags;
        match self {
            NetworkIsolation::None => None,
            NetworkIsolation::Namespace => Some(CloneFlags::CLONE_NEWNET),
            NetworkIsolation::UserAndNetworkNamespace => Some(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_python_v8_flags_are_single_flags() {
        let flags: Vec<_> = shared_python_v8_flags().collect();
        assert!(flags.contains(&"--expose-gc"), "{flags:?}");
        for flag in flags {
            // Deno takes them as one comma-separated argument.
            assert!(flag.starts_with("--") && !flag.contains([',', ' ', '\t']), "{flag:?}");
        }
    }
}
