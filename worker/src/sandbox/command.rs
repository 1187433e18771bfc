//! Builds the command line and process attributes of one Deno child.
//!
//! Every permission is denied by flag, and the two "fetch code from outside"
//! paths that `--deny-net` does not cover (`npm:` and remote imports) are
//! closed with `--no-npm --no-remote --cached-only --deny-import`. The Python
//! child keeps npm resolution because its harness finds Pyodide through
//! `node_modules`; it is the only child given any read access, scoped to the
//! Pyodide files, and it revokes that before the program arrives.

use std::ffi::OsString;
use std::path::Path;

use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};
use runbox_common::Language;
use tokio::process::Command;

use super::{Isolation, Limits, NetworkIsolation, Runtime};

const DENY_ALL: &[&str] = &[
    "--no-prompt",
    "--no-config",
    "--no-remote",
    "--cached-only",
    "--deny-import",
    "--deny-net",
    "--deny-run",
    "--deny-ffi",
    "--deny-sys",
    "--deny-write",
    "--deny-env",
];

/// Open files a child may hold. Deno needs a few dozen for itself.
const MAX_OPEN_FILES: u64 = 256;

/// Largest file the child's own process may write. The only files it writes
/// are Deno's caches in its throwaway DENO_DIR.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// `RLIMIT_DATA` floor. Below about 2 GiB a Deno Worker cannot reserve its
/// code space, so programs that start a single Worker would fail.
const MIN_DATA_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The command for one child of `language`, whose private directory is `dir`.
pub fn deno_command(
    runtime: &Runtime,
    isolation: &Isolation,
    limits: &Limits,
    language: Language,
    dir: &Path,
) -> Command {
    let mut args: Vec<OsString> = vec!["run".into()];
    args.extend(DENY_ALL.iter().map(OsString::from));
    args.push(format!("--v8-flags=--max-old-space-size={}", limits.memory_mb).into());
    match language {
        Language::Javascript | Language::Typescript => {
            args.extend(["--no-npm", "--deny-read"].map(OsString::from));
            args.push(runtime.js_harness.clone().into());
        }
        Language::Python => {
            let mut readable: OsString = "--allow-read=".into();
            readable.push(&runtime.pyodide_dir);
            if let Some(snapshot) = &runtime.snapshot {
                readable.push(",");
                readable.push(snapshot);
            }
            args.push("--node-modules-dir=manual".into());
            args.push(readable);
            args.push(runtime.python_harness.clone().into());
            let mut pyodide_dir = runtime.pyodide_dir.clone().into_os_string();
            pyodide_dir.push("/");
            args.push(pyodide_dir);
            args.push(runtime.snapshot.as_ref().map_or_else(|| "-".into(), |s| s.clone().into_os_string()));
            args.push(limits.memory_mb.to_string().into());
        }
    }

    let mut command = Command::new(&runtime.deno);
    command
        .args(args)
        .current_dir(dir)
        // Only what Deno itself needs, none of it secret. DENO_DIR is where
        // Deno keeps caches and web storage; one per child means nothing a
        // run stores there outlives it.
        .env_clear()
        .env("DENO_DIR", dir.join("deno"))
        .env("HOME", dir)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1")
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
    // (setrlimit, unshare, setgroups, setgid, setuid, prctl, getppid) on values computed
    // before the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
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
