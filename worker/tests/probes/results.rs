//! The outcome is exactly what the program did: exit codes, stdin, and
//! output bytes as they were written.

use runbox_common::{Language, Status};

use crate::util::*;

async fn exits(language: Language, code: &str, expected: i32) -> runbox_common::Outcome {
    let outcome = run(language, code).await;
    assert_status(&outcome, Status::Completed);
    assert_eq!(outcome.exit_code, Some(expected), "{outcome:#?}");
    outcome
}

#[tokio::test]
async fn js_exit_codes() {
    let ok = exits(Js, "console.log('hi')", 0).await;
    assert_eq!((ok.stdout.as_str(), ok.stderr.as_str()), ("hi\n", ""));
    exits(Js, "Deno.exit(7)", 7).await;
    exits(Js, "import process from 'node:process'; process.exit(5)", 5).await;
    let thrown = exits(Js, "throw new Error('boom')", 1).await;
    assert!(thrown.stderr.contains("Uncaught Error: boom"), "{thrown:#?}");
    let rejected = exits(Js, "setTimeout(() => { throw new TypeError('later') }, 10)", 1).await;
    assert!(rejected.stderr.contains("TypeError: later"), "{rejected:#?}");
    let syntax = exits(Js, "let = ;", 1).await;
    assert!(syntax.stderr.contains("SyntaxError"), "{syntax:#?}");
}

#[tokio::test]
async fn ts_types_are_stripped() {
    let outcome =
        exits(Ts, "interface P { x: number }\nconst p: P = { x: 2 };\nconsole.log(p.x * 21 as number);", 0).await;
    assert_eq!(outcome.stdout, "42\n");
}

#[tokio::test]
async fn python_exit_codes() {
    let ok = exits(Py, "print(2 + 2)", 0).await;
    assert_eq!((ok.stdout.as_str(), ok.stderr.as_str()), ("4\n", ""));
    exits(Py, "import sys\nsys.exit(3)", 3).await;
    exits(Py, "import sys\nsys.exit()", 0).await;
    let message = exits(Py, "import sys\nsys.exit('bad input')", 1).await;
    assert_eq!(message.stderr, "bad input\n");
    exits(Py, "raise SystemExit(256 + 9)", 9).await;
}

/// The C level links as CPython expects: dlsym on the main module finds
/// its symbols (ctypes.pythonapi, CDLL(None)), those it exports and those
/// the harness resolves when asked (pyodide-wasm.mjs: the data of
/// `_Py_NoneStruct` at None's address, libc++'s `std::__sort` for chars
/// through its table slot), a function pointer called through the table
/// reaches the right function, a JS function whose address the module
/// takes answers through its table slot, and every function the glue no
/// longer defines is still found: on Pyodide's `Module` (`ccall` looks it
/// up there) and as a bare name in code the glue evaluates in its own
/// scope (`emscripten_run_script`, as a side module's EM_JS).
#[tokio::test]
async fn python_c_level_linking() {
    let code = "import ctypes\n\
        print(ctypes.pythonapi.Py_IsInitialized(), ctypes.CDLL(None).Py_IsInitialized())\n\
        from_long = ctypes.pythonapi.PyLong_FromLong\n\
        from_long.restype, from_long.argtypes = ctypes.py_object, [ctypes.c_long]\n\
        print(from_long(41) + 1)\n\
        print(ctypes.addressof(ctypes.c_int.in_dll(ctypes.pythonapi, '_Py_NoneStruct')) == id(None))\n\
        sort = ctypes.CDLL(None)['_ZNSt3__26__sortIRNS_6__lessIccEEPcEEvT0_S5_T_']\n\
        sort.restype, sort.argtypes = None, [ctypes.c_void_p] * 3\n\
        text = ctypes.create_string_buffer(b'runbox sorts')\n\
        sort(ctypes.addressof(text), ctypes.addressof(text) + 12, ctypes.addressof(text))\n\
        print(text.value)\n\
        print(sorted({1: 'a', 2: 'b'}.items(), key=lambda kv: -kv[0]), flush=True)\n\
        import pyodide_js\n\
        module = pyodide_js._module\n\
        print(module.ccall('Py_IsInitialized', 'number', [], []), hasattr(module, '_PyLong_FromLong'), hasattr(module, '_no_such_symbol'), flush=True)\n\
        run_script = ctypes.CDLL(None).emscripten_run_script_string\n\
        run_script.argtypes, run_script.restype = [ctypes.c_char_p], ctypes.c_char_p\n\
        print(run_script(b'typeof _PyLong_FromLong + typeof _Py_IsInitialized'), flush=True)\n\
        ctypes.CDLL(None).emscripten_console_log(b'through the table')";
    let outcome = exits(Py, code, 0).await;
    assert_eq!(
        outcome.stdout,
        "1 1\n42\nTrue\nb' bnoorrsstux'\n[(2, 'b'), (1, 'a')]\n1 True False\nb'functionfunction'\nthrough the table\n",
        "{outcome:#?}"
    );
}

