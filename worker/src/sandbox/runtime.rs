use std::path::{Path, PathBuf};

use super::SandboxError;

/// The files a sandboxed run needs, all under one runtime directory that
/// `scripts/setup` fills from `package-lock.json`.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The real Deno binary, not the `.bin/deno` Node wrapper, which adds
    /// about 55 ms to every start.
    pub deno: PathBuf,
    pub js_harness: PathBuf,
    pub python_harness: PathBuf,
    /// Pyodide's files, copied out of `node_modules` by `runtime/prepare`;
    /// the Python child may read these (and only these) while it boots.
    pub pyodide_dir: PathBuf,
    /// A Pyodide memory snapshot made at setup time. Without it Python boots
    /// from scratch, about 5× slower.
    pub snapshot: Option<PathBuf>,
    /// The runtime directory itself.
    pub dir: PathBuf,
    /// Where `pyodide_js.loadPackage` (and micropip, for a package of
    /// Pyodide's own) fetches Pyodide's packages from, through the egress
    /// proxy: Pyodide's CDN for this version, or `RUNBOX_PYODIDE_PACKAGES_URL`.
    pub packages_url: String,
}

/// Where the runtime lives when `RUNBOX_RUNTIME_DIR` is not set: the source
/// tree's copy, which is what `scripts/setup` installs.
pub const DEFAULT_RUNTIME_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/runtime");

/// Where `scripts/setup` writes the snapshot, relative to the runtime dir.
pub const SNAPSHOT_FILE: &str = "snapshot/pyodide.snapshot";

impl Runtime {
    /// Checks that every file is in place, so a bad install fails at start-up
    /// with the path and the fix, not on the first job.
    pub fn locate(dir: &Path) -> Result<Runtime, SandboxError> {
        let dir = dir.canonicalize().map_err(|e| SandboxError::Runtime(format!("{}: {e}", dir.display())))?;
        let runtime = Runtime {
            deno: dir.join("node_modules/@deno/linux-x64-glibc/deno"),
            js_harness: dir.join("harness/js.mjs"),
            python_harness: dir.join("harness/python.mjs"),
            pyodide_dir: dir.join("pyodide"),
            snapshot: Some(dir.join(SNAPSHOT_FILE)).filter(|p| p.is_file()),
            dir,
            packages_url: String::new(),
        };
        for path in [&runtime.deno, &runtime.js_harness, &runtime.python_harness, &runtime.pyodide_dir] {
            if !path.exists() {
                return Err(SandboxError::Runtime(format!(
                    "{} is missing; run scripts/setup (or `npm ci && ./prepare` in {})",
                    path.display(),
                    runtime.dir.display()
                )));
            }
        }
        let version = runtime.pyodide_version().unwrap_or_default();
        Ok(Runtime { packages_url: format!("https://cdn.jsdelivr.net/pyodide/v{version}/full/"), ..runtime })
    }

    /// The pinned Pyodide version, from its package.json.
    pub fn pyodide_version(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.pyodide_dir.join("package.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json.get("version")?.as_str().map(str::to_owned)
    }

    /// The pinned Python packages, `[{"name", "version"}]`, as `prepare`
    /// recorded them; an empty list if it installed none.
    pub fn python_packages(&self) -> serde_json::Value {
        std::fs::read_to_string(self.pyodide_dir.join("packages.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_else(|| serde_json::json!([]))
    }

    /// The Deno version, from `deno --version`.
    pub fn deno_version(&self) -> Option<String> {
        let out = std::process::Command::new(&self.deno).arg("--version").env_clear().output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        text.lines().next()?.split_whitespace().nth(1).map(str::to_owned)
    }
}
