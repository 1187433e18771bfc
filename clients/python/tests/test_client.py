"""The Python client against a real stack: jobs in every language, errors
as typed exceptions, retries on 503 and 429, batches with streamed results,
and the async client."""

from __future__ import annotations

import asyncio
import time

import pytest

import runbox
from runbox import AsyncClient, Client, job_spec

from .conftest import OTHER_TOKEN, TOKEN


@pytest.fixture
def client(stack):
    with Client(stack.url, TOKEN) as client:
        yield client


def test_runs_each_language(client):
    assert client.run("print(6 * 7)").stdout == "42\n"
    assert client.run("console.log(6 * 7)", "javascript").stdout == "42\n"
    job = client.run("const n: number = 42; console.log(n)", "typescript")
    assert (job.status, job.exit_code, job.stdout) == ("completed", 0, "42\n")
    assert job.ok and job.done and job.duration_ms is not None


def test_stdin_args_files_and_verdicts(client):
    job = client.run(
        "import sys; print(input(), sys.argv[1:], open('data.txt').read())",
        stdin="hello\n",
        args=["-v"],
        files=[{"path": "data.txt", "content": "from a file"}],
    )
    assert job.stdout == "hello ['-v'] from a file\n"
    assert client.run("print(1)", expected_stdout="2\n").verdict == "wrong_answer"


def test_a_failing_program_is_data_not_an_exception(client):
    job = client.run("import sys; print('bye', file=sys.stderr); sys.exit(3)")
    assert (job.status, job.exit_code, job.stderr, job.ok) == ("completed", 3, "bye\n", False)
    job = client.run("while True: pass", timeout_ms=500)
    assert job.status == "timeout" and job.exit_code is None


def test_submit_get_wait_cancel(client):
    job_id = client.submit("console.log('later')", "javascript")
    assert client.wait(job_id).stdout == "later\n"
    assert client.get(job_id).status == "completed"
    slow = client.submit("await new Promise((r) => setTimeout(r, 20000))", "javascript", timeout_ms=30000)
    assert client.get(slow, wait=1).status in ("queued", "running")
    client.cancel(slow)
    assert client.wait(slow, timeout_s=10).status == "cancelled"


def test_idempotent_submit(client):
    first = client.submit("print(1)", idempotency_key="py-client-retry")
    assert client.submit("print(1)", idempotency_key="py-client-retry") == first


def test_errors_carry_the_server_code(stack, client):
    with pytest.raises(runbox.InvalidRequest) as bad:
        client.submit("print(1)", "cobol")
    assert (bad.value.status, bad.value.code) == (400, "invalid_field")
    with pytest.raises(runbox.NotFound) as missing:
        client.get("00000000-0000-4000-8000-000000000000")
    assert missing.value.code == "not_found"
    with Client(stack.url, "not-a-token-at-all-0123") as stranger, pytest.raises(runbox.Unauthorized) as denied:
        stranger.run("print(1)")
    assert denied.value.code == "unauthorized"
    # Another token's job does not exist for this one.
    job_id = client.submit("print(1)")
    with Client(stack.url, OTHER_TOKEN) as other, pytest.raises(runbox.NotFound):
        other.get(job_id)
    with Client("http://127.0.0.1:9", TOKEN, max_retries=0) as nowhere, pytest.raises(runbox.TransportError):
        nowhere.get("x")


def test_a_full_queue_is_retried_after_retry_after(stack):
    # A second api on the same queue, with room for one job.
    url = stack.api(RUNBOX_MAX_QUEUE="1")
    with Client(url, TOKEN) as client:
        client.submit("import time; time.sleep(2)")
        started = time.monotonic()
        job = client.run("print('got in')")
        assert job.stdout == "got in\n"
        assert time.monotonic() - started >= 1, "it waited for room"
    with Client(url, TOKEN, max_retries=0) as impatient:
        impatient.submit("import time; time.sleep(2)")
        with pytest.raises(runbox.Unavailable) as full:
            impatient.submit("print(1)")
        assert full.value.code == "queue_full"


