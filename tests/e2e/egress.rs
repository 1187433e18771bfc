//! Opt-in egress through the real stack: a token's jobs reach the loopback
//! upstreams its rules name (HTTP, and HTTPS with a test CA the worker is
//! told to trust), through the worker's proxy, and nothing else; a secret
//! reaches only its own host's request headers; the caps hold; and a token
//! without rules reaches nothing, as before.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::util::*;

const SECRET: &str = "sk-live-0123456789-the-real-value";
const PLACEHOLDER: &str = "{{secret:API_KEY}}";

/// An HTTP and an HTTPS upstream on loopback (upstream.py), with the CA
/// that signed the HTTPS one's certificate.
struct Upstreams {
    http: u16,
    https: u16,
    dir: tempfile::TempDir,
    _process: tokio::process::Child,
}

impl Upstreams {
    async fn start() -> Upstreams {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_owned();
        test_certificates(dir.path());
        std::fs::create_dir(path("files")).expect("files dir");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/upstream.py");
        let mut process = tokio::process::Command::new("python3")
            .arg(script)
            .args(["--cert", &path("server.pem"), "--key", &path("server.key")])
            .args(["--log", &path("received.jsonl"), "--files", &path("files")])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("upstream.py");
        let mut lines = BufReader::new(process.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
        // "listening HTTP_PORT HTTPS_PORT": the ports the servers bound.
        let ports = match &ready {
            Ok(Ok(Some(line))) => line.strip_prefix("listening ").and_then(|ports| ports.split_once(' ')),
            _ => None,
        };
        let (http, https) = ports
            .and_then(|(http, https)| Some((http.parse().ok()?, https.parse().ok()?)))
            .unwrap_or_else(|| panic!("upstream did not start: {ready:?}"));
        Upstreams { http, https, dir, _process: process }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().expect("utf-8").to_owned()
    }

    /// Every request the upstreams got, in order.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("received.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    fn url(&self, scheme: &str, path: &str) -> String {
        let port = if scheme == "https" { self.https } else { self.http };
        format!("{scheme}://127.0.0.1:{port}{path}")
    }
}

/// Redis, an api and a worker, where alice may reach both upstreams and
/// `localhost` on the HTTP one's port (which resolves to loopback, so is
/// refused), with a secret for the HTTPS one; bob may reach nothing.
struct EgressStack {
    api: Api,
    worker: Process,
    up: Upstreams,
    _redis: Redis,
}

impl EgressStack {
    async fn start(caps: &[(&str, &str)]) -> EgressStack {
        let up = Upstreams::start().await;
        let mirror = up.url("http", "/files/pyodide/");
        let rules = format!("alice=127.0.0.1:{0},127.0.0.1:{1},localhost:{0}", up.http, up.https);
        let secrets = json!({ "alice": { "API_KEY": { "host": format!("127.0.0.1:{}", up.https), "value": SECRET } } });
        std::fs::write(up.path("secrets.json"), secrets.to_string()).expect("secrets file");
        let (secrets, ca) = (up.path("secrets.json"), up.path("ca.pem"));
        let redis = Redis::start().await;
        let api = Api::start(&redis, &[("RUNBOX_EGRESS", &rules), ("RUNBOX_EGRESS_SECRETS_FILE", &secrets)]).await;
        let mut env = vec![
            ("RUNBOX_EGRESS_SECRETS_FILE", secrets.as_str()),
            ("RUNBOX_EGRESS_CA_FILE", ca.as_str()),
            ("RUNBOX_PYODIDE_PACKAGES_URL", mirror.as_str()),
        ];
        env.extend_from_slice(caps);
        let worker = start_worker(&redis, &env).await;
        EgressStack { api, worker, up, _redis: redis }
    }

