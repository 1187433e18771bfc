"""Sync and async clients for runbox's HTTP API (see the project README).

Both follow the same rules:

- a program that fails is data: `run` returns a `Job` whatever its exit code;
- 429 and 503 are retried, waiting as long as `Retry-After` asks (at most
  `max_retries` times), then raised as `QuotaExceeded` or `Unavailable`;
- every other 4xx is raised at once as a `RunboxError` subclass carrying
  the server's error code;
- the URL and token default to `RUNBOX_URL` and `RUNBOX_TOKEN`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, AsyncIterator, Iterable, Iterator, Optional

import httpx

from .errors import TransportError, error_for
from .types import Batch, Job

#: The longest long-poll runbox holds a request for.
MAX_WAIT_S = 60
#: Longest pause between retries, whatever `Retry-After` says.
MAX_RETRY_DELAY_S = 30.0


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


def _answer(response: httpx.Response, attempt: int, max_retries: int) -> tuple[Optional[float], Any]:
    """How one response ends a request: `(delay, None)` to retry after
    `delay` seconds, else `(None, body)`; an error status raises."""
    if response.status_code in (429, 503) and attempt < max_retries:
        return _retry_delay(response, attempt), None
    if response.status_code >= 400:
        raise error_for(response.status_code, _body(response))
    return None, _body(response)


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
        self._http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise TransportError(f"{method} {path}: {e}") from e
            delay, body = _answer(response, attempt, self.max_retries)
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
        self._http = httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s, transport=transport
        )

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.HTTPError as e:
                raise TransportError(f"{method} {path}: {e}") from e
            delay, body = _answer(response, attempt, self.max_retries)
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


