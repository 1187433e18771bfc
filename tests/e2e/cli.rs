//! The `runbox` command line against a real stack: a program's output and
//! exit code pass through, timeouts and errors get their own exit codes,
//! a JSONL file runs as a batch with JSON lines out, and files move in and
//! out of a session.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::util::*;

async fn runbox(api: &Api, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = tokio::process::Command::new(bin("runbox"));
    command.args(args).env("RUNBOX_URL", &api.base).env("RUNBOX_TOKEN", ALICE).env_remove("NO_COLOR");
    command.stdin(if stdin.is_some() { std::process::Stdio::piped() } else { std::process::Stdio::null() });
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("runbox");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        pipe.write_all(text.as_bytes()).await.expect("stdin");
    }
    child.wait_with_output().await.expect("runbox ran")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn run_passes_output_and_exit_code_through() {
    let stack = Stack::start(&[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let program = write(
        dir.path(),
        "prog.py",
        "import sys\nprint(sys.argv[1:], input())\nprint('oops', file=sys.stderr)\nsys.exit(3)\n",
    );
    let input = write(dir.path(), "input.txt", "hello\n");
    let out = runbox(&stack.api, &["run", &program, "--stdin", &input, "--", "a", "b"], None).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "['a', 'b'] hello\n");
    assert_eq!(text(&out.stderr), "oops\n");

    // The language from the extension, or from --language; code from stdin.
    let js = write(dir.path(), "prog.mjs", "console.log(6 * 7)");
    let out = runbox(&stack.api, &["run", &js], None).await;
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "42\n".to_owned()));
    let out = runbox(&stack.api, &["run", "-", "--language", "ts"], Some("const n: number = 7; console.log(n)")).await;
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "7\n".to_owned()));
}

