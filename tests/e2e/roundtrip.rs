//! A job goes in over HTTP and its result comes back, in every language.

use std::time::Duration;

use serde_json::json;

use crate::util::*;

#[tokio::test]
async fn every_language_round_trips() {
    let stack = Stack::start(&[]).await;
    for (language, code, stdout) in [
        ("python", "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", "6\n"),
        (
            "javascript",
            "const t = await new Response(Deno.stdin.readable).text(); console.log(t.split(' ').map(Number).reduce((a, b) => a + b))",
            "6\n",
        ),
        (
            "ts",
            "const text: string = await new Response(Deno.stdin.readable).text();\nconsole.log(text.split(' ').map(Number).reduce((a, b) => a + b));",
            "6\n",
        ),
    ] {
        let (status, job) =
            stack.api.submit(json!({ "language": language, "code": code, "stdin": "1 2 3" }), Some(60)).await;
        assert_eq!(status, 200, "{job}");
        assert_eq!(job["status"], "completed", "{job}");
        assert_eq!(job["stdout"], stdout, "{job}");
        assert_eq!(job["stderr"], "", "{job}");
        assert_eq!(job["exit_code"], 0);
        assert_eq!(job["stdout_truncated"], false);
        for field in ["id", "created_at", "started_at", "finished_at"] {
            assert!(job[field].is_string(), "{field} missing: {job}");
        }
        assert!(job["duration_ms"].is_u64(), "{job}");
        let timings = &job["timings"];
        assert_eq!(timings["run_ms"], job["duration_ms"], "{job}");
        for field in ["queue_ms", "boot_ms", "write_ms"] {
            assert!(timings[field].is_u64(), "timings.{field} missing: {job}");
        }
    }
}

#[tokio::test]
async fn warm_children_serve_jobs_without_a_boot() {
    let stack = Stack::start(&[]).await;
    for (language, code) in [("python", "print(1)"), ("javascript", "console.log(1)")] {
        let mut boots = Vec::new();
        for _ in 0..10 {
            let job = stack.api.run(language, code).await;
            assert_eq!(job["stdout"], "1\n", "{job}");
            let boot = job["timings"]["boot_ms"].as_u64().expect("boot_ms");
            boots.push(boot);
            if boot == 0 {
                break;
            }
            // Give the pool time to warm a child, generously: the other
            // tests load the same 2 cores.
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        assert_eq!(boots.last(), Some(&0), "{language}: no job found a warm child: boots {boots:?}");
    }
}

#[tokio::test]
async fn submit_then_poll() {
    let stack = Stack::start(&[]).await;
    let (status, accepted) =
        stack.api.submit(json!({ "language": "py", "code": "import sys\nprint('out')\nsys.exit(4)" }), None).await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["status"], "queued");
    let id = accepted["id"].as_str().expect("id");
    let job = stack.api.until_status(id, "completed", Duration::from_secs(60)).await;
    assert_eq!(job["exit_code"], 4);
    assert_eq!(job["stdout"], "out\n");
    assert_eq!(job["language"], "python");
}

#[tokio::test]
async fn limits_come_back_as_statuses() {
    let stack = Stack::start(&[]).await;
    let (_, job) =
        stack.api.submit(json!({ "language": "js", "code": "for (;;) {}", "timeout_ms": 500 }), Some(30)).await;
    assert_eq!((job["status"].as_str(), job["exit_code"].is_null()), (Some("timeout"), true), "{job}");
    let job = stack.api.run("js", "const a = []; for (;;) a.push(new Array(1e6).fill(1));").await;
    assert_eq!(job["status"], "memory_exceeded", "{job}");
    let job = stack.api.run("py", "print('x' * 2_000_000)").await;
    assert_eq!(
        (job["status"].as_str(), job["stdout_truncated"].as_bool()),
        (Some("completed"), Some(true)),
        "{}",
        job["status"]
    );
    let job = stack.api.run("js", "await fetch('http://127.0.0.1:9/')").await;
    assert_eq!(job["exit_code"], 1, "{job}");
}