/// Pyodide's package index, which the memory snapshot holds and a realm
/// restored from it does not rebuild: which package a missing module is in.
const MISSING_MODULES: &str = r#"
import _pyodide._importhook as hook
for name in ("numpy", "sqlite3"):
    try:
        __import__(name)
    except ModuleNotFoundError as e:
        hook.add_note_to_module_not_found_error(e)
        print(e.__notes__[0].splitlines()[0])
"#;

#[tokio::test]
async fn python_knows_which_pyodide_package_has_a_missing_module() {
    let outcome = exits(Py, MISSING_MODULES, 0).await;
    assert_eq!(
        outcome.stdout,
        "The module 'numpy' is included in the Pyodide distribution, but it is not installed.\n\
         The module 'sqlite3' is unvendored from the Python standard library in the Pyodide distribution.\n",
        "{outcome:#?}"
    );
}

#[tokio::test]
async fn python_traceback_has_no_harness_frames() {
    let outcome = exits(Py, "def f():\n    return 1 / 0\n\nf()", 1).await;
    // A session names each exec's source after its turn.
    let file = if in_sessions() { "<exec 1>" } else { "main.py" };
    assert_eq!(
        outcome.stderr,
        "Traceback (most recent call last):\n  File \"main.py\", line 4, in <module>\n    f()\n    ~^^\n  File \"main.py\", line 2, in f\n    return 1 / 0\n           ~~^~~\nZeroDivisionError: division by zero\n"
            .replace("main.py", file)
    );
    let syntax = exits(Py, "def f(:\n    pass", 1).await;
    assert!(syntax.stderr.starts_with(&format!("  File \"{file}\", line 1")), "{syntax:#?}");
    assert!(syntax.stderr.ends_with("SyntaxError: invalid syntax\n"), "{syntax:#?}");
}

#[tokio::test]
async fn python_name_is_main_and_top_level_await_works() {
    let outcome = exits(Py, "import asyncio\nawait asyncio.sleep(0.01)\nprint(__name__)", 0).await;
    assert_eq!(outcome.stdout, "__main__\n");
}

#[tokio::test]
async fn stdin_reaches_the_program() {
    let mut job = spec(Py, "name = input()\nrest = __import__('sys').stdin.read()\nprint(f'hello {name}', repr(rest))");
    job.stdin = "runbox\nline two\n".into();
    let outcome = run_spec(&job).await;
    assert_eq!(outcome.stdout, "hello runbox 'line two\\n'\n", "{outcome:#?}");

    let mut job =
        spec(Js, "const text = await new Response(Deno.stdin.readable).text(); console.log(JSON.stringify(text));");
    job.stdin = "a\nb\u{e9}".into();
    let outcome = run_spec(&job).await;
    assert_eq!(outcome.stdout, "\"a\\nb\u{e9}\"\n", "{outcome:#?}");
}

#[tokio::test]
async fn program_that_ignores_a_large_stdin_still_runs() {
    let mut job = spec(Js, "console.log('ignored')");
    job.stdin = "z".repeat(4 * 1024 * 1024);
    let outcome = run_spec(&job).await;
    assert_eq!((outcome.status, outcome.stdout.as_str()), (Status::Completed, "ignored\n"));
}

#[tokio::test]
async fn invalid_utf8_is_replaced() {
    let outcome = exits(Js, "Deno.stdout.writeSync(new Uint8Array([0x61, 0xff, 0xfe, 0x62]))", 0).await;
    assert_eq!(outcome.stdout, "a\u{fffd}\u{fffd}b");
    let outcome =
        exits(Py, "import sys\nsys.stdout.buffer.write(b'a\\xffb')\nsys.stderr.buffer.write(b'\\xc3')", 0).await;
    assert_eq!((outcome.stdout.as_str(), outcome.stderr.as_str()), ("a\u{fffd}b", "\u{fffd}"));
}

#[tokio::test]
async fn long_line_without_newline() {
    let outcome = exits(Js, "Deno.stdout.writeSync(new TextEncoder().encode('q'.repeat(50000)))", 0).await;
    assert_eq!(outcome.stdout, "q".repeat(50000));
    let outcome = exits(Py, "import sys\nsys.stdout.write('q' * 50000)", 0).await;
    assert_eq!(outcome.stdout, "q".repeat(50000));
}

#[tokio::test]
async fn nul_bytes_pass_through() {
    let outcome = exits(Js, "Deno.stdout.writeSync(new Uint8Array([0x61, 0, 0x62]))", 0).await;
    assert_eq!(outcome.stdout, "a\0b");
    let outcome = exits(Py, "print('a\\0b', end='')", 0).await;
    assert_eq!(outcome.stdout, "a\0b");
}

#[tokio::test]
async fn unicode_round_trips() {
    let outcome = exits(Py, "print('h\u{e9}llo \u{1f600}')", 0).await;
    assert_eq!(outcome.stdout, "h\u{e9}llo \u{1f600}\n");
    let outcome = exits(Js, "console.log('h\u{e9}llo \u{1f600}')", 0).await;
    assert_eq!(outcome.stdout, "h\u{e9}llo \u{1f600}\n");
}