    async fn run_as(&self, token: &str, body: Value) -> Value {
        let response = self
            .api
            .http
            .post(self.api.url("/v1/jobs?wait=60"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("submit");
        assert_eq!(response.status(), 200);
        let job: Value = response.json().await.expect("json");
        assert_eq!(job["status"], "completed", "{job}");
        job
    }

    /// GET `path` as `token`, as JSON.
    async fn get_as(&self, token: &str, path: &str) -> Value {
        let response = self.api.http.get(self.api.url(path)).bearer_auth(token).send().await.expect("get");
        response.json().await.expect("json")
    }

    /// POST `body` to `path` as `token`, as JSON.
    async fn post_as(&self, token: &str, path: &str, body: Value) -> Value {
        let response = self.api.http.post(self.api.url(path)).bearer_auth(token).json(&body).send().await;
        response.expect("post").json().await.expect("json")
    }

    /// Opens a session of `language` as alice and runs `code` in it.
    async fn exec_in_new_session(&self, language: &str, code: &str) -> Value {
        let session = self.post_as(ALICE, "/v1/sessions", json!({ "language": language })).await;
        let id = session["id"].as_str().expect("session id");
        self.post_as(ALICE, &format!("/v1/sessions/{id}/exec?wait=60"), json!({ "code": code })).await
    }

    /// MCP `tools/list` as `token`: the raw answer.
    async fn mcp_tools(&self, token: &str) -> String {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {} });
        let request = self.api.http.post(self.api.url("/mcp")).bearer_auth(token);
        let request = request
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        request.json(&body).send().await.expect("tools/list").text().await.expect("text")
    }

    async fn run(&self, language: &str, code: &str) -> Value {
        self.run_as(ALICE, json!({ "language": language, "code": code })).await
    }
}

