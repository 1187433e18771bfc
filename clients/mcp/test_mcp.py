"""runbox's /mcp through the official Python SDK (PyPI `mcp`), against a real
stack started by clients/with-stack (RUNBOX_URL, RUNBOX_TOKEN).

Every test runs in each way the SDK connects: the initialize handshake
(`legacy`), the handshake-free 2026-07-28 revision, and `auto`, which asks
`server/discover` first.
"""

import asyncio
import json
import os
import re
import time

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["RUNBOX_URL"] + "/mcp"
TOKEN = os.environ["RUNBOX_TOKEN"]
# An api with room for one queued or running job, sharing the stack's Redis.
TIGHT = os.environ["RUNBOX_TIGHT_URL"]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLEEPER = {"language": "python", "code": "import time\ntime.sleep(30)", "timeout_ms": 40000}
MODES = ["legacy", "2026-07-28", "auto"]


def call(mode, work, token=TOKEN, statuses=None, methods=None, url=URL):
    """Connects in `mode` with `token`, runs `work(client)` and returns its
    result; `statuses` collects the HTTP status of every response, and
    `methods` the JSON-RPC method of every message posted."""

    async def record(response):
        if statuses is not None:
            statuses.append(response.status_code)

    async def sent(request):
        if methods is not None and request.method == "POST":
            methods.append(json.loads(request.content).get("method"))

    async def main():
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30, read=120),
            event_hooks={"request": [sent], "response": [record]},
        )
        async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            return await work(client)

    return asyncio.run(main())


def text(result):
    return "\n".join(block.text for block in result.content if block.type == "text")


# What each mode sends before listing the tools: the 2026-07-28 revision
# has no handshake at all.
OPENINGS = {
    "legacy": ["initialize", "notifications/initialized"],
    "2026-07-28": [],
    "auto": ["server/discover"],
}


@pytest.mark.parametrize("mode", MODES)
def test_run_code_is_listed_and_says_what_the_sandbox_lacks(mode):
    async def work(client):
        return await client.list_tools()

    methods = []
    tools = {tool.name: tool for tool in call(mode, work, methods=methods).tools}
    assert methods == OPENINGS[mode] + ["tools/list"]
    assert "run_code" in tools, tools.keys()
    run_code = tools["run_code"]
    assert re.search(r"cannot: reach the network", run_code.description), run_code.description
    assert "Nothing persists between run_code calls" in run_code.description
    assert re.search(r"at most \d+ ms", run_code.description)
    assert run_code.input_schema["required"] == ["language", "code"]
    assert run_code.output_schema["properties"]["exit_code"]


