"""E2B's Python SDK (e2b-code-interpreter==2.11.5 on e2b==2.63.0), unchanged,
through its asyncio API (AsyncSandbox), against runbox's /e2b on a real stack
(run under clients/with-stack; conftest.py points the SDK there).

The same ground as test_e2b_sync.py, more briefly: the async client has its
own transport, its own streaming reader and awaitable callbacks."""

import asyncio

import pytest
import pytest_asyncio
from conftest import OTHER_TOKEN, PROBE_CODE, WRONG_TOKENS, raw_execute
from e2b_code_interpreter import (
    E2B,
    AsyncSandbox,
    FileNotFoundException,
    FileType,
    InvalidArgumentException,
    SandboxException,
    SandboxNotFoundException,
    SandboxState,
    TimeoutException,
)

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def sandbox():
    sbx = await AsyncSandbox.create()
    try:
        yield sbx
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)


async def listed_ids(sandbox_class=AsyncSandbox):
    paginator = sandbox_class.list()
    ids = []
    while paginator.has_next:
        ids += [info.sandbox_id for info in await paginator.next_items()]
    return ids


async def test_create_list_connect_and_kill():
    sbx = await AsyncSandbox.create(timeout=240)
    sandbox_id = sbx.sandbox_id
    try:
        info = await sbx.get_info()
        assert (info.template_id, info.state) == ("code-interpreter-v1", SandboxState.RUNNING)
        assert await sbx.is_running() is True
        assert sandbox_id in await listed_ids()
        assert sandbox_id not in await listed_ids(E2B(api_key=OTHER_TOKEN).AsyncSandbox)
        await sbx.run_code("seen = 'through connect'")
        again = await AsyncSandbox.connect(sandbox_id)
        assert (await again.run_code("seen")).text == "through connect"
        await sbx.set_timeout(900)
        assert await sbx.kill() is True
        assert await AsyncSandbox.kill(sandbox_id) is False
        with pytest.raises(SandboxNotFoundException):
            await AsyncSandbox.connect(sandbox_id)
    finally:
        await AsyncSandbox.kill(sandbox_id)


async def test_state_results_and_errors(sandbox):
    await sandbox.run_code("x = 21")
    assert (await sandbox.run_code("x * 2")).text == "42"
    execution = await sandbox.run_code("1 / 0")
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value and "ZeroDivisionError" in execution.error.traceback
    assert (await sandbox.run_code("x")).text == "21"


async def test_async_callbacks_get_the_output_as_printed(sandbox):
    lines, errors = [], []

    async def on_stdout(message):
        await asyncio.sleep(0)
        lines.append(message.line)

    code = "import sys, time\nfor i in range(4):\n    print('line', i, flush=True)\n    time.sleep(0.3)\nprint('oops', file=sys.stderr)"
    execution = await sandbox.run_code(code, on_stdout=on_stdout, on_stderr=errors.append)
    expected = "".join(f"line {i}\n" for i in range(4))
    assert "".join(lines) == expected
    assert "".join(execution.logs.stdout) == expected
    assert "".join(m.line for m in errors) == "oops\n"


async def test_javascript_keeps_its_state(sandbox):
    await sandbox.run_code("globalThis.y = 5", language="js")
    execution = await sandbox.run_code("y + 1", language="javascript")
    assert execution.error is None, execution.error
    assert execution.text == "6"


async def test_a_new_context_is_separate(sandbox):
    await sandbox.run_code("secret = 1")
    context = await sandbox.create_code_context()
    assert (await sandbox.run_code("'secret' in globals()", context=context)).text == "False"


async def test_a_client_timeout_then_a_working_run(sandbox):
    with pytest.raises(TimeoutException):
        await sandbox.run_code("while True: pass", timeout=2)
    execution = await sandbox.run_code("print('recovered')", timeout=180)
    assert "".join(execution.logs.stdout) == "recovered\n"


async def test_files(sandbox):
    info = await sandbox.files.write("data/x.csv", "a,b\n1,2\n")
    assert (info.name, info.type) == ("x.csv", FileType.FILE)
    printed = await sandbox.run_code("print(open('data/x.csv').read(), end='')")
    assert "".join(printed.logs.stdout) == "a,b\n1,2\n"
    await sandbox.run_code("open('data/y.bin', 'wb').write(bytes(range(256)))")
    assert bytes(await sandbox.files.read("data/y.bin", format="bytes")) == bytes(range(256))
    entries = {e.name: e.type for e in await sandbox.files.list("data")}
    assert entries == {"x.csv": FileType.FILE, "y.bin": FileType.FILE}
    assert await sandbox.files.make_dir("data/sub") is True
    moved = await sandbox.files.rename("data/x.csv", "data/sub/x.csv")
    assert moved.path == "/home/user/data/sub/x.csv"
    assert (await sandbox.files.get_info("data/sub/x.csv")).size == len("a,b\n1,2\n")
    await sandbox.files.remove("data/sub")
    assert await sandbox.files.exists("data/sub/x.csv") is False
    with pytest.raises(FileNotFoundException):
        await sandbox.files.read("data/sub/x.csv")
    with pytest.raises(InvalidArgumentException):
        await sandbox.files.read("/etc/passwd")


async def test_pause_and_resume(sandbox):
    await sandbox.run_code("kept = 'across the pause'")
    await sandbox.files.write("kept.txt", "file across the pause")
    assert await sandbox.pause() is True
    assert await AsyncSandbox.pause(sandbox.sandbox_id) is False
    resumed = await AsyncSandbox.connect(sandbox.sandbox_id)
    assert (await resumed.run_code("kept")).text == "across the pause"
    assert await resumed.files.read("kept.txt") == "file across the pause"


async def test_commands_run_says_there_is_no_shell(sandbox):
    with pytest.raises(SandboxException, match="no shell") as raised:
        await sandbox.commands.run("ls", timeout=30)
    assert not isinstance(raised.value, TimeoutException)


async def test_the_second_token_reaches_nothing(sandbox):
    other = E2B(api_key=OTHER_TOKEN).AsyncSandbox
    await sandbox.run_code("owner = 1")
    with pytest.raises(SandboxNotFoundException):
        await other.connect(sandbox.sandbox_id)
    assert await other.kill(sandbox.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        await other.set_timeout(sandbox.sandbox_id, 10)
    for what, token in WRONG_TOKENS:
        # httpx's sync call, off the event loop.
        response = await asyncio.to_thread(raw_execute, sandbox.sandbox_id, token, PROBE_CODE.format(name="refused.txt"))
        assert response.status_code == 401, (what, response.text)
    assert await sandbox.files.exists("refused.txt") is False
    assert (await sandbox.run_code("owner + 1")).text == "2"