def test_a_quota_is_retried_then_raised(stack):
    # The other token: nothing of its is still running from earlier tests.
    url = stack.api(RUNBOX_QUOTAS="other:1/0")
    with Client(url, OTHER_TOKEN, max_retries=1) as client:
        client.submit("import time; time.sleep(4)")
        with pytest.raises(runbox.QuotaExceeded) as over:
            client.submit("print(1)")
        assert over.value.code == "quota_exceeded"


def test_batch_results_stream_as_jobs_finish(client):
    handle = client.batch([job_spec(f"print({i} * {i})", "python") for i in range(6)], shared_runtime=True)
    assert len(handle.job_ids) == 6
    streamed = {job.id: job.stdout for job in handle.results()}
    assert streamed == {job_id: f"{i * i}\n" for i, job_id in enumerate(handle.job_ids)}
    batch = handle.wait()
    assert (batch.done, batch.size, batch.counts) == (True, 6, {"completed": 6})
    assert [job.id for job in batch.jobs] == handle.job_ids


def test_a_batch_can_be_cancelled(client):
    handle = client.batch([job_spec("import time; time.sleep(30)", "python", timeout_ms=40000)] * 4)
    batch = handle.cancel()
    assert sum(batch.counts.values()) == 4
    assert handle.wait().counts.get("cancelled", 0) >= 2


def test_async_client(stack):
    async def main():
        async with AsyncClient(stack.url, TOKEN) as client:
            jobs = await asyncio.gather(*(client.run(f"print({i})") for i in range(3)))
            assert [job.stdout for job in jobs] == ["0\n", "1\n", "2\n"]
            handle = await client.batch([job_spec("console.log(7)", "javascript")] * 3)
            streamed = [job async for job in handle.results()]
            assert sorted(job.id for job in streamed) == sorted(handle.job_ids)
            assert all(job.stdout == "7\n" for job in streamed)
            with pytest.raises(runbox.NotFound):
                await client.cancel("00000000-0000-4000-8000-000000000000")

    asyncio.run(main())


def test_url_and_token_from_the_environment(stack, monkeypatch):
    monkeypatch.setenv("RUNBOX_URL", stack.url)
    monkeypatch.setenv("RUNBOX_TOKEN", TOKEN)
    with Client() as client:
        assert client.run("print('env')").stdout == "env\n"
    monkeypatch.delenv("RUNBOX_TOKEN")
    with pytest.raises(ValueError):
        Client()


def test_stream_gives_output_as_it_is_written(client):
    job_id = client.submit("import sys, time\nprint('one', flush=True)\ntime.sleep(1.5)\nprint('two', file=sys.stderr)")
    seen = []
    for event in client.stream(job_id):
        seen.append((event.kind, time.monotonic(), event))
    kinds = [kind for kind, _, _ in seen]
    assert kinds[0] == "stdout" and kinds[-1] == "result", kinds
    first, last = seen[0], seen[-1]
    assert (first[2].offset, first[2].data) == (0, "one\n")
    assert last[1] - first[1] >= 1.0, "the first chunk came only at the end"
    job = last[2].job
    assert (job.status, job.stdout, job.stderr) == ("completed", "one\n", "two\n")
    assert "".join(e.data for k, _, e in seen if k == "stderr") == "two\n"
    # After the end: the output, then the result.
    again = list(client.stream(job_id))
    assert [e.kind for e in again][-1] == "result"
    assert "".join(e.data for e in again if e.kind == "stdout") == "one\n"
    with pytest.raises(runbox.NotFound):
        list(client.stream("00000000-0000-4000-8000-000000000000"))


def test_async_stream(stack):
    async def main():
        async with AsyncClient(stack.url, TOKEN) as client:
            job_id = await client.submit("console.log('a'); console.log('b')", "javascript")
            events = [event async for event in client.stream(job_id)]
            assert "".join(e.data for e in events if e.kind == "stdout") == "a\nb\n"
            assert events[-1].job.stdout == "a\nb\n"

    asyncio.run(main())
