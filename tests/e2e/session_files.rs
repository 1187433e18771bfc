//! The files API of sessions: every route, on a real stack; hostile paths
//! and links; the caps, each refused with the session alive after; another
//! token's session; files the session's code reads and writes; and files
//! across a checkpoint, a fork and a restore.

use reqwest::Method;
use serde_json::{Value, json};

use crate::util::*;

/// A client of one session's files, as `token`.
struct Files<'a> {
    api: &'a Api,
    token: &'a str,
}

/// A response: its status, and its body as bytes.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The error code of a JSON error body.
    fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or("").to_owned()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Files<'_> {
    async fn call(&self, method: Method, path: &str, body: Option<Vec<u8>>) -> Answer {
        let mut request = self.api.http.request(method, self.api.url(path)).bearer_auth(self.token);
        if let Some(body) = body {
            request = request.header("content-type", "application/octet-stream").body(body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        Answer { status, body: response.bytes().await.expect("body").to_vec() }
    }

    async fn json(&self, method: Method, path: &str, body: Value) -> (u16, Value) {
        let response =
            self.api.http.request(method, self.api.url(path)).bearer_auth(self.token).json(&body).send().await;
        let response = response.expect("request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn open(&self, language: &str) -> String {
        let (status, session) = self.json(Method::POST, "/v1/sessions", json!({ "language": language })).await;
        assert_eq!(status, 201, "{session}");
        session["id"].as_str().expect("id").to_owned()
    }

    /// Runs `code` in session `id` and returns its stdout; panics unless it exited 0.
    async fn run(&self, id: &str, code: &str) -> String {
        let (status, result) =
            self.json(Method::POST, &format!("/v1/sessions/{id}/exec"), json!({ "code": code })).await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["exit_code"], 0, "{result}");
        result["stdout"].as_str().expect("stdout").to_owned()
    }

    async fn put(&self, id: &str, path: &str, bytes: impl Into<Vec<u8>>) -> Answer {
        self.call(Method::PUT, &format!("/v1/sessions/{id}/files/{path}"), Some(bytes.into())).await
    }

    async fn get(&self, id: &str, path: &str) -> Answer {
        self.call(Method::GET, &format!("/v1/sessions/{id}/files/{path}"), None).await
    }

    async fn delete(&self, id: &str, path: &str) -> Answer {
        self.call(Method::DELETE, &format!("/v1/sessions/{id}/files/{path}"), None).await
    }

    async fn list(&self, id: &str, dir: Option<&str>) -> Answer {
        let query = dir.map(|d| format!("?path={d}")).unwrap_or_default();
        self.call(Method::GET, &format!("/v1/sessions/{id}/files{query}"), None).await
    }

    /// The names in a listing of `dir`, with their types; panics unless it is 200.
    async fn names(&self, id: &str, dir: Option<&str>) -> Vec<(String, String)> {
        let listing = self.list(id, dir).await;
        assert_eq!(listing.status, 200, "{}", listing.text());
        let files = listing.json()["files"].as_array().cloned().unwrap_or_default();
        files
            .iter()
            .map(|f| (f["name"].as_str().unwrap_or("").into(), f["type"].as_str().unwrap_or("").into()))
            .collect()
    }

    /// Uploads `bytes` to `path` and panics unless it is taken.
    async fn put_ok(&self, id: &str, path: &str, bytes: impl Into<Vec<u8>>) {
        let bytes = bytes.into();
        let size = bytes.len();
        let answer = self.put(id, path, bytes).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.json()["size"], size, "{}", answer.text());
    }

    /// Downloads `path` and panics unless it is there.
    async fn get_ok(&self, id: &str, path: &str) -> Vec<u8> {
        let answer = self.get(id, path).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        answer.body
    }
}

fn alice(api: &Api) -> Files<'_> {
    Files { api, token: ALICE }
}

/// Every byte value, twice: content no text encoding would carry.
fn all_bytes() -> Vec<u8> {
    (0..=255u8).chain((0..=255u8).rev()).collect()
}

