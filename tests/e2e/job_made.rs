//! Issue 43, rows 1 to 4: whatever bytes a job makes cross the protocols
//! between its child and the api, and the job's ending stays its own.
//! `internal_error` (and SandboxFusion's `SandboxError`) means runbox
//! failed; nothing a program writes produces it.

use serde_json::{Value, json};

use crate::util::*;

/// A Python program that writes files named as no JSON text can carry,
/// prints a wrong answer and exits 1.
const LONE_SURROGATE: &str = "open(b'\\xed\\xa0\\x80', 'wb').write(b'x')\nprint(5)\nraise SystemExit(1)";

/// The same with 64 files of 16,383 bytes, each named with control
/// characters: their escapes once made the report outgrow its line cap.
const CONTROL_NAMES: &str = "for i in range(64):\n    open(''.join(chr(1 + (i + j) % 30) for j in range(200)), 'wb').write(b'y' * 16383)\nprint(5)\nraise SystemExit(1)";

/// The realm's `JSON.stringify`, which its harness uses for the returned
/// files, replaced by the program: a name with a lone surrogate in it.
const FORGED_STRINGIFY: &str = "import js\n\
js.eval(\"JSON.stringify = () => '{\\\"files\\\":[{\\\"path\\\":\\\"' + String.fromCharCode(0xd800) + '\\\",\\\"content\\\":\\\"\\\",\\\"size\\\":0,\\\"truncated\\\":false}],\\\"truncated\\\":false}'\")\n\
open('out.txt', 'w').write('x')\nprint(5)\nraise SystemExit(1)";

async fn post(api: &Api, path: &str, body: &Value) -> Value {
    let response = api.http.post(api.url(path)).bearer_auth(ALICE).json(body).send().await.expect("post");
    assert!(response.status().is_success(), "{path}: {}", response.status());
    response.json().await.expect("json")
}

fn assert_runtime_error(job: &Value, what: &str) {
    let ending = (job["status"].as_str(), job["exit_code"].as_i64(), job["verdict"].as_str());
    assert_eq!(ending, (Some("completed"), Some(1), Some("runtime_error")), "{what}: {:.2000}", job.to_string());
}

#[tokio::test]
async fn job_made_file_names_leave_the_job_its_own_ending() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    for (what, code) in [
        ("a lone surrogate", LONE_SURROGATE),
        ("control characters", CONTROL_NAMES),
        ("a forged stringify", FORGED_STRINGIFY),
    ] {
        for lane in [true, false] {
            let body = json!({ "language": "python", "code": code, "expected_stdout": "4\n", "return_files": true, "shared_runtime": lane });
            let job = post(api, "/v1/jobs?wait=60", &body).await;
            assert_runtime_error(&job, &format!("{what}, shared lane {lane}"));
            // What could not come back is flagged, never an error.
            if what == "control characters" {
                assert_eq!(job["files_truncated"], true, "{what}: {:.500}", job.to_string());
            }
        }
    }
}

/// Row 3: a test-case batch whose first case writes such files: every case
/// is counted, each with its own verdict.
#[tokio::test]
async fn a_test_case_batch_counts_every_case() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    for code in [LONE_SURROGATE, CONTROL_NAMES] {
        let program = json!({ "language": "py", "code": format!("if input() == 'bad':\n    exec({code:?})\nprint(4)"), "return_files": true });
        let cases = json!([{ "stdin": "bad", "expected_stdout": "4\n" }, { "stdin": "ok", "expected_stdout": "4\n" }, { "stdin": "ok", "expected_stdout": "4\n" }]);
        let submitted = post(api, "/v1/batches", &json!({ "program": program, "cases": cases })).await;
        let id = submitted["id"].as_str().expect("id");
        let response = api.http.get(api.url(&format!("/v1/batches/{id}?wait=60"))).bearer_auth(ALICE).send().await;
        let batch: Value = response.expect("get").json().await.expect("json");
        assert_eq!(batch["verdicts"], json!({ "accepted": 2, "runtime_error": 1 }), "{:.2000}", batch.to_string());
    }
}

/// Row 4: SandboxFusion's answer for a program that failed is `Failed`,
/// whatever it did to the files it was asked to fetch; `SandboxError`
/// would make its client retry a failure instead of scoring it.
#[tokio::test]
async fn sandbox_fusion_scores_a_failure_whatever_its_files() {
    let stack = Stack::start(&[]).await;
    for code in [FORGED_STRINGIFY, LONE_SURROGATE] {
        let body = json!({ "language": "python", "code": code, "fetch_files": ["out.txt"] });
        let answer = post(&stack.api, "/sandbox-fusion/run_code", &body).await;
        assert_eq!(answer["status"], "Failed", "{answer}");
        assert_eq!(answer["run_result"]["return_code"], 1, "{answer}");
    }
}
