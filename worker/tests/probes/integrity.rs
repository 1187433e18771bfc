//! Integrity (issue 18): no job reaches the harness, another job's result,
//! the worker's disk or the worker itself.
//!
//! Today the harness runs in the job's JS realm, and Python reaches that
//! realm through `import js`: whatever the harness touches once the
//! program has started (`JSON.parse`, species getters, `Object.prototype`,
//! the process's stdin, unwatched globals), a job can redefine. Each probe
//! here does one such thing and asserts the ending the job would have had
//! if it had not: its own output, exit code and verdict, and the next
//! job's. A probe named for a row says which row of issue 18's table it
//! covers.

use std::time::{Duration, Instant};

use runbox_common::{JobSpec, Language, ReturnFiles, SessionOp, SessionTask, Status, Verdict};
use runbox_worker::sandbox::{Live, Replayed, Restore, SessionChild};
use tokio_util::sync::CancellationToken;

use crate::util::*;

/// Set in the copy of this test binary that [`isolated`] starts.
const ISOLATED: &str = "RUNBOX_PROBE_ISOLATED";

/// The data segment the isolated copy may grow to: a worker host has far
/// less memory to spare than a length a child can claim, and an
/// allocation past this fails at once instead of paging for a minute.
/// Deno children set their own, lower, limit (see `command.rs`).
const ISOLATED_DATA_BYTES: u64 = 4 << 30;

/// Whether the calling test runs its body here. In the suite it does not:
/// this runs a copy of the test binary that runs only `test` (as libtest
/// names it, `integrity::...`) and asserts that the copy passed, so a
/// probe whose failure is an abort of the whole process fails as one test
/// instead of taking the suite down. In that copy it does, under
/// [`ISOLATED_DATA_BYTES`].
async fn isolated(test: &str) -> bool {
    use nix::sys::resource::{Resource, setrlimit};
    if std::env::var_os(ISOLATED).is_some() {
        setrlimit(Resource::RLIMIT_DATA, ISOLATED_DATA_BYTES, ISOLATED_DATA_BYTES).expect("cap the data segment");
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = tokio::process::Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ISOLATED, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .await
        .expect("run the test binary again");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    // "1 passed" also proves the filter found the test: a probe that ran
    // nothing would pass.
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} in a process of its own ended with {}:\n{stdout}\n{stderr}",
        output.status
    );
    false
}

fn expecting(language: Language, code: &str, expected: &str) -> JobSpec {
    JobSpec { expected_stdout: Some(expected.to_owned()), ..spec(language, code) }
}

/// A Python session program that replaces `JSON.parse` in its child and,
/// from the next checkpoint request frame it parses, takes the nonce and
/// writes a checkpoint header claiming LENGTH bytes before the harness
/// writes the real one. It keeps a JS object in its globals, so the
/// session's genuine checkpoint fails too (Pyodide cannot snapshot one):
/// whether or not the forged header reaches the runner, the one right
/// ending of the checkpoint is an error.
const FORGE_CHECKPOINT_HEADER: &str = r#"
import js
keep = js.Object.new()
js.eval(r"""(() => {
  const parse = JSON.parse;
  const encoder = new TextEncoder();
  JSON.parse = function (text, reviver) {
    const value = parse(text, reviver);
    if (value !== null && typeof value === "object" && value.op === "checkpoint") {
      JSON.parse = parse;
      Deno.stdout.writeSync(encoder.encode("\x06runbox-checkpoint:" + value.nonce + ":LENGTH\n"));
    }
    return value;
  };
})()""")
print("forging")
"#;

