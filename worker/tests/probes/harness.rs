//! Statuses are runbox's own, and the harness is out of the program's reach.
//!
//! `timeout`, `memory_exceeded`, `cancelled` and `internal_error` come only
//! from what runbox observed; whatever a program does to end itself is
//! `completed`, with its exit code or the signal it sent itself. Python
//! programs run as the genuine `__main__`, and a program that patches what
//! it can reach does not change how its run is reported.

use runbox_common::{Outcome, Status};

use crate::util::*;

#[track_caller]
fn assert_exit(outcome: &Outcome, code: i32) {
    assert_eq!(
        (outcome.status, outcome.exit_code, outcome.signal),
        (Status::Completed, Some(code), None),
        "{outcome:#?}"
    );
}

#[track_caller]
fn assert_signal(outcome: &Outcome, signal: i32) {
    assert_eq!(
        (outcome.status, outcome.exit_code, outcome.signal),
        (Status::Completed, None, Some(signal)),
        "{outcome:#?}"
    );
}

#[tokio::test]
async fn exit_codes_runbox_once_used_are_the_programs_own() {
    assert_exit(&run(Js, "Deno.exit(133)").await, 133);
    assert_exit(&run(Py, "import sys\nsys.exit(133)").await, 133);
    assert_exit(&run(Py, "import sys\nsys.exit(389)").await, 133);
}

#[tokio::test]
async fn a_thrown_out_of_memory_error_is_just_an_error() {
    let outcome = run(Js, "throw new RangeError('Out of memory')").await;
    assert_exit(&outcome, 1);
    assert!(outcome.stderr.contains("RangeError: Out of memory"), "{outcome:#?}");
    let outcome = run(Js, "await Promise.reject(new RangeError('Array buffer allocation failed'))").await;
    assert_exit(&outcome, 1);
    let outcome = run(Py, "raise MemoryError('pretend')").await;
    assert_exit(&outcome, 1);
    assert!(outcome.stderr.contains("MemoryError: pretend"), "{outcome:#?}");
}

#[tokio::test]
async fn a_forged_marker_is_just_output() {
    // The harness's out-of-memory marker, with a guessed nonce.
    let marker = "\\u0006runbox-out-of-memory:00000000000000000000000000000000\\n";
    let outcome = run(Js, &format!("Deno.stderr.writeSync(new TextEncoder().encode('{marker}')); Deno.exit(1)")).await;
    assert_exit(&outcome, 1);
    assert!(outcome.stderr.contains("runbox-out-of-memory"), "{outcome:#?}");
}

#[tokio::test]
async fn signals_a_program_sends_itself() {
    assert_signal(&run(Js, "Deno.kill(Deno.pid, 'SIGKILL')").await, 9);
    assert_signal(&run(Js, "Deno.kill(Deno.pid, 'SIGTERM')").await, 15);
    assert_signal(&run(Js, "import process from 'node:process'; process.kill(process.pid, 'SIGKILL')").await, 9);
    // A job's Python realm has no Deno to signal with; a session's Worker has.
    let outcome = run(Py, "import js\njs.Deno.kill(js.Deno.pid, 'SIGKILL')").await;
    if outcome.signal.is_some() {
        assert_signal(&outcome, 9);
    } else {
        assert_fails_with_any(&outcome, &[NO_DENO]);
    }
    // V8's fatal-error trap is how a real heap exhaustion ends, so the child
    // ignores SIGTRAP from anyone else.
    let outcome = run(Js, "Deno.kill(Deno.pid, 'SIGTRAP'); console.log('still here')").await;
    assert_exit(&outcome, 0);
    assert_eq!(outcome.stdout, "still here\n");
    // An abort is the program's own death, not runbox's failure.
    assert_signal(&run(Js, "import process from 'node:process'; process.abort()").await, 6);
}

#[tokio::test]
async fn js_harness_survives_a_program_that_patches_globals() {
    let code = "Deno.exit = () => {};\n\
                console.error = () => {};\n\
                globalThis.process && (process.exit = () => {});\n\
                Uint8Array.prototype.subarray = function () { return new Uint8Array(0); };\n\
                TextEncoder.prototype.encode = () => new Uint8Array(0);\n\
                String.prototype.split = () => [];\n\
                throw new Error('boom after patching');";
    let outcome = run(Js, code).await;
    assert_exit(&outcome, 1);
    assert!(outcome.stderr.contains("boom after patching"), "{outcome:#?}");
}