#[tokio::test]
async fn run_prints_as_the_program_prints() {
    let stack = Stack::start(&[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let program =
        write(dir.path(), "slow.py", "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')\n");
    let mut command = tokio::process::Command::new(bin("runbox"));
    command.args(["run", &program]).env("RUNBOX_URL", &stack.api.base).env("RUNBOX_TOKEN", ALICE);
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("runbox");
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::time::timeout(std::time::Duration::from_secs(60), stdout.read_line(&mut line))
        .await
        .expect("a line")
        .expect("read");
    assert_eq!(line, "first\n");
    let first_at = std::time::Instant::now();
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut rest).await.expect("rest");
    assert_eq!(rest, "second\n");
    // The program slept between its lines: the first was printed before it woke.
    assert!(first_at.elapsed() >= std::time::Duration::from_millis(1000), "runbox printed only at the end");
    assert_eq!(child.wait().await.expect("exit").code(), Some(0));
}

#[tokio::test]
async fn a_timeout_and_a_refused_request_have_their_own_exit_codes() {
    let stack = Stack::start(&[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let looping = write(dir.path(), "loop.js", "while (true) {}");
    let out = runbox(&stack.api, &["run", &looping, "--timeout", "500"], None).await;
    assert_eq!(out.status.code(), Some(124), "timeout: {}", text(&out.stderr));

    let out = runbox(&stack.api, &["run", &looping, "--language", "cobol"], None).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("invalid_field"), "{}", text(&out.stderr));
    let out = runbox(&stack.api, &["run", &looping, "--token", "not-a-token-at-all-0123"], None).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("unauthorized"), "{}", text(&out.stderr));
    let unknown = write(dir.path(), "prog.rb", "puts 1");
    let out = runbox(&stack.api, &["run", &unknown], None).await;
    assert!(text(&out.stderr).contains("--language"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn submit_get_and_cancel() {
    let stack = Stack::start(&[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let quick = write(dir.path(), "quick.py", "print('queued')");
    let out = runbox(&stack.api, &["submit", &quick], None).await;
    let id = text(&out.stdout).trim().to_owned();
    assert_eq!(id.len(), 36, "an id: {id:?} {}", text(&out.stderr));
    let out = runbox(&stack.api, &["get", &id, "--wait"], None).await;
    let job: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!((job["status"].as_str(), job["stdout"].as_str()), (Some("completed"), Some("queued\n")));

    let slow = write(dir.path(), "slow.js", "await new Promise((r) => setTimeout(r, 8000))");
    let out = runbox(&stack.api, &["submit", &slow, "--timeout", "9000"], None).await;
    let id = text(&out.stdout).trim().to_owned();
    let out = runbox(&stack.api, &["cancel", &id], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let job = stack.api.until_status(&id, "cancelled", std::time::Duration::from_secs(20)).await;
    assert_eq!(job["status"], "cancelled");
}

#[tokio::test]
async fn batch_prints_json_lines_and_a_summary() {
    let stack = Stack::start(&[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let lines = [
        r#"{"language": "python", "code": "print(input())", "stdin": "1\n", "expected_stdout": "1\n"}"#,
        r#"{"language": "js", "code": "console.log(2)", "expected_stdout": "3\n"}"#,
        "",
        r#"{"language": "python", "code": "print(3)"}"#,
    ];
    let file = write(dir.path(), "jobs.jsonl", &lines.join("\n"));
    let out = runbox(&stack.api, &["batch", &file], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut results: Vec<Value> =
        text(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    results.sort_by_key(|job| job["index"].as_u64());
    let stdouts: Vec<&str> = results.iter().map(|job| job["stdout"].as_str().unwrap_or("")).collect();
    assert_eq!(stdouts, ["1\n", "2\n", "3\n"]);
    let verdicts: Vec<Option<&str>> = results.iter().map(|job| job["verdict"].as_str()).collect();
    assert_eq!(verdicts, [Some("accepted"), Some("wrong_answer"), None]);
    // Piped: a summary, and no progress bar drawn.
    let stderr = text(&out.stderr);
    assert_eq!(stderr, "3 jobs: completed 3\nverdicts: accepted 1, wrong_answer 1\n");

    let broken = write(dir.path(), "broken.jsonl", "{\"language\": \"python\", \"code\": \"1\"}\nnot json\n");
    let out = runbox(&stack.api, &["batch", &broken], None).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("broken.jsonl:2"), "{}", text(&out.stderr));
}

#[tokio::test]
async fn files_move_in_and_out_of_a_session() {
    let stack = Stack::start(&[]).await;
    let create = stack.api.http.post(stack.api.url("/v1/sessions")).bearer_auth(ALICE);
    let response = create.json(&serde_json::json!({ "language": "python" })).send().await.expect("create");
    assert_eq!(response.status().as_u16(), 201);
    let session: Value = response.json().await.expect("json");
    let id = session["id"].as_str().expect("session id").to_owned();
    let dir = tempfile::tempdir().expect("dir");
    let local = write(dir.path(), "rows.csv", "a,b\n1,2\n");

    let out = runbox(&stack.api, &["files", "put", &id, &local, "data/rows.csv"], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "8 bytes to data/rows.csv\n");
    // Without REMOTE, LOCAL's file name; `-` is stdin.
    let out = runbox(&stack.api, &["files", "put", &id, &local], None).await;
    assert_eq!(text(&out.stdout), "8 bytes to rows.csv\n", "{}", text(&out.stderr));
    let out = runbox(&stack.api, &["files", "put", &id, "-", "data/note.txt"], Some("from stdin")).await;
    assert_eq!(text(&out.stdout), "10 bytes to data/note.txt\n", "{}", text(&out.stderr));

    let out = runbox(&stack.api, &["files", "ls", &id], None).await;
    let lines: Vec<String> =
        text(&out.stdout).lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("directory ") && lines[0].ends_with(" data/"), "{lines:?}");
    assert!(lines[1].starts_with("file 8 ") && lines[1].ends_with(" rows.csv"), "{lines:?}");
    let out = runbox(&stack.api, &["files", "ls", &id, "data"], None).await;
    let listing = text(&out.stdout);
    let paths: Vec<&str> = listing.lines().filter_map(|l| l.split_whitespace().last()).collect();
    assert_eq!(paths, ["data/note.txt", "data/rows.csv"]);

    let out = runbox(&stack.api, &["files", "get", &id, "data/note.txt", "-"], None).await;
    assert_eq!((out.status.code(), text(&out.stdout)), (Some(0), "from stdin".to_owned()), "{}", text(&out.stderr));
    let copy = dir.path().join("copy.csv");
    let out = runbox(&stack.api, &["files", "get", &id, "data/rows.csv", copy.to_str().expect("utf-8")], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&copy).expect("copied"), "a,b\n1,2\n");

    let out = runbox(&stack.api, &["files", "rm", &id, "data/rows.csv"], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = runbox(&stack.api, &["files", "get", &id, "data/rows.csv", "-"], None).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("no_file"), "{}", text(&out.stderr));
    let out = runbox(&stack.api, &["files", "put", &id, &local, "../escape.csv"], None).await;
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("invalid_path"), "{}", text(&out.stderr));
}
