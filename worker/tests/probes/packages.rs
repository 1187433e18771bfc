//! The pinned Python packages (`worker/runtime/python-packages.lock`):
//! importable offline in every job, at the pinned versions, with pytest and
//! hypothesis working as users expect, and no way to fetch more.

use runbox_common::{FileEncoding, InputFile, JobSpec, Status};

use crate::util::*;

fn lock() -> Vec<(String, String)> {
    let path = std::path::Path::new(runbox_worker::sandbox::DEFAULT_RUNTIME_DIR).join("python-packages.lock");
    std::fs::read_to_string(path)
        .expect("lock file")
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_owned())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned())
        })
        .collect()
}

fn file(path: &str, content: &str) -> InputFile {
    InputFile { path: path.into(), content: content.into(), encoding: FileEncoding::Utf8 }
}

#[tokio::test]
async fn every_locked_package_imports_at_its_version() {
    let modules = "import pytest, hypothesis, dateutil.parser, tabulate, more_itertools, attrs, typing_extensions, \
                   pluggy, iniconfig, packaging, pygments, sortedcontainers, tzdata";
    let listing = "import importlib.metadata as m\nfor d in m.distributions():\n    \
                   print(d.metadata['Name'].lower().replace('_', '-'), d.version)";
    let code = format!("{modules}\n{listing}");
    let outcome = run(Py, &code).await;
    assert_eq!((outcome.status, outcome.exit_code), (Status::Completed, Some(0)), "{outcome:#?}");
    for (name, version) in lock() {
        assert!(
            outcome.stdout.lines().any(|l| l == format!("{name} {version}")),
            "{name} {version} missing: {outcome:#?}"
        );
    }
}

#[tokio::test]
async fn pytest_runs_test_files_with_rewritten_assertions() {
    let tests = r#"
import pytest

def add(a, b):
    return a + b

def test_passes():
    assert add(2, 2) == 4

def test_fails():
    expected = {"name": "runbox", "lang": "python"}
    assert {"name": "runbox", "lang": "pyodide"} == expected

@pytest.mark.parametrize("a, b, total", [(1, 2, 3), (0, 0, 0), (-1, 1, 0)])
def test_parametrized(a, b, total):
    assert add(a, b) == total
"#;
    let job = JobSpec {
        files: vec![file("test_sample.py", tests)],
        ..spec(Py, "import sys, pytest\nsys.exit(pytest.main(['-q', 'test_sample.py']))")
    };
    let outcome = run_spec(&job).await;
    assert_eq!((outcome.status, outcome.exit_code), (Status::Completed, Some(1)), "{outcome:#?}");
    let out = &outcome.stdout;
    assert!(out.contains("1 failed, 4 passed"), "{out}");
    // Assertion rewriting: the failing comparison is explained, key by key.
    assert!(out.contains("Differing items") && out.contains("'pyodide'") && out.contains("'python'"), "{out}");

    let passing = JobSpec {
        files: vec![file("test_ok.py", "def test_ok():\n    assert True\n")],
        expected_stdout: None,
        ..spec(Py, "import pytest\nraise SystemExit(pytest.main(['-q']))")
    };
    let outcome = run_spec(&passing).await;
    assert_eq!(outcome.exit_code, Some(0), "{outcome:#?}");
    // pytest's own exit codes: 5 when no tests were collected.
    let outcome = run(Py, "import pytest\nraise SystemExit(pytest.main(['-q']))").await;
    assert_eq!(outcome.exit_code, Some(5), "{outcome:#?}");
}

#[tokio::test]
async fn hypothesis_finds_a_planted_bug() {
    let code = r#"
from hypothesis import given, settings, strategies as st

def clamp(x, low, high):
    if x > 1000:  # the planted bug
        return low
    return max(low, min(x, high))

@settings(max_examples=500, database=None)
@given(st.integers(), st.integers(-10, 0), st.integers(1, 10))
def test_clamp_stays_in_range(x, low, high):
    result = clamp(x, low, high)
    assert low <= result <= high
    if low <= x <= high:
        assert result == x
    if x > high:
        assert result == high

try:
    test_clamp_stays_in_range()
except AssertionError:
    import traceback; traceback.print_exc()
    print("found the bug")
"#;
    let outcome = run(Py, code).await;
    assert_eq!(outcome.exit_code, Some(0), "{outcome:#?}");
    assert!(outcome.stdout.contains("found the bug"), "{outcome:#?}");
    assert!(outcome.stderr.contains("Falsifying example"), "{outcome:#?}");
}

#[tokio::test]
async fn no_package_can_be_fetched_at_run_time() {
    let listener = Listener::open();
    let code = format!(
        r#"
import pyodide_js, micropip
# loadPackage reports a failure on stderr and returns; the import tells.
await pyodide_js.loadPackage(["numpy", "pandas", "http://127.0.0.1:{port}/evil-1.0-py3-none-any.whl"])
for name in ["numpy", "pandas", "evil"]:
    try:
        __import__(name)
        print("IMPORTED", name)
    except ImportError:
        print("absent", name)
for install in [
    lambda: micropip.install("evil", index_urls=["http://127.0.0.1:{port}/simple/"]),
    lambda: micropip.install("http://127.0.0.1:{port}/evil-1.0-py3-none-any.whl"),
]:
    try:
        await install()
        print("INSTALLED")
    except Exception as e:
        print("refused", type(e).__name__)
"#,
        port = listener.port
    );
    let outcome = run(Py, &code).await;
    assert!(!outcome.stdout.contains("IMPORTED") && !outcome.stdout.contains("INSTALLED"), "{outcome:#?}");
    for name in ["numpy", "pandas", "evil"] {
        assert!(outcome.stdout.contains(&format!("absent {name}")), "{outcome:#?}");
    }
    assert_eq!(outcome.stdout.matches("refused").count(), 2, "{outcome:#?}");
    listener.assert_untouched();
}
