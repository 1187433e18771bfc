"""The official Judge0 Python SDK (judge0==0.0.8), unchanged, against
runbox's /judge0 API on a real stack (run under clients/with-stack)."""

import base64
import http.server
import json
import os
import threading
import time

import httpx
import judge0
import pytest

URL = os.environ["RUNBOX_URL"] + "/judge0"
TOKEN = os.environ["RUNBOX_TOKEN"]
OTHER = os.environ["RUNBOX_OTHER_TOKEN"]


@pytest.fixture(scope="module")
def client():
    # What JUDGE0_CE_ENDPOINT and JUDGE0_CE_AUTH_HEADERS configure.
    return judge0.Client(URL, headers={"X-Auth-Token": TOKEN})


def test_the_environment_configures_the_implicit_client(monkeypatch):
    monkeypatch.setenv("JUDGE0_CE_ENDPOINT", URL)
    monkeypatch.setenv("JUDGE0_CE_AUTH_HEADERS", json.dumps({"X-Auth-Token": TOKEN}))
    monkeypatch.setattr(judge0, "JUDGE0_IMPLICIT_CE_CLIENT", None)
    result = judge0.run(source_code="print(6 * 7)", language=judge0.PYTHON)
    assert result.status == judge0.Status.ACCEPTED
    assert result.stdout == "42\n"


@pytest.mark.parametrize(
    "language, code",
    [
        (judge0.PYTHON, "print(input()[::-1])"),
        (judge0.JAVASCRIPT, "const s = (await new Response(Deno.stdin.readable).text()).trim();\nconsole.log([...s].reverse().join(''))"),
        (
            judge0.TYPESCRIPT,
            "const s: string = (await new Response(Deno.stdin.readable).text()).trim();\nconsole.log([...s].reverse().join(''))",
        ),
    ],
)
def test_each_language_runs_with_stdin(client, language, code):
    result = judge0.run(client=client, source_code=code, language=language, stdin="runbox")
    assert result.status == judge0.Status.ACCEPTED, (result.status, result.stderr, result.message)
    assert result.stdout == "xobnur\n"
    assert result.token is not None
    assert float(result.time) >= 0
    assert result.finished_at is not None


def test_expected_output_gives_accepted_or_wrong_answer(client):
    code = "a, b = map(int, input().split())\nprint(a + b)"
    results = judge0.run(
        client=client,
        source_code=code,
        language=judge0.PYTHON,
        test_cases=[("2 3", "5"), ("2 3", "6"), ("10 20", "30\n\n")],
    )
    assert [r.status for r in results] == [
        judge0.Status.ACCEPTED,
        judge0.Status.WRONG_ANSWER,
        judge0.Status.ACCEPTED,
    ]


def test_a_timeout_is_time_limit_exceeded(client):
    result = judge0.run(client=client, source_code="while True: pass", language=judge0.PYTHON, cpu_time_limit=1)
    assert result.status == judge0.Status.TIME_LIMIT_EXCEEDED
    assert float(result.time) >= 0.9


def test_a_runtime_error_is_nzec_with_the_exit_code(client):
    result = judge0.run(client=client, source_code="import sys\nprint('before')\nsys.exit(3)", language=judge0.PYTHON)
    assert result.status == judge0.Status.RUNTIME_ERROR_NZEC
    assert result.exit_code == 3
    assert result.stdout == "before\n"
    js = judge0.run(client=client, source_code="throw new Error('boom')", language=judge0.JAVASCRIPT)
    assert js.status == judge0.Status.RUNTIME_ERROR_NZEC
    assert "boom" in js.stderr


def test_command_line_arguments_reach_the_program(client):
    code = "import sys\nprint(' '.join(sys.argv[1:]))"
    submission = judge0.Submission(source_code=code, language=judge0.PYTHON, command_line_arguments="one two")
    result = judge0.run(client=client, submissions=submission)
    assert result.stdout == "one two\n"


def test_async_batch_submit_then_wait(client):
    submissions = [
        judge0.Submission(source_code=f"print({i} * {i})", language=judge0.PYTHON) for i in range(3)
    ] + [judge0.Submission(source_code="console.log('js')", language=judge0.JAVASCRIPT)]
    created = judge0.async_run(client=client, submissions=submissions)
    assert all(s.token for s in created)
    done = judge0.wait(client=client, submissions=created)
    assert [s.stdout for s in done] == ["0\n", "1\n", "4\n", "js\n"]
    assert all(s.status == judge0.Status.ACCEPTED for s in done)


