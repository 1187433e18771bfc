//! Setup refuses Python packages that are not exactly what the lock file
//! pins. Runs `packages.py fetch` on throwaway copies of the lock file and
//! of the wheel cache that `scripts/setup` filled, so nothing is downloaded.

use std::path::{Path, PathBuf};
use std::process::Command;

fn runtime() -> PathBuf {
    Path::new(runbox_worker::sandbox::DEFAULT_RUNTIME_DIR).to_owned()
}

/// Runs `fetch` with `lock` as the lock file's text; returns (success, stderr).
fn fetch_with(lock: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("wheels");
    std::fs::create_dir(&cache).expect("mkdir");
    for wheel in std::fs::read_dir(runtime().join("wheels")).expect("wheel cache: run scripts/setup") {
        let wheel = wheel.expect("entry").path();
        std::fs::copy(&wheel, cache.join(wheel.file_name().expect("name"))).expect("copy");
    }
    std::fs::write(dir.path().join("lock"), lock).expect("write lock");
    let out = Command::new("python3")
        .arg(runtime().join("packages.py"))
        .args(["fetch", "--python-version", "3.13", "--lock"])
        .arg(dir.path().join("lock"))
        .arg("--cache")
        .arg(&cache)
        .arg("--out")
        .arg(dir.path().join("sources.zip"))
        .output()
        .expect("python3 runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn real_lock() -> String {
    std::fs::read_to_string(runtime().join("python-packages.lock")).expect("lock file")
}

#[test]
fn the_real_lock_file_passes() {
    let (ok, stderr) = fetch_with(&real_lock());
    assert!(ok, "{stderr}");
}

#[test]
fn a_tampered_hash_stops_setup_and_names_the_package() {
    let lock = real_lock();
    let line = lock.lines().find(|l| l.starts_with("pluggy ")).expect("pluggy is locked");
    let hash = line.split_whitespace().nth(2).expect("hash");
    let flipped = format!("{}{}", if hash.starts_with('0') { '1' } else { '0' }, &hash[1..]);
    let (ok, stderr) = fetch_with(&lock.replace(hash, &flipped));
    assert!(!ok, "a wrong hash was accepted");
    assert!(stderr.contains("pluggy") && stderr.contains("refusing it") && stderr.contains(&flipped), "{stderr}");
}

#[test]
fn a_malformed_lock_line_stops_setup() {
    let (ok, stderr) = fetch_with(&format!("{}pytest 9.2.0\n", real_lock()));
    assert!(!ok);
    assert!(stderr.contains("expected `name version sha256`"), "{stderr}");
}