fn stdout(job: &Value) -> &str {
    job["stdout"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn allowed_hosts_are_reached_from_js_and_python_over_http_and_https() {
    let s = EgressStack::start(&[]).await;
    let (http, https) = (s.up.url("http", "/echo?from=js"), s.up.url("https", "/echo?from=js"));
    let js = format!(
        "for (const url of ['{http}', '{https}']) {{\n\
           const r = await fetch(url, {{ method: 'POST', body: 'hello', headers: {{ 'x-test': 'js' }} }});\n\
           const seen = await r.json();\n\
           console.log(r.status, seen.scheme, seen.method, seen.body, r.url === url);\n\
         }}"
    );
    for lane in [false, true] {
        let job = s.run_as(ALICE, json!({ "language": "javascript", "code": js, "shared_runtime": lane })).await;
        assert_eq!(stdout(&job), "200 http POST hello true\n200 https POST hello true\n", "{job}");
        let network = job["network"].as_array().expect("network");
        assert_eq!(network.len(), 2, "{job}");
        assert_eq!(network[0]["host"], format!("127.0.0.1:{}", s.up.http));
        assert!(network.iter().all(|h| h["requests"] == 1 && h["bytes_out"].as_u64() > Some(0)), "{job}");
        assert!(network.iter().all(|h| h["bytes_in"].as_u64() > Some(0)), "{job}");
    }

    let (http, https) = (s.up.url("http", "/echo?from=py"), s.up.url("https", "/echo?from=py"));
    let python = format!(
        "from pyodide.http import pyfetch\n\
         import js, json\n\
         r = await pyfetch('{http}', method='POST', body='from python')\n\
         print(r.status, (await r.json())['body'])\n\
         r = await js.fetch('{https}')\n\
         print(r.status, json.loads(await r.text())['scheme'])"
    );
    for lane in [true, false] {
        let job = s.run_as(ALICE, json!({ "language": "python", "code": python, "shared_runtime": lane })).await;
        assert_eq!(stdout(&job), "200 from python\n200 https\n", "{job}");
        assert_eq!(job["network"].as_array().map(Vec::len), Some(2), "{job}");
    }

    // A compatible API's job follows its token's rules too.
    let fusion = json!({ "language": "python", "code": format!("from pyodide.http import pyfetch\nprint((await pyfetch('{http}')).status)") });
    for (token, expected) in [(ALICE, "200\n"), (BOB, "")] {
        let answer = s.post_as(token, "/sandbox-fusion/run_code", fusion.clone()).await;
        assert_eq!(answer["run_result"]["stdout"], expected, "{answer}");
    }

    // A session in each language, last: each holds a worker slot while it
    // lives. Its execs reach the same hosts.
    for (language, code) in [
        ("python", format!("from pyodide.http import pyfetch\nprint((await pyfetch('{http}')).status)")),
        ("javascript", format!("console.log((await fetch('{https}')).status)")),
    ] {
        let exec = s.exec_in_new_session(language, &code).await;
        assert_eq!(stdout(&exec), "200\n", "{language}: {exec}");
        assert_eq!(exec["network"][0]["requests"], 1, "{exec}");
    }

    let runtimes = s.get_as(ALICE, "/v1/runtimes").await;
    assert_eq!(runtimes["egress"]["rules"][0], format!("127.0.0.1:{}", s.up.http));
    assert_eq!(runtimes["egress"]["secrets"][0]["placeholder"], PLACEHOLDER);
    assert!(!runtimes.to_string().contains(SECRET));

    // MCP's run_code tells each token what it may reach.
    let alice = s.mcp_tools(ALICE).await;
    assert!(
        alice.contains("Network, for this token only, despite the above") && alice.contains(PLACEHOLDER),
        "{alice}"
    );
    assert!(alice.contains(&format!("127.0.0.1:{}", s.up.https)) && !alice.contains(SECRET), "{alice}");
    let bob = s.mcp_tools(BOB).await;
    assert!(bob.contains("run_code") && !bob.contains("Network, for this token only, despite the above"), "{bob}");
}

#[tokio::test]
async fn what_the_rules_do_not_name_is_refused() {
    let s = EgressStack::start(&[]).await;
    let unlisted_port = free_port();
    let cases = [
        (format!("http://127.0.0.1:{unlisted_port}/echo"), format!("127.0.0.1:{unlisted_port} is not in")),
        ("http://unlisted.example/echo".to_owned(), "unlisted.example:80 is not in".to_owned()),
        (format!("http://localhost:{}/echo", s.up.http), "localhost resolves to".to_owned()),
        (
            s.up.url("http", &format!("/redirect?to=http://127.0.0.2:{}/echo", s.up.http)),
            format!("a redirect to 127.0.0.2:{} left", s.up.http),
        ),
        ("file:///etc/passwd".to_owned(), "only http and https".to_owned()),
    ];
    let urls: Vec<&str> = cases.iter().map(|(url, _)| url.as_str()).collect();
    let code = format!(
        "for (const url of {urls:?}) {{\n\
           try {{ await fetch(url); console.log('reached', url); }} catch (e) {{ console.log(String(e)); }}\n\
         }}\n\
         for (const attempt of [\n\
           () => Deno.connect({{ hostname: '127.0.0.1', port: {port} }}),\n\
           () => Deno.resolveDns('localhost', 'A'),\n\
           () => Deno.connect({{ transport: 'unix', path: '../egress.sock' }}),\n\
           () => new Promise((ok, fail) => {{ const ws = new WebSocket('ws://127.0.0.1:{port}/'); ws.onopen = ok; ws.onerror = () => fail(new Error('websocket refused')); }}),\n\
         ]) {{\n\
           try {{ await attempt(); console.log('reached raw'); }} catch (e) {{ console.log(String(e)); }}\n\
         }}",
        port = s.up.http
    );
    let before = s.up.received().len();
    let job = s.run("javascript", &code).await;
    let lines: Vec<&str> = stdout(&job).lines().collect();
    assert_eq!(lines.len(), cases.len() + 4, "{job}");
    for ((_, expected), line) in cases.iter().zip(&lines) {
        assert!(line.contains(expected) && line.starts_with("TypeError: runbox egress"), "{line:?} lacks {expected:?}");
    }
    assert!(lines[2].contains("loopback"), "{}", lines[2]);
    assert!(lines[cases.len()].contains("Requires net access"), "raw TCP: {}", lines[cases.len()]);
    assert!(lines[cases.len() + 1].contains("Requires net access"), "DNS: {}", lines[cases.len() + 1]);
    // The proxy's socket, which the harness connected to while booting.
    assert!(lines[cases.len() + 2].contains("NotCapable"), "unix socket: {}", lines[cases.len() + 2]);
    assert!(!lines.iter().any(|line| line.starts_with("reached")), "{job}");
    // Only the redirect's first hop reached an upstream.
    let received = s.up.received();
    assert_eq!(received.len() - before, 1, "{received:?}");
    assert!(received[before]["path"].as_str().is_some_and(|p| p.starts_with("/redirect")));

    let python = format!(
        "from pyodide.http import pyfetch\n\
         try:\n    await pyfetch('http://127.0.0.1:{unlisted_port}/')\n\
         except Exception as e:\n    print(type(e).__name__, 'is not in' in str(e))"
    );
    assert_eq!(stdout(&s.run("python", &python).await), "AbortError True\n");
}

#[tokio::test]
async fn a_token_without_rules_reaches_nothing() {
    let s = EgressStack::start(&[]).await;
    let url = s.up.url("http", "/echo");
    let js = format!("try {{ await fetch('{url}'); console.log('reached'); }} catch (e) {{ console.log(String(e)); }}");
    for lane in [false, true] {
        let job = s.run_as(BOB, json!({ "language": "javascript", "code": js, "shared_runtime": lane })).await;
        assert!(stdout(&job).starts_with("NotCapable: Requires net access"), "{job}");
        assert!(job.get("network").is_none(), "{job}");
    }
    // A Python job's realm has no fetch at all.
    let python = "import js\nprint(hasattr(js, 'fetch'))\nfrom pyodide.http import pyfetch";
    let job = s.run_as(BOB, json!({ "language": "python", "code": python })).await;
    assert_eq!(stdout(&job), "False\n", "{job}");
    let runtimes = s.get_as(BOB, "/v1/runtimes").await;
    assert!(runtimes.get("egress").is_none(), "{runtimes}");
    assert!(s.up.received().is_empty(), "{:?}", s.up.received());
}

#[tokio::test]
async fn a_secret_reaches_only_its_own_hosts_request_headers() {
    let s = EgressStack::start(&[]).await;
    // The secret is bound to the HTTPS upstream; the HTTP one is listed too.
    let own = s.up.url("https", &format!("/echo?key={PLACEHOLDER}"));
    let other = s.up.url("http", "/collect");
    // Its own host redirects to the other: the secret stays behind.
    let bounce = s.up.url("https", &format!("/redirect?to={}", s.up.url("http", "/bounced")));
    let code = format!(
        "const key = '{PLACEHOLDER}';\n\
         console.log('placeholder', key);\n\
         const headers = {{ authorization: `Bearer ${{key}}`, 'x-copy': key }};\n\
         const echoed = await (await fetch('{own}', {{ method: 'POST', headers, body: key }})).text();\n\
         console.log('echoed', echoed);\n\
         await fetch('{other}', {{ method: 'POST', headers, body: key }});\n\
         await fetch('{bounce}', {{ headers }});\n\
         for (const look of [() => Deno.env.toObject(), () => Deno.readTextFileSync('/proc/self/environ'), () => Deno.readDirSync('/')]) {{\n\
           try {{ console.log(JSON.stringify(look())); }} catch (e) {{ console.error(String(e)); }}\n\
         }}"
    );
    let job = s.run("javascript", &code).await;
    assert!(stdout(&job).starts_with(&format!("placeholder {PLACEHOLDER}\necho")), "{job}");
    // The upstream echoed the header it got: the job sees the placeholder back.
    assert!(stdout(&job).contains(&format!("Bearer {PLACEHOLDER}")), "{job}");

    let received = s.up.received();
    let own_request = received.iter().find(|r| r["scheme"] == "https").expect("the secret's host was reached");
    let header = |request: &Value, name: &str| {
        request["headers"].as_array().into_iter().flatten().find(|h| h[0].as_str() == Some(name)).map(|h| h[1].clone())
    };
    assert_eq!(header(own_request, "authorization"), Some(json!(format!("Bearer {SECRET}"))));
    assert_eq!(header(own_request, "x-copy"), Some(json!(SECRET)));
    assert_eq!(own_request["body"], PLACEHOLDER, "never in a body");
    assert!(!own_request["path"].as_str().unwrap_or_default().contains(SECRET), "never in a URL");
    let others: Vec<&Value> = received.iter().filter(|r| r["scheme"] == "http").collect();
    assert_eq!(others.len(), 2, "the other host, directly and by the redirect: {received:?}");
    for other in others {
        assert!(!other.to_string().contains(SECRET), "another host got it: {other}");
        assert_eq!(header(other, "x-copy"), Some(json!(PLACEHOLDER)));
    }
    let bounced = received.iter().find(|r| r["path"] == "/bounced").expect("the redirect was followed");
    assert_eq!(header(bounced, "authorization"), None, "dropped when the redirect left the origin");

    // An upstream that keeps the value and hands it back later, to a
    // request that carried no secret, in a body, a header or a redirect's
    // URL: the job gets the placeholder every time. A hash of what comes
    // back cannot be asked for with a secret aboard.
    let (remember, recall, land) =
        (s.up.url("https", "/remember"), s.up.url("https", "/recall"), s.up.url("https", "/land-on-it"));
    let code = format!(
        "await fetch('{remember}', {{ headers: {{ 'x-copy': '{PLACEHOLDER}' }} }});\n\
         const r = await fetch('{recall}');\n\
         console.log(r.headers.get('x-recalled'));\n\
         console.log(JSON.parse(await r.text())['x-copy']);\n\
         console.log(new URL((await fetch('{land}')).url).searchParams.get('k'));\n\
         try {{ await fetch('{own}', {{ headers: {{ 'x-copy': '{PLACEHOLDER}' }}, integrity: 'sha256-AAAA' }}); }}\n\
         catch (e) {{ console.log(String(e)); }}"
    );
    let job = s.run("javascript", &code).await;
    let lines: Vec<&str> = stdout(&job).lines().collect();
    assert_eq!(lines[..3], [PLACEHOLDER, PLACEHOLDER, PLACEHOLDER], "{job}");
    assert!(lines[3].contains("cannot ask for integrity"), "{job}");

    // The worker logs each request by host, never by path.
    let worker_log = s.worker.logs();
    assert!(worker_log.contains("egress request") && worker_log.contains(&format!("127.0.0.1:{}", s.up.https)));
    assert!(!worker_log.contains("/collect") && !worker_log.contains("/remember"), "a path is in the log");

    // The value is nowhere but in the own host's request headers.
    let everywhere = [job.to_string(), s.api.process.logs(), s.worker.logs()];
    for (what, text) in ["result", "api log", "worker log"].iter().zip(&everywhere) {
        assert!(!text.contains(SECRET), "the secret is in the {what}");
    }
    let log = std::fs::read_to_string(s.up.path("received.jsonl")).expect("log");
    // Twice (two headers) in the first request and in the redirect's first
    // hop; once in /remember's, in the request that asked for integrity,
    // and in the URL the own host redirected to itself (its own doing).
    assert_eq!(log.matches(SECRET).count(), 7, "{log}");
}

#[tokio::test]
async fn requests_at_once_and_oversized_ones_keep_the_link() {
    let s = EgressStack::start(&[]).await;
    let echo = s.up.url("http", "/echo");
    // Three 1 MiB bodies at once, each of its own byte: none mixes with another.
    let code = format!(
        "const bodies = ['a', 'b', 'c'].map((c) => c.repeat(1 << 20));\n\
         const seen = await Promise.all(bodies.map(async (body) => (await (await fetch('{echo}', {{ method: 'POST', body }})).json()).body));\n\
         console.log(seen.map((body, i) => body === bodies[i]).join(' '));\n\
         try {{ await fetch('{echo}?' + 'x'.repeat(300000)); }} catch (e) {{ console.log(String(e)); }}\n\
         console.log((await fetch('{echo}')).status);"
    );
    for lane in [false, true] {
        let job = s.run_as(ALICE, json!({ "language": "javascript", "code": code, "shared_runtime": lane })).await;
        let lines: Vec<&str> = stdout(&job).lines().collect();
        assert_eq!(lines.first(), Some(&"true true true"), "{job}");
        assert!(lines.get(1).is_some_and(|l| l.contains("longer than 256 KiB")), "{job}");
        assert_eq!(lines.get(2), Some(&"200"), "the link still serves: {job}");
    }
}

/// Issue 43, rows 5 and 6: a job that ends while large answers are still
/// being written into its child leaves the link in step, so the next job of
/// the same warm child gets its own answers. Each job awaits its first
/// download, so the others are mid-write when it ends.
#[tokio::test]
async fn a_job_ending_mid_answer_leaves_the_link_clean_for_the_next() {
    let caps = [("RUNBOX_EGRESS_MAX_BYTES", "100000000"), ("RUNBOX_EGRESS_MAX_CONNECTIONS", "8")];
    let s = EgressStack::start(&caps).await;
    let (big, echo) = (s.up.url("http", "/bytes?n=5000000"), s.up.url("http", "/echo"));
    let js_leaves = format!(
        "const all = [1, 2, 3, 4, 5, 6].map(() => fetch('{big}'));\n\
         all.forEach((p) => p.catch(() => {{}}));\n\
         console.log((await all[0]).status);"
    );
    let js_next = format!("console.log((await fetch('{echo}')).status);");
    let py_leaves = format!(
        "import js, asyncio\n\
         calls = [js.fetch('{big}') for _ in range(6)]\n\
         print((await calls[0]).status)"
    );
    let py_next = format!("import js\nprint((await js.fetch('{echo}')).status)");
    for (language, leaves, next) in [("javascript", &js_leaves, &js_next), ("python", &py_leaves, &py_next)] {
        let mut warm = 0;
        for round in 0..3 {
            let body = |code: &str| json!({ "language": language, "code": code, "shared_runtime": true });
            let left = s.run_as(ALICE, body(leaves)).await;
            assert_eq!(stdout(&left), "200\n", "{language}, round {round}: {left}");
            let job = s.run_as(ALICE, body(next)).await;
            assert_eq!(stdout(&job), "200\n", "{language}, round {round}: the next job's own answer: {job}");
            warm += usize::from(job["warm"] == true);
        }
        assert!(warm > 0, "{language}: no next job ran in the child the first had used");
    }
}

/// Issue 43's review: a shared-lane job's requests still queued in its
/// harness when it ends (1,000 un-awaited, then `Deno.exit`) were written
/// once the next job of the same child had begun, and the proxy sent them
/// as that job's, under its caps and in its `network`. Each request bears
/// its job's nonce now, and one whose job has ended is refused.
#[tokio::test]
async fn an_ended_jobs_queued_requests_are_never_the_next_jobs() {
    let s = EgressStack::start(&[("RUNBOX_WORKER_CONCURRENCY", "1")]).await;
    let leaves = format!(
        "for (let i = 0; i < 1000; i++) fetch('{}').catch(() => {{}});\n\
         await new Promise((resolve) => setTimeout(resolve, 0));\n\
         console.log(200);\n\
         Deno.exit(0);",
        s.up.url("http", "/slow?ms=1500&from=ended")
    );
    let next = format!("console.log((await fetch('{}')).status);", s.up.url("http", "/echo?from=next"));
    let mut warm = 0;
    for round in 0..5 {
        let jobs = [("javascript", &leaves), ("javascript", &next)]
            .map(|(language, code)| json!({ "language": language, "code": code }));
        let submitted = s.post_as(ALICE, "/v1/batches", json!({ "jobs": jobs, "shared_runtime": true })).await;
        let ids: Vec<&str> =
            submitted["job_ids"].as_array().expect("job_ids").iter().filter_map(Value::as_str).collect();
        let first = s.get_as(ALICE, &format!("/v1/jobs/{}?wait=60", ids[0])).await;
        assert_eq!((first["status"].as_str(), stdout(&first)), (Some("completed"), "200\n"), "round {round}: {first}");
        let job = s.get_as(ALICE, &format!("/v1/jobs/{}?wait=60", ids[1])).await;
        assert_eq!((job["status"].as_str(), stdout(&job)), (Some("completed"), "200\n"), "round {round}: {job}");
        assert_eq!(job["network"][0]["requests"], 1, "round {round}: only its own request: {job}");
        warm += usize::from(job["warm"] == true);
    }
    assert!(warm > 0, "no next job ran in the child the first had used");
}

/// Issue 43's second review: a request a session's timer made between two
/// execs was taken by the harness only once the next exec had begun (it
/// blocked on the next frame meanwhile), and sent and counted as that
/// exec's. Between execs the harness now waits with its event loop running,
/// and refuses it. Each exec after the first checks whether the timer has
/// fired; the first that saw it fired began after the request was made,
/// and carries no request. An exec the timer fired in (the first, say, on
/// a busy machine) carries it, and every request sent is one an exec
/// carries.
async fn a_request_made_between_execs(language: &str, leave: &str, check: &str) {
    let s = EgressStack::start(&[]).await;
    let session = s.post_as(ALICE, "/v1/sessions", json!({ "language": language })).await;
    let id = session["id"].as_str().expect("session id").to_owned();
    let path = format!("/v1/sessions/{id}/exec?wait=60");
    let exec = |code: String| s.post_as(ALICE, &path, json!({ "code": code }));
    let first = exec(leave.replace("URL", &s.up.url("http", "/echo?from=between"))).await;
    assert_eq!(first["status"], "completed", "{first}");
    let mut execs = vec![first];
    loop {
        // The timer fires 100 ms after exec 1 ended (an exec waits for no
        // interval): by the first wait, unless the machine is busy.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let exec = exec(check.to_owned()).await;
        assert_eq!(exec["status"], "completed", "{exec}");
        let fired = stdout(&exec) == "fired\n";
        execs.push(exec);
        if fired {
            break;
        }
        assert!(execs.len() < 60, "{language}: the timer never fired");
    }
    let after = execs.last().expect("an exec");
    assert!(after.get("network").is_none(), "{language}: the request was sent as a later exec's: {after}");
    let carried: u64 = execs.iter().filter_map(|e| e["network"][0]["requests"].as_u64()).sum();
    let sent = s.up.received().iter().filter(|r| r["path"] == "/echo?from=between").count() as u64;
    assert_eq!(sent, carried, "{language}: every request sent is an exec's: {execs:?}");
}

#[tokio::test]
async fn a_sessions_request_made_between_execs_is_no_execs() {
    a_request_made_between_execs(
        "javascript",
        "globalThis.fired = false;\n\
         const timer = setInterval(() => {\n\
           clearInterval(timer);\n\
           globalThis.fired = true;\n\
           fetch('URL').catch(() => {});\n\
         }, 100);",
        "console.log(globalThis.fired ? 'fired' : 'not yet');",
    )
    .await;
    a_request_made_between_execs(
        "python",
        "import js\n\
         from pyodide.ffi import create_once_callable\n\
         fired = False\n\
         def go():\n    global fired\n    fired = True\n    js.fetch('URL')\n\
         js.setTimeout(create_once_callable(go), 100)",
        "print('fired' if fired else 'not yet')",
    )
    .await;
}

/// Issue 43's second review: a JS program in a child of its own shares its
/// harness's realm, and read what the harness stamped on its egress
/// request, then its frame's nonce, through a `JSON.stringify` of its own.
/// What it reads now is a tag for egress alone: the out-of-memory claim it
/// forges with it is its own stderr, and the program goes on to exit 0
/// (with the nonce, the runner took the claim and ended it).
#[tokio::test]
async fn a_program_in_its_harnesss_realm_learns_no_nonce_from_egress() {
    let s = EgressStack::start(&[]).await;
    let code = format!(
        "let seen = '';\n\
         const original = JSON.stringify;\n\
         JSON.stringify = function (value, ...rest) {{\n\
           if (value && typeof value === 'object' && 'job' in value) seen = String(value.job);\n\
           return original.call(this, value, ...rest);\n\
         }};\n\
         await fetch('{}');\n\
         console.log(seen.length);\n\
         await Deno.stderr.write(new TextEncoder().encode('\\u0006runbox-out-of-memory:' + seen + '\\n'));\n\
         await new Promise((resolve) => setTimeout(resolve, 200));\n\
         console.log('still running');",
        s.up.url("http", "/echo")
    );
    let job = s.run_as(ALICE, json!({ "language": "javascript", "code": code, "shared_runtime": false })).await;
    assert_eq!((job["exit_code"].as_i64(), stdout(&job)), (Some(0), "32\nstill running\n"), "{job}");
}

#[tokio::test]
async fn each_jobs_requests_connections_and_bytes_are_capped() {
    let caps = [
        ("RUNBOX_EGRESS_MAX_REQUESTS", "4"),
        ("RUNBOX_EGRESS_MAX_CONNECTIONS", "2"),
        ("RUNBOX_EGRESS_MAX_BYTES", "100000"),
    ];
    let s = EgressStack::start(&caps).await;
    let attempt = |url: String| {
        format!(
            "try {{ const r = await fetch('{url}'); console.log('ok', (await r.text()).length); }} catch (e) {{ console.log(String(e)); }}"
        )
    };

    let bytes = s.run("javascript", &attempt(s.up.url("http", "/bytes?n=150000"))).await;
    assert!(stdout(&bytes).contains("has received its 100000 bytes"), "{bytes}");
    let small = s.run("javascript", &attempt(s.up.url("http", "/bytes?n=50000"))).await;
    assert_eq!(stdout(&small), "ok 50000\n", "a new job starts from nothing: {small}");

    let slow = s.up.url("http", "/slow?ms=700");
    let at_once = format!(
        "const results = await Promise.allSettled([1, 2, 3].map(() => fetch('{slow}')));\n\
         for (const r of results) console.log(r.status === 'fulfilled' ? 'ok' : String(r.reason));"
    );
    let job = s.run("javascript", &at_once).await;
    let lines: Vec<&str> = stdout(&job).lines().collect();
    assert_eq!(lines.iter().filter(|l| **l == "ok").count(), 2, "{job}");
    assert!(lines.iter().any(|l| l.contains("has 2 requests open already")), "{job}");

    let echo = s.up.url("http", "/echo");
    let many = format!("for (let i = 0; i < 5; i++) {{ {} }}", attempt(echo));
    let job = s.run("javascript", &many).await;
    let lines: Vec<&str> = stdout(&job).lines().collect();
    assert_eq!(lines.len(), 5, "{job}");
    assert!(lines[..4].iter().all(|l| l.starts_with("ok")), "{job}");
    assert!(lines[4].contains("has made its 4 requests"), "{job}");
    assert_eq!(job["network"][0]["requests"], 4, "{job}");
}

#[tokio::test]
async fn python_packages_install_from_an_index_the_rules_allow() {
    let s = EgressStack::start(&[]).await;
    let index = s.up.url("http", "/files/simple/");
    let wheel = s.up.url("http", "/files/simple/runbox-egress-probe/runbox_egress_probe-1.0-py3-none-any.whl");
    let install = format!(
        "import micropip\n\
         await micropip.install('runbox-egress-probe', index_urls=['{index}'])\n\
         import runbox_egress_probe\n\
         print(runbox_egress_probe.VALUE)"
    );
    for lane in [true, false] {
        let job = s.run_as(ALICE, json!({ "language": "python", "code": install, "shared_runtime": lane })).await;
        assert_eq!(stdout(&job), "42\n", "{job}");
        assert_eq!(job["network"][0]["requests"], 2, "the index, then the wheel: {job}");
    }
    let load = format!(
        "import pyodide_js\n\
         await pyodide_js.loadPackage('{wheel}')\n\
         import runbox_egress_probe\n\
         print(runbox_egress_probe.VALUE)\n\
         await pyodide_js.loadPackage('micropip')"
    );
    let job = s.run("python", &load).await;
    assert!(stdout(&job).contains("42\n"), "{job}");
    // Pyodide's own packages come from the mirror, checked against its lock file's hash.
    assert!(job["stderr"].as_str().is_some_and(|e| e.contains("does not match its integrity")), "{job}");

    // The same index, from a session.
    let exec = s.exec_in_new_session("python", &install).await;
    assert_eq!(stdout(&exec), "42\n", "{exec}");

    // Bob's jobs have micropip, and it reaches nothing.
    let job = s.run_as(BOB, json!({ "language": "python", "code": install })).await;
    assert_eq!(job["exit_code"], 1, "{job}");
    assert!(!stdout(&job).contains("42"), "{job}");
}