#[tokio::test]
async fn every_route_on_a_python_session_and_its_code_sees_the_files() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;

    f.put_ok(&id, "data.csv", "name,score\nada,3\nbob,4\n").await;
    f.put_ok(&id, "raw/sub/all.bin", all_bytes()).await;
    f.put_ok(&id, "caf%C3%A9%20menu.txt", "unicode and a space").await;
    assert_eq!(f.get_ok(&id, "raw/sub/all.bin").await, all_bytes());
    assert_eq!(f.get_ok(&id, "caf%C3%A9%20menu.txt").await, b"unicode and a space");

    // The session's code reads them through open(), pathlib and csv, in its working directory.
    let read = "import csv, os, pathlib\n\
                rows = list(csv.DictReader(open('data.csv')))\n\
                print(os.getcwd(), sum(int(r['score']) for r in rows), \
                pathlib.Path('raw/sub/all.bin').read_bytes() == bytes(range(256)) + bytes(reversed(range(256))), \
                pathlib.Path('café menu.txt').read_text())";
    assert_eq!(f.run(&id, read).await, "/home/pyodide 7 True unicode and a space\n");

    // What it writes, the files API reads; what is overwritten is replaced.
    f.run(&id, "import csv\nwith open('out.csv', 'w', newline='') as out:\n    csv.writer(out).writerow(['total', 7])")
        .await;
    assert_eq!(f.get_ok(&id, "out.csv").await, b"total,7\r\n");
    f.put_ok(&id, "data.csv", "name,score\n").await;
    assert_eq!(f.run(&id, "print(repr(open('data.csv').read()))").await, "'name,score\\n'\n");

    // Listings: name, type, size and modified time.
    let listing = f.list(&id, None).await;
    assert_eq!(listing.status, 200, "{}", listing.text());
    let body = listing.json();
    let entry = |name: &str| body["files"].as_array().and_then(|fs| fs.iter().find(|e| e["name"] == name).cloned());
    let data = entry("data.csv").expect("data.csv listed");
    assert_eq!(
        (data["type"].as_str(), data["size"].as_u64(), data["path"].as_str()),
        (Some("file"), Some(11), Some("data.csv"))
    );
    assert!(unix_ms(data["modified"].as_str().expect("modified")) > 1_600_000_000_000, "{data}");
    assert_eq!(entry("raw").expect("raw listed")["type"], "directory");
    assert_eq!(f.names(&id, Some("raw/sub")).await, vec![("all.bin".into(), "file".into())]);
    let sub = f.list(&id, Some("raw")).await.json();
    assert_eq!(sub["files"][0]["path"], "raw/sub", "{sub}");

    // Wrong kinds, and what is missing.
    assert_eq!((f.get(&id, "raw").await.status, f.get(&id, "raw").await.code()), (422, "not_a_file".into()));
    let through = f.put(&id, "data.csv/inner", "x").await;
    assert_eq!((through.status, through.code()), (422, "not_a_directory".into()));
    assert_eq!(f.list(&id, Some("data.csv")).await.code(), "not_a_directory");
    let over = f.put(&id, "raw", "x").await;
    assert_eq!((over.status, over.code()), (422, "not_a_file".into()));
    let missing = f.get(&id, "nothing.txt").await;
    assert_eq!((missing.status, missing.code()), (404, "no_file".into()));
    assert_eq!(f.list(&id, Some("nowhere")).await.code(), "no_file");

    // Deleting a file, then a directory with what it holds.
    let deleted = f.delete(&id, "data.csv").await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    assert_eq!(f.get(&id, "data.csv").await.code(), "no_file");
    assert_eq!(f.delete(&id, "data.csv").await.code(), "no_file");
    assert_eq!(f.delete(&id, "raw").await.status, 204);
    assert_eq!(f.run(&id, "import os\nprint(sorted(os.listdir('.')))").await, "['café menu.txt', 'out.csv']\n");
}