#[tokio::test]
async fn python_runs_as_the_genuine_main_module() {
    let outcome = run(Py, "import sys\nx = 42\nprint(sys.modules['__main__'].x, __name__, __file__)").await;
    assert_exit(&outcome, 0);
    assert_eq!(outcome.stdout, "42 __main__ main.py\n");

    let code = "import pickle\n\
                class Point:\n    def __init__(self, x): self.x = x\n\
                p = pickle.loads(pickle.dumps(Point(7)))\n\
                print(type(p).__module__, p.x)";
    let outcome = run(Py, code).await;
    assert_exit(&outcome, 0);
    assert_eq!(outcome.stdout, "__main__ 7\n");
}

#[tokio::test]
async fn python_unittest_main_finds_and_runs_the_tests() {
    let test = |body: &str| {
        format!("import unittest\nclass T(unittest.TestCase):\n    def test_it(self):\n        {body}\nunittest.main()")
    };
    let passing = run(Py, &test("self.assertEqual(1 + 1, 2)")).await;
    assert_exit(&passing, 0);
    assert!(passing.stderr.contains("Ran 1 test") && passing.stderr.contains("\nOK"), "{passing:#?}");
    let failing = run(Py, &test("self.assertEqual(1 + 1, 3)")).await;
    assert_exit(&failing, 1);
    assert!(failing.stderr.contains("Ran 1 test") && failing.stderr.contains("FAILED (failures=1)"), "{failing:#?}");
}

#[tokio::test]
async fn python_doctest_testmod_finds_the_programs_docstrings() {
    let code = "def double(x):\n    \"\"\"\n    >>> double(2)\n    4\n    >>> double(3)\n    7\n    \"\"\"\n    return 2 * x\n\
                import doctest\nprint(doctest.testmod())";
    let outcome = run(Py, code).await;
    assert_exit(&outcome, 0);
    assert!(outcome.stdout.ends_with("TestResults(failed=1, attempted=2)\n"), "{outcome:#?}");
}

#[tokio::test]
async fn python_harness_survives_a_program_that_patches_what_it_reaches() {
    let code = "import __main__, builtins, sys, traceback, js\n\
                __main__.exit_status = lambda code: 0\n\
                __main__.run_main = None\n\
                builtins.isinstance = lambda *args: False\n\
                builtins.int = str\n\
                traceback.print_exception = lambda *args, **kwargs: None\n\
                sys.exit = lambda *args: None\n\
                try:\n    js.Deno.exit = lambda *args: None\nexcept AttributeError:\n    pass\n\
                raise ValueError('still a failure')";
    let outcome = run(Py, code).await;
    assert_exit(&outcome, 1);
    let outcome = run(Py, "import builtins\nbuiltins.isinstance = lambda *a: True\nraise SystemExit(4)").await;
    assert_exit(&outcome, 4);
}

#[tokio::test]
async fn every_python_child_draws_fresh_random_numbers() {
    let code = "import random, os\nprint(random.random(), random.getrandbits(64), os.urandom(8).hex())";
    let one = run(Py, code).await;
    let two = run(Py, code).await;
    assert_exit(&one, 0);
    assert_exit(&two, 0);
    let (one, two): (Vec<&str>, Vec<&str>) = (one.stdout.split(' ').collect(), two.stdout.split(' ').collect());
    for (a, b) in one.iter().zip(&two) {
        assert_ne!(a, b, "two runs drew the same value: {one:?} {two:?}");
    }
}

/// A real heap exhaustion still ends as memory_exceeded; see floods.rs for
/// the rest. Here: the SIGTRAP that V8 raises is not confused with a
/// program's own exit status.
#[tokio::test]
async fn a_real_heap_exhaustion_is_still_memory_exceeded() {
    let outcome = run(Js, "const a = []; for (;;) a.push(new Array(1e5).fill(1.5));").await;
    assert_eq!(
        (outcome.status, outcome.exit_code, outcome.signal),
        (Status::MemoryExceeded, None, None),
        "{outcome:#?}"
    );
}