/// Row 1: a checkpoint header's length is checked before anything is
/// allocated. Today the worker calls `resize` with it and aborts, which is
/// why the body runs in a process of its own (see [`isolated`]).
async fn forged_checkpoint_header(length: u64) {
    let sandbox = sandbox().await;
    let mut session = SessionChild::open(sandbox, Py, Restore::Fresh).await.expect("session opens");
    let task = SessionTask { id: "forger".into(), op: SessionOp::Exec };
    let exec =
        JobSpec { session: Some(task), ..spec(Py, &FORGE_CHECKPOINT_HEADER.replace("LENGTH", &length.to_string())) };
    let (outcome, alive) =
        session.exec(&exec, sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await;
    assert_ran(&outcome, 0, "forging\n");
    assert!(alive, "{outcome:#?}");
    let started = Instant::now();
    let taken = session.checkpoint().await;
    assert!(taken.is_err(), "a checkpoint of a session holding JS references: {:?} bytes", taken.map(|b| b.len()));
    // The forged length is refused at once, not waited for until the
    // checkpoint timeout.
    assert!(started.elapsed() < Duration::from_secs(20), "the checkpoint took {:?}", started.elapsed());
    // The child that forged it may be ended; if it lives on, what it wrote
    // for the checkpoint is not the next exec's output.
    let task = SessionTask { id: "after".into(), op: SessionOp::Exec };
    let exec = JobSpec { session: Some(task), ..spec(Py, "print('after')") };
    let (outcome, alive) =
        session.exec(&exec, sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await;
    if alive {
        assert_ran(&outcome, 0, "after\n");
    }
    drop(session);
    // Nothing else is affected: this process goes on serving sessions.
    let mut next = SessionChild::open(sandbox, Py, Restore::Fresh).await.expect("a new session opens");
    let task = SessionTask { id: "next".into(), op: SessionOp::Exec };
    let exec = JobSpec { session: Some(task), ..spec(Py, "print(6 * 7)") };
    let (outcome, alive) =
        next.exec(&exec, sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await;
    assert_ran(&outcome, 0, "42\n");
    assert!(alive, "{outcome:#?}");
}

/// Row 1: today `memory allocation of 1000000000000000 bytes failed`, and
/// the process aborts.
#[tokio::test]
async fn a_forged_checkpoint_header_claiming_a_petabyte_is_an_error() {
    if isolated("integrity::a_forged_checkpoint_header_claiming_a_petabyte_is_an_error").await {
        forged_checkpoint_header(1_000_000_000_000_000).await;
    }
}

/// Row 1: a length just past 8 GiB, more than any checkpoint may be but
/// one an allocator on a big host might grant (it would then wait a
/// minute for bytes that never come).
#[tokio::test]
async fn a_forged_checkpoint_header_past_any_cap_is_an_error() {
    if isolated("integrity::a_forged_checkpoint_header_past_any_cap_is_an_error").await {
        forged_checkpoint_header((8 << 30) + 1).await;
    }
}

/// JS for `js.eval`: a `Symbol.species` getter on the `Uint8Array`
/// constructor that returns a subclass whose constructor rewrites the
/// bytes it is handed a view of. The harness's captured `subarray` still
/// consults the species, so every write it makes passes through here:
/// `WRONG` becomes `RIGHT`, and the exit status in an end marker becomes 0.
const REWRITE_OUTPUT: &str = r#"(() => {
  const Base = Uint8Array;
  const END = "\x06runbox-end:";
  const STATUS = /^[0-9a-f]{32}:[0-9]:/;
  class Rewriter extends Base {
    constructor(buffer, offset, length) {
      if (typeof length === "number" && length < 4096) {
        const view = new Base(buffer, offset, length);
        let text = "";
        for (let i = 0; i < view.length; i++) text += String.fromCharCode(view[i]);
        for (let at = text.indexOf("WRONG"); at >= 0; at = text.indexOf("WRONG", at + 1)) {
          view.set([82, 73, 71, 72, 84], at);
        }
        const end = text.indexOf(END);
        if (end >= 0 && STATUS.test(text.slice(end + END.length))) view[end + END.length + 33] = 48;
      }
      super(buffer, offset, length);
    }
  }
  Object.defineProperty(Base, Symbol.species, { configurable: true, get: () => Rewriter });
})()"#;

fn plant(js: &str) -> String {
    format!("import js\njs.eval(r\"\"\"{js}\"\"\")\n")
}

/// Row 2: a species getter job A planted does not rewrite the output or
/// the exit status of the batch's later jobs. Today they come back
/// `completed`, exit 0, `RIGHT\n`, `accepted`.
#[tokio::test]
async fn a_species_getter_does_not_rewrite_later_jobs() {
    let runner = lane_runner().await;
    let lane = "integrity-species";
    let planted = run_in(&runner, lane, spec(Py, &(plant(REWRITE_OUTPUT) + "print('planted')"))).await;
    assert_ran(&planted.outcome, 0, "planted\n");
    for _ in 0..2 {
        let failing = run_in(&runner, lane, expecting(Py, "print('WRONG')\nraise SystemExit(3)", "RIGHT\n")).await;
        assert_ran(&failing.outcome, 3, "WRONG\n");
        assert_eq!(failing.outcome.verdict, Some(Verdict::RuntimeError), "{failing:#?}");
        let wrong = run_in(&runner, lane, expecting(Py, "print('WRONG')", "RIGHT\n")).await;
        assert_ran(&wrong.outcome, 0, "WRONG\n");
        assert_eq!(wrong.outcome.verdict, Some(Verdict::WrongAnswer), "{wrong:#?}");
    }
}

/// Row 3: the same from case 0 of a test-case batch (one program, a case
/// per stdin, the shared lane by default): the other cases' runtime errors
/// stay runtime errors. Today they come back `accepted`.
#[tokio::test]
async fn a_species_getter_in_case_zero_leaves_the_other_cases_failing() {
    let runner = lane_runner().await;
    let lane = "integrity-cases";
    let program = format!(
        "import sys\ncase = sys.stdin.read()\nif case == '0':\n    {}\nprint('answer', case)\nif case != '0':\n    1 / 0\n",
        plant(REWRITE_OUTPUT).replace('\n', "\n    ").trim_end()
    );
    for case in 0..5 {
        let job = JobSpec { stdin: case.to_string(), ..expecting(Py, &program, &format!("answer {case}\n")) };
        let report = run_in(&runner, lane, job).await;
        let outcome = &report.outcome;
        if case == 0 {
            assert_ran(outcome, 0, "answer 0\n");
            assert_eq!(outcome.verdict, Some(Verdict::Accepted), "{outcome:#?}");
        } else {
            assert_ran(outcome, 1, &format!("answer {case}\n"));
            assert_eq!(outcome.verdict, Some(Verdict::RuntimeError), "case {case}: {outcome:#?}");
            assert!(outcome.stderr.ends_with("ZeroDivisionError: division by zero\n"), "case {case}: {outcome:#?}");
        }
    }
}

/// Row 4: a read of the process's stdin that a Python job leaves pending
/// does not take the next job's frame. Today the next job never runs: it
/// times out with no output.
#[tokio::test]
async fn a_pending_stdin_read_from_python_does_not_take_the_next_frame() {
    let runner = lane_runner().await;
    let leaves = [
        "import js\njs.eval('Deno.stdin.read(new Uint8Array(1 << 16))')\nprint('left a read')",
        "import js\njs.Deno.stdin.read(js.Uint8Array.new(1 << 16))\nprint('left a read')",
    ];
    for (i, leave) in leaves.into_iter().enumerate() {
        let lane = format!("integrity-py-stdin-{i}");
        let left = run_in(&runner, &lane, spec(Py, leave)).await;
        // A job's realm has no Deno, so no read to leave: the next job must still get its stdin.
        assert_fails_with_any(&left.outcome, &[NO_DENO, NO_DENO_IN_EVAL]);
        let next = JobSpec {
            stdin: "from its own stdin\n".into(),
            timeout_ms: Some(10_000),
            ..expecting(Py, "print(input())", "from its own stdin\n")
        };
        let next = run_in(&runner, &lane, next).await;
        assert_ran(&next.outcome, 0, "from its own stdin\n");
        assert_eq!(next.outcome.verdict, Some(Verdict::Accepted), "after {leave:?}: {next:#?}");
    }
}

/// Row 5: a JS job that reads the process's stdin from its Worker, under
/// a name the lane's text filter does not see, does not take the next
/// job's frame. Today the next job fails with the harness's own
/// `malformed frame header` (or times out).
#[tokio::test]
async fn a_pending_stdin_read_from_a_js_worker_does_not_take_the_next_frame() {
    let runner = lane_runner().await;
    let lane = "integrity-js-stdin";
    let leave = "const input = Deno['std' + 'in']; input.read(new Uint8Array(1 << 16)); console.log('left a read')";
    let left = run_in(&runner, lane, spec(Js, leave)).await;
    assert_ran(&left.outcome, 0, "left a read\n");
    for _ in 0..2 {
        let next = JobSpec { timeout_ms: Some(10_000), ..expecting(Js, "console.log('next')", "next\n") };
        let next = run_in(&runner, lane, next).await;
        assert_ran(&next.outcome, 0, "next\n");
        assert_eq!((next.outcome.stderr.as_str(), next.outcome.verdict), ("", Some(Verdict::Accepted)), "{next:#?}");
    }
}

/// Row 6: a getter planted on `Object.prototype` under a name the harness
/// looks up on the job frame, `return_files`, gets the frame as `this`
/// and writes the out-of-memory marker with the frame's nonce. Today the
/// one-line program is `memory_exceeded`, exit null.
#[tokio::test]
async fn a_getter_on_object_prototype_cannot_report_out_of_memory() {
    let getter = r#"Object.defineProperty(Object.prototype, "return_files", {
  configurable: true,
  get() {
    if (typeof this.nonce === "string" && typeof this.code === "string") {
      Deno.stderr.writeSync(new TextEncoder().encode("\x06runbox-out-of-memory:" + this.nonce + "\n"));
    }
    return undefined;
  },
})"#;
    let outcome = run(Py, &(plant(getter) + "print('one line')")).await;
    assert_ran(&outcome, 0, "one line\n");
    assert_eq!(outcome.stderr, "", "{outcome:#?}");
}