#[tokio::test]
async fn runtimes_reports_versions_limits_and_isolation() {
    let stack = Stack::start(&[]).await;
    // The worker's first heartbeat lands just after it starts.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let body = loop {
        let response = stack.api.http.get(stack.api.url("/v1/runtimes")).bearer_auth(ALICE).send().await.expect("get");
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.expect("json");
        if body["workers"].as_array().is_some_and(|w| !w.is_empty()) || std::time::Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(body["languages"], json!(["python", "javascript", "typescript"]));
    assert_eq!(body["limits"]["max_timeout_ms"], 10000);
    let worker = &body["workers"][0];
    assert_eq!(worker["deno"], "2.9.6", "{body}");
    assert_eq!(worker["pyodide"], "0.29.4", "{body}");
    let packages = worker["python_packages"].as_array().expect("python_packages");
    assert!(packages.iter().any(|p| p["name"] == "pytest" && p["version"].is_string()), "{body}");
    let layers = worker["isolation"].as_array().expect("layers");
    assert!(layers.contains(&json!("deno_permissions")), "{body}");
}

#[tokio::test]
async fn metrics_are_served_behind_the_token() {
    let stack = Stack::start(&[]).await;
    stack.api.run("js", "console.log(1)").await;
    let unauthorized = stack.api.http.get(stack.api.url("/metrics")).send().await.expect("get");
    assert_eq!(unauthorized.status(), 401);
    let text = stack
        .api
        .http
        .get(stack.api.url("/metrics"))
        .bearer_auth(ALICE)
        .send()
        .await
        .expect("get")
        .text()
        .await
        .expect("text");
    for name in [
        "runbox_api_jobs_submitted_total{language=\"javascript\"} 1",
        "runbox_api_queue_depth 0",
        "runbox_api_workers 1",
        "runbox_api_queue_full_total 0",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
}

#[tokio::test]
async fn args_files_and_verdicts_travel_through_the_api() {
    let stack = Stack::start(&[]).await;
    let api = &stack.api;
    let (status, job) = api
        .submit(
            json!({
                "language": "py",
                "code": "import sys\nprint(open('in/x.csv').read().strip(), sys.argv[1:], open('b.bin', 'rb').read())",
                "args": ["-v"],
                "files": [
                    { "path": "in/x.csv", "content": "a,b" },
                    { "path": "b.bin", "content": "AAE=", "encoding": "base64" },
                ],
                "expected_stdout": "a,b ['-v'] b'\\x00\\x01'\n",
            }),
            Some(60),
        )
        .await;
    assert_eq!((status, job["verdict"].as_str()), (200, Some("accepted")), "{job}");
    let (status, error) =
        api.submit(json!({ "language": "js", "code": "1", "files": [{ "path": "../x", "content": "" }] }), None).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
    assert!(error["error"]["message"].as_str().unwrap_or("").contains("\"../x\""), "names the path: {error}");

    // Files written come back, base64-encoded, without touching stdout.
    let code = "open('out.txt', 'w').write('written')\nprint('ok')";
    let (status, job) =
        api.submit(json!({ "language": "py", "code": code, "return_files": ["out.txt"] }), Some(60)).await;
    assert_eq!((status, job["stdout"].as_str()), (200, Some("ok\n")), "{job}");
    assert_eq!(job["files"], json!([{ "path": "out.txt", "content": "d3JpdHRlbg==", "size": 7, "truncated": false }]));
    assert!(job.get("files_truncated").is_none(), "{job}");
    for (body, needle) in [
        (json!({ "language": "js", "code": "1", "return_files": true }), "Python"),
        (json!({ "language": "py", "code": "1", "return_files": ["/etc/passwd"] }), "/etc/passwd"),
        (json!({ "language": "py", "code": "1", "return_files": "yes" }), "true, false"),
    ] {
        let (status, error) = api.submit(body, None).await;
        assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
        assert!(error["error"]["message"].as_str().unwrap_or("").contains(needle), "{needle}: {error}");
    }
}

#[tokio::test]
async fn the_job_object_carries_measured_cpu_and_memory() {
    let stack = Stack::start(&[]).await;
    // Python runs in the shared lane by default; JS in a single-use child.
    for (language, code) in [
        ("python", "b = bytearray(100_000_000)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint(len(b))"),
        (
            "javascript",
            "const b = new Uint8Array(100_000_000); for (let i = 0; i < b.length; i += 4096) b[i] = 1; console.log(b.length)",
        ),
    ] {
        let (status, job) = stack.api.submit(json!({ "language": language, "code": code }), Some(60)).await;
        assert_eq!(status, 200, "{job}");
        assert_eq!(job["status"], "completed", "{job}");
        assert!(job["cpu_ms"].is_u64(), "cpu_ms missing: {job}");
        let peak = job["peak_memory_bytes"].as_u64().unwrap_or_else(|| panic!("peak_memory_bytes missing: {job}"));
        assert!(peak >= 100_000_000, "a 100 MB allocation reported {peak} bytes: {job}");
    }
}
