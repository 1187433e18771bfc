"""Sync and async clients for runbox's HTTP API (see the project's docs/api.md).

Both follow the same rules:

- a program that fails is data: `run` returns a `Job` whatever its exit code;
- 429 and 503 are retried, waiting as long as `Retry-After` asks (at most
  `max_retries` times), then raised as `QuotaExceeded` or `Unavailable`;
- every other 4xx is raised at once as a `RunboxError` subclass carrying
  the server's error code;
- sessions bend the retry rule where a retry could run something twice
  (see `Client.create_session` and `Session.exec`);
- the URL and token default to `RUNBOX_URL` and `RUNBOX_TOKEN`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import replace
from urllib.parse import quote
from typing import Any, AsyncIterator, Iterable, Iterator, Optional, Union

import httpx

from .errors import InvalidRequest, SessionEnded, TransportError, error_code, error_for
from .types import Batch, Checkpoint, FileListing, FileWritten, Job, OutputEvent, SessionExec, SessionInfo

#: The longest long-poll runbox holds a request for.
MAX_WAIT_S = 60
#: Longest pause between retries, whatever `Retry-After` says.
MAX_RETRY_DELAY_S = 30.0
#: How long runbox may take to answer a checkpoint (it waits up to 120 s)
#: or a fork (a checkpoint, then up to 60 s for a worker to open the new
#: session), plus room for the network.
CHECKPOINT_TIMEOUT_S = 150.0
FORK_TIMEOUT_S = 210.0
#: How long a session answered as still `starting` (202) is polled for.
START_POLL_S = 120.0
#: What runbox waits beyond an exec's own timeout before answering 202.
EXEC_MARGIN_S = 30.0


def _retry_any(code: str) -> bool:
    return True


def _retry_never(code: str) -> bool:
    return False


def _retry_create(code: str) -> bool:
    """Whether a 429/503 to a session create (or fork) may be sent again.
    Sessions have no idempotency key, so only answers that say no live
    session was left behind are: `too_many_sessions` refuses before anything
    is made, and after `quota_exceeded`, `queue_full` or
    `session_unavailable` (its start could not be queued, or no worker
    opened it) runbox has already ended the session it made as lost.
    `unavailable` (Redis failing midway) may leave a half-made session that
    a worker opens later, so it is raised instead."""
    return code != "unavailable"


def job_spec(
    code: str,
    language: str,
    stdin: Optional[str] = None,
    args: Optional[list[str]] = None,
    files: Optional[list[dict]] = None,
    timeout_ms: Optional[int] = None,
    **extra: Any,
) -> dict:
    """The JSON job spec for one program; `extra` passes further fields
    (`expected_stdout`, `compare`, `return_files`, `callback_url`)."""
    spec: dict[str, Any] = {"language": language, "code": code}
    for name, value in (("stdin", stdin), ("args", args), ("files", files), ("timeout_ms", timeout_ms)):
        if value is not None:
            spec[name] = value
    spec.update({k: v for k, v in extra.items() if v is not None})
    return spec


def _settings(url: Optional[str], token: Optional[str]) -> tuple[str, str]:
    url = url or os.environ.get("RUNBOX_URL") or "http://127.0.0.1:8080"
    token = token or os.environ.get("RUNBOX_TOKEN")
    if not token:
        raise ValueError("a token is needed: pass token= or set RUNBOX_TOKEN")
    return url.rstrip("/"), token


def _retry_delay(response: httpx.Response, attempt: int) -> float:
    try:
        delay = float(response.headers.get("retry-after", ""))
    except ValueError:
        delay = min(2.0**attempt * 0.25, MAX_RETRY_DELAY_S)
    return min(max(delay, 0.0), MAX_RETRY_DELAY_S)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"error": {"code": "invalid_response", "message": response.text[:200]}}


def _answer(
    response: httpx.Response, attempt: int, max_retries: int, retry=_retry_any, raw: bool = False
) -> tuple[Optional[float], Any]:
    """How one response ends a request: `(delay, None)` to retry after
    `delay` seconds, else `(None, body)` (its bytes with `raw`); an error
    status raises. `retry` says, from the error code of a 429 or 503,
    whether it may be retried."""
    if response.status_code in (429, 503) and attempt < max_retries and retry(error_code(_body(response))):
        return _retry_delay(response, attempt), None
    if response.status_code >= 400:
        raise error_for(response.status_code, _body(response))
    return None, response.content if raw else _body(response)


class _EventParser:
    """Server-Sent Events, fed line by line, as `OutputEvent`s."""

    def __init__(self) -> None:
        self.kind = ""
        self.data: list[str] = []

    def feed(self, line: str) -> Optional[OutputEvent]:
        if line.startswith("event:"):
            self.kind = line[6:].strip()
        elif line.startswith("data:"):
            self.data.append(line[5:].removeprefix(" "))
        elif line == "":
            kind, data = self.kind, "\n".join(self.data)
            self.kind, self.data = "", []
            # A comment (the keep-alive) has no event name.
            if kind:
                return _output_event(kind, json.loads(data))
        return None


def _output_event(kind: str, data: Any) -> OutputEvent:
    if kind == "result":
        return OutputEvent("result", job=Job.from_json(data))
    if kind in ("stdout", "stderr"):
        return OutputEvent(kind, offset=data["offset"], data=data["data"])
    if kind == "error":
        raise error_for(503, {"error": data})
    return OutputEvent(kind)


def _events_request(job_id: str) -> dict:
    # The stream lasts as long as the job: no read timeout.
    return {"method": "GET", "url": f"/v1/jobs/{job_id}/events", "timeout": httpx.Timeout(30.0, read=None)}


def _exec_events_request(session_id: str, code: str, **fields: Any) -> dict:
    """`fields` are `_exec_body`'s."""
    return {
        "method": "POST",
        "url": f"/v1/sessions/{session_id}/exec",
        "json": _exec_body(code, **fields),
        "headers": {"Accept": "text/event-stream"},
        "timeout": httpx.Timeout(30.0, read=None),
    }