#[tokio::test]
async fn hostile_paths_and_links_are_refused_with_400() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;
    f.put_ok(&id, "kept.txt", "kept").await;
    let long = "a".repeat(256);
    let hostile = [
        "..%2Fetc%2Fpasswd",
        "a/..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "%2Fhome%2Fpyodide%2Fkept.txt",
        "a%00b",
        "kept.txt%00.png",
        "%FF%FE.txt",
        "a%2F.%2Fb",
        "a%2F%2Fb",
        "a%5Cb",
        long.as_str(),
    ];
    for path in hostile {
        for answer in [f.get(&id, path).await, f.put(&id, path, "x").await, f.delete(&id, path).await] {
            assert_eq!((answer.status, answer.code()), (400, "invalid_path".into()), "{path}: {}", answer.text());
        }
        let listing = f.list(&id, Some(path)).await;
        assert_eq!((listing.status, listing.code()), (400, "invalid_path".into()), "{path}: {}", listing.text());
    }
    // A client's URL drops `.` and `..` segments; a query does not.
    for dir in [".", "..", "%2E%2E", "a/../..", "/"] {
        let listing = f.list(&id, Some(dir)).await;
        assert_eq!((listing.status, listing.code()), (400, "invalid_path".into()), "{dir}: {}", listing.text());
    }
    let message = f.get(&id, "%FF%FE.txt").await.json()["error"]["message"].as_str().unwrap_or("").to_owned();
    assert!(message.contains("UTF-8"), "{message}");

    // Links the session's code makes are listed, never followed.
    f.run(&id, "import os\nos.symlink('/lib', 'lib')\nos.symlink('/home/pyodide/kept.txt', 'alias')").await;
    assert!(f.names(&id, None).await.contains(&("lib".into(), "link".into())));
    let through = [
        f.list(&id, Some("lib")).await,
        f.get(&id, "lib/python3.13/os.py").await,
        f.put(&id, "lib/planted.py", "x").await,
        f.get(&id, "alias").await,
        f.put(&id, "alias", "changed").await,
    ];
    for answer in through {
        assert_eq!((answer.status, answer.code()), (400, "invalid_path".into()), "{}", answer.text());
    }
    // Deleting a link removes the link, not what it points to.
    assert_eq!(f.delete(&id, "alias").await.status, 204);
    assert_eq!(f.get_ok(&id, "kept.txt").await, b"kept");
    assert_eq!(f.run(&id, "import os\nprint(os.path.isdir('/lib'))").await, "True\n");
}

#[tokio::test]
async fn caps_are_refused_with_413_or_422_and_the_session_lives_on() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;
    f.run(&id, "state = 'alive'").await;
    const MIB: usize = 1 << 20;

    // Past the per-file cap: refused before it reaches the session.
    let big = f.put(&id, "big.bin", vec![7u8; 16 * MIB + 1]).await;
    assert_eq!((big.status, big.code()), (413, "file_too_large".into()), "{}", big.text());
    // At it: taken, and read back whole.
    f.put_ok(&id, "full.bin", vec![7u8; 16 * MIB]).await;
    assert_eq!(f.get_ok(&id, "full.bin").await.len(), 16 * MIB);
    assert_eq!(f.delete(&id, "full.bin").await.status, 204);

    // A file the session's code made past the cap is not moved.
    f.run(&id, "open('made.bin', 'wb').write(b'x' * (17 << 20))").await;
    let made = f.get(&id, "made.bin").await;
    assert_eq!((made.status, made.code()), (413, "file_too_large".into()), "{}", made.text());
    assert_eq!(f.delete(&id, "made.bin").await.status, 204);

    // Past the session's total.
    f.put_ok(&id, "one.bin", vec![1u8; 15 * MIB]).await;
    f.put_ok(&id, "two.bin", vec![2u8; 15 * MIB]).await;
    let three = f.put(&id, "three.bin", vec![3u8; 3 * MIB]).await;
    assert_eq!((three.status, three.code()), (413, "session_files_full".into()), "{}", three.text());
    // Replacing a file counts its new size, not both.
    f.put_ok(&id, "two.bin", vec![2u8; 16 * MIB]).await;
    assert_eq!(f.delete(&id, "one.bin").await.status, 204);
    assert_eq!(f.delete(&id, "two.bin").await.status, 204);

    // Past the count of files.
    f.run(&id, "import os\nos.mkdir('many')\nfor i in range(1000):\n    open(f'many/{i}', 'w').write('.')").await;
    let extra = f.put(&id, "extra.txt", "x").await;
    assert_eq!((extra.status, extra.code()), (422, "too_many_files".into()), "{}", extra.text());
    f.put_ok(&id, "many/0", "replaced").await;

    // The session lived through all of it, with its state.
    assert_eq!(f.run(&id, "print(state, open('many/0').read())").await, "alive replaced\n");
}