/// Row 7: the same through a species getter, when the job asks for its
/// files back: the harness's write of the files section, which carries
/// the nonce, passes through the job's subclass. Today the program is
/// `memory_exceeded`.
#[tokio::test]
async fn a_species_getter_cannot_report_out_of_memory_through_returned_files() {
    let informer = r#"(() => {
  const Base = Uint8Array;
  const FILES = "\x06runbox-files:";
  const encoder = new TextEncoder();
  let told = false;
  class Informer extends Base {
    constructor(buffer, offset, length) {
      if (!told && typeof length === "number" && length < 4096) {
        const view = new Base(buffer, offset, length);
        let text = "";
        for (let i = 0; i < view.length; i++) text += String.fromCharCode(view[i]);
        const at = text.indexOf(FILES);
        if (at >= 0) {
          told = true;
          const nonce = text.slice(at + FILES.length, at + FILES.length + 32);
          Deno.stderr.writeSync(encoder.encode("\x06runbox-out-of-memory:" + nonce + "\n"));
        }
      }
      super(buffer, offset, length);
    }
  }
  Object.defineProperty(Base, Symbol.species, { configurable: true, get: () => Informer });
})()"#;
    let code = plant(informer) + "open('out.txt', 'w').write('kept')\nprint('one line')";
    let job = JobSpec { return_files: ReturnFiles::All, ..spec(Py, &code) };
    let outcome = run_spec(&job).await;
    assert_ran(&outcome, 0, "one line\n");
    assert_eq!(outcome.stderr, "", "{outcome:#?}");
    let files: Vec<(&str, &str, u64, bool)> =
        outcome.files.iter().map(|f| (f.path.as_str(), f.content.as_str(), f.size, f.truncated)).collect();
    assert_eq!(files, [("out.txt", "a2VwdA==", 4, false)], "{outcome:#?}");
}