PROGRAMS = [
    ("python", "import sys\nprint(sum(map(int, sys.stdin.read().split())))", "2 3 4", "9\n"),
    ("javascript", "console.log([1, 2, 3].map((x) => x * 2).join(','))", None, "2,4,6\n"),
    ("typescript", "const greet = (name: string): string => `hi ${name}`;\nconsole.log(greet('ts'))", None, "hi ts\n"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("language", "code", "stdin", "expected"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_run_code_runs(mode, language, code, stdin, expected):
    args = {"language": language, "code": code}
    if stdin is not None:
        args["stdin"] = stdin

    async def work(client):
        return await client.call_tool("run_code", args)

    result = call(mode, work)
    assert result.is_error is False, text(result)
    run = result.structured_content
    assert run["status"] == "completed"
    assert run["exit_code"] == 0
    assert run["stdout"] == expected
    assert run["stderr"] == ""
    assert isinstance(run["duration_ms"], int)
    assert expected.strip() in text(result)


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_program_is_a_tool_error(mode):
    code = "import sys\nprint('half done')\nsys.exit(4)"

    async def work(client):
        return await client.call_tool("run_code", {"language": "python", "code": code})

    result = call(mode, work)
    assert result.is_error is True
    run = result.structured_content
    assert (run["status"], run["exit_code"], run["stdout"]) == ("completed", 4, "half done\n")
    assert "exited with code 4" in text(result)


def test_an_exception_is_a_tool_error_with_the_traceback():
    async def work(client):
        return await client.call_tool("run_code", {"language": "python", "code": "1 / 0"})

    result = call("legacy", work)
    assert result.is_error is True
    assert result.structured_content["exit_code"] == 1
    assert "ZeroDivisionError" in result.structured_content["stderr"]


def test_no_network_inside():
    code = "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:1/')\n"

    async def work(client):
        return await client.call_tool("run_code", {"language": "python", "code": code})

    result = call("2026-07-28", work)
    assert result.is_error is True
    assert result.structured_content["exit_code"] != 0


@pytest.mark.parametrize("mode", MODES)
def test_bad_arguments_are_tool_errors_that_say_what_to_fix(mode):
    cases = [
        ({"language": "ruby", "code": "puts 1"}, r"python, javascript or typescript"),
        ({"language": "python", "code": "print(1)", "timeout_ms": 10_000_000}, r"timeout_ms must be .* from 1 to \d+"),
        ({"language": "python", "code": "x" * 300_000}, r"code is 300000 bytes; the limit is \d+"),
    ]

    async def work(client):
        return [await client.call_tool("run_code", args) for args, _ in cases]

    for result, (args, message) in zip(call(mode, work), cases):
        assert result.is_error is True, args
        assert re.search(message, text(result)), text(result)


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_token_gets_401(mode):
    statuses = []

    async def work(client):
        return await client.list_tools()

    with pytest.raises(Exception):
        call(mode, work, token="not-the-token-0123456789", statuses=statuses)
    assert statuses and set(statuses) == {401}, statuses


@pytest.mark.parametrize("mode", MODES)
def test_a_full_queue_is_a_tool_error_that_says_to_retry(mode):
    blocker = httpx2.post(f"{TIGHT}/v1/jobs", json=SLEEPER, headers=AUTH, timeout=30)
    assert blocker.status_code == 202, blocker.text
    try:

        async def work(client):
            return await client.call_tool("run_code", {"language": "python", "code": "print(1)"})

        result = call(mode, work, url=f"{TIGHT}/mcp")
        assert result.is_error is True
        assert re.search(r"queue_full: .*queue is full.*Retry", text(result)), text(result)
    finally:
        httpx2.delete(f"{TIGHT}/v1/jobs/{blocker.json()['id']}", headers=AUTH, timeout=30)


def test_an_abandoned_call_cancels_its_job():
    """A client that goes away mid-run frees the queue: the tight api takes
    a new job within seconds instead of after the abandoned one's 30 s."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run_code", "arguments": SLEEPER}}
    headers = {**AUTH, "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    with pytest.raises(httpx2.ReadTimeout):
        with httpx2.stream("POST", f"{TIGHT}/mcp", json=body, headers=headers, timeout=httpx2.Timeout(10, read=2)) as r:
            assert r.status_code == 200
            for _ in r.iter_raw():
                pass
    for _ in range(50):
        probe = httpx2.post(f"{TIGHT}/v1/jobs?wait=10", json={"language": "python", "code": "print(1)"}, headers=AUTH, timeout=30)
        if probe.status_code != 503:
            break
        time.sleep(0.2)
    assert probe.status_code == 200, probe.text
    assert probe.json()["stdout"] == "1\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_session_keeps_state_checkpoints_forks_and_ends(mode):
    async def work(client):
        tools = {tool.name for tool in (await client.list_tools()).tools}
        created = await client.call_tool("create_session", {"language": "python", "idle_timeout_s": 60})
        assert created.is_error is False, text(created)
        sid = created.structured_content["id"]
        first = await client.call_tool("run_in_session", {"session_id": sid, "code": "data = [i * i for i in range(10)]"})
        second = await client.call_tool("run_in_session", {"session_id": sid, "code": "print(sum(data))"})
        checkpoint = await client.call_tool("checkpoint_session", {"session_id": sid})
        fork = await client.call_tool("fork_session", {"session_id": sid})
        fid = fork.structured_content["id"]
        changed = await client.call_tool("run_in_session", {"session_id": fid, "code": "data.append(1000); print(len(data))"})
        parent = await client.call_tool("run_in_session", {"session_id": sid, "code": "print(len(data))"})
        failing = await client.call_tool("run_in_session", {"session_id": sid, "code": "raise ValueError('nope')"})
        ended = [await client.call_tool("destroy_session", {"session_id": s}) for s in (sid, fid)]
        after = await client.call_tool("run_in_session", {"session_id": sid, "code": "print(1)"})
        return tools, first, second, checkpoint, changed, parent, failing, ended, after

    tools, first, second, checkpoint, changed, parent, failing, ended, after = call(mode, work)
    assert {"create_session", "run_in_session", "checkpoint_session", "fork_session", "destroy_session"} <= tools
    assert first.is_error is False, text(first)
    assert second.structured_content["stdout"] == "285\n", text(second)
    assert checkpoint.structured_content["size_bytes"] > 0, text(checkpoint)
    assert changed.structured_content["stdout"] == "11\n", text(changed)
    assert parent.structured_content["stdout"] == "10\n", text(parent)
    assert failing.is_error is True and "ValueError: nope" in failing.structured_content["stderr"]
    assert all(e.structured_content["status"] == "closed" for e in ended), [text(e) for e in ended]
    assert after.is_error is True and "session_closed" in text(after), text(after)


@pytest.mark.parametrize("mode", MODES)
def test_files_move_in_and_out_of_a_session(mode):
    async def work(client):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        created = await client.call_tool("create_session", {"language": "python", "idle_timeout_s": 60})
        sid = created.structured_content["id"]
        calls = {
            "text": ("upload_file", {"session_id": sid, "path": "data/in.csv", "content": "a,b\n1,2\n"}),
            "bytes": ("upload_file", {"session_id": sid, "path": "blob.bin", "content": "AAEC/w==", "encoding": "base64"}),
            "ran": (
                "run_in_session",
                {
                    "session_id": sid,
                    "code": "print(len(open('data/in.csv').read()), open('blob.bin', 'rb').read())\n"
                    "open('data/out.txt', 'w').write(open('given.txt').read() * 2)",
                    "files": [{"path": "given.txt", "content": "hi"}],
                    "return_files": ["data/out.txt"],
                },
            ),
            "read_text": ("read_file", {"session_id": sid, "path": "data/out.txt"}),
            "read_bytes": ("read_file", {"session_id": sid, "path": "blob.bin"}),
            "home": ("list_files", {"session_id": sid}),
            "data": ("list_files", {"session_id": sid, "path": "data"}),
            "missing": ("read_file", {"session_id": sid, "path": "nothing.txt"}),
            "escape": ("upload_file", {"session_id": sid, "path": "../x", "content": "x"}),
            "bad_base64": ("upload_file", {"session_id": sid, "path": "x", "content": "not base64!", "encoding": "base64"}),
            "unknown": ("list_files", {"session_id": sid, "recursive": True}),
        }
        results = {name: await client.call_tool(tool, args) for name, (tool, args) in calls.items()}
        await client.call_tool("destroy_session", {"session_id": sid})
        results["closed"] = await client.call_tool("list_files", {"session_id": sid})
        return tools, results

    tools, r = call(mode, work)
    assert {"upload_file", "read_file", "list_files"} <= tools.keys()
    assert tools["read_file"].annotations.read_only_hint is True
    assert set(tools["run_in_session"].input_schema["properties"]) >= {"files", "return_files"}
    assert r["text"].structured_content == {"path": "data/in.csv", "size": 8}, text(r["text"])
    assert r["bytes"].structured_content == {"path": "blob.bin", "size": 4}, text(r["bytes"])
    assert r["ran"].structured_content["stdout"] == "8 b'\\x00\\x01\\x02\\xff'\n", text(r["ran"])
    assert [(f["path"], f["content"]) for f in r["ran"].structured_content["files"]] == [("data/out.txt", "aGloaQ==")]
    assert r["read_text"].structured_content == {"path": "data/out.txt", "size": 4, "encoding": "utf8", "content": "hihi"}
    assert "UTF-8" in text(r["read_text"]) and text(r["read_text"]).endswith("\nhihi"), text(r["read_text"])
    assert r["read_bytes"].structured_content == {"path": "blob.bin", "size": 4, "encoding": "base64", "content": "AAEC/w=="}
    assert "base64" in text(r["read_bytes"]), text(r["read_bytes"])
    home = {f["name"]: f for f in r["home"].structured_content["files"]}
    assert (home["data"]["type"], home["blob.bin"]["type"], home["blob.bin"]["size"]) == ("directory", "file", 4)
    assert r["home"].structured_content["path"] == "" and r["home"].structured_content["truncated"] is False
    assert [f["path"] for f in r["data"].structured_content["files"]] == ["data/in.csv", "data/out.txt"]
    for name, code in [("missing", "no_file"), ("escape", "invalid_path"), ("bad_base64", "invalid_field"),
                       ("unknown", "unknown_field"), ("closed", "session_closed")]:
        assert r[name].is_error is True and text(r[name]).startswith(f"{code}: "), (name, text(r[name]))
    assert "list_files takes" in text(r["unknown"]), text(r["unknown"])


def test_session_tools_say_that_state_lasts_only_inside_a_session():
    async def work(client):
        return {tool.name: tool for tool in (await client.list_tools()).tools}

    tools = call("legacy", work)
    assert "State lasts only inside a session" in tools["run_code"].description
    assert "no network" in tools["create_session"].description
    assert "destroy_session" in tools["create_session"].description


@pytest.mark.parametrize("mode", MODES)
def test_run_code_reports_output_as_progress_while_it_runs(mode):
    notes = []

    async def progress(done, total, message):
        notes.append((time.monotonic(), done, message))

    code = "import time\nprint('halfway', flush=True)\ntime.sleep(1.5)\nprint('done')"

    async def work(client):
        result = await client.call_tool("run_code", {"language": "python", "code": code}, progress_callback=progress)
        return result, time.monotonic()

    result, ended = call(mode, work)
    assert result.structured_content["stdout"] == "halfway\ndone\n"
    assert notes, "no progress notification came"
    at, done, message = notes[0]
    assert (done, message) == (len("halfway\n"), "stdout: halfway\n")
    assert ended - at >= 1.0, "the first notification came only at the end"
