"""The PyPI SandboxFusion client (sandbox-fusion==0.3.7), unchanged, sync and
async, against runbox's /sandbox-fusion API on a real stack (run under
clients/with-stack); then raw requests shaped as RL frameworks send them."""

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import sandbox_fusion as sf

BASE = os.environ["RUNBOX_URL"]
TOKEN = os.environ["RUNBOX_TOKEN"]
# The endpoint an RL framework's config takes: the token is in the path.
ENDPOINT = f"{BASE}/sandbox-fusion/{TOKEN}"


def run(request, mode):
    """One run_code call through the client's sync or async function; one
    attempt, so a failure shows at once instead of after its retries."""
    if mode == "sync":
        return sf.run_code(request, endpoint=ENDPOINT, max_attempts=1)
    return asyncio.run(sf.run_code_async(request, endpoint=ENDPOINT, max_attempts=1))


def jupyter(request, mode):
    if mode == "sync":
        return sf.run_jupyter(request, endpoint=ENDPOINT, max_attempts=1)
    return asyncio.run(sf.run_jupyter_async(request, endpoint=ENDPOINT, max_attempts=1))


MODES = ["sync", "async"]

LANGUAGES = [
    ("python", "print(input()[::-1])"),
    ("nodejs", "const s = (await new Response(Deno.stdin.readable).text()).trim();\nconsole.log([...s].reverse().join(''))"),
    (
        "typescript",
        "const s: string = (await new Response(Deno.stdin.readable).text()).trim();\nconsole.log([...s].reverse().join(''))",
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("language, code", LANGUAGES)
def test_each_language_runs_with_stdin(mode, language, code):
    result = run(sf.RunCodeRequest(code=code, language=language, stdin="runbox"), mode)
    assert result.status == sf.RunStatus.Success, result
    assert result.compile_result is None
    assert result.run_result.status == sf.CommandRunStatus.Finished
    assert result.run_result.return_code == 0
    assert result.run_result.stdout == "xobnur\n"
    # runbox times a job in whole milliseconds, and a warm child runs this one
    # in less (the timeout test below checks a time runbox measured).
    assert result.run_result.execution_time is not None and result.run_result.execution_time >= 0
    assert result.executor_pod_name
    assert sf.summary_run_code_result(result, sf.SummaryMapping()) == sf.RunStatus.Success


def test_nodejs_programs_written_for_node_get_require():
    # CommonJS, as SandboxFusion's Node runs it: require, module.exports.
    code = (
        "const readline = require('readline');\n"
        "module.exports = { twice: (n) => 2 * n };\n"
        "const rl = readline.createInterface({ input: process.stdin });\n"
        "rl.on('line', (line) => console.log(module.exports.twice(Number(line))));\n"
    )
    result = run(sf.RunCodeRequest(code=code, language="nodejs", stdin="21\n"), "sync")
    assert result.status == sf.RunStatus.Success, result
    assert result.run_result.stdout == "42\n"
    # A stack trace still points at the program's own line.
    thrown = run(sf.RunCodeRequest(code="const a = 1;\nthrow new Error('line two');", language="nodejs"), "sync")
    assert thrown.status == sf.RunStatus.Failed
    assert ":2:" in thrown.run_result.stderr, thrown.run_result.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_program_is_failed_with_its_exit_code(mode):
    code = "import sys\nprint('before')\nraise SystemExit(3)"
    result = run(sf.RunCodeRequest(code=code, language="python"), mode)
    assert result.status == sf.RunStatus.Failed
    assert result.run_result.status == sf.CommandRunStatus.Finished
    assert (result.run_result.return_code, result.run_result.stdout) == (3, "before\n")
    mapping = sf.SummaryMapping(RunFailed="wrong")
    assert sf.summary_run_code_result(result, mapping) == "wrong"
    error = run(sf.RunCodeRequest(code="raise ValueError('boom')", language="python"), mode)
    assert error.status == sf.RunStatus.Failed
    assert "ValueError: boom" in error.run_result.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_is_time_limit_exceeded(mode):
    result = run(sf.RunCodeRequest(code="while True: pass", language="python", run_timeout=1), mode)
    assert result.status == sf.RunStatus.Failed
    assert result.run_result.status == sf.CommandRunStatus.TimeLimitExceeded
    assert result.run_result.execution_time >= 0.9
    # runbox measured the CPU it burned, in seconds, as SandboxFusion reports cpu_time.
    assert result.run_result.cpu_time is not None and result.run_result.cpu_time > 0.3, result.run_result
    assert sf.summary_run_code_result(result, sf.SummaryMapping(RunTimeout="slow")) == "slow"


def test_memory_limit_mb_lowers_the_cap():
    # The client's model (0.3.7) has no memory_limit_MB; RL frameworks send
    # it in their own requests, as here.
    code = "a = bytearray(120 * 1024 * 1024)\nfor i in range(0, len(a), 4096):\n    a[i] = 1\nprint('kept')"

    def post(limit):
        body = {"code": code, "language": "python", "memory_limit_MB": limit}
        response = httpx.post(f"{ENDPOINT}/run_code", json=body, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()

    within = post(1024)
    assert (within["status"], within["run_result"]["stdout"]) == ("Success", "kept\n"), within
    over = post(48)
    assert over["status"] == "Failed", over
    assert over["run_result"]["return_code"] == -9 and "out of memory" in over["message"], over


@pytest.mark.parametrize("mode", MODES)
def test_files_go_in_and_fetch_files_come_out(mode):
    code = (
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data.upper())\n"
        "open('raw.bin', 'wb').write(bytes([0, 255]))\n"
        "print(len(data))"
    )
    request = sf.RunCodeRequest(
        code=code,
        language="python",
        files={"data/in.txt": base64.b64encode(b"hello").decode()},
        fetch_files=["out.txt", "raw.bin", "never-written.txt"],
    )
    result = run(request, mode)
    assert result.status == sf.RunStatus.Success, result
    assert result.run_result.stdout == "5\n"
    assert {path: base64.b64decode(content) for path, content in result.files.items()} == {
        "out.txt": b"HELLO",
        "raw.bin": b"\x00\xff",
    }


PASSING_TESTS = "def add(a, b):\n    return a + b\n\ndef test_add():\n    assert add(2, 3) == 5\n"
FAILING_TESTS = PASSING_TESTS + "\ndef test_wrong():\n    assert add(2, 2) == 5\n"


@pytest.mark.parametrize("mode", MODES)
def test_pytest_mode_passes_and_fails(mode):
    passed = run(sf.RunCodeRequest(code=PASSING_TESTS, language="pytest"), mode)
    assert passed.status == sf.RunStatus.Success, passed
    assert "1 passed" in passed.run_result.stdout
    failed = run(sf.RunCodeRequest(code=FAILING_TESTS, language="pytest"), mode)
    assert failed.status == sf.RunStatus.Failed
    assert failed.run_result.return_code == 1
    assert "1 failed, 1 passed" in failed.run_result.stdout
    assert "test_wrong" in failed.run_result.stdout


@pytest.mark.parametrize("mode", MODES)
def test_run_jupyter_keeps_state_across_cells(mode):
    request = sf.RunJupyterRequest(
        cells=[
            "a = 123",
            "a",
            "print(a + int(open('seed.txt').read()))",
            "import sys; sys.stderr.write('to stderr\\n');",
            "raise RuntimeError('error message')",
            "open('made.txt', 'w').write(str(a * 2))\n[a, a]",
        ],
        files={"seed.txt": base64.b64encode(b"1").decode()},
        fetch_files=["made.txt"],
    )
    result = jupyter(request, mode)
    assert result.status == sf.RunStatus.Failed, "a cell raised"
    assert result.driver.status == sf.CommandRunStatus.Finished
    cells = result.cells
    assert len(cells) == 6
    assert cells[0].display == [] and cells[0].error == []
    assert cells[1].display == [{"text/plain": "123"}]
    assert cells[2].stdout == "124\n"
    assert (cells[3].stderr, cells[3].display) == ("to stderr\n", []), "a trailing semicolon hides the value"
    assert cells[4].error[0]["ename"] == "RuntimeError"
    assert cells[4].error[0]["evalue"] == "error message"
    assert "<cell-4>" in "".join(cells[4].error[0]["traceback"])
    assert cells[5].display == [{"text/plain": "[123, 123]"}], "cells after an error still run"
    assert result.files == {"made.txt": base64.b64encode(b"246").decode()}


def test_run_jupyter_sessions_are_fresh_and_cells_time_out():
    first = jupyter(sf.RunJupyterRequest(cells=["secret = 1", "secret"]), "sync")
    assert first.status == sf.RunStatus.Success
    second = jupyter(sf.RunJupyterRequest(cells=["'secret' in globals()"]), "sync")
    assert second.cells[0].display == [{"text/plain": "False"}]
    slow = jupyter(sf.RunJupyterRequest(cells=["x = 1", "while True: pass", "x"], cell_timeout=1), "sync")
    assert slow.status == sf.RunStatus.Failed
    assert slow.driver.status == sf.CommandRunStatus.TimeLimitExceeded
    assert len(slow.cells) == 2 and slow.cells[1].error


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_token_is_refused(mode):
    request = sf.RunCodeRequest(code="print(1)", language="python")
    wrong = f"{BASE}/sandbox-fusion/not-the-token-0123456789"
    with pytest.raises(Exception, match="401"):
        if mode == "sync":
            sf.run_code(request, endpoint=wrong, max_attempts=1)
        else:
            asyncio.run(sf.run_code_async(request, endpoint=wrong, max_attempts=1))


def test_a_bearer_token_works_without_one_in_the_path():
    body = {"code": "print(6 * 7)", "language": "python"}
    response = httpx.post(f"{BASE}/sandbox-fusion/run_code", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response.json()["run_result"]["stdout"] == "42\n"
    assert httpx.post(f"{BASE}/sandbox-fusion/run_code", json=body).status_code == 401


@pytest.mark.parametrize("mode", MODES)
def test_an_unsupported_language_is_a_sandbox_error_not_a_failed_program(mode):
    request = sf.RunCodeRequest(code="int main() { return 0; }", language="cpp")
    # The client raises on SandboxError: the sandbox could not run it.
    with pytest.raises(Exception, match="Sandbox responded with error: runbox runs python, pytest, nodejs and typescript"):
        run(request, mode)


def test_a_malformed_request_is_422_naming_the_field():
    response = httpx.post(f"{ENDPOINT}/run_code", json={"code": "print(1)", "language": "python", "run_timeout": "soon"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "run_timeout"]


def test_the_token_never_reaches_the_apis_log():
    logs = os.environ.get("RUNBOX_STACK_LOGS")
    if not logs:
        pytest.skip("not under clients/with-stack")
    run(sf.RunCodeRequest(code="print('logged')", language="python"), "sync")
    log = open(f"{logs}/api.log", encoding="utf8").read()
    # The request was logged (scripts/test logs request spans), under its redacted path.
    assert "/sandbox-fusion/***/run_code" in log
    assert TOKEN not in log, "the api log contains the token"


def test_rl_style_one_request_per_sample_from_16_threads():
    # What verl's and similar reward functions post: one sample per request,
    # memory_limit_MB set, compile_timeout sent though nothing compiles.
    samples = 48

    def sample(i):
        body = {
            "code": f"import sys\nn = int(sys.stdin.read())\nprint(sum(range(n)) + {i})",
            "stdin": str(i * 10),
            "language": "python",
            "compile_timeout": 10,
            "run_timeout": 30,
            "memory_limit_MB": 1024,
            "files": {},
            "fetch_files": [],
        }
        response = httpx.post(f"{ENDPOINT}/run_code", json=body, timeout=180)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["status"] == "Success", answer
        assert answer["run_result"]["stdout"] == f"{sum(range(i * 10)) + i}\n"
        return answer["run_result"]["execution_time"]

    with ThreadPoolExecutor(max_workers=16) as pool:
        times = list(pool.map(sample, range(samples)))
    assert len(times) == samples