#[tokio::test]
async fn an_exec_takes_files_in_and_returns_the_files_it_wrote() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;
    f.put_ok(&id, "kept.txt", "untouched").await;
    let exec_path = format!("/v1/sessions/{id}/exec");
    let exec = |body: Value| f.json(Method::POST, &exec_path, body);
    // The code moves away from the home first: the files still land there.
    let code = "import os\nos.makedirs('/tmp/elsewhere', exist_ok=True)\nos.chdir('/tmp/elsewhere')\n\
                os.chdir('/home/pyodide')\nrows = open('in/data.csv').read().splitlines()\n\
                open('out/sum.txt', 'w').write(str(sum(int(r) for r in rows)))\n\
                open('in/data.csv', 'a').write('4\\n')";
    let body = json!({
        "code": code,
        "files": [{ "path": "in/data.csv", "content": "1\n2\n3\n" }],
        "return_files": true,
    });
    let os_dir = "import os; os.makedirs('out', exist_ok=True)";
    assert_eq!(f.run(&id, os_dir).await, "");
    let (status, result) = exec(body).await;
    assert_eq!((status, &result["exit_code"]), (200, &json!(0)), "{result}");
    // Only what this exec wrote comes back: the changed input and the new
    // output, not the file uploaded before.
    let names: Vec<&str> =
        result["files"].as_array().expect("files").iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(names, ["in/data.csv", "out/sum.txt"], "{result}");
    assert_eq!(result["files"][1]["content"], "Ng==", "{result}");
    assert_eq!(result["files"][0]["content"], "MQoyCjMKNAo=", "{result}");
    // The files stay in the session.
    assert_eq!(f.get_ok(&id, "out/sum.txt").await, b"6");

    // Named paths come back whether or not this exec wrote them; a missing one is left out.
    let named = json!({ "code": "pass", "return_files": ["kept.txt", "nope.txt"] });
    let (status, result) = exec(named).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(
        result["files"],
        json!([{ "path": "kept.txt", "content": "dW50b3VjaGVk", "size": 9, "truncated": false }])
    );
    // Nothing written, nothing returned (an empty `files` is left out).
    let (status, result) = exec(json!({ "code": "pass", "return_files": true })).await;
    assert_eq!((status, result.get("files")), (200, None), "{result}");

    // A JavaScript session takes files too; it returns none (as a JS job).
    let js = f.open("javascript").await;
    let body = json!({ "code": "console.log(Deno.readTextFileSync('in/a.txt'))", "files": [{ "path": "in/a.txt", "content": "x" }] });
    let (status, result) = f.json(Method::POST, &format!("/v1/sessions/{js}/exec"), body).await;
    assert_eq!((status, result["stdout"].as_str()), (200, Some("x\n")), "{result}");
    assert_eq!(f.get_ok(&js, "in/a.txt").await, b"x");
    let body = json!({ "code": "1", "return_files": true });
    let (status, error) = f.json(Method::POST, &format!("/v1/sessions/{js}/exec"), body).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("invalid_field")), "{error}");
    assert!(error["error"]["message"].as_str().unwrap_or("").contains("Python sessions"), "{error}");
}