/// Row 10: TypeScript modules a program imports from `data:` and `blob:`
/// URLs are transpiled, and Deno caches what it transpiled under
/// DENO_DIR/gen. Today 150 modules of 200 KB put tens of MB there; a JS
/// child writes nothing, so its job directory stays as small as it starts.
#[tokio::test]
async fn transpiled_typescript_imports_stay_off_disk() {
    let code = r#"
const body: string = "z".repeat(200_000);
let imported: number = 0;
for (let i = 0; i < 150; i++) {
  const source = `interface Row${i} { id: number; name: string }
const row: Row${i} = { id: ${i}, name: "${body}" };
export const id: number = row.id;
`;
  const url = i % 2 === 0
    ? "data:application/typescript," + encodeURIComponent(source)
    : URL.createObjectURL(new Blob([source], { type: "application/typescript" }));
  const module: { id: number } = await import(url);
  if (module.id === i) imported++;
}
console.log(imported);
"#;
    let (outcome, disk) = peak_disk_use(Ts, code).await;
    assert_ran(&outcome, 0, "150\n");
    let bound = 2 * 1024 * 1024;
    assert!(disk.peak < bound, "a TS job put {disk:?} bytes on disk (bound {bound}): {outcome:#?}");
}

/// Row 11: what a Python job sets on JS objects the realm fingerprint does
/// not watch does not reach the batch's next job. (`Array` is watched
/// today, and the child is replaced after a change to it; the others are
/// not, and the next job sees the property.)
#[tokio::test]
async fn properties_set_on_js_objects_do_not_reach_the_next_job() {
    let runner = lane_runner().await;
    for target in ["console", "Intl", "performance", "Deno.stdout", "Array", "Map", "Uint8Array"] {
        let lane = format!("integrity-leak-{target}");
        let set =
            run_in(&runner, &lane, spec(Py, &format!("import js\njs.{target}.runbox_leak = 1\nprint('set')"))).await;
        if target.starts_with("Deno") && set.outcome.exit_code == Some(1) {
            // A job's bare realm has no Deno to set anything on.
            assert_fails_with_any(&set.outcome, &[NO_DENO]);
            continue;
        }
        assert_ran(&set.outcome, 0, "set\n");
        let check = expecting(Py, &format!("import js\nprint(hasattr(js.{target}, 'runbox_leak'))"), "False\n");
        let next = run_in(&runner, &lane, check).await;
        assert_ran(&next.outcome, 0, "False\n");
        assert_eq!(next.outcome.verdict, Some(Verdict::Accepted), "after setting {target}.runbox_leak: {next:#?}");
    }
}