def _idempotency(key: Optional[str]) -> dict:
    return {"Idempotency-Key": key} if key else {}


def _wait_params(wait: Optional[int]) -> Optional[dict]:
    return {"wait": min(wait, MAX_WAIT_S)} if wait else None


def _page_params(wait: Optional[int], offset: int, limit: int) -> dict:
    return {"offset": offset, "limit": limit, **(_wait_params(wait) or {})}


def _poll_seconds(deadline: Optional[float]) -> int:
    """How long the next long-poll of a wait may hold: at least a second,
    so the last one is a wait, not a spin."""
    if deadline is None:
        return MAX_WAIT_S
    return max(1, min(MAX_WAIT_S, int(deadline - time.monotonic())))


def _session_body(language: Optional[str], idle_timeout_s: Optional[int], from_checkpoint: Optional[str]) -> dict:
    fields = (("language", language), ("idle_timeout_s", idle_timeout_s), ("from_checkpoint", from_checkpoint))
    return {name: value for name, value in fields if value is not None}


def _exec_body(
    code: str,
    stdin: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    files: Optional[list[dict]] = None,
    return_files: Union[bool, list[str], None] = None,
) -> dict:
    body: dict[str, Any] = {"code": code}
    fields = (("stdin", stdin), ("timeout_ms", timeout_ms), ("files", files), ("return_files", return_files))
    for name, value in fields:
        if value is not None:
            body[name] = value
    return body


def _file_url(session_id: str, path: str) -> str:
    """A file's route; its path is percent-encoded name by name. A path
    with an empty, `.` or `..` name is refused here with the `invalid_path`
    runbox would answer: the URL would resolve it away before runbox saw
    it, and name another file."""
    if any(name in ("", ".", "..") for name in path.split("/")):
        message = f"{path!r} has an empty, '.' or '..' name; a path is plain names relative to the session's home"
        raise InvalidRequest(400, "invalid_path", message, {"error": {"code": "invalid_path", "message": message}})
    return f"/v1/sessions/{session_id}/files/{quote(path, safe='/')}"


def _file_bytes(data: Union[bytes, str]) -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


#: Headers of an upload: its body is the file's bytes.
_OCTETS = {"Content-Type": "application/octet-stream"}


def _exec_timeout(client_timeout_s: float, timeout_ms: Optional[int]) -> float:
    """A read timeout long enough for runbox to answer an exec itself
    (with its result or a 202), so a slow exec is not cut off midway."""
    return max(client_timeout_s, (timeout_ms or 0) / 1000 + EXEC_MARGIN_S + 15)