def test_information_routes_through_the_sdk(client):
    assert client.get_about()["version"] == "1.13.1"
    assert client.version == "1.13.1"
    config = client.get_config_info()
    assert config.max_submission_batch_size == 20
    assert config.enable_wait_result is True
    ids = {language.id: language.name for language in client.get_languages()}
    assert ids == {63: "JavaScript (Node.js 12.14.0)", 71: "Python (3.8.1)", 74: "TypeScript (3.7.4)"}
    assert client.get_language(71).source_file == "script.py"
    assert client.is_language_supported(judge0.PYTHON)
    assert not client.is_language_supported(judge0.RUST)
    statuses = client.get_statuses()
    assert [s["id"] for s in statuses] == list(range(1, 15))
    assert statuses[11] == {"id": 12, "description": "Runtime Error (Other)"}
    info = httpx.get(f"{URL}/system_info", headers={"X-Auth-Token": TOKEN})
    assert info.status_code == 200 and "CPU(s)" in info.json()


def test_a_wrong_token_is_401(client):
    with pytest.raises(RuntimeError, match="Authentication failed"):
        judge0.Client(URL, headers={"X-Auth-Token": "not-a-token-0123456789"})
    assert httpx.get(f"{URL}/languages").status_code == 401
    response = httpx.get(f"{URL}/about", headers={"X-Auth-Token": "wrong"})
    assert response.status_code == 401
    assert "error" in response.json()


def test_base64_on_and_off_over_http():
    headers = {"X-Auth-Token": TOKEN}
    body = {"source_code": "print(input())", "language_id": 71, "stdin": "héllo"}
    plain = httpx.post(f"{URL}/submissions?wait=true&fields=stdout,status,stdin", json=body, headers=headers, timeout=90)
    assert plain.status_code == 201, plain.text
    assert plain.json() == {"stdin": "héllo", "stdout": "héllo\n", "status": {"id": 3, "description": "Accepted"}}

    encoded = {k: base64.b64encode(v.encode()).decode() if isinstance(v, str) else v for k, v in body.items()}
    created = httpx.post(f"{URL}/submissions?base64_encoded=true&wait=true", json=encoded, headers=headers, timeout=90)
    assert created.status_code == 201, created.text
    result = created.json()
    assert base64.b64decode(result["stdout"]).decode() == "héllo\n"
    assert set(result) == {"token", "time", "memory", "stdout", "stderr", "compile_output", "message", "status"}

    token = result["token"]
    everything = httpx.get(f"{URL}/submissions/{token}?base64_encoded=true&fields=*", headers=headers).json()
    assert base64.b64decode(everything["source_code"]).decode() == "print(input())"
    assert everything["language"] == {"id": 71, "name": "Python (3.8.1)"}
    # Every key is one the SDK's Submission takes, so the SDK never fails on one.
    assert set(everything) <= set(judge0.Submission.model_fields) | {"language_id", "status_id"}

    bad = httpx.get(f"{URL}/submissions/{token}?fields=stdout,colour", headers=headers)
    assert bad.status_code == 400 and bad.json() == {"error": "invalid fields: [colour]"}


def test_invalid_submissions_are_422_by_field():
    headers = {"X-Auth-Token": TOKEN}
    response = httpx.post(f"{URL}/submissions", json={"language_id": 1, "source_code": ""}, headers=headers)
    assert response.status_code == 422
    assert response.json() == {"language_id": ["language with id 1 doesn't exist"], "source_code": ["can't be blank"]}
    batch = httpx.post(
        f"{URL}/submissions/batch",
        json={"submissions": [{"language_id": 71, "source_code": "print(1)"}, {"language_id": 71}]},
        headers=headers,
    )
    assert batch.status_code == 201
    first, second = batch.json()
    assert "token" in first and second == {"source_code": ["can't be blank"]}
    too_many = httpx.post(f"{URL}/submissions/batch", json={"submissions": [{}] * 21}, headers=headers)
    assert too_many.status_code == 400


def test_another_tokens_submissions_are_invisible(client):
    mine = judge0.async_run(client=client, source_code="print(1)", language=judge0.PYTHON)
    other = {"X-Auth-Token": OTHER}
    assert httpx.get(f"{URL}/submissions/{mine.token}", headers=other).status_code == 404
    batch = httpx.get(f"{URL}/submissions/batch", params={"tokens": str(mine.token)}, headers=other).json()
    assert batch == {"submissions": [None]}


def test_a_callback_gets_the_result_put_to_it(client):
    received = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.command, self.headers, json.loads(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/judge0-callback"
        submission = judge0.Submission(source_code="print('called back')", language=judge0.PYTHON, callback_url=url)
        created = judge0.async_run(client=client, submissions=submission)
        deadline = time.monotonic() + 60
        while not received and time.monotonic() < deadline:
            time.sleep(0.2)
        assert received, "no callback arrived"
        method, headers, body = received[0]
        assert method == "PUT"
        assert body["token"] == str(created.token)
        assert body["status"] == {"id": 3, "description": "Accepted"}
        assert base64.b64decode(body["stdout"]).decode() == "called back\n"
        assert headers.get("Runbox-Signature", "").startswith("t=")
        assert headers.get("Content-Type") == "application/json"
    finally:
        server.shutdown()