#[tokio::test]
async fn another_tokens_session_is_not_found() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;
    f.put_ok(&id, "secret.txt", "alice's").await;
    let bob = Files { api: &stack.api, token: BOB };
    for answer in [
        bob.get(&id, "secret.txt").await,
        bob.put(&id, "secret.txt", "bob's").await,
        bob.delete(&id, "secret.txt").await,
        bob.list(&id, None).await,
    ] {
        assert_eq!((answer.status, answer.code()), (404, "no_session".into()), "{}", answer.text());
    }
    assert_eq!(f.get_ok(&id, "secret.txt").await, b"alice's");
    let nobody = f.get("00000000-0000-4000-8000-000000000000", "x").await;
    assert_eq!((nobody.status, nobody.code()), (404, "no_session".into()));
}

#[tokio::test]
async fn files_survive_checkpoint_fork_and_restore() {
    // The parent, a fork and a restored session, each a live process.
    // (A token holds half the fleet's places at most.)
    let stack = Stack::start(&[("RUNBOX_WORKER_SESSIONS", "6")]).await;
    let f = alice(&stack.api);
    let id = f.open("python").await;
    f.put_ok(&id, "in/all.bin", all_bytes()).await;
    f.run(&id, "open('made.txt', 'w').write('by code')").await;

    let (status, checkpoint) = f.json(Method::POST, &format!("/v1/sessions/{id}/checkpoints"), json!({})).await;
    assert_eq!(status, 201, "{checkpoint}");
    f.put_ok(&id, "after.txt", "after the checkpoint").await;

    let (status, fork) = f.json(Method::POST, &format!("/v1/sessions/{id}/fork"), json!({})).await;
    assert_eq!(status, 201, "{fork}");
    let fork = fork["id"].as_str().expect("id").to_owned();
    assert_eq!(f.get_ok(&fork, "in/all.bin").await, all_bytes());
    assert_eq!(f.get_ok(&fork, "after.txt").await, b"after the checkpoint");
    f.put_ok(&fork, "only-fork.txt", "mine").await;
    assert_eq!(f.get(&id, "only-fork.txt").await.code(), "no_file");

    let body = json!({ "from_checkpoint": checkpoint["id"] });
    let (status, restored) = f.json(Method::POST, "/v1/sessions", body).await;
    assert_eq!(status, 201, "{restored}");
    let restored = restored["id"].as_str().expect("id").to_owned();
    assert_eq!(f.get_ok(&restored, "in/all.bin").await, all_bytes());
    assert_eq!(f.get_ok(&restored, "made.txt").await, b"by code");
    assert_eq!(f.get(&restored, "after.txt").await.code(), "no_file");
    assert_eq!(f.run(&restored, "print(open('in/all.bin', 'rb').read()[:3])").await, "b'\\x00\\x01\\x02'\n");

    // A session whose process dies comes back from its latest checkpoint
    // (the parent's is the fork's) with that checkpoint's files: an exec
    // that cannot be interrupted (time.sleep) has its process killed past
    // its deadline.
    let code = json!({ "code": "import time\ntime.sleep(60)", "timeout_ms": 300 });
    let (status, result) = f.json(Method::POST, &format!("/v1/sessions/{id}/exec"), code).await;
    assert_eq!(status, 200, "{result}");
    assert!(result["session"]["restored_from"].is_string(), "{result}");
    assert_eq!(f.get_ok(&id, "in/all.bin").await, all_bytes());
    assert_eq!(f.get_ok(&id, "after.txt").await, b"after the checkpoint");
    assert_eq!(f.get(&id, "only-fork.txt").await.code(), "no_file");
}