def _pending_exec(job: Job, session: SessionInfo) -> SessionExec:
    """An exec that outlasted runbox's wait, once it has finished."""
    fields = {name: getattr(job, name) for name in Job.__dataclass_fields__}
    return SessionExec(**fields, session_id=session.id, session_status=session.status)


def _batch_body(jobs: Iterable[dict], shared_runtime: Optional[bool], **extra: Any) -> dict:
    body: dict[str, Any] = {"jobs": list(jobs)}
    if shared_runtime is not None:
        body["shared_runtime"] = shared_runtime
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


class Client:
    """A blocking client. Use it as a context manager, or call `close()`."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        max_retries: int = 5,
        timeout_s: float = MAX_WAIT_S + 30,
        transport: Optional[httpx.BaseTransport] = None,
    ):
        base, token = _settings(url, token)
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self._http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, retry=_retry_any, raw: bool = False, **kwargs: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise TransportError(f"{method} {path}: {e}") from e
            delay, body = _answer(response, attempt, self.max_retries, retry, raw)
            if delay is None:
                return body
            time.sleep(delay)
        raise AssertionError("unreachable")

    def submit(self, code: str, language: str = "python", *, idempotency_key: Optional[str] = None, **fields: Any) -> str:
        """Queues a job and returns its id."""
        headers = _idempotency(idempotency_key)
        return self._request("POST", "/v1/jobs", json=job_spec(code, language, **fields), headers=headers)["id"]

    def get(self, job_id: str, *, wait: Optional[int] = None) -> Job:
        """The job as it is now, or after up to `wait` seconds if it is not done."""
        params = _wait_params(wait)
        return Job.from_json(self._request("GET", f"/v1/jobs/{job_id}", params=params))

    def wait(self, job_id: str, *, timeout_s: Optional[float] = None) -> Job:
        """Long-polls until the job is done (or `timeout_s` passes; then the
        job as it is)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = _poll_seconds(deadline)
            job = self.get(job_id, wait=left)
            if job.done or (deadline is not None and time.monotonic() >= deadline):
                return job

    def run(self, code: str, language: str = "python", **fields: Any) -> Job:
        """Runs a program and returns the finished job, whatever its exit code."""
        return self.wait(self.submit(code, language, **fields))

    def stream(self, job_id: str) -> Iterator[OutputEvent]:
        """The job's output as it is written: `stdout` and `stderr` chunks
        (what was written before the call comes first), then one `result`
        event with the finished job, after which the iterator ends."""
        return self._events(_events_request(job_id))

    def stream_exec(
        self,
        session_id: str,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> Iterator[OutputEvent]:
        """`exec_in`, with the exec's output as it is written, as `stream`
        gives a job's; takes the same fields. Never retried, as `exec_in`
        is not."""
        return self._events(_exec_events_request(session_id, code, stdin=stdin, timeout_ms=timeout_ms, files=files, return_files=return_files))

    def _events(self, request: dict) -> Iterator[OutputEvent]:
        what = f"{request['method']} {request['url']}"
        try:
            with self._http.stream(**request) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_for(response.status_code, _body(response))
                parser = _EventParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                        if event.kind == "result":
                            return
        except httpx.HTTPError as e:
            raise TransportError(f"{what}: {e}") from e
        raise TransportError(f"{what}: the stream ended before the result")

    def cancel(self, job_id: str) -> Job:
        return Job.from_json(self._request("DELETE", f"/v1/jobs/{job_id}"))

    def batch(
        self, jobs: Iterable[dict], *, shared_runtime: Optional[bool] = None, idempotency_key: Optional[str] = None, **extra: Any
    ) -> "BatchHandle":
        """Queues many jobs (specs from `job_spec`) as one batch."""
        headers = _idempotency(idempotency_key)
        body = self._request("POST", "/v1/batches", json=_batch_body(jobs, shared_runtime, **extra), headers=headers)
        return BatchHandle(self, body["id"], body["job_ids"])

    def get_batch(self, batch_id: str, *, wait: Optional[int] = None, offset: int = 0, limit: int = 100) -> Batch:
        params = _page_params(wait, offset, limit)
        return Batch.from_json(self._request("GET", f"/v1/batches/{batch_id}", params=params))

    def cancel_batch(self, batch_id: str) -> Batch:
        return Batch.from_json(self._request("DELETE", f"/v1/batches/{batch_id}"))

    def stream_results(self, batch_id: str) -> Iterator[Job]:
        """Each job of the batch as it finishes, until all have."""
        with self._http.stream("GET", f"/v1/batches/{batch_id}/results", timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                raise error_for(response.status_code, _body(response))
            for line in response.iter_lines():
                if line.strip():
                    yield Job.from_json(json.loads(line))

    # Sessions: state that lasts across execs (see the project's docs/sessions.md).

    def create_session(
        self, language: Optional[str] = None, idle_timeout_s: Optional[int] = None, from_checkpoint: Optional[str] = None
    ) -> "Session":
        """Opens a session (`python` or `javascript`; from a checkpoint, its
        language is the checkpoint's). Returns once a worker holds it.

        429 and 503 are retried only when runbox says it left no session
        behind (see `_retry_create`): a create has no idempotency key, and a
        retry after a half-made one would hold two against the token's cap."""
        body = _session_body(language, idle_timeout_s, from_checkpoint)
        info = SessionInfo.from_json(self._request("POST", "/v1/sessions", json=body, retry=_retry_create))
        return Session(self, self._started(info))

    def session(self, session_id: str) -> "Session":
        """A handle on an existing session (raises `NotFound` if none)."""
        return Session(self, self.get_session(session_id))

    def get_session(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(self._request("GET", f"/v1/sessions/{session_id}"))

    def list_sessions(self) -> list[SessionInfo]:
        """This token's sessions, live and recently ended."""
        return [SessionInfo.from_json(s) for s in self._request("GET", "/v1/sessions")["sessions"]]

    def exec_in(
        self,
        session_id: str,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> SessionExec:
        """Runs `code` in the session; a non-zero exit is data. `files`
        (`{"path", "content", "encoding"?}` each, as a job's) are written
        under the session's home first and stay there; `return_files`
        (`True`, or paths) brings files back in the result's `files`, as a
        job's. Never retried: an exec is not idempotent (it changes the
        session), and a 503 or a lost answer may come after the worker has
        run it. 409 `session_busy` is raised as `SessionBusy` for the same
        reason."""
        body = self._request(
            "POST",
            f"/v1/sessions/{session_id}/exec",
            json=_exec_body(code, stdin, timeout_ms, files, return_files),
            retry=_retry_never,
            timeout=_exec_timeout(self.timeout_s, timeout_ms),
        )
        if "session" in body:
            return SessionExec.from_json(body)
        # 202: it outlasted runbox's wait; the job has the result later.
        job = self.wait(body["id"])
        return _pending_exec(job, self.get_session(session_id))

    def checkpoint_session(self, session_id: str) -> Checkpoint:
        """Saves the session's state; a retry after a lost answer at worst
        leaves one more checkpoint, which expires on its own."""
        body = self._request("POST", f"/v1/sessions/{session_id}/checkpoints", timeout=CHECKPOINT_TIMEOUT_S)
        return Checkpoint.from_json(body)

    def fork_session(self, session_id: str) -> "Session":
        """A new session from a checkpoint of this one; they then diverge.
        Retried as a create is."""
        body = self._request("POST", f"/v1/sessions/{session_id}/fork", retry=_retry_create, timeout=FORK_TIMEOUT_S)
        return Session(self, self._started(SessionInfo.from_json(body)))

    def destroy_session(self, session_id: str) -> SessionInfo:
        """Ends the session and its process; returns it `closed`."""
        return SessionInfo.from_json(self._request("DELETE", f"/v1/sessions/{session_id}"))

    # A session's files: its home, which is its code's working directory.

    def upload_file(self, session_id: str, path: str, data: Union[bytes, str]) -> FileWritten:
        """Writes `data` (a `str` as UTF-8) to `path` under the session's
        home, making its directories; a file there is replaced, so a retry
        is harmless."""
        body = self._request("PUT", _file_url(session_id, path), content=_file_bytes(data), headers=_OCTETS)
        return FileWritten.from_json(body)

    def read_file(self, session_id: str, path: str) -> bytes:
        """The bytes of the file at `path` under the session's home."""
        return self._request("GET", _file_url(session_id, path), raw=True)

    def list_files(self, session_id: str, path: Optional[str] = None) -> FileListing:
        """A directory of the session's home (the home itself by default)."""
        params = {"path": path} if path else None
        return FileListing.from_json(self._request("GET", f"/v1/sessions/{session_id}/files", params=params))

    def delete_file(self, session_id: str, path: str) -> None:
        """Deletes the file at `path`, or the directory with all it holds."""
        self._request("DELETE", _file_url(session_id, path), raw=True)

    def _started(self, info: SessionInfo) -> SessionInfo:
        """`info` once a worker has opened it: runbox answers 202 with the
        session still `starting` when that takes long."""
        deadline = time.monotonic() + START_POLL_S
        while info.status == "starting" and time.monotonic() < deadline:
            time.sleep(0.5)
            info = self.get_session(info.id)
        return info


class BatchHandle:
    """A submitted batch: its id, its jobs' ids, and ways to read it."""

    def __init__(self, client: Client, batch_id: str, job_ids: list[str]):
        self.client, self.id, self.job_ids = client, batch_id, job_ids

    def results(self) -> Iterator[Job]:
        """Each job as it finishes (NDJSON stream)."""
        return self.client.stream_results(self.id)

    def wait(self) -> Batch:
        """Waits until every job is done; returns the batch with its first page."""
        while True:
            batch = self.client.get_batch(self.id, wait=MAX_WAIT_S)
            if batch.done:
                return batch

    def cancel(self) -> Batch:
        return self.client.cancel_batch(self.id)


class AsyncClient:
    """The same calls as `Client`, for asyncio."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        max_retries: int = 5,
        timeout_s: float = MAX_WAIT_S + 30,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ):
        base, token = _settings(url, token)
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, retry=_retry_any, raw: bool = False, **kwargs: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise TransportError(f"{method} {path}: {e}") from e
            delay, body = _answer(response, attempt, self.max_retries, retry, raw)
            if delay is None:
                return body
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def submit(
        self, code: str, language: str = "python", *, idempotency_key: Optional[str] = None, **fields: Any
    ) -> str:
        headers = _idempotency(idempotency_key)
        body = await self._request("POST", "/v1/jobs", json=job_spec(code, language, **fields), headers=headers)
        return body["id"]

    async def get(self, job_id: str, *, wait: Optional[int] = None) -> Job:
        params = _wait_params(wait)
        return Job.from_json(await self._request("GET", f"/v1/jobs/{job_id}", params=params))

    async def wait(self, job_id: str, *, timeout_s: Optional[float] = None) -> Job:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = _poll_seconds(deadline)
            job = await self.get(job_id, wait=left)
            if job.done or (deadline is not None and time.monotonic() >= deadline):
                return job

    def stream(self, job_id: str) -> AsyncIterator[OutputEvent]:
        """`Client.stream`, asynchronously."""
        return self._events(_events_request(job_id))

    def stream_exec(
        self,
        session_id: str,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> AsyncIterator[OutputEvent]:
        """`Client.stream_exec`, asynchronously."""
        return self._events(_exec_events_request(session_id, code, stdin=stdin, timeout_ms=timeout_ms, files=files, return_files=return_files))

    async def _events(self, request: dict) -> AsyncIterator[OutputEvent]:
        what = f"{request['method']} {request['url']}"
        try:
            async with self._http.stream(**request) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise error_for(response.status_code, _body(response))
                parser = _EventParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                        if event.kind == "result":
                            return
        except httpx.HTTPError as e:
            raise TransportError(f"{what}: {e}") from e
        raise TransportError(f"{what}: the stream ended before the result")

    async def run(self, code: str, language: str = "python", **fields: Any) -> Job:
        return await self.wait(await self.submit(code, language, **fields))

    async def cancel(self, job_id: str) -> Job:
        return Job.from_json(await self._request("DELETE", f"/v1/jobs/{job_id}"))

    async def batch(
        self, jobs: Iterable[dict], *, shared_runtime: Optional[bool] = None, idempotency_key: Optional[str] = None, **extra: Any
    ) -> "AsyncBatchHandle":
        headers = _idempotency(idempotency_key)
        body = await self._request("POST", "/v1/batches", json=_batch_body(jobs, shared_runtime, **extra), headers=headers)
        return AsyncBatchHandle(self, body["id"], body["job_ids"])

    async def get_batch(self, batch_id: str, *, wait: Optional[int] = None, offset: int = 0, limit: int = 100) -> Batch:
        params = _page_params(wait, offset, limit)
        return Batch.from_json(await self._request("GET", f"/v1/batches/{batch_id}", params=params))

    async def cancel_batch(self, batch_id: str) -> Batch:
        return Batch.from_json(await self._request("DELETE", f"/v1/batches/{batch_id}"))

    async def stream_results(self, batch_id: str) -> AsyncIterator[Job]:
        async with self._http.stream("GET", f"/v1/batches/{batch_id}/results", timeout=None) as response:
            if response.status_code >= 400:
                await response.aread()
                raise error_for(response.status_code, _body(response))
            async for line in response.aiter_lines():
                if line.strip():
                    yield Job.from_json(json.loads(line))

    # Sessions: the same calls as `Client`'s, with the same retry rules.

    async def create_session(
        self, language: Optional[str] = None, idle_timeout_s: Optional[int] = None, from_checkpoint: Optional[str] = None
    ) -> "AsyncSession":
        body = _session_body(language, idle_timeout_s, from_checkpoint)
        info = SessionInfo.from_json(await self._request("POST", "/v1/sessions", json=body, retry=_retry_create))
        return AsyncSession(self, await self._started(info))

    async def session(self, session_id: str) -> "AsyncSession":
        return AsyncSession(self, await self.get_session(session_id))

    async def get_session(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(await self._request("GET", f"/v1/sessions/{session_id}"))

    async def list_sessions(self) -> list[SessionInfo]:
        body = await self._request("GET", "/v1/sessions")
        return [SessionInfo.from_json(s) for s in body["sessions"]]

    async def exec_in(
        self,
        session_id: str,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> SessionExec:
        body = await self._request(
            "POST",
            f"/v1/sessions/{session_id}/exec",
            json=_exec_body(code, stdin, timeout_ms, files, return_files),
            retry=_retry_never,
            timeout=_exec_timeout(self.timeout_s, timeout_ms),
        )
        if "session" in body:
            return SessionExec.from_json(body)
        job = await self.wait(body["id"])
        return _pending_exec(job, await self.get_session(session_id))

    async def checkpoint_session(self, session_id: str) -> Checkpoint:
        body = await self._request("POST", f"/v1/sessions/{session_id}/checkpoints", timeout=CHECKPOINT_TIMEOUT_S)
        return Checkpoint.from_json(body)

    async def fork_session(self, session_id: str) -> "AsyncSession":
        body = await self._request(
            "POST", f"/v1/sessions/{session_id}/fork", retry=_retry_create, timeout=FORK_TIMEOUT_S
        )
        return AsyncSession(self, await self._started(SessionInfo.from_json(body)))

    async def destroy_session(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(await self._request("DELETE", f"/v1/sessions/{session_id}"))

    async def upload_file(self, session_id: str, path: str, data: Union[bytes, str]) -> FileWritten:
        body = await self._request("PUT", _file_url(session_id, path), content=_file_bytes(data), headers=_OCTETS)
        return FileWritten.from_json(body)

    async def read_file(self, session_id: str, path: str) -> bytes:
        return await self._request("GET", _file_url(session_id, path), raw=True)

    async def list_files(self, session_id: str, path: Optional[str] = None) -> FileListing:
        params = {"path": path} if path else None
        return FileListing.from_json(await self._request("GET", f"/v1/sessions/{session_id}/files", params=params))

    async def delete_file(self, session_id: str, path: str) -> None:
        await self._request("DELETE", _file_url(session_id, path), raw=True)

    async def _started(self, info: SessionInfo) -> SessionInfo:
        deadline = time.monotonic() + START_POLL_S
        while info.status == "starting" and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            info = await self.get_session(info.id)
        return info


class AsyncBatchHandle:
    def __init__(self, client: AsyncClient, batch_id: str, job_ids: list[str]):
        self.client, self.id, self.job_ids = client, batch_id, job_ids

    def results(self) -> AsyncIterator[Job]:
        return self.client.stream_results(self.id)

    async def wait(self) -> Batch:
        while True:
            batch = await self.client.get_batch(self.id, wait=MAX_WAIT_S)
            if batch.done:
                return batch

    async def cancel(self) -> Batch:
        return await self.client.cancel_batch(self.id)




class Session:
    """A live session: `exec` runs code in it, keeping what earlier execs
    defined. As a context manager it is destroyed on exit."""

    def __init__(self, client: Client, info: SessionInfo):
        self.client, self.info = client, info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def language(self) -> str:
        return self.info.language

    @property
    def status(self) -> str:
        """As of the last call that returned the session (see `refresh`)."""
        return self.info.status

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.info.ended:
            try:
                self.destroy()
            except SessionEnded:
                pass  # it ended meanwhile (idle or lifetime limit): nothing to do

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, language={self.language!r}, status={self.status!r})"

    def stream(
        self,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> Iterator[OutputEvent]:
        """`exec`, with its output as it is written (see `Client.stream`)."""
        return self.client.stream_exec(self.id, code, stdin=stdin, timeout_ms=timeout_ms, files=files, return_files=return_files)

    def exec(
        self,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> SessionExec:
        """See `Client.exec_in`."""
        result = self.client.exec_in(self.id, code, stdin, timeout_ms, files, return_files)
        if result.session_status is not None:
            self.info = replace(self.info, status=result.session_status)
        return result

    def upload_file(self, path: str, data: Union[bytes, str]) -> FileWritten:
        """See `Client.upload_file`."""
        return self.client.upload_file(self.id, path, data)

    def read_file(self, path: str) -> bytes:
        return self.client.read_file(self.id, path)

    def list_files(self, path: Optional[str] = None) -> FileListing:
        return self.client.list_files(self.id, path)

    def delete_file(self, path: str) -> None:
        self.client.delete_file(self.id, path)

    def checkpoint(self) -> Checkpoint:
        return self.client.checkpoint_session(self.id)

    def fork(self) -> "Session":
        return self.client.fork_session(self.id)

    def refresh(self) -> SessionInfo:
        self.info = self.client.get_session(self.id)
        return self.info

    def destroy(self) -> SessionInfo:
        self.info = self.client.destroy_session(self.id)
        return self.info


class AsyncSession:
    """`Session` for `AsyncClient`; `async with` destroys it on exit."""

    def __init__(self, client: AsyncClient, info: SessionInfo):
        self.client, self.info = client, info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def language(self) -> str:
        return self.info.language

    @property
    def status(self) -> str:
        return self.info.status

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.info.ended:
            try:
                await self.destroy()
            except SessionEnded:
                pass

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, language={self.language!r}, status={self.status!r})"

    def stream(
        self,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> AsyncIterator[OutputEvent]:
        """`exec`, with its output as it is written (see `Client.stream`)."""
        return self.client.stream_exec(self.id, code, stdin=stdin, timeout_ms=timeout_ms, files=files, return_files=return_files)

    async def exec(
        self,
        code: str,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[list[dict]] = None,
        return_files: Union[bool, list[str], None] = None,
    ) -> SessionExec:
        result = await self.client.exec_in(self.id, code, stdin, timeout_ms, files, return_files)
        if result.session_status is not None:
            self.info = replace(self.info, status=result.session_status)
        return result

    async def upload_file(self, path: str, data: Union[bytes, str]) -> FileWritten:
        return await self.client.upload_file(self.id, path, data)

    async def read_file(self, path: str) -> bytes:
        return await self.client.read_file(self.id, path)

    async def list_files(self, path: Optional[str] = None) -> FileListing:
        return await self.client.list_files(self.id, path)

    async def delete_file(self, path: str) -> None:
        await self.client.delete_file(self.id, path)

    async def checkpoint(self) -> Checkpoint:
        return await self.client.checkpoint_session(self.id)

    async def fork(self) -> "AsyncSession":
        return await self.client.fork_session(self.id)

    async def refresh(self) -> SessionInfo:
        self.info = await self.client.get_session(self.id)
        return self.info

    async def destroy(self) -> SessionInfo:
        self.info = await self.client.destroy_session(self.id)
        return self.info