#[tokio::test]
async fn args_reach_the_program() {
    let mut job = spec(Js, "console.log(JSON.stringify(Deno.args), process.argv.slice(2).join('|'))");
    job.args = vec!["one".into(), "two words".into(), "".into()];
    let outcome = run_spec(&job).await;
    assert_eq!(outcome.stdout, "[\"one\",\"two words\",\"\"] one|two words|\n", "{outcome:#?}");
    let mut job = spec(Py, "import sys\nprint(sys.argv)");
    job.args = vec!["--flag".into(), "\u{e9}".into()];
    let outcome = run_spec(&job).await;
    assert_eq!(outcome.stdout, "['main.py', '--flag', '\u{e9}']\n", "{outcome:#?}");
}

#[tokio::test]
async fn verdicts_compare_stdout_with_what_was_expected() {
    use runbox_common::{Compare, Verdict};
    let judged = |language, code: &str, expected: &str, compare| {
        let mut job = spec(language, code);
        job.expected_stdout = Some(expected.into());
        job.compare = compare;
        job.timeout_ms = Some(2000);
        async move { run_spec(&job).await.verdict }
    };
    assert_eq!(judged(Py, "print(2 + 2)", "4\n", Compare::Exact).await, Some(Verdict::Accepted));
    assert_eq!(judged(Py, "print(2 + 2, '')", "4\n", Compare::Exact).await, Some(Verdict::WrongAnswer));
    assert_eq!(judged(Py, "print(2 + 2, '')\nprint()", "4\n", Compare::Trim).await, Some(Verdict::Accepted));
    assert_eq!(judged(Js, "console.log(5)", "4\n", Compare::Trim).await, Some(Verdict::WrongAnswer));
    assert_eq!(judged(Js, "console.log(4); Deno.exit(2)", "4\n", Compare::Exact).await, Some(Verdict::RuntimeError));
    assert_eq!(judged(Js, "for (;;) {}", "4\n", Compare::Exact).await, Some(Verdict::Timeout));
    assert_eq!(run(Js, "console.log(4)").await.verdict, None, "no expectation, no verdict");
}

fn decoded(file: &runbox_common::OutputFile) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(&file.content).expect("base64")
}

/// `return_files` in both lanes: what the program wrote comes back, and
/// nothing else, within the cap, without touching stdout.
#[tokio::test]
async fn python_returns_the_files_it_wrote() {
    use runbox_common::{FileEncoding, InputFile, JobSpec, MAX_RETURN_FILES_BYTES, ReturnFiles};
    use tokio_util::sync::CancellationToken;
    let code = r#"
import os
os.makedirs("out/deep", exist_ok=True)
open("out/deep/a.txt", "w").write("hello")
open("bin.dat", "wb").write(bytes(range(256)))
open("changed.txt", "w").write("new")
os.symlink("/etc/passwd", "link")
os.chdir("out")
print("done")
"#;
    let input = |path: &str| InputFile { path: path.into(), content: "given".into(), encoding: FileEncoding::Utf8 };
    for shared_lane in [None, Some("returned-files".to_owned())] {
        let runner = runner_with(limits(), &std::env::temp_dir()).await;
        let job = JobSpec {
            files: vec![input("kept.txt"), input("changed.txt")],
            return_files: ReturnFiles::All,
            shared_lane: shared_lane.clone(),
            ..spec(Py, code)
        };
        let outcome = runner.run(&job, &CancellationToken::new()).await.outcome;
        assert_eq!((outcome.stdout.as_str(), outcome.exit_code), ("done\n", Some(0)), "{outcome:#?}");
        let paths: Vec<&str> = outcome.files.iter().map(|f| f.path.as_str()).collect();
        // Sorted; the unchanged input and the link are not returned.
        assert_eq!(paths, ["bin.dat", "changed.txt", "out/deep/a.txt"], "{shared_lane:?}: {outcome:#?}");
        assert_eq!(decoded(&outcome.files[0]), (0..=255).collect::<Vec<u8>>());
        assert_eq!(decoded(&outcome.files[1]), b"new");
        assert!(!outcome.files_truncated && outcome.files.iter().all(|f| !f.truncated));

        let listed = JobSpec {
            return_files: ReturnFiles::Paths(vec!["kept.txt".into(), "missing.txt".into(), "link".into()]),
            ..job.clone()
        };
        let outcome = runner.run(&listed, &CancellationToken::new()).await.outcome;
        let paths: Vec<&str> = outcome.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["kept.txt"], "{outcome:#?}");

        let code = "open('a.bin', 'wb').write(b'a' * 900_000)\nopen('b.bin', 'wb').write(b'b' * 900_000)";
        let big = JobSpec { return_files: ReturnFiles::All, shared_lane: shared_lane.clone(), ..spec(Py, code) };
        let outcome = runner.run(&big, &CancellationToken::new()).await.outcome;
        assert!(outcome.files_truncated, "{:?}", outcome.files.iter().map(|f| (&f.path, f.size)).collect::<Vec<_>>());
        let kept: usize = outcome.files.iter().map(|f| decoded(f).len()).sum();
        assert_eq!(kept, MAX_RETURN_FILES_BYTES);
        assert_eq!((outcome.files[1].size, outcome.files[1].truncated), (900_000, true));
    }
}