/// Issue 18, "Replays": a JavaScript session's restore replays each exec
/// under that exec's own timeout, and the whole replay under the job
/// maximum, never the 120 s a restore once had. A replayed exec that now
/// loops (it read the clock, say) ends the open within its own timeout.
#[tokio::test]
async fn a_replay_that_loops_ends_within_its_execs_timeout() {
    let sandbox = sandbox().await;
    let log = vec![
        Replayed { code: "globalThis.n = 1".into(), timeout_ms: 2_000 },
        Replayed { code: "for (;;) {}".into(), timeout_ms: 1_000 },
    ];
    let started = Instant::now();
    let opened = SessionChild::open(sandbox, Language::Javascript, Restore::Replay(log, Vec::new())).await;
    let took = started.elapsed();
    let error = opened.err().expect("a replay that loops does not open");
    assert!(error.to_string().contains("replaying exec 2"), "{error}");
    assert!(took < Duration::from_secs(8), "the replay ran {took:?}");

    // An older checkpoint, programs alone: each replays under the default.
    let (log, files) = Replayed::parse_log(br#"["globalThis.n = 41"]"#, 3_000).expect("old log");
    let mut session =
        SessionChild::open(sandbox, Language::Javascript, Restore::Replay(log, files)).await.expect("opens");
    let task = SessionTask { id: "replay".into(), op: SessionOp::Exec };
    let exec = JobSpec { session: Some(task), ..spec(Js, "console.log(n + 1)") };
    let (outcome, alive) =
        session.exec(&exec, sandbox, &CancellationToken::new(), &CancellationToken::new(), &Live::default()).await;
    assert!(alive);
    assert_ran(&outcome, 0, "42\n");
}

// A review of the realm-per-job harness, as a stranger with the code in
// hand, found these; each probe failed on the harness it was found in.

/// Two honest jobs after `attack` in one lane: each comes back exactly as it ran.
async fn honest_jobs_after(language: Language, attack: JobSpec) {
    let runner = lane_runner().await;
    let lane = format!("integrity-after-{}", uuid_like(&attack.code));
    let _ = run_in(&runner, &lane, attack).await;
    let (wrong, honest) = match language {
        Language::Python => ("print('WRONG')\nraise SystemExit(3)", "print('honest')"),
        _ => ("console.log('WRONG'); Deno.exit(3)", "console.log('honest')"),
    };
    let failing = run_in(&runner, &lane, expecting(language, wrong, "RIGHT\n")).await;
    assert_ran(&failing.outcome, 3, "WRONG\n");
    assert_eq!(failing.outcome.verdict, Some(Verdict::RuntimeError), "{failing:#?}");
    let fine = run_in(&runner, &lane, expecting(language, honest, "honest\n")).await;
    assert_ran(&fine.outcome, 0, "honest\n");
    assert_eq!(fine.outcome.verdict, Some(Verdict::Accepted), "{fine:#?}");
}

fn uuid_like(code: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    code.hash(&mut hasher);
    format!("{:x}", hasher.finish())
}

/// A Python job's Worker answered early with a reply that carried report
/// fields (`kind`, `interrupted`) inside its files, which the harness
/// once spread into its own report: the job's fake end shifted every
/// later job's status by one.
#[tokio::test]
async fn a_forged_reply_cannot_write_reports_for_later_jobs() {
    let forge = r#"import js
js.postMessage(js.JSON.parse('{"status":0,"files":{"files":[],"truncated":false,"kind":"end","status":0,"clean":true,"interrupted":true}}'))"#;
    let attack = JobSpec { return_files: ReturnFiles::All, ..spec(Py, forge) };
    honest_jobs_after(Py, attack).await;
}

/// A job revoked the `blob:` URL its Worker started from (the blob store
/// is the process's): every later job failed to start.
#[tokio::test]
async fn revoking_the_harness_urls_breaks_no_later_job() {
    honest_jobs_after(Js, spec(Js, "URL.revokeObjectURL(location.href)")).await;
    honest_jobs_after(Py, spec(Py, "import js\njs.URL.revokeObjectURL(js.location.href)")).await;
}

/// A job posted its end early and went on writing after its Worker was
/// terminated: the bytes landed at the start of the next job's output.
#[tokio::test]
async fn output_written_after_a_jobs_end_reaches_no_later_job() {
    let js = "self.postMessage({ status: 0 });\n\
              const t = Date.now(); while (Date.now() - t < 150) {}\n\
              Deno.stdout.writeSync(new TextEncoder().encode('INJECTED\\n'));";
    honest_jobs_after(Js, spec(Js, js)).await;
    let py = "import js, time\njs.postMessage(js.JSON.parse('{\"status\": 0}'))\n\
              t = time.time()\nwhile time.time() - t < 0.15: pass\n\
              js.Deno.stdout.writeSync(js.TextEncoder.new().encode('INJECTED\\n'))";
    honest_jobs_after(Py, spec(Py, py)).await;
}

/// An out-of-memory claim backed only by memory reserved and never
/// touched, less than the cap: not `memory_exceeded`.
#[tokio::test]
async fn reserved_memory_under_the_cap_does_not_confirm_a_claim() {
    let js = "globalThis.k = new ArrayBuffer(140 << 20);\n\
              console.log('one line');\n\
              throw new RangeError('Array buffer allocation failed');";
    let outcome = run(Js, js).await;
    assert_eq!((outcome.status, outcome.exit_code), (Status::Completed, Some(1)), "{outcome:#?}");
    let py = "import js\njs.k = js.ArrayBuffer.new(140 << 20)\n\
              js.postMessage(js.JSON.parse('{\"status\": 0, \"memoryError\": true}'))";
    let outcome = run(Py, py).await;
    assert_ne!(outcome.status, Status::MemoryExceeded, "{outcome:#?}");
}