#[tokio::test]
async fn every_route_on_a_javascript_session_and_its_code_sees_the_files() {
    let stack = Stack::start(&[]).await;
    let f = alice(&stack.api);
    let id = f.open("javascript").await;

    f.put_ok(&id, "data.csv", "name,score\nada,3\nbob,4\n").await;
    f.put_ok(&id, "raw/sub/all.bin", all_bytes()).await;
    f.put_ok(&id, "caf%C3%A9%20menu.txt", "unicode and a space").await;
    assert_eq!(f.get_ok(&id, "raw/sub/all.bin").await, all_bytes());

    // The code reads them with Deno's API, node:fs and node:fs/promises,
    // relative to its working directory, which is the home.
    let read = "const fs = await import('node:fs');\n\
                const fsp = await import('node:fs/promises');\n\
                const rows = Deno.readTextFileSync('data.csv').trim().split('\\n').slice(1);\n\
                const bytes = fs.readFileSync('raw/sub/all.bin');\n\
                console.log(rows.reduce((sum, r) => sum + Number(r.split(',')[1]), 0), bytes.length, bytes[255], \
                await fsp.readFile('café menu.txt', 'utf8'));";
    assert_eq!(f.run(&id, read).await, "7 512 255 unicode and a space\n");

    // What it writes, each way, the files API reads.
    let write = "const fsp = await import('node:fs/promises');\n\
                 Deno.writeTextFileSync('deno.txt', 'by Deno');\n\
                 (await import('node:fs')).mkdirSync('out/deep', { recursive: true });\n\
                 await fsp.writeFile('out/deep/node.txt', 'by node');";
    f.run(&id, write).await;
    assert_eq!(f.get_ok(&id, "deno.txt").await, b"by Deno");
    assert_eq!(f.get_ok(&id, "out/deep/node.txt").await, b"by node");
    let names = f.names(&id, None).await;
    let expected: Vec<(String, String)> = [
        ("caf\u{e9} menu.txt", "file"),
        ("data.csv", "file"),
        ("deno.txt", "file"),
        ("out", "directory"),
        ("raw", "directory"),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), t.to_string()))
    .collect();
    assert_eq!(names, expected);
    let data = f.list(&id, None).await.json()["files"][1].clone();
    assert_eq!((data["size"].as_u64(), data["path"].as_str()), (Some(23), Some("data.csv")), "{data}");

    // Wrong kinds and missing files, as in a Python session.
    assert_eq!(f.get(&id, "raw").await.code(), "not_a_file");
    assert_eq!(f.put(&id, "data.csv/inner", "x").await.code(), "not_a_directory");
    assert_eq!(f.get(&id, "nothing.txt").await.code(), "no_file");
    assert_eq!(f.delete(&id, "raw").await.status, 204);
    assert_eq!(f.delete(&id, "data.csv").await.status, 204);
    assert_eq!(
        f.run(&id, "console.log([...Deno.readDirSync('.')].map((e) => e.name).sort().join(','))").await,
        "café menu.txt,deno.txt,out\n"
    );

    // The home is all the code reaches: nothing beside it, no links, no
    // way up.
    let escape = "for (const attempt of [\n\
                    () => Deno.readTextFileSync('../frames'),\n\
                    () => Deno.readTextFileSync('/etc/passwd'),\n\
                    () => Deno.writeTextFileSync('../planted', 'x'),\n\
                    () => Deno.writeTextFileSync('/tmp/runbox-session-planted', 'x'),\n\
                    () => Deno.symlinkSync('/etc/passwd', 'passwd'),\n\
                    () => Deno.linkSync('/etc/passwd', 'passwd'),\n\
                  ]) {\n\
                    try { attempt(); console.log('done'); } catch (e) { console.log(e.name); }\n\
                  }\n\
                  const fs = await import('node:fs');\n\
                  try { fs.symlinkSync('/etc', 'etc'); console.log('done'); } catch (e) { console.log(e.code ?? e.name); }";
    let out = f.run(&id, escape).await;
    assert!(!out.contains("done"), "{out}");
    assert_eq!(out.lines().count(), 7, "{out}");
    assert!(!std::path::Path::new("/tmp/runbox-session-planted").exists());
}

