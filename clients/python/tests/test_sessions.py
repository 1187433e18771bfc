"""Sessions through the Python client against a real stack: state kept
across execs, checkpoints, forks that diverge, typed errors for ended,
unknown and other tokens' sessions, and the async client."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import runbox
from runbox import AsyncClient, Client

from .conftest import OTHER_TOKEN, TOKEN

UNKNOWN = "7f6c1a52-0c2e-4a53-9d47-3f1e2b8c9a10"


@pytest.fixture
def client(stack):
    with Client(stack.url, TOKEN) as client:
        yield client


def test_a_python_session_keeps_state_checkpoints_and_forks(client):
    with client.create_session("python") as session:
        assert (session.language, session.status) == ("python", "idle")
        first = session.exec("rows = [i * i for i in range(10)]\nprint(len(rows))")
        assert (first.status, first.exit_code, first.stdout) == ("completed", 0, "10\n")
        assert (first.session_id, first.session_status) == (session.id, "idle")
        assert session.exec("print(sum(rows))").stdout == "285\n"
        assert session.exec("print(input()[::-1])", stdin="abc\n").stdout == "cba\n"

        # A failing exec is data, and the session lives on with its state.
        failed = session.exec("import sys\nprint('bye', file=sys.stderr)\nsys.exit(4)")
        assert (failed.status, failed.exit_code, failed.stderr, failed.ok) == ("completed", 4, "bye\n", False)
        assert session.exec("print(rows[3])").stdout == "9\n"

        checkpoint = session.checkpoint()
        assert checkpoint.size_bytes > 0 and checkpoint.expires_at
        info = session.refresh()
        assert [c.id for c in info.checkpoints] == [checkpoint.id]
        assert info.execs == 5

        with session.fork() as fork:
            assert fork.id != session.id and fork.language == "python"
            session.exec("rows[0] = 'parent'")
            fork.exec("rows[0] = 'fork'")
            assert session.exec("print(rows[0], rows[1])").stdout == "parent 1\n"
            assert fork.exec("print(rows[0], rows[1])").stdout == "fork 1\n"
            listed = {s.id: s.status for s in client.list_sessions()}
            assert listed[session.id] == "idle" and listed[fork.id] == "idle"
        assert fork.status == "closed", "the with block destroyed the fork"

    # The with block destroyed the session: an exec now is a typed error.
    assert session.status == "closed"
    with pytest.raises(runbox.SessionEnded) as ended:
        session.exec("print(rows)")
    assert (ended.value.status, ended.value.code) == (410, "session_closed")

    # A new session from the checkpoint has the state as it was then.
    with client.create_session(from_checkpoint=checkpoint.id) as restored:
        assert restored.language == "python"
        assert restored.exec("print(rows[0])").stdout == "0\n"


def test_a_javascript_session(client):
    with client.create_session("javascript", idle_timeout_s=60) as session:
        assert session.info.idle_timeout_s == 60
        session.exec("let scale = 10; function times(x) { return x * scale }")
        assert session.exec("console.log(times(4))").stdout == "40\n"
        thrown = session.exec("throw new Error('boom')")
        assert thrown.exit_code == 1 and "boom" in thrown.stderr
        with pytest.raises(runbox.InvalidRequest) as refused:
            session.exec("1", stdin="x")
        assert refused.value.code == "invalid_field"
        assert session.exec("console.log(scale)").stdout == "10\n"


def test_session_errors_carry_the_server_code(stack, client):
    with pytest.raises(runbox.NotFound) as missing:
        client.exec_in(UNKNOWN, "print(1)")
    assert (missing.value.status, missing.value.code) == (404, "no_session")
    with pytest.raises(runbox.NotFound) as missing:
        client.session("not-an-id")
    assert missing.value.code == "no_session"
    with pytest.raises(runbox.NotFound) as missing:
        client.create_session(from_checkpoint=UNKNOWN)
    assert missing.value.code == "no_checkpoint"
    with pytest.raises(runbox.InvalidRequest) as bad:
        client.create_session("typescript")
    assert (bad.value.status, bad.value.code) == (400, "invalid_field")

    # Another token's session does not exist for this one.
    with client.create_session("python") as mine, Client(stack.url, OTHER_TOKEN) as other:
        mine.exec("secret = 42")
        for call in (
            lambda: other.exec_in(mine.id, "print(secret)"),
            lambda: other.get_session(mine.id),
            lambda: other.destroy_session(mine.id),
            lambda: other.fork_session(mine.id),
        ):
            with pytest.raises(runbox.NotFound) as hidden:
                call()
            assert hidden.value.code == "no_session"
        assert mine.id not in {s.id for s in other.list_sessions()}
        assert mine.exec("print(secret)").stdout == "42\n"


def test_a_busy_session_is_not_retried(client):
    with client.create_session("python") as session, ThreadPoolExecutor(1) as pool:
        session.exec("import time")
        first = pool.submit(session.exec, "t = time.time()\nwhile time.time() - t < 3: pass")
        time.sleep(0.8)
        started = time.monotonic()
        with pytest.raises(runbox.SessionBusy) as busy:
            client.exec_in(session.id, "print(1)")
        assert (busy.value.status, busy.value.code) == (409, "session_busy")
        assert time.monotonic() - started < 1, "refused at once, not retried"
        assert first.result().exit_code == 0
        assert session.exec("print(1)").stdout == "1\n"


def test_async_sessions(stack):
    async def main():
        async with AsyncClient(stack.url, TOKEN) as client:
            async with await client.create_session("python") as session:
                await session.exec("total = 1")
                async with await session.fork() as fork:
                    await fork.exec("total += 10")
                    assert (await fork.exec("print(total)")).stdout == "11\n"
                assert (await session.exec("print(total)")).stdout == "1\n"
                assert [c for c in (await session.refresh()).checkpoints], "the fork checkpointed the parent"
            with pytest.raises(runbox.SessionEnded) as ended:
                await client.exec_in(session.id, "print(total)")
            assert ended.value.code == "session_closed"
            with pytest.raises(runbox.NotFound):
                await client.get_session(UNKNOWN)

    asyncio.run(main())


def test_too_many_sessions_is_retried_then_raised(stack):
    # A second api on the same Redis that lets a token hold one session.
    url = stack.api(RUNBOX_SESSIONS_PER_TOKEN="1")
    with Client(url, OTHER_TOKEN, max_retries=1) as client, client.create_session("javascript") as held:
        started = time.monotonic()
        with pytest.raises(runbox.QuotaExceeded) as over:
            client.create_session("python")
        assert (over.value.status, over.value.code) == (429, "too_many_sessions")
        assert time.monotonic() - started >= 1, "it waited Retry-After once before giving up"
        held.destroy()
        with client.create_session("python") as freed:
            assert freed.exec("print('room again')").stdout == "room again\n"


def test_a_session_exec_streams_its_output(client):
    with client.create_session("python") as session:
        session.exec("import time\nn = 41")
        seen = [(time.monotonic(), e) for e in session.stream("print('start', flush=True)\ntime.sleep(1.5)\nprint(n + 1)")]
        first, last = seen[0], seen[-1]
        assert (first[1].kind, first[1].data) == ("stdout", "start\n")
        assert last[1].kind == "result" and last[1].job.stdout == "start\n42\n"
        assert last[0] - first[0] >= 1.0, "the first chunk came only at the end"
        # The session lives on for the next exec.
        assert session.exec("print(n)").stdout == "41\n"


def test_an_async_session_exec_streams(stack):
    async def main():
        async with AsyncClient(stack.url, TOKEN) as client:
            session = await client.create_session("python")
            try:
                events = [e async for e in session.stream("print('a')\nprint('b')")]
                assert "".join(e.data for e in events if e.kind == "stdout") == "a\nb\n"
                assert events[-1].job.stdout == "a\nb\n"
            finally:
                await session.destroy()

    asyncio.run(main())
