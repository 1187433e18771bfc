//! Verdicts on everything a program wrote, past the 1 MiB output cap:
//! output that matches up to the cap and then goes wrong is a wrong answer,
//! through the native API and through `/judge0`, and output past the cap
//! that still matches is accepted, with `stdout_truncated` set.

use serde_json::{Value, json};

use crate::util::*;

const MIB: usize = 1024 * 1024;

/// Python programs, each with its expectation and the verdict it earns.
fn cases() -> Vec<(&'static str, String, &'static str, &'static str, bool)> {
    let a_mib = "A".repeat(MIB);
    vec![
        // ok, newlines up to the cap, then output the kept bytes do not show.
        (
            "import sys\nsys.stdout.write('ok' + '\\n' * ((1 << 20) - 2) + 'WRONG EXTRA OUTPUT')",
            "ok\n".into(),
            "trim",
            "wrong_answer",
            true,
        ),
        // Exactly a MiB of A expected, and one B more.
        ("import sys\nsys.stdout.write('A' * (1 << 20) + 'B')", a_mib.clone(), "exact", "wrong_answer", true),
        ("import sys\nsys.stdout.write('A' * (1 << 20))", a_mib.clone(), "exact", "accepted", false),
        // Past the cap, and what follows it only trailing whitespace.
        ("import sys\nsys.stdout.write('A' * (1 << 20) + ' \\n' * (1 << 20))", a_mib, "trim", "accepted", true),
    ]
}

#[tokio::test]
async fn output_past_the_cap_is_judged_on_all_of_it() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    for (code, expected, compare, verdict, truncated) in cases() {
        let body = json!({ "language": "python", "code": code, "expected_stdout": expected, "compare": compare });
        let (status, job) = api.submit(body, Some(60)).await;
        let brief = json!({ "status": job["status"], "verdict": job["verdict"], "stderr": job["stderr"] });
        assert_eq!(status, 200, "{code}: {brief}");
        assert_eq!(
            (job["status"].as_str(), job["verdict"].as_str(), job["stdout_truncated"].as_bool()),
            (Some("completed"), Some(verdict), Some(truncated)),
            "{code}: {brief}"
        );
        assert_eq!(job["stdout"].as_str().map(str::len), Some(MIB), "{code}: the kept bytes are the cap's worth");
    }

    // Test cases, which run Python in the shared lane: the same for each.
    let program = json!({
        "language": "python",
        "code": "import sys\nsys.stdout.write('ok' + '\\n' * (1 << 20) + sys.stdin.read())",
        "compare": "trim",
    });
    let cases = json!([
        { "stdin": "WRONG EXTRA OUTPUT", "expected_stdout": "ok\n" },
        { "stdin": " \t\n\n", "expected_stdout": "ok\n" },
    ]);
    let response = api
        .http
        .post(api.url("/v1/batches"))
        .bearer_auth(ALICE)
        .json(&json!({ "program": program, "cases": cases }))
        .send()
        .await
        .expect("post");
    assert_eq!(response.status().as_u16(), 202);
    let submitted: Value = response.json().await.expect("json");
    let id = submitted["id"].as_str().expect("id");
    let response =
        api.http.get(api.url(&format!("/v1/batches/{id}?wait=60"))).bearer_auth(ALICE).send().await.expect("get");
    let batch: Value = response.json().await.expect("json");
    let jobs = batch["jobs"].as_array().expect("jobs");
    let judged: Vec<(&str, bool)> =
        jobs.iter().map(|job| (job["verdict"].as_str().unwrap_or("none"), job["stdout_truncated"] == true)).collect();
    assert_eq!(judged, [("wrong_answer", true), ("accepted", true)], "{}", batch["verdicts"]);
}

#[tokio::test]
async fn judge0_judges_output_past_the_cap_on_all_of_it() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    let submit = async |code: &str, expected: &str| -> Value {
        let body = json!({ "source_code": code, "language_id": 71, "expected_output": expected });
        let response = api
            .http
            .post(api.url("/judge0/submissions?wait=true&fields=status,stderr"))
            .header("X-Auth-Token", ALICE)
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert_eq!(response.status().as_u16(), 201);
        response.json().await.expect("json")
    };
    // Judge0 compares as `trim` does.
    let flood = "import sys\nsys.stdout.write('ok' + '\\n' * ((1 << 20) - 2) + 'WRONG EXTRA OUTPUT')";
    let answer = submit(flood, "ok\n").await;
    assert_eq!(answer["status"], json!({ "id": 4, "description": "Wrong Answer" }), "{answer}");
    let padded = "import sys\nsys.stdout.write('ok' + ' \\n' * (1 << 20))";
    let answer = submit(padded, "ok\n").await;
    assert_eq!(answer["status"], json!({ "id": 3, "description": "Accepted" }), "{answer}");
}