#[tokio::test]
async fn a_javascript_sessions_files_are_capped_and_survive_checkpoint_fork_and_restore() {
    let stack = Stack::start(&[("RUNBOX_WORKER_SESSIONS", "6")]).await;
    let f = alice(&stack.api);
    let id = f.open("javascript").await;
    const MIB: usize = 1 << 20;

    // Uploads past the caps are refused, the session alive after.
    f.run(&id, "globalThis.state = 'alive'").await;
    let big = f.put(&id, "big.bin", vec![7u8; 16 * MIB + 1]).await;
    assert_eq!((big.status, big.code()), (413, "file_too_large".into()), "{}", big.text());
    f.put_ok(&id, "one.bin", vec![1u8; 16 * MIB]).await;
    f.put_ok(&id, "two.bin", vec![2u8; 15 * MIB]).await;
    let three = f.put(&id, "three.bin", vec![3u8; 2 * MIB]).await;
    assert_eq!((three.status, three.code()), (413, "session_files_full".into()), "{}", three.text());
    assert_eq!(f.delete(&id, "one.bin").await.status, 204);
    assert_eq!(f.delete(&id, "two.bin").await.status, 204);
    assert_eq!(f.run(&id, "console.log(state)").await, "alive\n");

    // Files, a checkpoint, then more.
    f.put_ok(&id, "in/all.bin", all_bytes()).await;
    f.run(&id, "Deno.writeTextFileSync('made.txt', 'by code'); globalThis.n = 1").await;
    let (status, checkpoint) = f.json(Method::POST, &format!("/v1/sessions/{id}/checkpoints"), json!({})).await;
    assert_eq!(status, 201, "{checkpoint}");
    f.run(&id, "Deno.writeTextFileSync('made.txt', 'changed after'); Deno.writeTextFileSync('after.txt', 'x')").await;

    // A fork has the parent's files as they are now; what it writes is its own.
    let (status, fork) = f.json(Method::POST, &format!("/v1/sessions/{id}/fork"), json!({})).await;
    assert_eq!(status, 201, "{fork}");
    let fork = fork["id"].as_str().expect("id").to_owned();
    assert_eq!(f.get_ok(&fork, "in/all.bin").await, all_bytes());
    assert_eq!(f.get_ok(&fork, "made.txt").await, b"changed after");
    f.run(&fork, "Deno.writeTextFileSync('only-fork.txt', 'mine')").await;
    assert_eq!(f.get(&id, "only-fork.txt").await.code(), "no_file");

    // A restore has the checkpoint's files, whatever its replay wrote.
    let (status, restored) = f.json(Method::POST, "/v1/sessions", json!({ "from_checkpoint": checkpoint["id"] })).await;
    assert_eq!(status, 201, "{restored}");
    let restored = restored["id"].as_str().expect("id").to_owned();
    assert_eq!(f.get_ok(&restored, "made.txt").await, b"by code");
    assert_eq!(f.get(&restored, "after.txt").await.code(), "no_file");
    assert_eq!(f.run(&restored, "console.log(n, Deno.readFileSync('in/all.bin').length)").await, "1 512\n");

    // Code that writes past the cap has its exec stopped; the session
    // comes back from its latest checkpoint, with that checkpoint's files.
    let flood = json!({ "code": "const mib = new Uint8Array(1 << 20); for (let i = 0; ; i++) Deno.writeFileSync(`flood-${i}`, mib);" });
    let (status, result) = f.json(Method::POST, &format!("/v1/sessions/{id}/exec"), flood).await;
    assert_eq!(status, 200, "{result}");
    assert!(result["stderr"].as_str().unwrap_or("").contains("passed 33554432 bytes"), "{result}");
    assert!(result["session"]["restored_from"].is_string(), "{result}");
    // (The latest is the fork's, taken after `after.txt`.)
    let names: Vec<String> = f.names(&id, None).await.into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["after.txt", "in", "made.txt"]);
}
