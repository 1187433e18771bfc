//! Memory and output floods: the child ends as memory_exceeded or is
//! truncated, and the worker's own memory stays bounded.

use runbox_common::{Language, Status};

use crate::util::*;

async fn out_of_memory(language: Language, code: &str) {
    let outcome = run(language, code).await;
    assert_status(&outcome, Status::MemoryExceeded);
    assert_eq!(outcome.exit_code, None);
}

#[tokio::test]
async fn js_object_bomb() {
    out_of_memory(Js, "const a = []; for (;;) a.push({ x: Math.random(), y: [1, 2, 3] });").await;
}

#[tokio::test]
async fn js_array_buffer_bomb() {
    out_of_memory(Js, "const a = []; for (;;) a.push(new ArrayBuffer(64 * 1024 * 1024));").await;
}

#[tokio::test]
async fn js_touched_array_buffer_bomb() {
    out_of_memory(Js, "const a = []; for (;;) { const b = new Uint8Array(32 * 1024 * 1024); b.fill(1); a.push(b); }")
        .await;
}

#[tokio::test]
async fn js_string_bomb() {
    out_of_memory(Js, "const keep = []; for (;;) keep.push('x'.repeat(1 << 20) + Math.random());").await;
}

#[tokio::test]
async fn js_worker_bomb() {
    out_of_memory(
        Js,
        "const url = URL.createObjectURL(new Blob(['const a = []; for (;;) a.push(new Array(1e6).fill(1));'], { type: 'text/javascript' }));\n\
         for (let i = 0; i < 64; i++) new Worker(url, { type: 'module' });\n\
         await new Promise(() => setInterval(() => {}, 1000));",
    )
    .await;
}

#[tokio::test]
async fn js_single_worker_still_works() {
    let outcome = run(
        Js,
        "const url = URL.createObjectURL(new Blob(['postMessage(6 * 7)'], { type: 'text/javascript' }));\n\
         const w = new Worker(url, { type: 'module' });\n\
         await new Promise((done) => (w.onmessage = (e) => { console.log(e.data); w.terminate(); done(); }));",
    )
    .await;
    assert_status(&outcome, Status::Completed);
    assert_eq!(outcome.stdout, "42\n", "{outcome:#?}");
}

#[tokio::test]
async fn python_bytearray_bomb() {
    let outcome = run(Py, "a = []\nwhile True:\n    a.append(bytearray(10 * 1024 * 1024))").await;
    assert_status(&outcome, Status::MemoryExceeded);
    assert!(outcome.stderr.contains("MemoryError"), "{outcome:#?}");
}

#[tokio::test]
async fn python_list_bomb() {
    let outcome = run(Py, "a = []\nwhile True:\n    a.append(list(range(100000)))").await;
    assert_status(&outcome, Status::MemoryExceeded);
    assert!(outcome.stderr.contains("MemoryError"), "{outcome:#?}");
}

#[tokio::test]
async fn python_memory_error_can_be_caught() {
    let code = "try:\n    a = bytearray(200 * 1024 * 1024)\n    b = bytearray(200 * 1024 * 1024)\nexcept MemoryError:\n    print('caught')";
    let outcome = run(Py, code).await;
    assert_status(&outcome, Status::Completed);
    assert_eq!(outcome.stdout, "caught\n");
}

#[tokio::test]
async fn python_js_array_buffer_bomb() {
    out_of_memory(Py, "import js\nkeep = []\nwhile True:\n    b = js.Uint8Array.new(32 * 1024 * 1024)\n    b.fill(1)\n    keep.append(b)").await;
}

/// Limit on the worker's resident memory while a child floods its output:
/// the runner keeps at most the output cap, whatever the child writes.
const WORKER_RSS_BOUND: u64 = 64 * 1024 * 1024;

async fn output_flood(language: Language, code: &str) {
    let cap = 64 * 1024;
    let (outcome, peak_rss) =
        exec_cli(language, code, &[("RUNBOX_MAX_OUTPUT_BYTES", "65536")], &["--timeout-ms", "3000"]).await;
    assert_status(&outcome, Status::Timeout);
    assert_eq!(outcome.stdout.len(), cap);
    assert!(
        outcome.stdout_truncated && outcome.stderr_truncated,
        "{:?}",
        (outcome.stdout_truncated, outcome.stderr_truncated)
    );
    assert_eq!(outcome.stderr.len(), cap);
    assert!(peak_rss > 0 && peak_rss < WORKER_RSS_BOUND, "worker RSS peaked at {peak_rss} bytes");
}

#[tokio::test]
async fn js_output_flood() {
    output_flood(Js, "const s = 'x'.repeat(1 << 20); for (;;) { console.log(s); console.error(s); }").await;
}

#[tokio::test]
async fn python_output_flood() {
    output_flood(Py, "import sys\ns = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(s)\n    sys.stderr.write(s)")
        .await;
}

#[tokio::test]
async fn output_just_under_the_cap_is_whole() {
    let cap = limits().max_output_bytes;
    let outcome = run(Js, &format!("Deno.stdout.writeSync(new TextEncoder().encode('y'.repeat({cap})))")).await;
    assert_status(&outcome, Status::Completed);
    assert_eq!(outcome.stdout.len(), cap);
    assert!(!outcome.stdout_truncated);
    let outcome = run(Js, &format!("Deno.stdout.writeSync(new TextEncoder().encode('y'.repeat({})))", cap + 1)).await;
    assert_eq!(outcome.stdout.len(), cap);
    assert!(outcome.stdout_truncated);
    assert_eq!(outcome.exit_code, Some(0), "a program that printed too much still ran to its end");
}

/// A job's own lower memory cap holds: 120 MB is well within the worker's
/// cap, and over the 48 MB the job asked for.
#[tokio::test]
async fn a_jobs_own_lower_memory_cap_holds() {
    let programs = [
        (Py, "a = bytearray(120 * 1024 * 1024)\nfor i in range(0, len(a), 4096):\n    a[i] = 1\nprint('kept')"),
        (Js, "const b = new Uint8Array(120 * 1024 * 1024); b.fill(1); console.log('kept')"),
    ];
    for (language, code) in programs {
        let lowered = run_spec(&runbox_common::JobSpec { memory_mb: Some(48), ..spec(language, code) }).await;
        assert_status(&lowered, Status::MemoryExceeded);
        let within = run(language, code).await;
        assert_status(&within, Status::Completed);
        assert_eq!(within.stdout, "kept\n", "{within:#?}");
        // Asking for more than the worker's cap changes nothing.
        let higher = run_spec(&runbox_common::JobSpec { memory_mb: Some(1 << 20), ..spec(language, code) }).await;
        assert_eq!(higher.stdout, "kept\n", "{higher:#?}");
    }
}
